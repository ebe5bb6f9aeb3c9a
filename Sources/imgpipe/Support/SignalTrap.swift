import Dispatch
import Foundation
import ImagePipeline
import PipelineKit
import Synchronization

/// Turns SIGINT and SIGTERM into a call, instead of killing the process. A second signal
/// calls `onRepeat`.
final class SignalTrap: Sendable {
    /// Set once in init and only cancelled afterwards (dispatch sources are not `Sendable`).
    private let sources: Mutex<[any DispatchSourceSignal]>

    init(onSignal: @escaping @Sendable () -> Void, onRepeat: @escaping @Sendable () -> Void) {
        let count = LockedBox(0)
        let sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let seen = count.withLock { count in
                    count += 1
                    return count
                }
                if seen == 1 { onSignal() } else { onRepeat() }
            }
            source.resume()
            return source
        }
        self.sources = Mutex(sources)
    }

    func cancel() {
        sources.withLock { sources in
            for source in sources { source.cancel() }
        }
    }
}

extension SignalTrap {
    /// The trap of a command that works on items: the first signal prints `notice` and asks
    /// for a graceful stop (`interrupt(false)`); a second asks to stop at once
    /// (`interrupt(true)`) and, `grace` seconds later whatever is still running, exits 130
    /// saying `stopped`.
    static func stoppingWork(
        reporter: ConsoleReporter, notice: String, grace: Double, stopped: String,
        interrupt: @escaping @Sendable (_ now: Bool) -> Void
    ) -> SignalTrap {
        SignalTrap(
            onSignal: {
                reporter.notice(notice)
                interrupt(false)
            },
            onRepeat: {
                interrupt(true)
                DispatchQueue.global().asyncAfter(deadline: .now() + grace) {
                    Console.exitNow(130, reporter: reporter, saying: stopped)
                }
            })
    }
}
