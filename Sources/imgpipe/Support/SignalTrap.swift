import Dispatch
import Foundation

/// Turns SIGINT and SIGTERM into a call, instead of killing the process. A second signal
/// calls `onRepeat`.
// @unchecked because `sources` is set once in init and only cancelled afterwards.
final class SignalTrap: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    init(onSignal: @escaping @Sendable () -> Void, onRepeat: @escaping @Sendable () -> Void) {
        let count = Counter()
        sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                if count.next() == 1 { onSignal() } else { onRepeat() }
            }
            source.resume()
            return source
        }
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}

// @unchecked because `value` is guarded by `lock`.
private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func next() -> Int {
        lock.withLock {
            value += 1
            return value
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
