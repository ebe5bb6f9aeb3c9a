import Foundation
import ImagePipeline

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
// @unchecked because mutable state is guarded by `lock`.
final class ConsoleReporter: RunReporter, @unchecked Sendable {
    private let quiet: Bool
    private let live: Bool
    /// Whether `failed:` is painted (`TerminalStyle`).
    private let painted: Bool
    private let environment: Environment
    private let lock = NSLock()
    /// Plain lines start one interval in: a short run prints only its summary.
    private var lastPlain = Date()
    private var lastDrawn: Date?
    private var lineShown = false
    /// Set by `endLine`: a late report (the session's timer racing its end) draws nothing.
    private var ended = false
    private var failuresShown = 0
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
                lock.withLock {
                    clearLine()
                    write()
                }
            }
        }
    }

    func progress(_ progress: RunProgress) {
        guard !quiet else { return }
        lock.withLock {
            guard !ended else { return }
            let now = Date()
            if live {
                if let lastDrawn, now.timeIntervalSince(lastDrawn) < redrawInterval { return }
                lastDrawn = now
                write("\r" + ProgressLine(progress).fitted(columns: Self.columns()) + "\u{1B}[K")
                lineShown = true
            } else if now.timeIntervalSince(lastPlain) >= plainInterval {
                lastPlain = now
                write("progress: " + ProgressLine(progress).text + "\n")
            }
        }
    }

    func itemFailed(key: String, failure: ItemFailure) {
        guard !quiet else { return }
        lock.withLock {
            failuresShown += 1
            if failuresShown <= maxFailuresShown {
                let label = TerminalStyle.paint("failed:", .red, when: painted)
                line("\(Environment.shown(key).printable): \(environment.redact(failure.description).printable)", label: label)
            } else if failuresShown == maxFailuresShown + 1 {
                line("(more failures: see `imgpipe status`)")
            }
        }
    }

    func notice(_ message: String) {
        lock.withLock { line(environment.redact(message)) }
    }

    func info(_ message: String) {
        guard !quiet else { return }
        notice(message)
    }

    /// Clears the live line for good, before the summary (or an error) is printed.
    func endLine() {
        lock.withLock {
            clearLine()
            ended = true
        }
        LiveLine.released()
    }

    /// `text` made printable, after `label` (imgpipe's own, which may be painted).
    private func line(_ text: String, label: String? = nil) {
        clearLine()
        write((label.map { $0 + " " } ?? "") + text.printableLines + "\n")
    }

    private func clearLine() {
        if lineShown {
            write("\r\u{1B}[K")
            lineShown = false
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
