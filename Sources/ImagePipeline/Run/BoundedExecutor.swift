import Dispatch
import Foundation

/// Runs jobs on a Dispatch concurrent queue, at most `width` at a time; the rest wait in
/// order. Submitting never blocks, so completions on other queues can hand work on.
// @unchecked because `running` and `waiting` are guarded by `lock`.
final class BoundedExecutor: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    let width: Int
    private let queue: DispatchQueue
    private let lock = NSLock()
    private var running = 0
    private var waiting: [Job] = []
    private var head = 0
    private let afterEachJob: (@Sendable () -> Void)?

    /// `afterEachJob` runs on the worker thread after every job (e.g. libvips' per-thread
    /// cleanup).
    init(label: String, width: Int, qos: DispatchQoS = .userInitiated, afterEachJob: (@Sendable () -> Void)? = nil) {
        self.width = max(1, width)
        queue = DispatchQueue(label: label, qos: qos, attributes: .concurrent)
        self.afterEachJob = afterEachJob
    }

    func submit(_ job: @escaping Job) {
        let start: Bool = lock.withLock {
            if running < width {
                running += 1
                return true
            }
            waiting.append(job)
            return false
        }
        if start { queue.async { self.drain(first: job) } }
    }

    /// Runs `first`, then waiting jobs, on this worker until none is left.
    private func drain(first: @escaping Job) {
        var job: Job? = first
        while let current = job {
            current()
            afterEachJob?()
            job = lock.withLock {
                guard head < waiting.count else {
                    waiting.removeAll(keepingCapacity: true)
                    head = 0
                    running -= 1
                    return nil
                }
                let next = waiting[head]
                head += 1
                if head > 1024, head * 2 > waiting.count {
                    waiting.removeFirst(head)
                    head = 0
                }
                return next
            }
        }
    }
}
