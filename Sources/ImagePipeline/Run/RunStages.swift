import Dispatch
import Foundation
import Logging
import PipelineKit
import Synchronization
import VipsKit

/// One session of a run: the producer that lists the feed and admits items, and the stages
/// each item goes through — fetch (`limits.downloads` wide), pixels (`limits.workers`
/// wide, never on Swift's cooperative pool) and sinks (`limits.uploads` wide).
///
/// The constants are in `context`; everything that changes is in `state`, one value behind
/// one lock, whose methods say what to do next. An item holds one of `capacity` slots from
/// its admission to its verdict, so memory does not grow with the feed. Each stage hands an
/// item on from the completion of its state change (`StoreWriter`), so a kill at any
/// moment loses at most the work in flight. A retry (a download, a delivery) waits on a
/// timer, never on a thread.
final class RunStages: Sendable {
    let context: RunContext
    let state: Mutex<RunState>
    /// Signalled once, when the producer has finished and no item is in flight.
    private let allDone = DispatchSemaphore(value: 0)
    /// Signalled when a slot is given back (the producer may be waiting for one).
    private let slotFreed = DispatchSemaphore(value: 0)
    /// Signalled when the producer thread ends.
    private let producerEnded = DispatchSemaphore(value: 0)
    /// Retries waiting on a timer, with what to do instead if the run is interrupted.
    private let retryTimers = Mutex<(next: UInt64, pending: [UInt64: @Sendable () -> Void])>((0, [:]))
    /// What each sink holds in its open batch, by sink name.
    private let batches: [String: OpenBatch]
    /// `dedup`'s judge and the gate that gives its verdicts in feed order; nil without `dedup`.
    private let dedup: (judge: DedupJudge, gate: DedupGate)?
    /// Whether items found to have been made with a placeholder are taken out of the open
    /// batch (`dedup.placeholders`, the pipeline's one sink batching items: a dataset's).
    private let withdrawsPlaceholders: Bool
    /// Those items, each with its skip and the placeholder's bytes (SHA-256: only an item made
    /// from them is taken), so that one on its way to the batch is refused there.
    private let withdrawing = Mutex<[String: (skip: ItemSkip, sha256: String)]>([:])

    init(_ context: RunContext) throws {
        self.context = context
        let store = context.store
        let cancellation = context.pipeline.cancellation
        batches = context.sinks.mapValues {
            OpenBatch($0, gate: { store.deliveryGate(key: $0) }, isAborted: { cancellation.isAborted })
        }
        let counts = try context.store.counts(runId: context.runId)
        dedup = try Self.dedup(context)
        withdrawsPlaceholders =
            context.pipeline.spec.dedup.placeholdersAfter != nil && context.sinks.count == 1
            && context.sinks.values.allSatisfy(\.takesWholeItems)
        state = Mutex(
            RunState(
                capacity: context.capacity, counts: counts, feedComplete: context.run.feedComplete,
                itemLimit: context.run.itemLimit))
    }

    /// `dedup`'s judge and gate: a shared run's worker judges through its ledger (the
    /// shared database), a state file's run through the state file.
    private static func dedup(_ context: RunContext) throws -> (judge: DedupJudge, gate: DedupGate)? {
        let policy = context.pipeline.spec.dedup
        guard policy.isOn else { return nil }
        if let ledger = context.options.dedupLedger {
            return (DedupJudge(policy: policy, ledger: ledger), DedupGate(floor: ledger))
        }
        guard let store = context.store as? any DedupStore else {
            throw StoreError("dedup: this run's store cannot look for duplicates")
        }
        let judge = try DedupJudge(policy: policy, store: store, runId: context.runId, baseline: context.run.baseline)
        return (judge, DedupGate())
    }

    private var pipeline: BuiltPipeline { context.pipeline }
    private var writer: StoreWriter { context.writer }
    private var metrics: RunMetrics? { context.options.metrics }
    private var isCancelled: Bool { state.withLock { $0.isCancelled } }
    /// Whether a fetched item is left for resume instead of made: once the run is
    /// interrupted; with `dedup`, only once it aborts, as the items after it (made already,
    /// perhaps) cannot have their verdicts before its own (`DedupGate`).
    private var isStoppingPixelWork: Bool { dedup == nil ? isCancelled : pipeline.cancellation.isAborted }

    func interrupt(now: Bool) {
        let action = state.withLock { $0.interrupt(now: now, at: Date()) }
        if action == .abort {
            pipeline.cancellation.abort()
            // Pixel helpers can be stopped where threads cannot: their items are left for resume.
            context.pixels.abort()
        }
        if action != .none { cancelRetries() }
        // Items in flight finish on a first interrupt; an abort leaves every verdict to come.
        // In a shared run, the items before a waiting one may be other workers', stopping
        // too, or chunks no one will claim now: the waiting items are left for resume.
        if action == .abort || (action != .none && dedup?.gate.floor != nil) { dedup?.gate.shut() }
    }

    // MARK: - the session

