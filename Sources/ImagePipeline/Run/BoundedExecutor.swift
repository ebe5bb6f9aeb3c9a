import Foundation

/// Runs jobs on a fixed set of `width` threads, started at once; the rest wait in order.
/// Submitting never blocks, so completions on other queues can hand work on.
///
/// Real threads, not a Dispatch queue: jobs here block (a download, an upload, libvips
/// decoding), and libdispatch grows a queue's threads by about one a second while its jobs
/// block, so a stage 16 wide would take 15 s to reach its width. These threads are all
/// there from the first job. `shutdown` ends them once the session is over.
///
/// A job goes to the thread that went idle last (each idle thread waits on a semaphore of
/// its own, on a stack), not to whichever a shared condition wakes: when a stage needs
/// fewer threads than it has (16 downloads from a fast origin feeding 2 pixel workers), the
/// same one or two threads do its jobs with their stacks, their pooled libcurl handles and
/// receive buffers still in the caches, instead of each of the 16 in turn. When every
/// thread is needed (a slow origin), every thread runs, as before.
// @unchecked because `waiting`, `head`, `sleepers` and `stopped` are guarded by `lock`.
final class BoundedExecutor: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    let width: Int
    private let lock = NSLock()
    /// Jobs not yet taken from `head` on; a taken job's slot is emptied at once, so that
    /// what it holds goes when it has run, not when the queue next runs dry.
    private var waiting: [Job?] = []
    private var head = 0
    /// The semaphores of the threads waiting for a job, the one that went idle last at the
    /// end. A thread is taken off when it is woken, so each is signalled at most once.
    private var sleepers: [DispatchSemaphore] = []
    private var stopped = false
    private let afterEachJob: (@Sendable () -> Void)?

    /// `afterEachJob` runs on the worker thread after every job (e.g. libvips' per-thread
    /// cleanup).
    init(label: String, width: Int, afterEachJob: (@Sendable () -> Void)? = nil) {
        self.width = max(1, width)
        self.afterEachJob = afterEachJob
        for index in 0 ..< self.width {
            let name = "\(label).\(index)"
            // The kernel's name of the thread, as profilers and /proc show it (15 bytes at
            // most): the label's last part and the index, "fetch.12".
            let stage = label.split(separator: ".").last.map(String.init) ?? label
            let shortName = String(decoding: "\(stage).\(index)".utf8.prefix(15), as: UTF8.self)
            let thread = Thread { [self] in
                Self.nameThisThread(shortName)
                work()
            }
            thread.name = name
            thread.stackSize = 4 << 20
            thread.start()
        }
    }

    /// Queues `job`; after `shutdown` it is dropped (the session it belonged to is over).
    func submit(_ job: @escaping Job) {
        lock.lock()
        guard !stopped else { return lock.unlock() }
        waiting.append(job)
        let woken = sleepers.popLast()
        lock.unlock()
        woken?.signal()
    }

    /// Queues `job` only when a thread is free to run it at once; false otherwise (busy,
    /// or shut down), and the caller runs it itself.
    func submitIfIdle(_ job: @escaping Job) -> Bool {
        lock.lock()
        // Each job queued took a sleeper with it: one left is a thread with nothing to do.
        guard !stopped, let woken = sleepers.popLast() else {
            lock.unlock()
            return false
        }
        waiting.append(job)
        lock.unlock()
        woken.signal()
        return true
    }

    /// Jobs queued and not yet taken by a thread.
    var backlog: Int {
        lock.withLock { waiting.count - head }
    }

    /// Threads waiting for a job.
    var idleThreads: Int {
        lock.withLock { sleepers.count }
    }

    /// Lets the threads end once the jobs already queued have run; later jobs are dropped.
    func shutdown() {
        lock.lock()
        stopped = true
        let woken = sleepers
        sleepers.removeAll()
        lock.unlock()
        for sleeper in woken { sleeper.signal() }
    }

    /// Sets the calling thread's kernel name (`pthread_setname_np`, a GNU extension that
    /// Swift's Glibc module does not declare, does the same write).
    private static func nameThisThread(_ name: String) {
        let file = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard file >= 0 else { return }
        _ = name.withCString { write(file, $0, strlen($0)) }
        close(file)
    }

    private func work() {
        let wake = DispatchSemaphore(value: 0)
        while let job = next(wake) {
            job()
            afterEachJob?()
        }
    }

    /// The oldest waiting job; nil when shut down and nothing is left. A thread with nothing
    /// to do puts its semaphore on `sleepers` and waits on it: woken for a job that another
    /// thread may take first, it goes back on the stack.
    private func next(_ wake: DispatchSemaphore) -> Job? {
        lock.lock()
        defer { lock.unlock() }
        while head == waiting.count {
            if stopped { return nil }
            sleepers.append(wake)
            lock.unlock()
            wake.wait()
            lock.lock()
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
