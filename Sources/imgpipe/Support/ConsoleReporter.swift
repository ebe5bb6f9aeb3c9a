import Foundation
import ImagePipeline
import PipelineKit
import Synchronization

/// Progress and failures on standard error; with `--quiet`, errors and warnings only
/// (`RunReporter.notice`: entries of a feed left out are told, since nothing else tells
/// of them), no progress, failures (the exit code and `status` tell of them) nor `info`.
///
/// On a terminal, one line (`ProgressLine`) redrawn in place — `\r`, the text, then clear
/// to the end of the line — at most ten times a second, fitted to the terminal's width
/// (`TIOCGWINSZ`, read at each redraw; 80 columns when it cannot be told). Anything else
/// this reporter prints (a failure, a notice such as the interruption message) clears the
/// line first, and `endLine` clears it for good before the summary, so no stale line is
/// left above what follows. Otherwise (piped, CI) a plain `progress: …` line every
/// `IMGPIPE_PROGRESS_INTERVAL` seconds (5 by default), with no control characters. A session
/// reports once more as it ends, so a last line (when one is due) shows where it stopped.
final class ConsoleReporter: RunReporter, Sendable {
    private let quiet: Bool
    private let live: Bool
    /// Whether `failed:` is painted (`TerminalStyle`).
    private let painted: Bool
    private let environment: Environment
    private struct State {
        /// Plain lines start one interval in: a short run prints only its summary.
        var lastPlain = Date()
        var lastDrawn: Date?
        var lineShown = false
        /// Set by `endLine`: a late report (the session's timer racing its end) draws nothing.
        var ended = false
        var failuresShown = 0
    }
    private let state = Mutex(State())
    private let maxFailuresShown = 20
    private let plainInterval: Double
    /// Redraws of the live line are at least this far apart.
    private let redrawInterval = 0.1

    init(quiet: Bool, environment: Environment) {
        self.quiet = quiet
        self.environment = environment
        live = isatty(STDERR_FILENO) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
        painted = TerminalStyle.onStandardError
        plainInterval = Double(ProcessInfo.processInfo.environment["IMGPIPE_PROGRESS_INTERVAL"] ?? "") ?? 5
        if live && !quiet {
            LiveLine.owned { [weak self] write in
                guard let self else { return write() }
                state.withLock { state in
                    clearLine(&state)
                    write()
                }
            }
        }
    }

    func progress(_ progress: RunProgress) {
        guard !quiet else { return }
        state.withLock { state in
            guard !state.ended else { return }
            let now = Date()
            if live {
                if let lastDrawn = state.lastDrawn, now.timeIntervalSince(lastDrawn) < redrawInterval { return }
                state.lastDrawn = now
                write("\r" + ProgressLine(progress).fitted(columns: Self.columns()) + "\u{1B}[K")
                state.lineShown = true
            } else if now.timeIntervalSince(state.lastPlain) >= plainInterval {
                state.lastPlain = now
                write("progress: " + ProgressLine(progress).text + "\n")
            }
        }
    }

    func itemFailed(key: String, failure: ItemFailure) {
        guard !quiet else { return }
        state.withLock { state in
            state.failuresShown += 1
            if state.failuresShown <= maxFailuresShown {
                let label = TerminalStyle.paint("failed:", .red, when: painted)
                line(
                    &state, "\(Environment.shown(key).printable): \(environment.redact(failure.description).printable)",
                    label: label)
            } else if state.failuresShown == maxFailuresShown + 1 {
                line(&state, "(more failures: see `imgpipe status`)")
            }
        }
    }

    func notice(_ message: String) {
        state.withLock { line(&$0, environment.redact(message)) }
    }

    func info(_ message: String) {
        guard !quiet else { return }
        notice(message)
    }

    /// Clears the live line for good, before the summary (or an error) is printed.
    func endLine() {
        state.withLock { state in
            clearLine(&state)
            state.ended = true
        }
        LiveLine.released()
    }

    /// `text` made printable, after `label` (imgpipe's own, which may be painted).
    private func line(_ state: inout State, _ text: String, label: String? = nil) {
        clearLine(&state)
        write((label.map { $0 + " " } ?? "") + text.printableLines + "\n")
    }

    private func clearLine(_ state: inout State) {
        if state.lineShown {
            write("\r\u{1B}[K")
            state.lineShown = false
        }
    }

    private func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }

    /// The width of the terminal on standard error, else 80.
    private static func columns() -> Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }
}
