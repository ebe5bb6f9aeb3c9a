import Foundation

/// How a watched command ended.
public struct WatchedResult: Sendable {
    /// Nil when the command was still running at the deadline (it was killed).
    public let result: CommandResult?
    /// Seconds from the start of the watch to the end of the command.
    public let seconds: Double
}

extension RunningCommand {
    /// Waits at most `deadline` seconds for a command started with `launch` (a hang guard:
    /// past it the command is killed and `result` is nil). The child's peak memory is read
    /// by `ImgpipeBinary.runMeasured`, which reaps the child itself.
    public func watch(deadline: Double) -> WatchedResult {
        let started = Date()
        while process.isRunning {
            if Date().timeIntervalSince(started) > deadline {
                signal(SIGKILL)
                process.waitUntilExit()
                _ = result()
                return WatchedResult(result: nil, seconds: Date().timeIntervalSince(started))
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return WatchedResult(result: wait(), seconds: Date().timeIntervalSince(started))
    }
}
