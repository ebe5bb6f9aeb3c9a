import Foundation
import PipelineKit

/// How a watched command ended.
public struct WatchedResult: Sendable {
    /// Nil when the command was still running at the deadline (it was killed).
    public let result: CommandResult?
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
                return WatchedResult(result: nil)
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return WatchedResult(result: wait())
    }
}
