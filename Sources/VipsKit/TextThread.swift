import CVips
import Foundation

/// The one thread every text is rendered on (`VipsImage.text`), one at a time, and which never
/// ends.
///
/// libvips 8.14 draws text with Pango and fontconfig, which are not thread-safe, and lays it
/// out and draws it without a lock (its own lock covers only `fontfile`), so two pixel
/// workers captioning at once could crash the process. Pango also keeps state
/// per thread, freed when the thread ends: a Dispatch thread that rendered a caption and
/// ended could free it beside another render. Here Pango only ever runs on this thread, so
/// whatever it keeps per thread is made once and never freed while the process runs.
///
/// Pango 1.50's own font-matching threads race with this one (Sources/CPangoGuard/PangoGuard.c
/// tells how); `CPangoGuard` runs those matches on this thread as well.
final class TextThread: @unchecked Sendable {
    // @unchecked because `jobs` and `ran` are guarded by `condition` (the thread waits on it
    // for work: `Mutex` has no wait).
    static let shared = TextThread()

    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var ran = 0

    /// Jobs run on the thread so far (every `VipsImage.text` is one).
    var jobsRun: Int {
        condition.lock()
        defer { condition.unlock() }
        return ran
    }

    private init() {
        let thread = Thread { [self] in work() }
        thread.name = "imgpipe.text"
        thread.stackSize = 4 << 20
        thread.start()
    }

    /// Runs `body` on the text thread, waits for it and returns what it returned.
    func run<T>(_ body: @escaping () -> T) -> T {
        // Handed from the caller to the text thread and back; the caller waits in between, so
        // the two never touch them at once.
        nonisolated(unsafe) let body = body
        nonisolated(unsafe) var result: T?
        let done = DispatchSemaphore(value: 0)
        condition.lock()
        jobs.append { [self] in
            result = body()
            // Counted before the caller goes on, so that it sees its own job counted.
            condition.lock()
            ran += 1
            condition.unlock()
            done.signal()
        }
        condition.signal()
        condition.unlock()
        done.wait()
        return result!
    }

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
            // libvips' own per-thread state (its buffers), as on every thread it did not make.
            VipsRuntime.endThreadWork()
        }
    }
}
