import COrcStress
import Testing
import VipsKit

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
}
