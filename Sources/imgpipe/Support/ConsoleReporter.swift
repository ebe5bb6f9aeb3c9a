import Foundation
import ImagePipeline

/// Progress and failures on standard error: a live line on a terminal, a plain line every
/// few seconds otherwise, nothing with `--quiet`.
// @unchecked because mutable state is guarded by `lock`.
final class ConsoleReporter: RunReporter, @unchecked Sendable {
    private let quiet: Bool
    private let live: Bool
    private let environment: Environment
    private let lock = NSLock()
    /// Plain lines start one interval in: a short run prints only its summary.
    private var lastPlain = Date()
    private var lineShown = false
    private var failuresShown = 0
    private let maxFailuresShown = 20
    private let plainInterval: Double

    init(quiet: Bool, environment: Environment) {
        self.quiet = quiet
        self.environment = environment
        live = isatty(STDERR_FILENO) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
        plainInterval = Double(ProcessInfo.processInfo.environment["IMGPIPE_PROGRESS_INTERVAL"] ?? "") ?? 5
    }

    func progress(_ progress: RunProgress) {
        guard !quiet else { return }
        lock.withLock {
            let total = progress.listing ? "\(progress.total)+" : "\(progress.total)"
            var text = "\(progress.done)/\(total) done, \(progress.failed) failed, "
                + String(format: "%.1f items/s", progress.itemsPerSecond)
            if let eta = progress.eta { text += ", ETA \(Self.duration(eta))" }
            if live {
                write("\r\u{1B}[K" + text)
                lineShown = true
            } else if Date().timeIntervalSince(lastPlain) >= plainInterval {
                lastPlain = Date()
                write("progress: " + text + "\n")
            }
        }
    }

    func itemFailed(key: String, failure: ItemFailure) {
        guard !quiet else { return }
        lock.withLock {
            failuresShown += 1
            if failuresShown <= maxFailuresShown {
                line("failed: \(key): \(environment.redact(failure.description))")
            } else if failuresShown == maxFailuresShown + 1 {
                line("(more failures: see `imgpipe status`)")
            }
        }
    }

    func notice(_ message: String) {
        lock.withLock { line(environment.redact(message)) }
    }

    /// Ends the live line before a summary is printed.
    func endLine() {
        lock.withLock {
            if lineShown { write("\n"); lineShown = false }
        }
    }

    private func line(_ text: String) {
        if lineShown { write("\r\u{1B}[K"); lineShown = false }
        write(text + "\n")
    }

    private func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }

    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        if total >= 3600 { return String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60) }
        return String(format: "%d:%02d", total / 60, total % 60)
    }
}
