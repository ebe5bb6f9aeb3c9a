import Foundation

/// Runs jobs on a fixed set of `width` threads, started at once; the rest wait in order.
/// Submitting never blocks, so completions on other queues can hand work on.
///
/// Real threads, not a Dispatch queue: jobs here block (a download, an upload, libvips
/// decoding), and libdispatch grows a queue's threads by about one a second while its jobs
/// block, so a stage 16 wide would take 15 s to reach its width. These threads are all
/// there from the first job. `shutdown` ends them once the session is over.
// @unchecked because `waiting`, `head`, `idle` and `stopped` are guarded by `condition`
// (idle threads wait on it: `Mutex` has no wait).
package final class BoundedExecutor: @unchecked Sendable {
    package typealias Job = @Sendable () -> Void

    package let width: Int
    private let condition = NSCondition()
    /// Jobs not yet taken from `head` on; a taken job's slot is emptied at once, so that
    /// what it holds goes when it has run, not when the queue next runs dry.
    private var waiting: [Job?] = []
    private var head = 0
    /// Threads waiting for a job.
    private var idle = 0
    private var stopped = false
    private let afterEachJob: (@Sendable () -> Void)?

    /// `afterEachJob` runs on the worker thread after every job (e.g. libvips' per-thread
    /// cleanup).
    package init(label: String, width: Int, afterEachJob: (@Sendable () -> Void)? = nil) {
        self.width = max(1, width)
        self.afterEachJob = afterEachJob
        // The kernel's name of each thread, as profilers and /proc show it (15 bytes at most):
        // the label's last part and the index, "fetch.12".
        let stage = label.split(separator: ".").last.map(String.init) ?? label
        for index in 0..<self.width {
            let shortName = String(decoding: "\(stage).\(index)".utf8.prefix(15), as: UTF8.self)
            let thread = Thread { [self] in
                Self.nameThisThread(shortName)
                work()
            }
            thread.name = "\(label).\(index)"
            thread.stackSize = 4 << 20
            thread.start()
        }
    }

    /// Queues `job`; after `shutdown` it is dropped (the session it belonged to is over).
    package func submit(_ job: @escaping Job) {
        condition.lock()
        guard !stopped else { return condition.unlock() }
        waiting.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Queues `job` only when a thread is free to run it at once; false otherwise (busy,
    /// or shut down), and the caller runs it itself.
    func submitIfIdle(_ job: @escaping Job) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped, waiting.count - head < idle else { return false }
        waiting.append(job)
        condition.signal()
        return true
    }

    /// Jobs queued and not yet taken by a thread.
    package var backlog: Int {
        condition.lock()
        defer { condition.unlock() }
        return waiting.count - head
    }

    /// Lets the threads end once the jobs already queued have run; later jobs are dropped.
    package func shutdown() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    /// Sets the calling thread's kernel name (`pthread_setname_np`, a GNU extension that
    /// Swift's Glibc module does not declare, does the same write).
    package static func nameThisThread(_ name: String) {
        writeKernelFile("/proc/thread-self/comm", name)
    }

    private func work() {
        while let job = next() {
            job()
            afterEachJob?()
        }
    }

    /// The oldest waiting job; nil when shut down and nothing is left.
    private func next() -> Job? {
        condition.lock()
        defer { condition.unlock() }
        while head == waiting.count {
            if stopped { return nil }
            idle += 1
            condition.wait()
            idle -= 1
        }
        // Slots from `head` on hold jobs.
        let job = waiting[head]
        waiting[head] = nil
        head += 1
        if head == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024, head * 2 > waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
        return job
    }
}
