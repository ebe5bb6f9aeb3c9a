import Dispatch
import Foundation
import Logging
import PipelineKit
import Synchronization
import VipsKit

/// Runs a built pipeline over its feed, recording every transition in the state file.
///
/// `execute` picks the run (`RunStateStore.begin`: the rules of `run` and `resume`), builds the
/// constants of the session (`RunContext`) and hands them to `RunStages`, which drives the
/// items through fetch, pixels and sinks. The runner itself holds no state of the run: it
/// only knows the session under way, so that `interrupt` reaches it.
public final class PipelineRunner: Sendable {
    public struct Options: Sendable {
        /// Seconds in-flight items get to finish after SIGINT/SIGTERM.
        public var gracePeriod: Double = 10
        /// Seconds between progress reports.
        public var progressInterval: Double = 0.25
        /// Seconds of pixel work after which an item is logged as slow.
        public var slowItem: Double = 5
        /// The UUID of a new run (nil: its own); `imgpipe work` passes the shared run's.
        public var runUUID: String?
        /// `run --incremental`: each listed item is compared with the previous run, and what
        /// is unchanged is carried over instead of made and delivered again.
        public var changes: ChangeDetector?
        /// Items' pixels are made in helper processes started this way (`PixelHelper`), one
        /// per pixel worker; nil: on the workers' own threads, in this process.
        public var pixelHelper: PixelHelperLaunch?
        /// Each pixel worker starts its helper as the session starts, not for its first item:
        /// set by `SharedWorker` (`work`, and `run` or `resume` on a PostgreSQL state), where
        /// a helper's start, about 0.2 s, then overlaps the first claim. Off
        /// for a state file, where a re-run with nothing to make would start them for nothing.
        public var warmPixelHelpers = false
        /// Lets the feed have the session commit its sinks' open batches (`BatchFlush`).
        public var batchFlush: BatchFlush?
        /// Where a shared run's `dedup` verdicts are kept (`SharedDedup`); nil: in the state file.
        public var dedupLedger: (any DedupLedger)?
        /// What the session counts for `--metrics` (nil: nothing is counted).
        public var metrics: RunMetrics?
        public init() {}
    }

    let pipeline: BuiltPipeline
    let store: any RunStateStore
    let reporter: any RunReporter
    let logger: Logger
    let options: Options
    private let active = Mutex<RunStages?>(nil)

    public init(
        pipeline: BuiltPipeline, store: any RunStateStore, reporter: any RunReporter, logger: Logger,
        options: Options = Options()
    ) {
        self.pipeline = pipeline
        self.store = store
        self.reporter = options.metrics.map { MetricsReporter(base: reporter, metrics: $0) } ?? reporter
        self.logger = logger
        self.options = options
    }

    /// Stops taking new items; in-flight items get `gracePeriod` seconds to finish (none
    /// with `now`). Safe to call from any thread, e.g. a signal source, at any time.
    public func interrupt(now: Bool = false) {
        if now { pipeline.cancellation.abort() } else { pipeline.cancellation.cancel() }
        active.withLock { $0 }?.interrupt(now: now)
    }

    /// Runs to the end of the feed (or an interruption) and returns the run's report as the
    /// session leaves it, with `session` set. Every thread it started has ended when it returns.
    public func execute(_ mode: RunMode) throws -> StatusReport {
        // Sinks are checked before a run is created or reopened: a sink that cannot be
        // prepared (a read-only folder) must not leave a `running` run behind.
        let identity = identity
        for sink in pipeline.sinks { try sink.prepare(workRoot: identity.workRoot) }
        // What the pixel helpers are sent, made before a state file's run exists: settings
        // that cannot be sent fail the session, never leave the pixels to this process.
        let helperConfiguration = try options.pixelHelper.map { _ in try PixelMessage.configuration(pipeline.processor.settings) }
        let start = try store.begin(mode, identity)
        for notice in start.notices { reporter.notice(notice) }
        try VipsRuntime.setUp()
        let context = RunContext(
            start: start, pipeline: pipeline, store: store, reporter: reporter, logger: logger,
            options: options, helperConfiguration: helperConfiguration
        ) { [weak self] error in
            self?.reporter.notice("cannot write the state file: \(error); stopping")
            self?.interrupt()
        }
        // The executors' threads start with the context: whatever way this returns (a run
        // already finished, a work folder that cannot be made), they are let go.
        defer { context.stopExecutors() }
        if let metrics = options.metrics { context.instrument(metrics) }
        let stages = try RunStages(context)
        active.withLock { $0 = stages }
        defer { active.withLock { $0 = nil } }
        if pipeline.cancellation.isCancelled { stages.interrupt(now: pipeline.cancellation.isAborted) }
        return try stages.drive()
    }

    /// What the store records of this pipeline.
    var identity: RunIdentity {
        let spec = pipeline.spec
        return RunIdentity(
            pipelinePath: pipeline.path, pipelineName: spec.name, document: spec.document.serialized(),
            fingerprint: pipeline.runFingerprint, sinks: spec.sinks.map(\.name),
            workRoot: store.workRoot,
            displayPath: displayPath, uuid: options.runUUID, baseline: options.changes?.baseline.id)
    }

