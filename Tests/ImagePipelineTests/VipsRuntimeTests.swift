import Testing
import VipsKit

@Suite("libvips runtime")
struct VipsRuntimeTests {
    /// libvips' calls into liborc's code memory reach the lock of `Sources/COrcGuard`
    /// (the executable's definitions interpose liborc's), with liborc's own behind it.
    /// Debian's libvips is built with liborc; a build without it has nothing to guard.
    @Test func liborcCodeMemoryIsBehindTheLock() throws {
        try VipsRuntime.setUp()
        #expect(VipsRuntime.vectorCompileGuarded)
    }
}
