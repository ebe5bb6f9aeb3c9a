import COrcGuard
import CPangoGuard
import CVips

#if canImport(Glibc)
    import Glibc
#endif

/// Process-wide libvips set-up, done once, the first time anything asks for it.
///
/// - operation cache off: a batch never sees the same operation twice, and the cache would
///   only hold memory;
/// - one libvips thread per image: imgpipe runs one image per worker and as many workers
///   as cores, which is faster than libvips' own threading for small images;
/// - untrusted loaders (SVG, PDF, ImageMagick, matrix, …) blocked;
/// - libvips warnings silenced: failures reach the caller as errors instead;
/// - liborc's run-time compiled vector code on only behind imgpipe's lock around liborc's
///   code memory (Debian 12's liborc 0.4.33 races there; the story is in
///   Sources/COrcGuard/OrcGuard.c). When the lock is not in force (`vectorCompileGuarded`
///   false), or `VIPS_NOVECTOR` is set, the vector code stays off.
public enum VipsRuntime {
    private static let setUpResult: Result<Void, VipsError> = {
        setenv("VIPS_WARNING", "0", 0)
        if ip_init("imgpipe") != 0 {
            return .failure(VipsError.take("vips_init"))
        }
        vips_cache_set_max(0)
        vips_cache_set_max_mem(0)
        vips_cache_set_max_files(0)
        vips_concurrency_set(1)
        vips_block_untrusted_set(1)
        vips_leak_set(0)
        // libvips' own switch, VIPS_NOVECTOR, keeps it off as it would without imgpipe.
        ip_set_vector_enabled(vectorCompileGuarded && getenv("VIPS_NOVECTOR") == nil ? 1 : 0)
        return .success(())
    }()

    /// Initialises libvips once; later calls return the first call's result.
    public static func setUp() throws {
        try setUpResult.get()
    }

    /// Whether libvips uses liborc's vector code.
    public static var vectorCodeEnabled: Bool {
        guard case .success = setUpResult else { return false }
        return ip_vector_enabled() != 0
    }

    /// Limits glibc's malloc arenas for the process (call first thing): libvips workers
    /// allocate on many threads, and fewer arenas measured faster and smaller.
    public static func limitMallocArenas(_ count: Int) {
        ip_limit_malloc_arenas(Int32(max(1, count)))
    }

    /// Whether liborc's code memory is behind imgpipe's lock (`Sources/COrcGuard`): libvips'
    /// calls to `orc_program_compile` and `orc_program_free` reach the executable's
    /// definitions, which serialise them.
    public static var vectorCompileGuarded: Bool { ip_orc_guard_active() != 0 }

    /// Whether Pango's fontconfig matching runs on the thread that renders the text
    /// (`Sources/CPangoGuard`): Pango's calls to `g_thread_new` reach the executable's
    /// definition, which runs its matching threads' work at once on the caller.
    public static var fontMatchingInline: Bool { ip_pango_guard_active() != 0 }

    /// How many of Pango's matching threads have been run on their caller's thread so far.
    public static var fontMatchesInlined: Int { ip_pango_threads_inlined() }

    /// The thread (`pthread_self()`) that ran the last of them inline, or 0 before the first.
    public static var lastFontMatchThread: UInt { ip_pango_last_inline_thread() }

    /// libvips' version, e.g. `8.14.1`.
    public static var version: String {
        "\(vips_version(0)).\(vips_version(1)).\(vips_version(2))"
    }

    /// Frees libvips' per-thread state. Call at the end of every job that ran libvips on a
    /// thread libvips did not create (a Dispatch worker, a test thread).
    /// Safe to call before anything else touched libvips (it sets libvips up first:
    /// `vips_thread_shutdown` before `vips_init` crashes).
    public static func endThreadWork() {
        guard case .success = setUpResult else { return }
        vips_thread_shutdown()
    }
}
