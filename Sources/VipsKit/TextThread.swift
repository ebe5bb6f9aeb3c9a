import CVips
import Foundation

/// The one thread every text is rendered on (`VipsImage.text`), one at a time, and which never
/// ends.
///
/// libvips 8.14 draws text with Pango and fontconfig, which are not thread-safe: a lock
/// around each call kept two renders apart, yet the test process crashed four times with a
/// SIGFPE inside GLib, the last time while another thread was inside Pango (with the tests
/// one at a time: four cases of one test rendering captions at once, on Dispatch threads).
/// What a lock does not cover is what Pango and GLib keep per thread and free when the thread
/// ends: a Dispatch thread that rendered a caption, went idle and ended could free it outside
/// any lock while another thread rendered. That is the one path left that we could see (the
/// crash was never made to happen on demand). Here Pango only ever runs on this thread, so
/// whatever it keeps per thread is made once and never freed while the process runs.
final class TextThread: @unchecked Sendable {
    // @unchecked because `jobs` and `ran` are guarded by `condition`.
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

    /// Runs `body` on the text thread and waits for it.
    func run(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        condition.lock()
        jobs.append {
            body()
            done.signal()
        }
        condition.signal()
        condition.unlock()
        done.wait()
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
            condition.lock()
            ran += 1
            condition.unlock()
        }
    }
}

/// What a render on the text thread gave: written there, read by the caller once the render
/// has ended (`TextThread.run` returns after it).
// @unchecked because it is written by one thread and read by another only after that write.
final class TextResult: @unchecked Sendable {
    var status: Int32 = -1
    var image: UnsafeMutablePointer<CVips.VipsImage>?
}
