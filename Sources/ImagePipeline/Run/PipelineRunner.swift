import Dispatch
import Foundation
import Logging
import VipsKit

/// Runs a built pipeline over its feed, recording every transition in the state file.
///
/// Stages are bounded executors: fetch (`limits.downloads` wide), pixels (`limits.workers`
/// wide, on a Dispatch concurrent queue, never on Swift's cooperative pool) and sinks
/// (`limits.uploads` wide). A producer thread lists the feed and admits an item only when
/// one of a fixed number of slots is free, so memory does not grow with the feed. Each
/// stage hands an item on from the completion of its state change, so a kill at any
/// moment loses at most the work in flight.
// @unchecked because mutable state is guarded by `lock` or owned by the producer thread.
public final class PipelineRunner: @unchecked Sendable {
    public struct Options: Sendable {
        /// Seconds in-flight items get to finish after SIGINT/SIGTERM.
        public var gracePeriod: Double = 10
        /// Seconds between progress reports.
        public var progressInterval: Double = 0.25
        public init() {}
    }

    let pipeline: BuiltPipeline
    let store: RunStore
    let reporter: any RunReporter
    let logger: Logger
    let options: Options

    private let lock = NSLock()
    private var cancelled = false
    private var interruptedAt: Date?
    private var producerFinished = false
    private var inFlight = 0
    private var counts = ItemCounts()
    private var finishedThisSession = 0
    private var listing = true
    private let allDone = DispatchSemaphore(value: 0)
    private var signalledDone = false
    private var slots = DispatchSemaphore(value: 0)

    public init(pipeline: BuiltPipeline, store: RunStore, reporter: any RunReporter, logger: Logger,
                options: Options = Options()) {
        self.pipeline = pipeline
        self.store = store
        self.reporter = reporter
        self.logger = logger
        self.options = options
    }

    /// Stops taking new items; in-flight items get `gracePeriod` seconds to finish (none
    /// with `now`). Safe to call from any thread, e.g. a signal source.
    public func interrupt(now: Bool = false) {
        lock.withLock {
            if !cancelled {
                cancelled = true
                interruptedAt = Date()
            }
            if now { interruptedAt = .distantPast }
        }
        pipeline.cancellation.cancel()
    }

    var isCancelled: Bool { lock.withLock { cancelled } }

    // MARK: - starting

    /// Runs to the end of the feed (or an interruption) and returns the summary.
    public func execute(_ mode: RunMode) throws -> RunSummary {
        // Sinks are checked before a run is created or reopened: a sink that cannot be
        // prepared (a read-only folder) must not leave a `running` run behind.
        for sink in pipeline.sinks { try sink.prepare() }
        let run = try prepareRun(mode)
        return try drive(run, resuming: { if case .resume = mode { return true } else { return false } }())
    }

    /// Finds or creates the run to work on, applying the rules of `run` and `resume`.
    func prepareRun(_ mode: RunMode) throws -> RunRecord {
        let spec = pipeline.spec
        let latest = try store.latestRun()
        switch mode {
        case let .fresh(limit, replace):
            if let latest, latest.isUnfinished {
                guard replace else {
                    throw RunError.unfinishedRun(id: latest.id, stateFile: store.path, pipeline: displayPath)
                }
                try store.setState(.abandoned, runId: latest.id)
            }
            // A new run makes the previous one unreachable for resume: its staged files
            // (kept for --retry-failed) can go.
            if let latest { try? FileManager.default.removeItem(atPath: latest.workDirectory) }
            let workRoot = URL(fileURLWithPath: store.path).deletingPathExtension().path + ".work"
            return try store.createRun(pipelinePath: pipeline.path, pipelineName: spec.name,
                                       document: spec.document.serialized(), fingerprint: spec.outputFingerprint,
                                       sinks: spec.sinks.map(\.name), itemLimit: limit, workRoot: workRoot)
        case let .resume(retryFailed, refreshFeed):
            guard var latest else {
                throw RunError.nothingToResume(stateFile: store.path, pipeline: displayPath)
            }
            let changed = spec.outputFingerprint.keys.sorted().filter { spec.outputFingerprint[$0] != latest.fingerprint[$0] }
            if !changed.isEmpty { throw RunError.pipelineChanged(fields: changed, id: latest.id) }
            if retryFailed {
                let requeued = try store.requeueFailed(runId: latest.id)
                if requeued > 0 { reporter.notice("retrying \(requeued) failed item(s) of run #\(latest.id)") }
            }
            if refreshFeed {
                try store.markFeedComplete(runId: latest.id, false)
                latest.feedComplete = false
                refreshing = true
                if latest.state == .finished {
                    try store.setState(.running, runId: latest.id)
                    latest.state = .running
                }
            }
            if latest.state == .finished {
                let counts = try store.counts(runId: latest.id)
                if counts.unfinished == 0 {
                    reporter.notice("run #\(latest.id) already finished: \(counts.done) done, \(counts.failed) failed" +
                                    (counts.failed > 0 ? " (add --retry-failed to try the failed ones again)" : ""))
                    return latest
                }
                try store.setState(.running, runId: latest.id)
                latest.state = .running
            }
            return latest
        }
    }

