import Foundation

/// How a watched command ended.
public struct WatchedResult: Sendable {
    /// Nil when the command was still running at the deadline (it was killed).
    public let result: CommandResult?
    /// The highest resident set size seen (`VmHWM` of `/proc/<pid>/status`), in bytes.
    public let peakRSS: Int
    /// Seconds from the start of the watch to the end of the command.
    public let seconds: Double
}

extension RunningCommand {
    /// Waits at most `deadline` seconds (a hang guard: past it the command is killed and
    /// `result` is nil), reading the process's peak memory every 20 ms as it runs.
    public func watch(deadline: Double) -> WatchedResult {
        let started = Date()
        let status = "/proc/\(process.processIdentifier)/status"
        var peak = 0
        while process.isRunning {
            if let text = try? String(contentsOfFile: status, encoding: .utf8),
               let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
               let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") {
                peak = max(peak, kib * 1024)
            }
            if Date().timeIntervalSince(started) > deadline {
                signal(SIGKILL)
                process.waitUntilExit()
                _ = result()
                return WatchedResult(result: nil, peakRSS: peak, seconds: Date().timeIntervalSince(started))
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return WatchedResult(result: wait(), peakRSS: peak, seconds: Date().timeIntervalSince(started))
    }
}
