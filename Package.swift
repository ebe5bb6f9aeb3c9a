// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "imgpipe",
    // macOS 15: the first with `Synchronization.Mutex` (Linux, where imgpipe runs, has it always).
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "imgpipe", targets: ["imgpipe"]),
        .library(name: "ImagePipeline", targets: ["ImagePipeline", "PipelineKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // libvips headers plus `shim.h`: non-variadic static inline wrappers for the
        // variadic libvips operations VipsKit calls.
        .systemLibrary(
            name: "CVips",
            pkgConfig: "vips",
            providers: [.apt(["libvips-dev"])]
        ),
        // zlib's gzip reader, for `.gz` URL lists.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        // libsnappy and libzstd, for the pages of Parquet files (read and written).
        .systemLibrary(name: "CSnappy", pkgConfig: "snappy", providers: [.apt(["libsnappy-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        // libcurl's easy API, for HTTP: a blocking call per transfer on the caller's thread,
        // with callbacks that can stop a transfer at once (limits, deadlines).
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // libpq, PostgreSQL's client, for the shared-state backend: blocking calls on the
        // store's own threads fit the Dispatch design and add no build time (see ARCHITECTURE.md,
        // "A run shared through PostgreSQL").
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        // A lock around liborc's code memory, which liborc 0.4.33 (Debian 12's) hands out
        // without one: `orc_program_compile` and `orc_program_free` defined here interpose
        // liborc's (see OrcGuard.c).
        .target(name: "COrcGuard"),
        // Pango 1.50's fontconfig matching run on the thread that asks for it, not on two
        // threads of its own per font pattern, which free what the render thread is using:
        // `g_thread_new` defined here interposes GLib's (see PangoGuard.c).
        .target(name: "CPangoGuard"),
        // Threads compiling and freeing liborc programs at once: the race the lock above
        // prevents (for the tests and bench/orc-race.c).
        .target(name: "COrcStress"),
        // Halving and lanczos3 reduction of 8-bit pictures already in memory, for the outputs
        // made from an item's other outputs (libvips 8.14 does both in scalar code).
        .target(name: "CResample"),
        // How a run starts its pixel helpers (posix_spawn closing every other descriptor)
        // and what a helper asks of the kernel (`PR_SET_PDEATHSIG`): calls Swift cannot make.
        .target(name: "CProcess"),
        // Folders opened beneath a directory sink's without following symbolic links
        // (`openat2`, which glibc does not wrap), and the swap its tests make (`renameat2`).
        .target(name: "CBeneath"),
        // A JPEG decoded at 1/2, 1/4 or 1/8 of its size by libjpeg-turbo (libvips' own JPEG
        // library), straight into pixels: an output's fingerprint without libvips' overhead.
        .target(name: "CJpegScale", linkerSettings: [.linkedLibrary("jpeg")]),
        // The only module that imports CVips (and COrcGuard, CPangoGuard, CResample, CJpegScale).
        .target(name: "VipsKit", dependencies: ["CVips", "COrcGuard", "CPangoGuard", "CResample", "CJpegScale"]),
        // Parquet files of flat tables, read and written (Debian has no Parquet library): the
        // table source's `.parquet`, `export --format parquet`, the shards' manifests.
        .target(name: "ParquetKit", dependencies: ["CSnappy", "CZstd", "CZlib"]),
        // The layers, each a target, so that the compiler keeps them apart: the lower may not
        // import the upper.
        // PipelineKit: what a pipeline is made of. The pipeline file and its checks, filters
        // and pixel work (through VipsKit), items' verdicts, and the transports: feeds, HTTP
        // fetching, S3, sinks. No run, no state.
        .target(
            name: "PipelineKit",
            dependencies: [
                "VipsKit",
                "ParquetKit",
                "CZlib",
                "CCurl",
                "CBeneath",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // ImagePipeline: a run. Its state (the state file, the shared PostgreSQL store), the
        // stages, pixel helpers, dry-run, status and export, over PipelineKit's parts.
        .target(
            name: "ImagePipeline",
            dependencies: [
                "PipelineKit",
                "ParquetKit",
                "VipsKit",
                "CPostgres",
                "CProcess",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .executableTarget(
            name: "imgpipe",
            dependencies: [
                "ImagePipeline",
                "ParquetKit",
                "PipelineKit",
                "VipsKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The shared-run store alone under simulated workers, for bench/scaleout.sh.
        .executableTarget(name: "imgpipe-scaleout", dependencies: ["ImagePipeline", "PipelineKit"]),
        // Fingerprints' cost and the near-duplicate index at a million hashes (`bench/dedup.sh`).
        .executableTarget(name: "imgpipe-hashbench", dependencies: ["ImagePipeline", "PipelineKit", "VipsKit"]),
        // The fuzz target (`make fuzz` builds it with -sanitize=fuzzer -DFUZZING); an
        // ordinary build makes a replayer of saved inputs.
        .executableTarget(name: "imgpipe-fuzz", dependencies: ["ImagePipeline", "PipelineKit", "ParquetKit", "VipsKit"]),
        .target(
            name: "ImagePipelineTesting",
            dependencies: ["ImagePipeline", "PipelineKit", "VipsKit"]
        ),
        // A run whose sink is `MemoryBatchSink` (in ImagePipelineTesting), for the tests of
        // the batching sink contract under kill -9: a test program, not a product.
        .executableTarget(
            name: "imgpipe-batchtest",
            dependencies: [
                "ImagePipeline", "PipelineKit", "ImagePipelineTesting", .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "ImagePipelineTests",
            dependencies: [
                "ImagePipeline", "PipelineKit", "ParquetKit", "ImagePipelineTesting", "VipsKit", "imgpipe", "imgpipe-batchtest",
                "COrcStress",
                "CProcess",
                "CBeneath",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