    var displayPath: String {
        let cwd = FileManager.default.currentDirectoryPath + "/"
        return pipeline.path.hasPrefix(cwd) ? String(pipeline.path.dropFirst(cwd.count)) : pipeline.path
    }

    // MARK: - driving

    private var run: RunRecord!
    private var writer: StoreWriter!
    private var stagedDirectory = ""
    private var spoolDirectory = ""
    private var fetchers: BoundedExecutor!
    private var workers: BoundedExecutor!
    private var deliverers: BoundedExecutor!
    private var sinksByName: [String: any Sink] = [:]
    private var passStartSeq = 0
    private var admitted = 0
    /// `resume --refresh-feed`: the feed was complete before this pass.
    private var refreshing = false
    /// Why the feed could not be listed to its end, if it could not.
    private var listingError: String?
    /// Keys reported as duplicates (each is reported once).
    private var reportedDuplicates: Set<String> = []

    private func reportDuplicate(_ key: String) {
        let first = lock.withLock { reportedDuplicates.insert(key).inserted }
        if first { reporter.notice("duplicate key \"\(key)\" in the feed; processed once") }
    }

    func drive(_ run: RunRecord, resuming: Bool) throws -> RunSummary {
        self.run = run
        let started = Date()
        try VipsRuntime.setUp()
        let initial = try store.counts(runId: run.id)
        lock.withLock { counts = initial }
        if run.state == .finished {
            return try summary(run: run, elapsed: 0, interrupted: false)
        }
        try store.setState(.running, runId: run.id)
        do {
            stagedDirectory = run.workDirectory + "/staged"
            spoolDirectory = run.workDirectory + "/spool"
            try FileManager.default.createDirectory(atPath: stagedDirectory, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: spoolDirectory, withIntermediateDirectories: true)
        } catch {
            // Nothing was started: the run stays resumable rather than `running`.
            try? store.setState(.interrupted, runId: run.id)
            throw error
        }
        sweepPartialFiles()
        for sink in pipeline.sinks { sinksByName[sink.name] = sink }
        let limits = pipeline.spec.limits
        let capacity = limits.downloads + limits.effectiveWorkers * 2 + limits.uploads
        slots = DispatchSemaphore(value: capacity)
        writer = StoreWriter(store: store, runId: run.id, redact: pipeline.environment.redact) { [weak self] error in
            self?.reporter.notice("cannot write the state file: \(error); stopping")
            self?.interrupt()
        }
        fetchers = BoundedExecutor(label: "imgpipe.fetch", width: limits.downloads)
        workers = BoundedExecutor(label: "imgpipe.pixels", width: limits.effectiveWorkers) {
            VipsRuntime.endThreadWork()
        }
        deliverers = BoundedExecutor(label: "imgpipe.sinks", width: limits.uploads)
        logger.debug("run \(run.id): \(capacity) slots, \(limits.effectiveWorkers) pixel workers")

        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global(qos: .utility))
        timer.schedule(deadline: .now() + options.progressInterval, repeating: options.progressInterval)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            self.reporter.progress(self.progress(since: started))
        }
        timer.resume()

        let producer = Thread { [self] in
            produce(resuming: resuming)
        }
        producer.name = "imgpipe.feed"
        producer.start()

        // Wait for every item, or for the grace period after an interruption.
        while allDone.wait(timeout: .now() + 0.1) == .timedOut {
            let deadline = lock.withLock { interruptedAt.map { $0.addingTimeInterval(options.gracePeriod) } }
            if let deadline, Date() > deadline {
                reporter.notice("grace period over; leaving unfinished items for resume")
                break
            }
        }
        timer.cancel()
        writer.drain()

        let elapsed = Date().timeIntervalSince(started)
        let latest = try store.run(id: run.id) ?? run
        let final = try store.counts(runId: run.id)
        let wasCancelled = isCancelled
        let finished = !wasCancelled && latest.feedComplete && final.unfinished == 0
        try store.setState(finished ? .finished : .interrupted, runId: run.id, addingElapsed: elapsed)
        for sink in pipeline.sinks { sink.finish() }
        // The work folder goes once nothing in it can be needed: kept while items failed,
        // so that `resume --retry-failed` can deliver staged outputs without redoing them.
        if finished, final.failed == 0 { try? FileManager.default.removeItem(atPath: run.workDirectory) }
        return try summary(run: latest, elapsed: elapsed, interrupted: !finished)
    }

    private func summary(run: RunRecord, elapsed: Double, interrupted: Bool) throws -> RunSummary {
        let final = try store.counts(runId: run.id)
        let session = lock.withLock { finishedThisSession }
        return RunSummary(run: run.id, stateFile: store.path, total: final.total, done: final.done,
                          failed: final.failed, pending: final.unfinished, processed: session, elapsed: elapsed,
                          itemsPerSecond: elapsed > 0 ? Double(session) / elapsed : 0,
                          interrupted: interrupted && isCancelled,
                          failuresByReason: try store.failureCounts(runId: run.id),
                          listingError: lock.withLock { listingError })
    }

    private func progress(since started: Date) -> RunProgress {
        lock.withLock {
            RunProgress(runId: run.id, total: counts.total, listing: listing, done: counts.done, failed: counts.failed,
                        finishedThisSession: finishedThisSession, elapsed: Date().timeIntervalSince(started))
        }
    }

    /// Removes half-written staged files of a killed session.
    private func sweepPartialFiles() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: stagedDirectory)) ?? []
        for name in names where name.hasSuffix(".partial") {
            unlink(stagedDirectory + "/" + name)
        }
    }

    // MARK: - the producer

    /// Admits items: first the unfinished items of a resumed run, then the feed's items
    /// not yet in the run. Runs on its own thread and blocks while all slots are taken.
    private func produce(resuming: Bool) {
        defer {
            lock.withLock {
                producerFinished = true
                listing = false
            }
            checkAllDone()
        }
        if resuming {
            var after = 0
            pages: while !isCancelled {
                let page: [ItemRecord]
                do {
                    page = try store.unfinishedItems(runId: run.id, after: after, limit: 256).map {
                        $0.expandingLocation(pipeline.environment)
                    }
                } catch {
                    reporter.notice("cannot read the state file: \(error)")
                    interrupt()
                    break
                }
                if page.isEmpty { break }
                for record in page {
                    guard acquireSlot() else { break pages }
                    start(Job(record: record), at: record.status)
                }
                after = page.last?.seq ?? after
            }
        }
        guard !run.feedComplete, !isCancelled else { return }
        list()
    }

    /// Lists the feed and admits each new item as soon as it is listed (so items of one
    /// page are processed while the next page is still being fetched). Inserts go through
    /// the group-commit writer; the item starts from the insert's completion.
    private func list() {
        let spec = pipeline.spec
        var seq: Int
        do {
            seq = try store.lastSeq(runId: run.id)
        } catch {
            reporter.notice("cannot read the state file: \(error)")
            interrupt()
            return
        }
        passStartSeq = seq + 1
        let relisting = seq > 0
        let limit = run.itemLimit
        lock.withLock { admitted = counts.total }
        let template = spec.output.name
        let sinkNames = spec.sinks.map(\.name)
        var stoppedByLimit = false

        func admit(_ item: FeedItem, seq itemSeq: Int) {
            let change = StoreChange.insert(NewItem(
                key: item.key, seq: itemSeq, location: pipeline.environment.unexpanded(item.location), metadata: item.metadata,
                outputName: template.usesHash ? nil : template.render(key: item.nameKey, stem: item.nameStem, index: itemSeq,
                                                                      format: spec.output.format, hash: nil),
                sinks: sinkNames, nameKey: item.nameKey, nameStem: item.nameStem,
                tier: !item.isLocal ? nil : item.fromFallback ? .fallback : .local))
            writer.submit(change) { [self] outcome in
                switch outcome {
                case .applied:
                    lock.withLock { counts.total += 1; counts.pending += 1 }
                    var job = Job(key: item.key, seq: itemSeq, location: item.location)
                    job.nameKey = item.nameKey
                    job.nameStem = item.nameStem
                    job.tier = !item.isLocal ? nil : item.fromFallback ? .fallback : .local
                    start(job, at: .pending)
                case let .failed(failure):
                    lock.withLock { counts.total += 1; counts.failed += 1; finishedThisSession += 1 }
                    reporter.itemFailed(key: item.key, failure: failure)
                    releaseSlot()
                case .existing:
                    lock.withLock { admitted -= 1 }
                    reportDuplicate(item.key)
                    releaseSlot()
                case .completed:
                    releaseSlot()
                }
            }
        }

        // With --limit, a key repeated in the feed must not use up the limit: the keys of
        // this pass are remembered (at most `limit` of them).
        var seenThisPass: Set<String> = []
        do {
            try pipeline.feed.list { listed in
                if isCancelled { return false }
                // No expanded `${…}` value is recorded: keys and names carry the reference.
                let item = listed.withoutSecrets(pipeline.environment)
                if limit != nil, !seenThisPass.insert(item.key).inserted {
                    reportDuplicate(item.key)
                    return true
                }
                if relisting, let known = try? store.item(runId: run.id, key: item.key) {
                    // Listed by an earlier pass: resume already has it in hand.
                    if known.seq >= passStartSeq { reportDuplicate(item.key) }
                    return true
                }
                if let limit, lock.withLock({ admitted }) >= limit {
                    stoppedByLimit = true
                    return false
                }
                guard acquireSlot() else { return false }
                seq += 1
                lock.withLock { admitted += 1 }
                admit(item, seq: seq)
                return true
            }
            if !isCancelled || stoppedByLimit {
                // Through the writer, so it is committed after every insert above.
                writer.submit(.feedComplete) { _ in }
                run.feedComplete = true
            }
        } catch {
            let message = pipeline.environment.redact(String(describing: error))
            lock.withLock { listingError = message }
            reporter.notice("cannot list the feed: \(message)")
            if refreshing {
                // The refresh failed: the run stays as complete as it was.
                writer.submit(.feedComplete) { _ in }
                run.feedComplete = true
            }
        }
    }

    /// Blocks until a slot is free; false when the run was interrupted meanwhile.
    private func acquireSlot() -> Bool {
        while slots.wait(timeout: .now() + 0.1) == .timedOut {
            if isCancelled { return false }
        }
        if isCancelled {
            slots.signal()
            return false
        }
        lock.withLock { inFlight += 1 }
        return true
    }

    private func releaseSlot() {
        lock.withLock { inFlight -= 1 }
        slots.signal()
        checkAllDone()
    }

    private func checkAllDone() {
        let done = lock.withLock {
            guard producerFinished, inFlight == 0, !signalledDone else { return false }
            signalledDone = true
            return true
        }
        if done { allDone.signal() }
    }

    // MARK: - stages

    struct Job: Sendable {
        let key: String
        let seq: Int
        let location: String
        var spoolPath: String?
        var stagedPath: String?
        var outputName: String?
        var outputHash: String?
        var nameKey: String
        var nameStem: String
        var tier: Tier?

        init(key: String, seq: Int, location: String) {
            self.key = key
            self.seq = seq
            self.location = location
            nameKey = key
            nameStem = NameTemplate.stem(of: key)
        }

        init(record: ItemRecord) {
            key = record.key
            seq = record.seq
            location = record.location
            spoolPath = record.spoolPath
            stagedPath = record.stagedPath
            outputName = record.outputName
            outputHash = record.outputHash
            nameKey = record.nameKey
            nameStem = record.nameStem
            tier = record.tier
        }

        /// Items of a local source carry the tier `local` (or `fallback`) from their listing;
        /// everything else was listed by a remote source and is only ever fetched over
        /// http(s), never read from disk.
        var isRemote: Bool { tier != .local && tier != .fallback }
    }

    private func start(_ job: Job, at status: ItemStatus) {
        switch status {
        case .pending where !job.isRemote:
            // A local file has nothing to fetch: it is read in place by the pixel stage.
            var local = job
            local.spoolPath = job.location
            process(local)
        case .pending: fetch(job)
        case .fetched: process(job)
        case .processed: deliver(job)
        case .done, .failed: releaseSlot()
        }
    }

    /// Downloads a remote item (or links it from the cache) into the run's spool folder.
    /// A retry waits on a timer, not on a download thread, so a burst of 503s does not
    /// stall the other downloads.
    private func fetch(_ job: Job, attempt: Int = 1) {
        fetchers.submit { [self] in
            guard !isCancelled else { return releaseSlot() }
            var fetched = job
            let tier: Tier?
            if job.isRemote {
                guard let fetcher = pipeline.fetcher else {
                    return fail(job, ItemFailure(.download, "a URL item in a local source: \(job.location)"), attempts: 1)
                }
                let spool = spoolDirectory + "/\(job.seq)"
                do throws(ItemFailure) {
                    switch try fetcher.image(job.location, to: spool, attempt: attempt) {
                    case let .fetched(served):
                        tier = served
                    case let .retry(delay):
                        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
                            fetch(job, attempt: attempt + 1)
                        }
                        return
                    }
                } catch {
                    return fail(job, error, attempts: attempt)
                }
                fetched.spoolPath = spool
            } else {
                fetched.spoolPath = job.location
                tier = nil
            }
            let next = fetched
            writer.submit(.fetched(key: job.key, spoolPath: next.spoolPath!, tier: tier)) { [self] _ in
                process(next)
            }
        }
    }

    private func process(_ job: Job, attempt: Int = 1) {
        workers.submit { [self] in
            guard !isCancelled else { return releaseSlot() }
            let spec = pipeline.spec
            let result = Result { () throws(ItemFailure) -> ProcessedImage in
                try pipeline.processor.process(.file(job.spoolPath ?? job.location))
            }
            switch result {
            case let .failure(failure):
                // Decoding and encoding are deterministic: a failure here is final.
                fail(job, failure, attempts: 1)
            case let .success(image):
                let name = spec.output.name.render(key: job.nameKey, stem: job.nameStem, index: job.seq,
                                                   format: spec.output.format, hash: String(image.sha256.prefix(16)))
                let staged = stagedDirectory + "/\(job.seq).\(spec.output.format.fileExtension)"
                let partial = staged + ".partial"
                do {
                    try FileWriter.write(image.data, to: partial)
                    guard rename(partial, staged) == 0 else { throw StageError(String(cString: strerror(errno))) }
                } catch {
                    // A full disk or a vanished work folder: an I/O failure, which may pass.
                    unlink(partial)
                    let retry = pipeline.spec.retry
                    guard attempt >= retry.attempts else {
                        let delay = retry.backoff * pow(2, Double(attempt - 1))
                        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
                            try? FileManager.default.createDirectory(atPath: stagedDirectory, withIntermediateDirectories: true)
                            process(job, attempt: attempt + 1)
                        }
                        return
                    }
                    let attempts = attempt > 1 ? " (after \(attempt) attempts)" : ""
                    return fail(job, ItemFailure(.io, "cannot stage the output in \(stagedDirectory): \(error)\(attempts)"),
                                attempts: attempt)
                }
                let output = StagedOutput(path: staged, name: name, sha256: image.sha256, bytes: image.data.count,
                                          width: image.width, height: image.height)
                var processed = job
                processed.stagedPath = staged
                processed.outputName = name
                processed.outputHash = image.sha256
                let next = processed
                writer.submit(.processed(key: job.key, output: output)) { [self] outcome in
                    if case let .failed(failure) = outcome {
                        unlink(staged)
                        finish(job, failure: failure)
                    } else {
                        deliver(next)
                    }
                }
            }
        }
    }

    private func deliver(_ job: Job) {
        deliverers.submit { [self] in
            guard let staged = job.stagedPath, let name = job.outputName,
                  FileManager.default.fileExists(atPath: staged) else {
                // The staged output is gone (removed by hand): make it again.
                writer.submit(.reset(key: job.key, to: .fetched)) { [self] _ in process(job) }
                return
            }
            let pending: [String]
            do {
                pending = try store.pendingSinks(runId: run.id, key: job.key)
            } catch {
                return fail(job, ItemFailure(.upload, "cannot read the state file: \(error)"), attempts: 1)
            }
            guard !pending.isEmpty else { return releaseSlot() }
            let delivery = Delivery(runId: run.id, runUUID: run.uuid, key: job.key, stagedPath: staged, name: name,
                                    format: pipeline.spec.output.format, origin: pipeline.environment.unexpanded(job.location), nameKey: job.nameKey,
                                    nameStem: job.nameStem, sha256: job.outputHash ?? "")
            var changes: [StoreChange] = []
            // `pending` sinks that end up without a change were interrupted.
            for sinkName in pending {
                guard let sink = sinksByName[sinkName] else {
                    let failure = ItemFailure(.upload, "sink \(sinkName) is no longer in the pipeline")
                    changes.append(.deliveryFailed(key: job.key, sink: sinkName, failure: failure, attempts: 1))
                    continue
                }
                if let change = deliverWithRetries(delivery, to: sink) { changes.append(change) }
            }
            guard !changes.isEmpty else { return releaseSlot() }
            let outcomes = OutcomeCollector(expected: changes.count)
            for change in changes {
                writer.submit(change) { [self] outcome in
                    guard let all = outcomes.add(outcome) else { return }
                    if let failure = all.compactMap({ if case let .failed(f) = $0 { f } else { nil } }).first {
                        finish(job, failure: failure)
                    } else if all.contains(.completed) {
                        unlink(staged)
                        if job.isRemote { unlink(spoolDirectory + "/\(job.seq)") }
                        finish(job, failure: nil)
                    } else {
                        // A delivery was left pending (the run is stopping): resume finishes it.
                        releaseSlot()
                    }
                }
            }
        }
    }

    /// One sink's delivery (the sink retries what may pass) as a state change; nil when
    /// the run was interrupted before a due retry (the delivery stays pending).
    private func deliverWithRetries(_ delivery: Delivery, to sink: any Sink) -> StoreChange? {
        do throws(DeliveryFailure) {
            let receipt = try sink.deliver(delivery)
            return .delivered(key: delivery.key, sink: sink.name, remoteURL: receipt.remoteURL,
                              httpStatus: receipt.httpStatus, attempts: receipt.attempts)
        } catch {
            if error.interrupted { return nil }
            return .deliveryFailed(key: delivery.key, sink: sink.name, failure: error.failure, attempts: error.attempts)
        }
    }

    private func fail(_ job: Job, _ failure: ItemFailure, attempts: Int) {
        writer.submit(.failed(key: job.key, failure: failure, attempts: attempts)) { [self] _ in
            finish(job, failure: failure)
        }
    }

    private func finish(_ job: Job, failure: ItemFailure?) {
        lock.withLock {
            if failure == nil { counts.done += 1 } else { counts.failed += 1 }
            finishedThisSession += 1
        }
        if let failure { reporter.itemFailed(key: job.key, failure: failure) }
        releaseSlot()
    }
}

/// Gathers the outcomes of one item's deliveries; hands them over when all are in.
// @unchecked because every access is guarded by `lock`.
private final class OutcomeCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var outcomes: [ChangeOutcome] = []
    private let expected: Int

    init(expected: Int) { self.expected = expected }

    func add(_ outcome: ChangeOutcome) -> [ChangeOutcome]? {
        lock.withLock {
            outcomes.append(outcome)
            return outcomes.count == expected ? outcomes : nil
        }
    }
}