    var displayPath: String {
        let cwd = FileManager.default.currentDirectoryPath + "/"
        return pipeline.path.hasPrefix(cwd) ? String(pipeline.path.dropFirst(cwd.count)) : pipeline.path
    }
}

/// The constants of one session of a run, built once before any item moves and handed to
/// every stage: nothing in it changes while the session goes on.
struct RunContext: Sendable {
    let run: RunRecord
    /// Continue the run's unfinished items before listing.
    let resuming: Bool
    /// `resume --refresh-feed` of a complete feed: a failed listing leaves it complete.
    let refreshing: Bool
    let stagedDirectory: String
    let spoolDirectory: String
    /// The spool folder's files, reused from one download to the next.
    let spool: SpoolFiles
    /// The staged folder's files, reused from one delivered output to the next (each keeps
    /// at most 256 KiB of blocks while it waits).
    let stagedFiles: SpoolFiles
    let pipeline: BuiltPipeline
    let store: any RunStateStore
    let writer: StoreWriter
    let fetchers: BoundedExecutor
    let workers: BoundedExecutor
    /// Where the workers have items' pixels made.
    let pixels: PixelWork
    /// What the pixel work of the items in flight may hold at once (`limits.memory`).
    let memory: MemoryBudget
    let deliverers: BoundedExecutor
    let sinks: [String: any Sink]
    let reporter: any RunReporter
    let logger: Logger
    let options: PipelineRunner.Options
    /// Items in flight at most.
    let capacity: Int

    init(
        start: RunStart, pipeline: BuiltPipeline, store: any RunStateStore, reporter: any RunReporter, logger: Logger,
        options: PipelineRunner.Options, helperConfiguration: Data?,
        onWriteError: @escaping @Sendable (any Error) -> Void
    ) {
        run = start.run
        resuming = start.resuming
        refreshing = start.refreshing
        stagedDirectory = start.run.workDirectory + "/staged"
        spoolDirectory = start.run.workDirectory + "/spool"
        self.pipeline = pipeline
        self.store = store
        self.reporter = reporter
        self.logger = logger
        self.options = options
        let limits = pipeline.spec.limits
        capacity = limits.downloads + limits.effectiveWorkers * 2 + limits.uploads
        spool = SpoolFiles(directory: spoolDirectory, keep: capacity)
        stagedFiles = SpoolFiles(directory: stagedDirectory, keep: capacity, keptBytes: 256 << 10)
        fetchers = BoundedExecutor(label: "imgpipe.fetch", width: limits.downloads)
        let workers = BoundedExecutor(label: "imgpipe.pixels", width: limits.effectiveWorkers) {
            VipsRuntime.endThreadWork()
        }
        self.workers = workers
        memory = MemoryBudget(bytes: limits.memoryBytes)
        if let launch = options.pixelHelper, let helperConfiguration {
            pixels = .helpers(
                PixelHelpers(
                    launch: launch, configuration: helperConfiguration, fallback: pipeline.processor,
                    cancellation: pipeline.cancellation, logger: logger, redact: pipeline.environment.redact,
                    metrics: options.metrics))
        } else {
            pixels = .inProcess(pipeline.processor)
        }
        // Commits wait for company only while every pixel thread has four items queued behind
        // the one it works on: the stage that sets the pace then has more work in hand than a
        // wait lasts, and the wait costs no throughput (`StoreWriter`).
        writer = StoreWriter(
            store: store, runId: start.run.id, redact: pipeline.environment.redact,
            linger: { workers.backlog >= 4 * workers.width }, onError: onWriteError)
        deliverers = BoundedExecutor(label: "imgpipe.sinks", width: limits.uploads)
        var sinks: [String: any Sink] = [:]
        for sink in pipeline.sinks { sinks[sink.name] = sink }
        self.sinks = sinks
    }

    var runId: Int64 { run.id }

    /// What `metrics` counts at each scrape: queue depths and the hosts held back.
    func instrument(_ metrics: RunMetrics) {
        metrics.identify(run: run.id)
        metrics.sessionActive(true)
        let queues = [("fetch", fetchers), ("pixels", workers), ("deliver", deliverers)]
        let pacing = pipeline.fetcher?.client.pacing
        let health = pipeline.fetcher?.hosts
        metrics.sample {
            var samples = queues.map { RunMetrics.Sample("imgpipe_queue_depth", Double($0.1.backlog), labels: [("stage", $0.0)]) }
            let hosts = pacing?.snapshot() ?? []
            for host in hosts {
                if let rate = host.rate {
                    samples.append(
                        RunMetrics.Sample("imgpipe_host_rate_requests_per_second", rate, labels: [("host", host.host)]))
                }
            }
            samples.append(RunMetrics.Sample("imgpipe_hosts_slowed", Double(hosts.filter(\.slowed).count)))
            samples.append(RunMetrics.Sample("imgpipe_hosts_held", Double(hosts.filter(\.held).count)))
            samples.append(RunMetrics.Sample("imgpipe_host_breakers_open", Double(health?.openBreakers() ?? 0)))
            return samples
        }
    }

    /// Lets the stages' threads end once their queues are empty, and the pixel helpers
    /// once they are idle (safe to call again).
    func stopExecutors() {
        for executor in [fetchers, workers, deliverers] { executor.shutdown() }
        pixels.shutdown()
    }
}
