import COrcStress
import Dispatch
import Foundation
import Synchronization
import Testing

@testable import PipelineKit
@testable import VipsKit

@Suite("libvips runtime")
struct VipsRuntimeTests {
    /// libvips' calls into liborc's code memory reach the lock of `Sources/COrcGuard`
    /// (the executable's definitions interpose liborc's), with liborc's own behind it, and
    /// the vector code is on. Debian's libvips is built with liborc; a build without it
    /// has nothing to guard.
    @Test func liborcCodeMemoryIsBehindTheLock() throws {
        try VipsRuntime.setUp()
        #expect(VipsRuntime.vectorCompileGuarded)
        #expect(VipsRuntime.vectorCodeEnabled)
    }

    /// Four threads compile, run and free 5,000 liborc programs each, through the
    /// functions the process resolves (the lock), and every program computes its own sums.
    /// With liborc 0.4.33's own functions the same crashes or computes wrong sums every
    /// run (`bench/orc-race.c`, with 2 to 8 threads; the runs are counted in bench/RESULTS.md).
    @Test func liborcProgramsBuiltAtOnceBehindTheLockComputeTheirOwnSums() throws {
        try VipsRuntime.setUp()
        #expect(ip_orc_stress(4, 5000, IP_ORC_AS_RESOLVED) == 0)
    }

    /// Every text is rendered on the one text thread, whichever thread asks: Pango never runs
    /// on a caller's thread (a Dispatch thread that may end, freeing what Pango kept for it).
    @Test func textsAreRenderedOnOneThreadWhicheverThreadAsks() throws {
        try VipsRuntime.setUp()
        let callers = Mutex<Set<UInt>>([])
        let renderers = Mutex<Set<UInt>>([])
        let masks = Mutex(0)
        let before = TextThread.shared.jobsRun
        DispatchQueue.concurrentPerform(iterations: 16) { index in
            defer { VipsRuntime.endThreadWork() }
            callers.withLock { _ = $0.insert(UInt(pthread_self())) }
            TextThread.shared.run { renderers.withLock { _ = $0.insert(UInt(pthread_self())) } }
            if let mask = try? VipsImage.text("TEXT \(index)", font: "DejaVu Sans 12", width: 100), mask.width > 0 {
                masks.withLock { $0 += 1 }
            }
        }
        let rendered = renderers.withLock { $0 }
        #expect(masks.withLock { $0 } == 16)
        // The 16 texts went through the text thread too, beside the 16 jobs given to it here.
        #expect(TextThread.shared.jobsRun - before >= 32)
        #expect(rendered.count == 1, "renders ran on \(rendered.count) threads")
        #expect(rendered.isDisjoint(with: callers.withLock { $0 }), "a render ran on a caller's thread")
    }

    /// Pango 1.50 matches each new font pattern on two threads of its own, which can free a
    /// pattern set in a hash the text thread is destroying or changing (the SIGFPE in GLib,
    /// caught in a core: `CPangoGuard` says how). Those matches run on the text thread
    /// instead: a text in a size not asked for before makes a new pattern, whose matching is
    /// counted as run inline, on the text thread. Without the interposed `g_thread_new` the
    /// count stays put; on a Pango that names its threads otherwise, too.
    @Test func pangosFontMatchingRunsOnTheTextThread() throws {
        try VipsRuntime.setUp()
        #expect(VipsRuntime.fontMatchingInline)
        let before = VipsRuntime.fontMatchesInlined
        // A size no other test asks for, so that the font map has no pattern for it yet.
        let size = 41 + Double(before % 997) / 1000
        let mask = try VipsImage.text("MATCHED HERE", font: "DejaVu Serif \(size)", width: 400)
        #expect(mask.width > 0)
        #expect(VipsRuntime.fontMatchesInlined > before)
        let textThread = TextThread.shared.run { UInt(pthread_self()) }
        #expect(VipsRuntime.lastFontMatchThread == textThread, "the last match ran on another thread")
    }
}