    func drive() throws -> StatusReport {
        context.options.batchFlush?.register { [weak self] in self?.commitOpenBatchesOnceIdle() }
        let run = context.run
        let store = context.store
        let started = Date()
        if run.state == .finished {
            return try report(elapsed: 0, interrupted: false)
        }
        try store.setState(.running, runId: run.id)
        do {
            try FileManager.default.createDirectory(atPath: context.stagedDirectory, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: context.spoolDirectory, withIntermediateDirectories: true)
        } catch {
            // Nothing was started: the run stays resumable rather than `running`.
            try? store.setState(.interrupted, runId: run.id)
            throw StageError("cannot make the run's work folder \(run.workDirectory): \(error.localizedDescription)")
        }
        sweepPartialFiles()
        if context.options.warmPixelHelpers {
            for _ in 0..<context.workers.width { context.workers.submit { [context] in context.pixels.warm() } }
        }
        context.logger.debug(
            "session started",
            metadata: [
                "run": "\(run.id)", "slots": "\(context.capacity)",
                "workers": "\(pipeline.spec.limits.effectiveWorkers)",
            ])

        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global(qos: .utility))
        let interval = context.options.progressInterval
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [self] in
            let elapsed = Date().timeIntervalSince(started)
            context.reporter.progress(state.withLock { $0.progress(runId: run.id, elapsed: elapsed) })
        }
        timer.resume()

        let producer = Thread { [self] in
            produce()
            producerEnded.signal()
        }
        producer.name = "imgpipe.feed"
        producer.start()

        // Wait for every item, or for the grace period after an interruption.
        var finishedEverything = false
        while !finishedEverything {
            finishedEverything = allDone.wait(timeout: .now() + 0.1) == .success
            if !finishedEverything, let deadline = state.withLock({ $0.graceDeadline(context.options.gracePeriod) }),
                Date() > deadline
            {
                if !state.withLock({ $0.aborted }) {
                    context.reporter.notice("grace period over; leaving unfinished items for resume")
                    // What the batches hold is made (only another sink may still be at work
                    // on those items): committed, each request made once, not dropped with the
                    // abort.
                    commitOpenBatches()
                }
                interrupt(now: true)
                break
            }
        }
        // Join the producer and the items in flight: transfers stop within a second of
        // the abort, pixel helpers at once, pixel work on a thread with the image it is on.
        producerEnded.wait()
        if !finishedEverything, allDone.wait(timeout: .now() + 30) == .timedOut {
            context.reporter.notice("some work did not stop within 30 s of the interruption; its items stay unfinished")
        }
        timer.cancel()
        // What the sinks hold is committed before the run's state is written (or dropped,
        // when the run stops at once): an item is never recorded delivered before its batch.
        endBatches(commit: !state.withLock { $0.aborted })
        writer.drain()
        context.stopExecutors()
        context.spool.clear()
        context.stagedFiles.clear()

        let elapsed = Date().timeIntervalSince(started)
        // The session's last state, whatever the timer's phase: a session shorter than one
        // interval still reports once (the reporter decides whether to show it).
        context.reporter.progress(state.withLock { $0.progress(runId: run.id, elapsed: elapsed) })
        let final = try store.counts(runId: run.id)
        let cancelled = isCancelled
        let feedComplete = state.withLock { $0.feedComplete }
        let finished = !cancelled && feedComplete && final.unfinished == 0
        try store.setState(finished ? .finished : .interrupted, runId: run.id, addingElapsed: elapsed)
        for sink in pipeline.sinks { sink.finish() }
        // The work folder goes once nothing in it can be needed: kept while items failed,
        // so that `resume --retry-failed` can deliver staged outputs without redoing them.
        if finished, final.failed == 0 { try? FileManager.default.removeItem(atPath: run.workDirectory) }
        return try report(elapsed: elapsed, interrupted: !finished && cancelled)
    }

    /// The run's report as the session leaves it, with what the session did.
    private func report(elapsed: Double, interrupted: Bool) throws -> StatusReport {
        var report = try context.store.report(runId: context.runId)
        var session = StatusReport.Session(stateFile: context.store.path)
        state.withLock {
            (session.done, session.skipped, session.failed) = $0.endedThisSession
            session.listingError = $0.listingError
        }
        session.elapsed = elapsed
        session.interrupted = interrupted
        report.session = session
        return report
    }

    /// Removes half-written staged outputs and downloads of a killed session.
    private func sweepPartialFiles() {
        for (folder, suffix) in [(context.stagedDirectory, ".partial"), (context.spoolDirectory, RemoteFetcher.partialSuffix)] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            for name in names where name.hasSuffix(suffix) || SpoolFiles.isLeftover(name) { unlink(folder + "/" + name) }
        }
    }

    // MARK: - slots

    /// Blocks until a slot is free; false when the run was interrupted meanwhile.
    /// How many items carried over whole (`run --incremental`) may be in flight past the
    /// slots: each is done once its insert is written, and the writer commits them in
    /// batches (`StoreWriter`) of up to this many instead of a few slots' worth.
    static let carriedAhead = 1000

    private func acquireSlot(beyond: Int = 0) -> Bool {
        while true {
            switch state.withLock({ $0.admit(beyond: beyond) }) {
            case .start: return true
            case .stop: return false
            case .wait: _ = slotFreed.wait(timeout: .now() + 0.1)
            }
        }
    }

    private func perform(_ action: RunState.ReleaseAction) {
        slotFreed.signal()
        if action == .allDone { allDone.signal() }
    }

    private func releaseSlot() {
        perform(state.withLock { $0.release() })
    }

    /// An item left as recorded because the run is stopping gives its slot back; with
    /// `dedup`, no item after it has its verdict in this session (`DedupGate.abandon`).
    private func leaveForResume(_ job: Job) {
        dedup?.gate.abandon(job.seq)
        releaseSlot()
    }

    private func reportDuplicate(_ key: String) {
        if state.withLock({ $0.reportDuplicate(key) }) {
            context.reporter.info("duplicate key \"\(key.printable)\" in the feed; processed once")
        }
    }

    // MARK: - the producer

    /// Admits items: first the unfinished items of a resumed run, then the feed's items
    /// not yet in the run. Runs on its own thread and blocks while all slots are taken.
    private func produce() {
        defer { perform(state.withLock { $0.producerDone() }) }
        if context.resuming {
            var after = 0
            pages: while !isCancelled {
                let page: [ItemRecord]
                do {
                    page = try context.store.unfinishedItems(runId: context.runId, after: after, limit: 256).map {
                        $0.restoringLocation(pipeline.environment)
                    }
                } catch {
                    context.reporter.notice("cannot read the state file: \(error)")
                    interrupt(now: false)
                    break
                }
                if page.isEmpty { break }
                for paged in page {
                    // Started here unless `takeUpAgain` has it under way; once claimed, an item
                    // put back to pending in this session (a skip gave its name up) is taken as
                    // it stands now, not as the page read it: it may have ended since.
                    guard state.withLock({ $0.claimStart(seq: paged.seq) }) else { continue }
                    var record = paged
                    if state.withLock({ $0.wasRevived(seq: paged.seq) }) {
                        guard
                            let now = (try? context.store.item(runId: context.runId, key: paged.key))??
                                .restoringLocation(pipeline.environment),
                            [.pending, .fetched, .processed].contains(now.status)
                        else {
                            state.withLock { $0.ended(seq: paged.seq) }
                            continue
                        }
                        record = now
                    }
                    guard acquireSlot() else { break pages }
                    start(Job(record: record), at: record.status)
                }
                after = page.last?.seq ?? after
            }
        }
        guard !state.withLock({ $0.feedComplete }), !isCancelled else { return }
        list()
    }

    /// Lists the feed and admits each new item as soon as it is listed (so items of one
    /// page are processed while the next page is still being fetched). Inserts go through
    /// the group-commit writer; the item starts from the insert's completion.
    private func list() {
        let spec = pipeline.spec
        let environment = pipeline.environment
        var seq: Int
        var cursor: FeedCursor?
        do {
            seq = try context.store.lastSeq(runId: context.runId)
            // A listing cut short continues after its last item (a refresh looks at everything,
            // and so does a listing that an error cut: what it could not read comes before).
            if seq > 0, !context.refreshing, !context.run.listingCut {
                cursor = try context.store.lastKey(runId: context.runId).map {
                    FeedCursor(key: environment.restored($0), listed: seq)
                }
            }
        } catch {
            context.reporter.notice("cannot read the state file: \(error)")
            interrupt(now: false)
            return
        }
        let passStartSeq = seq + 1
        let relisting = seq > 0
        let limit = context.run.itemLimit
        // The sinks that take each output.
        let takers = spec.outputs.map { output in spec.sinks.map(\.name).filter { spec.outputs(of: $0).contains(output.id) } }
        var stoppedByLimit = false

        func admit(_ item: FeedItem, seq itemSeq: Int, carried: NewItem.Carried?) {
            let tier: Tier? = !item.isLocal ? nil : item.fromFallback ? .fallback : .local
            // Names from the item's stem, and from a stem of its own should another item hold one.
            let uniqueStem = NameTemplate.uniqueStem(item.nameStem, key: item.key)
            let outputs = zip(spec.outputs, takers).map { output, sinks in
                let name = output.fileNameBeforeMaking(key: item.nameKey, stem: item.nameStem, index: itemSeq)
                var new = NewOutput(id: output.id, name: name, sinks: sinks)
                let unique = output.fileNameBeforeMaking(key: item.nameKey, stem: uniqueStem, index: itemSeq)
                if unique != name { new.uniqueName = unique }
                return new
            }
            var new = NewItem(
                key: item.key, seq: itemSeq, location: environment.recorded(item.location), metadata: item.metadata,
                outputs: outputs, nameKey: item.nameKey, nameStem: item.nameStem, tier: tier)
            new.uniqueStem = uniqueStem
            new.carried = carried
            let change = StoreChange.insert(new)
            writer.submit(change) { [self] outcome in
                switch outcome {
                case .applied, .revived, .renamed:  // (only a skip revives)
                    state.withLock { $0.inserted() }
                    var job = Job(key: item.key, seq: itemSeq, location: item.location, metadata: item.metadata)
                    job.nameKey = item.nameKey
                    job.nameStem = item.nameStem
                    if case .renamed(let stem) = outcome { job.nameStem = stem }
                    job.tier = tier
                    start(job, at: .pending)
                case .failed(let failure):
                    context.reporter.itemFailed(key: item.key, failure: failure)
                    context.reporter.itemSettled(key: item.key, outcome: .failed(failure))
                    noteUndelivered("failed", reason: failure.reason.rawValue)
                    perform(state.withLock { $0.insertFailed() })
                case .existing:
                    // Dropped by this session (a shared run's chunk lost, then given back to
                    // this worker) or put back for a retry: taken up where it stood, not
                    // passed over as a duplicate.
                    if context.store.takeBack(key: item.key),
                        let record = try? context.store.item(runId: context.runId, key: item.key)?.restoringLocation(environment)
                    {
                        context.logger.info(
                            "taken back where it stood",
                            metadata: [
                                "item": "\(item.key)",
                                "status": "\(record.status.rawValue)",
                            ])
                        state.withLock { $0.inserted() }
                        start(Job(record: record), at: record.status)
                        return
                    }
                    reportDuplicate(item.key)
                    perform(state.withLock { $0.duplicate() })
                case .completed:
                    // Carried over whole from the previous run (`--incremental`): done.
                    state.withLock { $0.inserted() }
                    do { try dedup?.judge.carried(key: item.key, seq: itemSeq) } catch {
                        context.reporter.notice("cannot read the state file: \(error)")
                    }
                    metrics?.carried(deliveriesTo: takers.flatMap { $0 })
                    context.reporter.itemSettled(key: item.key, outcome: .done)
                    perform(state.withLock { $0.finish(failed: false) })
                }
            }
        }

        // With --limit, a key repeated in the feed must not use up the limit: the keys of
        // this pass are remembered (at most `limit` of them).
        var seenThisPass: Set<String> = []
        do {
            // The feed's count, when it gives one, makes the total of progress lines.
            try pipeline.feed.list(after: cursor, expecting: { [self] count in state.withLock { $0.expect(count) } }) { listed in
                if isCancelled { return false }
                // No expanded `${…}` value is recorded: keys and names carry the reference.
                let item = listed.withoutSecrets(environment)
                if limit != nil, !seenThisPass.insert(item.key).inserted {
                    state.withLock { $0.passedOver() }
                    reportDuplicate(item.key)
                    return true
                }
                if relisting, let known = try? context.store.item(runId: context.runId, key: item.key) {
                    state.withLock { $0.passedOver() }
                    // Listed by an earlier pass: resume already has it in hand.
                    if known.seq >= passStartSeq { reportDuplicate(item.key) }
                    return true
                }
                guard state.withLock({ $0.hasRoom(limit: limit) }) else {
                    stoppedByLimit = true
                    return false
                }
                // `--incremental`: what of the item the previous run made can be kept.
                let itemSeq = listed.position ?? seq + 1
                var carried: NewItem.Carried?
                if let changes = context.options.changes {
                    let verdict = changes.classify(ChangeDetector.compared(listed, recorded: item), index: itemSeq)
                    let kept = spec.outputs.map(\.id).filter { !verdict.remake.contains($0) }
                    if verdict.source == .unchanged, !kept.isEmpty {
                        carried = NewItem.Carried(
                            run: changes.baseline.id, outputs: kept, sinks: changes.unchangedSinks,
                            version: SourceStamp.version(in: item.metadata, field: spec.source.remote?.versionField),
                            holder: verdict.holder)
                    }
                }
                // An item kept whole needs no stage: it may go past the slots.
                let whole = carried?.keepsWhole(outputs: spec.outputs.map(\.id), takers: takers) ?? false
                guard acquireSlot(beyond: whole ? Self.carriedAhead : 0) else { return false }
                seq = itemSeq
                state.withLock { $0.listed() }
                admit(item, seq: seq, carried: carried)
                return true
            }
            if !isCancelled || stoppedByLimit { completeFeed() }
        } catch {
            let message = environment.redact(String(describing: error))
            state.withLock { $0.listingFailed(message) }
            try? context.store.markListingCut(runId: context.runId, true)
            context.reporter.notice("cannot list the feed: \(message)")
            // A failed refresh leaves the run as complete as it was.
            if context.refreshing { completeFeed() }
        }
    }

    /// Through the writer, so that it is committed after every insert before it.
    private func completeFeed() {
        if context.run.listingCut { try? context.store.markListingCut(runId: context.runId, false) }
        writer.submit(.feedComplete) { _ in }
        state.withLock { $0.markFeedComplete() }
    }

    // MARK: - stages

    struct Job: Sendable {
        let key: String
        let seq: Int
        let location: String
        var spoolPath: String?
        /// The staged outputs, once processed (read from the state file when empty).
        var outputs: [StagedOutput] = []
        var nameKey: String
        var nameStem: String
        var tier: Tier?
        /// The feed's metadata for the item, for `{meta.…}` in text filters.
        var metadata: String?
        /// What the input was, once processed in this session (read from the state file when
        /// nil, for a sink that records it).
        var source: SourceStamp?
        /// What the first output looks like, once processed in this session (as `source`).
        var fingerprint: ImageFingerprint?

        init(key: String, seq: Int, location: String, metadata: String?) {
            self.key = key
            self.seq = seq
            self.location = location
            self.metadata = metadata
            nameKey = key
            nameStem = NameTemplate.stem(of: key)
        }

        init(record: ItemRecord) {
            key = record.key
            seq = record.seq
            location = record.location
            spoolPath = record.spoolPath
            nameKey = record.nameKey
            nameStem = record.nameStem
            tier = record.tier
            metadata = record.metadata
        }

        /// The origin a remote item comes from (`dedup.placeholders` counts per origin).
        var host: String? { isRemote ? URL(string: location).flatMap(RobotsPolicy.origin(of:)) : nil }

        /// Items of a local source carry the tier `local` (or `fallback`) from their listing;
        /// everything else was listed by a remote source and is only ever fetched over
        /// http(s), never read from disk.
        var isRemote: Bool { tier != .local && tier != .fallback }
    }

    private func start(_ job: Job, at status: ItemStatus) {
        // An item on its way to the pixel stage has a `dedup` verdict coming.
        if status == .pending || status == .fetched { dedup?.gate.enter(job.seq) }
        switch status {
        case .pending where !job.isRemote:
            // A local file has nothing to fetch: it is read in place by the pixel stage.
            var local = job
            local.spoolPath = job.location
            process(local)
        case .pending: fetch(job)
        case .fetched: process(job)
        case .processed: deliver(job)
        case .done, .skipped, .failed: releaseSlot()
        }
    }

    /// Runs `body` again after `delay` seconds, on a timer (no thread waits for it).
    ///
    /// The wait is registered: when the run is interrupted, `ifInterrupted` runs at once
    /// instead (the item gives its slot back and stays as recorded, for resume), so a
    /// pending `Retry-After: 60` never holds up Ctrl-C. Exactly one of the two runs.
    private func later(
        _ delay: Double, ifInterrupted cancel: @escaping @Sendable () -> Void,
        _ body: @escaping @Sendable () -> Void
    ) {
        let token = retryTimers.withLock { timers -> UInt64 in
            timers.next += 1
            timers.pending[timers.next] = cancel
            return timers.next
        }
        // An interrupt that came just before the registration has already swept.
        if isCancelled { return cancelRetry(token) }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            guard retryTimers.withLock({ $0.pending.removeValue(forKey: token) }) != nil else { return }
            body()
        }
    }

    private func cancelRetry(_ token: UInt64) {
        retryTimers.withLock { $0.pending.removeValue(forKey: token) }?()
    }

    /// Gives back the slots of items waiting for a retry (the run is stopping).
    private func cancelRetries() {
        let cancels = retryTimers.withLock { timers -> [@Sendable () -> Void] in
            defer { timers.pending.removeAll() }
            return Array(timers.pending.values)
        }
        for cancel in cancels { cancel() }
    }

    /// Downloads a remote item (or links it from the cache) into the run's spool folder.
    private func fetch(_ job: Job, attempt: Int = 1, reserved: Bool = false) {
        context.fetchers.submit { [self] in
            guard !isCancelled else { return leaveForResume(job) }
            guard let fetcher = pipeline.fetcher else {
                return fail(job, ItemFailure(.download, "a URL item in a local source: \(job.location)"), attempts: 1)
            }
            let spool = context.spoolDirectory + "/\(job.seq)"
            // A file of an ended item for the download to write over, under its own name.
            let reused = fetcher.writesBeside ? context.spool.take() : nil
            let began = DispatchTime.now().uptimeNanoseconds
            let outcome = Result { () throws(ItemFailure) -> RemoteFetcher.ImageFetch in
                try fetcher.image(job.location, to: spool, attempt: attempt, reserved: reserved, writingOver: reused)
            }
            // A download that did not end in its file (a skip, a retry, a failure) gives it
            // back now (unless the fetcher deleted it), before this item's next attempt.
            if case .success(.fetched) = outcome {} else if let reused { context.spool.recycle(reused) }
            if let metrics {
                metrics.timed(.fetch, since: began)
                if case .success(.fetched(.remote, let kept)) = outcome {
                    var info = stat()
                    metrics.downloaded(bytes: kept?.count ?? (stat(spool, &info) == 0 ? Int(info.st_size) : 0))
                }
            }
            let tier: Tier
            let body: Data?
            switch outcome {
            case .success(.fetched(let served, let kept)):
                tier = served
                body = kept
            case .success(.skipped(let skip)):
                return self.skip(job, skip)
            case .success(.retry(let delay)):
                context.logger.info(
                    "download will be retried",
                    metadata: [
                        "item": "\(job.key)", "stage": "fetch", "attempt": "\(attempt)",
                        "host": "\(URL(string: job.location)?.host ?? "")", "delay": "\(delay)",
                    ])
                metrics?.retrying("fetch")
                return later(delay, ifInterrupted: { [self] in leaveForResume(job) }) { [self] in
                    fetch(job, attempt: attempt + 1)
                }
            case .success(.later(let delay, let reserved)):
                // The host's turn: not an attempt.
                return later(delay, ifInterrupted: { [self] in leaveForResume(job) }) { [self] in
                    fetch(job, attempt: attempt, reserved: reserved)
                }
            case .failure(let error):
                // A transfer cut by the abort is no verdict on the item: left for resume.
                if pipeline.cancellation.isAborted { return leaveForResume(job) }
                return fail(job, error, attempts: attempt)
            }
            var fetched = job
            fetched.spoolPath = spool
            let next = fetched
            writer.submit(.fetched(key: job.key, spoolPath: spool, tier: tier)) { [self] _ in
                process(next, body: body)
            }
        }
    }

    /// Runs the item's pixel work. `body` is the input's bytes when the download kept them in
    /// memory (the same bytes as its spool file); otherwise the file is read.
    private func process(_ job: Job, body: Data? = nil, attempt: Int = 1) {
        context.workers.submit { [self] in
            guard !isStoppingPixelWork, dedup?.gate.isAbandoned(job.seq) != true else { return leaveForResume(job) }
            let spec = pipeline.spec
            // The same bytes as a kept item before it: a duplicate, known without pixel work
            // (unless placeholders are counted: every sighting is, in feed order).
            if let dedup, dedup.judge.policy.exact, dedup.judge.policy.placeholdersAfter == nil, let body {
                let read = sha256Hex(body)
                // As the check after the pixel work would have it: the table's hash first.
                if let expected = spec.source.expectedSHA256(of: job.metadata), read != expected {
                    return fail(job, Self.hashMismatch(read: read, expected: expected), attempts: 1)
                }
                if let kept = try? dedup.judge.keptBefore(seq: job.seq, sha256: read) {
                    return skip(job, .duplicate(of: kept, distance: 0, exact: true))
                }
            }
            let input = body.map(ImageInput.data) ?? .file(job.spoolPath ?? job.location)
            // Admitted against the run's memory budget by an estimate from the header, before
            // any decoding: one that does not fit waits for others to end; one over the whole
            // budget fails. A header that cannot be read here counts as the whole budget.
            let budget = context.memory
            let estimate = pipeline.processor.memoryEstimate(of: input)
            if let estimate, estimate.bytes > budget.bytes {
                return fail(
                    job,
                    ItemFailure(
                        .limit,
                        "needs about \(estimate.megabytes) MB to decode (\(estimate.what)), "
                            + "over limits.memory \(budget.bytes >> 20) MB"), attempts: 1)
            }
            let need = estimate?.bytes ?? budget.bytes
            guard budget.admit(need, unless: { isStoppingPixelWork }) else { return leaveForResume(job) }
            let began = DispatchTime.now()
            let result = Result { () throws(ItemFailure) -> ProcessOutcome? in
                try context.pixels.processOrSkip(
                    input,
                    fields: ItemFields(
                        key: job.key, stem: NameTemplate.plainStem(job.nameStem, key: job.key), metadata: job.metadata))
            }
            budget.release(need)
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - began.uptimeNanoseconds) / 1e9
            metrics?.timed(.pixels, since: began.uptimeNanoseconds)
            if seconds > context.options.slowItem {
                context.logger.warning(
                    "slow item",
                    metadata: [
                        "item": "\(job.key)", "stage": "pixels",
                        "seconds": "\(String(format: "%.1f", seconds))",
                    ])
            }
            let images: [ProcessedImage]
            switch result {
            case .failure(let failure):
                // Decoding and encoding are deterministic: a failure here is final.
                return fail(job, failure, attempts: 1)
            case .success(nil):
                // Its pixel helper ended as the run stopped at once: left for resume.
                return leaveForResume(job)
            case .success(.skipped(let skip)?):
                return self.skip(job, skip)
            case .success(.processed(let processed)?):
                images = processed
            }
            for note in images.first?.notes ?? [] {
                context.reporter.notice("item \"\(job.key.printable)\": \(note)")
            }
            // The SHA-256 a table gives is checked against the bytes the processor read.
            if let expected = spec.source.expectedSHA256(of: job.metadata), let read = images.first?.inputSHA256,
                read != expected
            {
                return fail(job, Self.hashMismatch(read: read, expected: expected), attempts: 1)
            }
            let outputs: [StagedOutput]
            do {
                do {
                    outputs = try stage(images, of: job)
                } catch {
                    // Spool files waiting for reuse hold disk space (`SpoolFiles`): once
                    // they are given back, the outputs are staged again at once, before this
                    // counts as a failed attempt.
                    guard context.spool.clear() + context.stagedFiles.clear() > 0 else { throw error }
                    outputs = try stage(images, of: job)
                }
            } catch {
                // A full disk or a vanished work folder: an I/O failure, which may pass.
                let retry = spec.retry
                guard attempt >= retry.attempts else {
                    let delay = RetryPolicy.delay(afterAttempt: attempt, backoff: retry.backoff)
                    context.logger.info(
                        "staging will be retried",
                        metadata: [
                            "item": "\(job.key)", "stage": "stage", "attempt": "\(attempt)", "error": "\(error)",
                        ])
                    metrics?.retrying("stage")
                    return later(delay, ifInterrupted: { [self] in leaveForResume(job) }) { [self] in
                        try? FileManager.default.createDirectory(
                            atPath: context.stagedDirectory, withIntermediateDirectories: true)
                        process(job, body: body, attempt: attempt + 1)
                    }
                }
                let attempts = attempt > 1 ? " (after \(attempt) attempts)" : ""
                return fail(
                    job, ItemFailure(.io, "cannot stage the output in \(context.stagedDirectory): \(error)\(attempts)"),
                    attempts: attempt)
            }
            metrics?.wrote(bytes: outputs.reduce(0) { $0 + $1.bytes })
            var processed = job
            processed.outputs = outputs
            // What the input was, for a later `plan` or `run --incremental`: the bytes the
            // processor read, not read again.
            var source = images.first.map { SourceStamp(read: $0, file: job.spoolPath ?? job.location, local: !job.isRemote) }
            source?.version = SourceStamp.version(in: job.metadata, field: spec.source.remote?.versionField)
            processed.source = source
            processed.fingerprint = images.first?.fingerprint
            let next = processed
            guard let dedup else { return record(next) }
            // In a shared run, an item may wait for items this worker has not admitted yet:
            // it gives its slot back meanwhile.
            let parks = dedup.gate.floor != nil
            if parks { perform(state.withLock { $0.park() }) }
            dedup.gate.arrive(job.seq) { [self] go in
                if parks { state.withLock { $0.unpark() } }
                judge(next, dedup, go: go)
            }
        }
    }

    /// `dedup`'s verdict on a processed item, in its turn (`DedupGate`): a duplicate is
    /// skipped and its staged outputs removed; the first of its kind is recorded as kept.
    private func judge(_ job: Job, _ dedup: (judge: DedupJudge, gate: DedupGate), go: Bool) {
        guard go else {
            // The run is stopping: left as recorded (fetched), made again on resume.
            for output in job.outputs { unlink(output.path) }
            return releaseSlot()
        }
        let verdict = Result {
            try dedup.judge.verdict(
                key: job.key, seq: job.seq, sha256: job.source?.sha256, fingerprint: job.fingerprint, host: job.host)
        }
        // The verdict's writes are queued before the next item's verdict can be: the writer
        // keeps their order, so a duplicate is never recorded before the item it names.
        defer { dedup.gate.pass(job.seq) }
        if case .success(let made) = verdict, let sighting = made.sighting {
            writer.submit(sighting) { _ in dedup.judge.written(sighting) }
        }
        if case .success(let made) = verdict, !made.flagging.isEmpty,
            case .placeholder = made.skip?.reason, let host = job.host, let sha256 = job.source?.sha256
        {
            let skip = ItemSkip.withdrawnPlaceholder(host: host, count: made.flagging.count + 1, first: made.flagging[0])
            withdraw(made.flagging, skip, sha256: sha256)
        }
        switch verdict {
        case .success(let made):
            guard let skip = made.skip else {
                return record(job, kept: true) { dedup.judge.written(sha256: job.source?.sha256) }
            }
            for output in job.outputs { unlink(output.path) }
            self.skip(job, skip)
        case .failure(let error):
            for output in job.outputs { unlink(output.path) }
            fail(job, ItemFailure(.io, "cannot record the dedup verdict: \(error)"), attempts: 1)
        }
    }

    /// Items a verdict found were made with a placeholder (`dedup.placeholders`), when the
    /// pipeline's one sink batches items: those its open batch holds are taken out of it
    /// and skipped, not delivered, and so is one still on its way there (refused by the
    /// batch). One delivered already (its batch committed) is left: it is flagged.
    private func withdraw(_ keys: [String], _ skip: ItemSkip, sha256: String) {
        guard withdrawsPlaceholders else { return }
        // Before the batches are asked: an item not in one yet is refused when it comes.
        withdrawing.withLock { for key in keys { $0[key] = (skip, sha256) } }
        // Off the verdict's path: a batch may be committing (a flush, an upload), and the
        // shard is written again without the items. Refused meanwhile, they cannot come in.
        DispatchQueue.global().async { [self] in
            for batch in batches.values {
                let taken = batch.withdraw(Set(keys)) { entry in
                    entry.settlement.isOnlyHeld && entry.item.inputSHA256 == sha256
                }
                for entry in taken {
                    entry.settlement.release(entry.item.deliveries.count)
                    // Held in the batch, it gave its slot back: it takes one for its end to give back.
                    if entry.settlement.wasSetAside { state.withLock { $0.takeUpSetAside() } }
                    withdrawn(entry.item, entry.settlement)
                }
            }
        }
    }

    /// Skips an item taken out of (or refused by) the batch as a placeholder; not compared
    /// with any more, if it was kept.
    private func withdrawn(_ item: BatchItem, _ settlement: Settlement) {
        let job = settlement.job
        guard let entry = withdrawing.withLock({ $0.removeValue(forKey: job.key) }) else {
            // Not expected (one attempt per item): left for resume rather than lost.
            return leavePending(item, settlement)
        }
        dedup?.judge.withdrawn(key: job.key, seq: job.seq)
        // Its outputs go once the skip is written: a kill before leaves it to `deliver`.
        self.skip(job, entry.skip) {
            for output in job.outputs { unlink(output.path) }
        }
    }

    /// An input whose bytes are not those its table gave.
    static func hashMismatch(read: String, expected: String) -> ItemFailure {
        ItemFailure(.hashMismatch, "the downloaded bytes have SHA-256 \(read); the table says \(expected)")
    }

    /// Records a processed item (its outputs staged), then delivers it.
    private func record(_ job: Job, kept: Bool = false, then written: @escaping @Sendable () -> Void = {}) {
        let change = StoreChange.processed(
            key: job.key, outputs: job.outputs, source: job.source, fingerprint: job.fingerprint, kept: kept)
        writer.submit(change) { [self] outcome in
            written()
            if case .failed(let failure) = outcome {
                for output in job.outputs { unlink(output.path) }
                finish(job, failure: failure)
            } else {
                deliver(job)
            }
        }
    }

    /// Whether a staged output of an earlier session is there and holds the bytes recorded
    /// (their length and SHA-256). Staged outputs are written over the files of delivered
    /// ones (`SpoolFiles`) with no `fsync`: after a crash of the machine, a file renamed
    /// into place may still hold another output's bytes, which are never delivered.
    static func isIntact(_ output: StagedOutput) -> Bool {
        guard let data = FileManager.default.contents(atPath: output.path), data.count == output.bytes else {
            return false
        }
        return sha256Hex(data) == output.sha256
    }

    /// Writes an item's outputs to the staged folder, each under a temporary name and renamed
    /// into place; on a failure none of them is left.
    private func stage(_ images: [ProcessedImage], of job: Job) throws -> [StagedOutput] {
        let spec = pipeline.spec
        var outputs: [StagedOutput] = []
        do {
            for (output, image) in zip(spec.outputs, images) {
                let name = output.fileName(key: job.nameKey, stem: job.nameStem, index: job.seq, made: image)
                // One output: `<seq>.<ext>`, as state files before several outputs had it.
                let file = spec.outputs.count == 1 ? "\(job.seq)" : "\(job.seq)-\(output.id)"
                let staged = context.stagedDirectory + "/\(file).\((image.format ?? output.format).fileExtension)"
                let partial = staged + ".partial"
                do {
                    // Over a file of a delivered output, when one waits (`SpoolFiles`); a
                    // new file when it cannot be moved.
                    if let free = context.stagedFiles.take(), rename(free, partial) != 0 { unlink(free) }
                    try FileWriter.write(image.data, to: partial)
                    guard rename(partial, staged) == 0 else { throw StageError(String(cString: strerror(errno))) }
                } catch {
                    unlink(partial)
                    throw error
                }
                outputs.append(
                    StagedOutput(
                        id: output.id, path: staged, name: name, sha256: image.sha256,
                        bytes: image.data.count, width: image.width, height: image.height, choice: image.choice,
                        format: image.format))
            }
        } catch {
            for output in outputs { unlink(output.path) }
            throw error
        }
        return outputs
    }

    /// Hands a staged output to every sink that does not have it yet (a `BatchItem` per
    /// output, or one per sink with all the outputs it takes when it takes items whole).
    /// Each sink's delivery goes on by itself (its retries on a timer); a sink may hold the
    /// item in its open batch, and the item, its staged outputs kept, gives its slot back
    /// once every delivery it still waits for is held (`Settlement.hold`), until the batch
    /// commits. The item is settled when every delivery has ended: done, failed, or left
    /// pending because the run is stopping.
    private func deliver(_ job: Job) {
        context.deliverers.submit { [self] in
            // Queued when the run was interrupted: left `processed`, resume delivers it.
            guard !isCancelled else { return releaseSlot() }
            var job = job
            // Outputs read from the state file (staged by an earlier session, or before an
            // item was taken back in this one).
            let earlier = job.outputs.isEmpty
            let pending: [(output: String, sink: String)]
            do {
                if earlier { job.outputs = try context.store.stagedOutputs(runId: context.runId, key: job.key) }
                pending = try context.store.pendingDeliveries(runId: context.runId, key: job.key)
            } catch {
                return fail(job, ItemFailure(.io, "cannot read the state file: \(error)"), attempts: 1)
            }
            // Found to be made with a placeholder in a session that stopped before taking it
            // out of the batch (or before it reached the batch): not delivered now either.
            if withdrawsPlaceholders, (try? context.store.isFlaggedPlaceholder(runId: context.runId, key: job.key)) == true {
                dedup?.judge.withdrawn(key: job.key, seq: job.seq)
                let outputs = job.outputs
                return skip(
                    job,
                    ItemSkip(
                        .placeholder,
                        "made with bytes found, after it was made, to be its host's placeholder: not delivered")
                ) {
                    for output in outputs { unlink(output.path) }
                }
            }
            let staged = Dictionary(job.outputs.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            let ready = pipeline.spec.outputs.allSatisfy { spec in
                staged[spec.id].map { earlier ? Self.isIntact($0) : FileManager.default.fileExists(atPath: $0.path) }
                    ?? false
            }
            guard ready else {
                // A staged output is gone (removed by hand) or not what was staged: make them
                // again.
                var cleared = job
                cleared.outputs = []
                let again = cleared
                writer.submit(.reset(key: job.key, to: .fetched)) { [self] _ in process(again) }
                return
            }
            guard !pending.isEmpty else { return releaseSlot() }
            let settlement = Settlement(job: job, remaining: pending.count)
            var items: [(sink: any Sink, deliveries: [Delivery])] = []
            for (outputID, sinkName) in pending {
                guard let sink = context.sinks[sinkName], let output = staged[outputID],
                    let spec = pipeline.spec.outputs.first(where: { $0.id == outputID })
                else {
                    let what = context.sinks[sinkName] == nil ? "sink \(sinkName)" : "output \(outputID)"
                    let failure = ItemFailure(.upload, "\(what) is no longer in the pipeline")
                    record(
                        [.deliveryFailed(key: job.key, output: outputID, sink: sinkName, failure: failure, attempts: 1)],
                        settlement)
                    continue
                }
                let delivery = Delivery(
                    runId: context.runId, runUUID: context.run.uuid, key: job.key, output: outputID,
                    width: output.width, height: output.height, stagedPath: output.path, name: output.name,
                    format: output.format ?? spec.format,
                    origin: pipeline.environment.recorded(job.location), nameKey: job.nameKey,
                    nameStem: job.nameStem, sha256: output.sha256, index: job.seq)
                // A sink that takes items whole gets all of the item's outputs it takes at once.
                if sink.takesWholeItems, let index = items.firstIndex(where: { $0.sink.name == sinkName }) {
                    items[index].deliveries.append(delivery)
                } else {
                    items.append((sink, [delivery]))
                }
            }
            // What the input was, for sinks that record it with the item (a shard's KEY.json):
            // known when the item was processed in this session, else from the state file.
            let whole = items.contains(where: { $0.sink.takesWholeItems })
            let source = job.source ?? (whole ? try? context.store.source(runId: context.runId, key: job.key) : nil)
            let fingerprint =
                job.fingerprint ?? (whole ? try? context.store.fingerprint(runId: context.runId, key: job.key) : nil)
            for (sink, deliveries) in items {
                var item = BatchItem(
                    key: job.key, metadata: job.metadata, caption: pipeline.spec.source.caption(of: job.metadata),
                    deliveries: deliveries, inputWidth: source?.width, inputHeight: source?.height,
                    inputSHA256: source?.sha256)
                item.fingerprint = fingerprint
                attempt(item, to: sink, number: 1, settlement)
            }
        }
    }

    /// One attempt at one sink, on a deliverer thread.
    private func attempt(_ item: BatchItem, to sink: any Sink, number: Int, _ settlement: Settlement) {
        switch context.store.deliveryGate(key: item.key) {
        case .go: break
        case .wait:
            return attemptLater(0.1, item, to: sink, number: number, settlement)
        case .drop:
            // Another worker's now: left pending here (the item gives its slot back).
            return leavePending(item, settlement)
        }
        // Every sink of the session has its `OpenBatch` (made from the same dictionary).
        guard let batch = batches[sink.name] else { return leavePending(item, settlement) }
        let accepted: Acceptance?
        let began = DispatchTime.now().uptimeNanoseconds
        defer { metrics?.timed(.deliver, since: began) }
        do throws(DeliveryFailure) {
            accepted = try batch.accept(
                item, attempt: number, settlement,
                refusing: { [self] item in
                    withdrawsPlaceholders && withdrawing.withLock { $0[item.key]?.sha256 == item.inputSHA256 }
                },
                onHold: { [self] in
                    // Held until the batch commits: once nothing else is at work on the item,
                    // its slot goes to the next one.
                    if settlement.hold(item.deliveries.count) { perform(state.withLock { $0.setAside() }) }
                }, record: { entries, commit in record(entries, commit, to: batch.sink) })
        } catch {
            if pipeline.cancellation.isAborted { return leavePending(item, settlement) }
            return record(
                item.deliveries.map {
                    .deliveryFailed(
                        key: $0.key, output: $0.output, sink: sink.name, failure: error.failure, attempts: error.attempts)
                }, settlement)
        }
        // Found to be a placeholder on its way to the batch: skipped, not delivered.
        guard let outcome = accepted else { return withdrawn(item, settlement) }
        switch outcome {
        case .delivered(let receipt):
            record(delivered(item, to: sink, receipt), settlement)
        case .held:
            break  // recorded when its batch commits
        case .retry(let delay, let failure):
            // The run is stopping: the delivery stays pending for resume.
            guard !isCancelled else { return leavePending(item, settlement) }
            context.logger.info(
                "delivery will be retried",
                metadata: [
                    "item": "\(item.key)", "stage": "sink", "sink": "\(sink.name)", "attempt": "\(number)",
                    "delay": "\(delay)", "error": "\(pipeline.environment.redact(failure.message))",
                ])
            metrics?.retrying("deliver")
            attemptLater(delay, item, to: sink, number: number + 1, settlement)
        }
    }

    private func delivered(_ item: BatchItem, to sink: any Sink, _ receipt: DeliveryReceipt) -> [StoreChange] {
        item.deliveries.map {
            .delivered(
                key: $0.key, output: $0.output, sink: sink.name, remoteURL: receipt.remoteURL,
                httpStatus: receipt.httpStatus, attempts: receipt.attempts)
        }
    }

    /// Records the deliveries of a committed batch's items in one transaction: a kill
    /// before it lands leaves every item of the batch to be delivered again. Returns once
    /// the transaction has landed: called under the batch's lock, so the sink's next batch
    /// is not committed before this one is recorded (a kill then repeats one batch at most).
    private func record(_ entries: [OpenBatch.Entry], _ commit: OpenBatch.Commit, to sink: any Sink) {
        var changes: [StoreChange] = []
        var recorded: [(settlement: Settlement, count: Int)] = []
        for entry in entries {
            let item = entry.item
            entry.settlement.release(item.deliveries.count)
            switch commit {
            case .delivered(let receipts):
                guard let receipt = receipts[item.key] else {
                    // No receipt: not delivered, left for resume.
                    leavePending(item, entry.settlement)
                    continue
                }
                changes += delivered(item, to: sink, receipt)
            case .failed where pipeline.cancellation.isCancelled, .dropped:
                // A commit that failed while the run stops (its requests made once, not tried
                // again), or another worker's item now: left pending for resume, not failed.
                leavePending(item, entry.settlement)
                continue
            case .failed(let failure):
                changes += item.deliveries.map {
                    .deliveryFailed(
                        key: $0.key, output: $0.output, sink: sink.name, failure: failure.failure,
                        attempts: failure.attempts)
                }
            }
            recorded.append((entry.settlement, item.deliveries.count))
        }
        let settlements = recorded
        metrics?.recording(changes)
        let landed = DispatchSemaphore(value: 0)
        writer.submit(changes) { [self] outcomes in
            landed.signal()
            var rest = outcomes[...]
            for (settlement, count) in settlements {
                for outcome in rest.prefix(count) { ended(settlement, outcome) }
                rest = rest.dropFirst(count)
            }
        }
        landed.wait()
    }

    /// A feed with nothing more to give this session for a while (`BatchFlush`): what every
    /// sink holds is committed once nothing else of the session is at work (every item it
    /// was given has ended or is held in a batch), so the batches hold all they can: asked
    /// while items are still made, a flush would commit them one by one.
    private func commitOpenBatchesOnceIdle() {
        guard state.withLock({ $0.inFlight == 0 }) else { return }
        commitOpenBatches()
    }

    /// Commits what every sink holds now.
    private func commitOpenBatches() {
        for batch in batches.values {
            batch.commit { entries, commit in record(entries, commit, to: batch.sink) }
        }
    }

    /// At the end of a session: commits what every sink holds, or drops it (its items stay
    /// undelivered, for resume).
    private func endBatches(commit committing: Bool) {
        context.options.batchFlush?.register(nil)
        guard committing else {
            for batch in batches.values {
                for entry in batch.discard() {
                    entry.settlement.release(entry.item.deliveries.count)
                    leavePending(entry.item, entry.settlement)
                }
            }
            return
        }
        commitOpenBatches()
    }

    /// Attempt `number` at one sink after `delay` seconds, on a deliverer thread; left
    /// pending when the run is interrupted meanwhile.
    private func attemptLater(_ delay: Double, _ item: BatchItem, to sink: any Sink, number: Int, _ settlement: Settlement) {
        later(delay, ifInterrupted: { [self] in leavePending(item, settlement) }) { [self] in
            context.deliverers.submit { [self] in
                guard !isCancelled else { return leavePending(item, settlement) }
                attempt(item, to: sink, number: number, settlement)
            }
        }
    }

    /// Leaves one sink's deliveries of an item pending (for resume).
    private func leavePending(_ item: BatchItem, _ settlement: Settlement) {
        for _ in item.deliveries { ended(settlement, nil) }
    }

    /// Records one sink's end of some of an item's deliveries, in one transaction, and
    /// settles the item after the last.
    private func record(_ changes: [StoreChange], _ settlement: Settlement) {
        metrics?.recording(changes)
        writer.submit(changes) { [self] outcomes in
            for outcome in outcomes { ended(settlement, outcome) }
        }
    }

    /// One of the item's deliveries ended (nil: left pending): the item is settled after its
    /// last; before, it gives its slot back once all it waits for is held in batches.
    private func ended(_ settlement: Settlement, _ outcome: ChangeOutcome?) {
        if let verdict = settlement.add(outcome) {
            settle(settlement, verdict)
        } else if settlement.asideIfOnlyHeld() {
            perform(state.withLock { $0.setAside() })
        }
    }

    private func settle(_ settlement: Settlement, _ verdict: Settlement.Verdict) {
        let job = settlement.job
        // Held in a batch: the item takes a slot again for its end to give back.
        if settlement.wasSetAside { state.withLock { $0.takeUpSetAside() } }
        switch verdict {
        case .failed(let failure):
            finish(job, failure: failure)
        case .done:
            for output in job.outputs { context.stagedFiles.recycle(output.path) }
            if job.isRemote { context.spool.recycle(context.spoolDirectory + "/\(job.seq)") }
            finish(job, failure: nil)
        case .unfinished:
            releaseSlot()
        }
    }

    private func fail(_ job: Job, _ failure: ItemFailure, attempts: Int) {
        // Its record is queued before the next item's verdict can be.
        defer { dedup?.gate.leave(job.seq, key: job.key) }
        context.logger.debug(
            "item failed",
            metadata: [
                "item": "\(job.key)", "reason": "\(failure.reason.rawValue)",
                "attempts": "\(attempts)",
            ])
        writer.submit(.failed(key: job.key, failure: failure, attempts: attempts)) { [self] _ in
            finish(job, failure: failure)
        }
    }

    /// Records a skip: the item is settled without an output, and no sink is asked for it.
    /// `written` runs once the skip is written.
    private func skip(_ job: Job, _ skip: ItemSkip, written: @escaping @Sendable () -> Void = {}) {
        // Its record is queued before the next item's verdict can be.
        defer { dedup?.gate.leave(job.seq, key: job.key) }
        context.logger.info(
            "item skipped",
            metadata: [
                "item": "\(job.key)", "reason": "\(skip.reason.rawValue)",
                "message": "\(pipeline.environment.redact(skip.message))",
            ])
        writer.submit(.skipped(key: job.key, skip: skip)) { [self] outcome in
            written()
            if job.isRemote { context.spool.recycle(context.spoolDirectory + "/\(job.seq)") }
            noteUndelivered("skipped", reason: skip.reason.rawValue)
            context.reporter.itemSettled(key: job.key, outcome: .skipped(skip))
            // Taken up before this item's slot is given back: the session cannot end between.
            if case .revived(let keys) = outcome { takeUpAgain(keys, freedBy: job.key) }
            perform(
                state.withLock {
                    $0.ended(seq: job.seq)
                    return $0.skip()
                })
        }
    }

    /// Starts items that had failed because an output name they needed was taken by an item
    /// now skipped: the name is theirs now (`RunStore.giveNamesUp`). When the run is
    /// stopping they stay `pending`, for resume.
    private func takeUpAgain(_ keys: [String], freedBy holder: String) {
        for key in keys {
            guard
                let record = try? context.store.item(runId: context.runId, key: key)?
                    .restoringLocation(pipeline.environment)
            else { continue }
            context.reporter.info(
                "\(key.printable): taken up again: the output name it failed for is free, "
                    + "as \"\(holder.printable)\" was skipped")
            // A resume's producer may have read it, pending, in a page: one of the two starts it.
            guard state.withLock({ $0.revived(seq: record.seq) }) else { continue }
            start(Job(record: record), at: record.status)
        }
    }

    /// Tells the sinks that batch whole items (their stats count these) of an item that
    /// ended without them.
    private func noteUndelivered(_ status: String, reason: String) {
        for sink in context.sinks.values where sink.takesWholeItems { sink.noteUndelivered(status, reason: reason) }
    }

    private func finish(_ job: Job, failure: ItemFailure?) {
        if let failure {
            context.reporter.itemFailed(key: job.key, failure: failure)
            noteUndelivered("failed", reason: failure.reason.rawValue)
        }
        context.reporter.itemSettled(key: job.key, outcome: failure.map { .failed($0) } ?? .done)
        perform(
            state.withLock {
                $0.ended(seq: job.seq)
                return $0.finish(failed: failure != nil)
            })
    }
}

/// Gathers the ends of one item's deliveries and gives the item's verdict after the last.
final class Settlement: Sendable {
    enum Verdict: Equatable {
        case done
        case failed(ItemFailure)
        /// A delivery was left pending (the run is stopping): resume finishes it.
        case unfinished
    }

    let job: RunStages.Job

    private struct State {
        /// Deliveries not ended yet.
        var remaining: Int
        var failure: ItemFailure?
        var completed = false
        /// Of those, the ones held in sinks' open batches.
        var held = 0
        /// Whether the item gave its slot back (once, when all it waited for was held).
        var setAside = false

        /// Sets the item aside if every delivery it waits for is held in a batch; true then.
        mutating func asideIfOnlyHeld() -> Bool {
            guard !setAside, held > 0, held == remaining else { return false }
            setAside = true
            return true
        }
    }

    private let outcomes: Mutex<State>

    init(job: RunStages.Job, remaining: Int) {
        self.job = job
        outcomes = Mutex(State(remaining: remaining))
    }

    /// `count` deliveries of the item are held in a sink's open batch; true when the item
    /// gives its slot back now: the first time every delivery it still waits for is held
    /// (another sink still at work on it, retrying, keeps the slot, so the session waits
    /// for it).
    func hold(_ count: Int) -> Bool {
        outcomes.withLock { state in
            state.held += count
            return state.asideIfOnlyHeld()
        }
    }

    /// `count` held deliveries come to their end: their batch committed, failed or was
    /// dropped (each is then added as ended).
    func release(_ count: Int) {
        outcomes.withLock { $0.held -= count }
    }

    /// After a delivery ended without a verdict: true when the item gives its slot back now.
    func asideIfOnlyHeld() -> Bool {
        outcomes.withLock { $0.asideIfOnlyHeld() }
    }

    var wasSetAside: Bool { outcomes.withLock { $0.setAside } }

    /// Whether every delivery the item still waits for is held in sinks' open batches.
    var isOnlyHeld: Bool { outcomes.withLock { $0.held > 0 && $0.held == $0.remaining } }

    /// One delivery's end (nil: left pending); the verdict once every delivery has ended.
    func add(_ outcome: ChangeOutcome?) -> Verdict? {
        outcomes.withLock { state in
            switch outcome {
            case .failed(let failure)?: state.failure = state.failure ?? failure
            case .completed?: state.completed = true
            default: break
            }
            state.remaining -= 1
            guard state.remaining == 0 else { return nil }
            if let failure = state.failure { return .failed(failure) }
            return state.completed ? .done : .unfinished
        }
    }
}
