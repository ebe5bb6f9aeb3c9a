import Foundation
import Logging
import PipelineKit
import Synchronization
import VipsKit

/// `imgpipe work`: one worker of a run shared through PostgreSQL.
///
/// The worker joins the run (`SharedRun`), then runs the pipeline's ordinary stages
/// (`PipelineRunner`) over a feed of claimed chunks (`ChunkFeed`), with the shared run as
/// its store (`SharedStateStore`: a journal of the worker's own on this machine, each output
/// name claimed run-wide, each item's end written to the shared database fenced by the
/// chunk's lease, and a chunk whose items have all ended marked done).
/// Three or four threads besides the stages:
/// - the lister takes the lister's lease when nobody holds it and lists the pipeline's
///   feed into the database page by page (one transaction per page with its cursor);
/// - the heartbeat renews the leases every `heartbeat` seconds and rescues expired ones
///   (any worker's); when it has failed for longer than a lease, the worker stops at once
///   (no new upload starts), gives up its connections (the calls under way end) and exits
///   with an error;
/// - the recorder writes the items' ends every 0.1 s and completes chunks
///   (`SharedStateStore.flush`);
/// - with `dedup`, the floor's poller asks every 20 ms whether the items before the one
///   waiting for its verdict have all had theirs (`SharedDedup`).
///
/// Every delivery carries the shared run's UUID in its idempotency key, so an item
/// redone by another worker after this one died mid-upload is sent with the same key.
public final class SharedWorker: Sendable {
    public struct Options: Sendable {
        /// Items per chunk (a run keeps the size it was created with).
        public var chunkSize = 500
        public var leaseSeconds: Double = 60
        public var heartbeatSeconds: Double = 10
        /// Called when the database stopped answering (a call hung, or heartbeats failed, for
        /// a lease) and the worker has still not ended 10 s after being stopped and giving
        /// up its connections (which ends their calls under way): the last resort for a call
        /// that still does not return, so the command line exits the process here (its
        /// leases run out; nothing is lost).
        public var onStuck: (@Sendable (String) -> Void)?
        /// Which run to take part in (`work`, `work --new`, `run`, `resume`).
        public var joining = SharedRun.Joining.work
        public var runner = PipelineRunner.Options()
        public init() {}
    }

    let pipeline: BuiltPipeline
    let journalPath: String
    let reporter: any RunReporter
    let logger: Logger
    let options: Options
    /// The shared run this worker takes part in.
    public let run: SharedRun
    private let ledger: ChunkLedger
    private let stopping = CancellationFlag()
    private let runner = Mutex<PipelineRunner?>(nil)
    private let lostDatabase = Mutex<String?>(nil)
    private let listingError = LockedBox<String?>(nil)

    /// Joins (or creates) the shared run of `pipeline`. `journalPath` is this worker's own
    /// local state file (made anew, removed after a clean end).
    public init(
        pipeline: BuiltPipeline, url: String, journalPath: String, reporter: any RunReporter, logger: Logger,
        options: Options
    ) throws {
        self.pipeline = pipeline
        self.journalPath = journalPath
        self.reporter = reporter
        self.logger = logger
        self.options = options
        ledger = ChunkLedger(leaseSeconds: options.leaseSeconds)
        let connection = try PostgresConnection(url: url, idleInTransactionTimeoutSeconds: Self.transactionLimit(options))
        // Before the run is joined (or a new one made): a server that cannot compare the
        // items is refused with nothing changed.
        if pipeline.spec.dedup.isOn { try SharedDedup.checkServer(connection) }
        run = try SharedRun(
            connection: connection,
            pipelineName: pipeline.spec.name,
            fingerprint: Self.fingerprint(of: pipeline.spec), chunkSize: options.chunkSize,
            leaseSeconds: options.leaseSeconds, joining: options.joining)
    }

    /// How long a worker's session may sit idle inside a transaction (and half of it, wait
    /// for a lock): a third of the lease, at least 2 s, so a stalled worker's row locks are
    /// let go well before its lease would be rescued.
    static func transactionLimit(_ options: Options) -> Int { max(2, Int(options.leaseSeconds / 3)) }

    /// What decides the run's outcome: the bytes of the outputs (the pipeline's filters and
    /// encodings, the versions of imgpipe and libvips, and whether liborc's vector code is
    /// on: its results differ from the scalar code's by a level or so), which items there
    /// are and which of them are used (`source`, `accept`, `limits.maxBytes` and
    /// `limits.maxPixels`), and where they go (`sinks`, as written: a `${…}` that each
    /// machine sets its own way is the same entry). Workers whose fingerprints differ do not
    /// share a run. The rest of `limits` (threads, timeouts, rates), `retry`, a source's
    /// `cache` and an S3 sink's part sizes are each machine's own. A run made by an imgpipe
    /// that did not record these (`recordedSince`) is not compared on them.
    /// Fingerprint keys added after the first shared runs: a run without them was made by
    /// an older imgpipe, and is joined on what it recorded.
    public static let recordedSince: Set<String> = [
        "source", "accept", "sinks", "limits.maxBytes", "limits.maxPixels", "network", "dedup",
    ]

    public static func fingerprint(of spec: PipelineSpec) -> [String: String] {
        let document = spec.document
        func canonical(_ value: JSONValue?) -> String { (value ?? .null).withoutComments.serialized(sortedKeys: true) }
        /// `value` without the members each machine sets its own way (a disk cache, upload part sizes).
        func withoutLocal(_ value: JSONValue?) -> JSONValue? {
            guard case .object(let members)? = value else { return value }
            return .object(members.filter { !["cache", "partSize", "multipartThreshold"].contains($0.key) })
        }
        let sinks = (document["sinks"]?.arrayValue ?? document["sink"].map { [$0] } ?? []).map { withoutLocal($0) ?? .null }
        return spec.outputFingerprint.merging([
            "imgpipe": ImgpipeIdentity.version, "libvips": VipsRuntime.version,
            "vector": VipsRuntime.vectorCodeEnabled ? "on" : "off",
            "source": canonical(withoutLocal(document["source"])), "accept": canonical(document["accept"]),
            "sinks": canonical(.array(sinks)),
            "limits.maxBytes": String(spec.limits.maxBytes), "limits.maxPixels": String(spec.limits.maxPixels),
            // Which addresses may be reached: an item refused on one machine is not fetched on another.
            "network": canonical(document["network"]),
            // Whether and how items are compared: every worker judges by the same rules.
            "dedup": canonical(document["dedup"]),
        ]) { $1 }
    }

    static func abandonedError(_ run: Int64) -> SharedWorkerError {
        SharedWorkerError("run #\(run) was abandoned (`imgpipe run --new` started another): this worker stopped")
    }

    /// Stops claiming; items in flight get the grace period (none with `now`).
    public func interrupt(now: Bool = false) {
        stopping.cancel()
        if now { stopping.abort() }
        runner.withLock { $0 }?.interrupt(now: now)
    }

    /// Set when `execute` has returned (the watchdog's hard stop no longer applies).
    private let ended = Mutex(false)
    /// The run was abandoned (`run --new`) under this worker.
    private let abandoned = Mutex(false)

    /// Takes part in the run until it has no work left for this worker (or an interruption)
    /// and returns the whole run's report from the database, with `session` set to what this
    /// worker did.
    public func execute() throws -> StatusReport {
        defer { ended.withLock { $0 = true } }
        let started = Date()
        let store = try SharedStateStore(
            journal: RunStore(path: journalPath), ledger: ledger, names: run.sibling(),
            outputs: pipeline.spec.outputs)
        var runnerOptions = options.runner
        runnerOptions.runUUID = run.uuid
        runnerOptions.warmPixelHelpers = true
        let flush = BatchFlush()
        runnerOptions.batchFlush = flush
        // `dedup`: verdicts in the shared database, in feed order across the workers.
        let dedup = try pipeline.spec.dedup.isOn ? SharedDedup(shared: run.sibling(), ledger: ledger) : nil
        defer { dedup?.stop() }
        runnerOptions.dedupLedger = dedup
        let chunkFeed = ChunkFeed(
            shared: run, ledger: ledger, stopping: stopping, listingError: listingError,
            environment: pipeline.environment, store: store, patience: options.leaseSeconds, flush: flush)
        let local = pipeline.replacingFeed(chunkFeed)
        let progress = SharedProgress(runId: run.runId)
        let localRunner = PipelineRunner(
            pipeline: local, store: store, reporter: SharedProgressReporter(base: reporter, shared: progress), logger: logger,
            options: runnerOptions)
        runner.withLock { $0 = localRunner }
        if stopping.isCancelled { localRunner.interrupt(now: stopping.isAborted) }

        let threads = try startThreads(store: store, progress: progress)
        var summary: StatusReport?
        var failure: Error?
        do {
            summary = try localRunner.execute(.fresh(limit: nil, replaceUnfinished: true))
        } catch {
            failure = error
        }
        stopping.cancel()
        for thread in threads.all { thread.stop() }
        if abandoned.withLock({ $0 }) {
            for chunk in ledger.unfinished() { try? threads.recorderRun.handBack(chunk) }
            throw Self.abandonedError(run.runId)
        }
        // With the database out of reach nothing more can be written: the leases run out
        // and other workers take the chunks.
        if let lost = lostDatabase.withLock({ $0 }) { throw SharedWorkerError(lost) }
        try? store.flush(using: threads.recorderRun)
        // Chunks not finished go back at once, for the other workers.
        for chunk in ledger.unfinished() {
            do { try threads.recorderRun.handBack(chunk) } catch { logger.debug("hand back: \(error)") }
        }
        if let failure { throw failure }

        // A refresh this session asked for, which failed (in any worker's lister): said, exit 1.
        if case .resume(_, refreshFeed: true, _) = options.joining, let failed = try? threads.recorderRun.refreshError() {
            listingError.withLock { $0 = $0 ?? "the feed could not be listed again: " + failed }
        }
        let finished = try threads.recorderRun.markFinished()
        // Read after the marking, on the recorder's connection, one reading for the last
        // progress line and the report: a run reopened meanwhile (a retry of its failed
        // items) is said with the items it has pending now.
        let counts = try threads.recorderRun.counts()
        // The last progress line is the run's as this worker leaves it.
        progress.record(counts)
        if let last = progress.current { reporter.progress(last) }
        // Abandoned after this worker's last heartbeat looked (it ended its items first):
        // said as the heartbeat would have said it, not as a run left unfinished.
        if !finished, try threads.recorderRun.state() == "abandoned" { throw Self.abandonedError(run.runId) }
        guard
            var report = try StatusReport.shared(
                on: threads.recorderRun.connection, pipelineName: nil, runNumber: run.runId,
                pipeline: StatusReport.SharedPipeline(pipeline.spec, path: pipeline.path), counts: counts)
        else { throw SharedWorkerError("run #\(run.runId) is no longer in the database") }
        let mine = store.tally()
        let interrupted = summary?.session?.interrupted ?? true
        // The feed of chunks failing (the database out of reach past the lease) ends the
        // runner's listing with an error: said, and the worker does not exit 0.
        if let chunkError = summary?.session?.listingError, listingError.withLock({ $0 }) == nil {
            listingError.withLock { $0 = "claiming chunks failed: " + chunkError }
        }
        var session = StatusReport.Session(stateFile: journalPath)
        if !interrupted, mine.unrecorded == 0, summary?.failed == 0 {
            for path in [
                journalPath, journalPath + "-wal", journalPath + "-shm",
                RunStore.workRoot(ofStateFile: journalPath),
            ] {
                try? FileManager.default.removeItem(atPath: path)
            }
            if !FileManager.default.fileExists(atPath: journalPath) { session.stateFile = nil }
        }
        (session.done, session.failed, session.skipped) = (mine.done, mine.failed, mine.skipped)
        session.worker = run.worker
        session.interrupted = interrupted && !report.isFinished
        session.elapsed = Date().timeIntervalSince(started)
        session.listingError = listingError.withLock { $0 }
        report.session = session
        return report
    }

    // MARK: - threads

    struct Threads {
        /// Stopped in this order: the watchdog last, so a stop stuck in a hung call is still watched.
        let all: [LoopThread]
        /// The recorder's own connection, also used after the threads stopped.
        let recorderRun: SharedRun
    }

    private func startThreads(store: SharedStateStore, progress: SharedProgress) throws -> Threads {
        let heartbeatRun = try run.sibling()
        let recorderRun = try run.sibling()
        let listerRun = try run.sibling()
        // The watchdog and the delivery gate read the same renewal time (`ChunkLedger`).
        ledger.renewed(at: Date())
        // The heartbeat call under way (each takes the next number; nil between calls), the
        // number the next one takes, and when the heartbeats began failing in a row (nil: the
        // last one landed).
        let attempt = LockedBox<(call: Int?, next: Int, failingSince: Date?)>((nil, 0, nil))
        let heartbeat = LoopThread(name: "imgpipe.heartbeat", every: options.heartbeatSeconds) { [self] in
            do {
                // Only chunks claimed before the renewal can be missing from its answer.
                let before = ledger.unfinished()
                let started = Date()
                attempt.withLock {
                    $0.call = $0.next
                    $0.next += 1
                }
                let held = try heartbeatRun.heartbeat(tokens: before.map(\.token))
                attempt.withLock {
                    $0.call = nil
                    $0.failingSince = nil
                }
                // (A chunk finished while the heartbeat was under way is missing from its
                // answer too: it is no longer held, and nothing is said.)
                for lost in before where held[lost.id] != lost.token && ledger.markLost(lost) {
                    logger.warning("lease lost", metadata: ["chunk": "\(lost.id)"])
                }
                // After the lost ones are marked: a delivery waiting for this answer then
                // finds its chunk held or lost, not the renewal alone.
                ledger.renewed(at: started)
                if try heartbeatRun.state() == "abandoned", !abandoned.withLock({ $0 }) {
                    abandoned.withLock { $0 = true }
                    reporter.notice("run #\(run.runId) was abandoned (`imgpipe run --new`): no new claims; stopping")
                    interrupt()
                }
                let rescued = try heartbeatRun.rescueExpired()
                if !rescued.isEmpty { logger.info("rescued expired leases", metadata: ["chunks": "\(rescued)"]) }
            } catch {
                attempt.withLock {
                    $0.call = nil
                    $0.failingSince = $0.failingSince ?? Date()
                }
                logger.warning("heartbeat failed: \(pipeline.environment.redact(String(describing: error)))")
            }
        }
        // Apart from the heartbeat, which may itself be stuck in a call to a database that
        // stopped answering: once no heartbeat has landed for a lease while heartbeats were
        // failing, or one call has hung for a lease, stop at once. (A process that was only
        // paused, SIGSTOP, has neither: its next heartbeat finds which leases it lost.)
        let fired = LockedBox<Date?>(nil)
        // Counted in time the process ran (`HeartbeatWatch`): a pause is no call's hang.
        let watch = LockedBox(HeartbeatWatch(lease: options.leaseSeconds))
        let watchdog = LoopThread(name: "imgpipe.watchdog", every: 0.25) { [self] in
            let now = Date()
            let (call, failingSince) = attempt.withLock { ($0.call, $0.failingSince) }
            let renewal = ledger.lastRenewal
            let stop = watch.withLock {
                $0.tick(now: now, call: call, renewal: renewal, failing: failingSince != nil)
            }
            if let lost = lostDatabase.withLock({ $0 }) {
                // Stopped, yet still not ended: a call is hung in libpq.
                if let firedAt = fired.withLock({ $0 }), now.timeIntervalSince(firedAt) > 10, !ended.withLock({ $0 }) {
                    fired.withLock { $0 = .distantFuture }
                    options.onStuck?(lost)
                }
                return
            }
            guard stop else { return }
            lostDatabase.withLock {
                $0 =
                    "no heartbeat reached the database for \(Int(options.leaseSeconds)) s "
                    + "(the lease): stopped without starting another upload"
            }
            fired.withLock { $0 = now }
            interrupt(now: true)
            // Nothing more is to be written: the calls under way (into a cut network, they
            // would wait for TCP's timeouts, then reconnect) end now, and the worker exits
            // through its ordinary end.
            run.abandonConnections()
        }
        // Every 0.1 s, and at once when a claim's last end is queued: the end of a chunk,
        // and of the run, is written without waiting for the next round.
        let recorderThread = LoopThread(name: "imgpipe.recorder", every: 0.1, wake: ledger.claimEnded) { [self] in
            do {
                try store.flush(using: recorderRun)
                // The run's counts for the progress line, read with the ends just written.
                if progress.isDue, let counts = try? recorderRun.counts() { progress.record(counts) }
            } catch {
                logger.warning(
                    "recording failed (kept for the next try): \(pipeline.environment.redact(String(describing: error)))")
            }
        }
        let lister = LoopThread(name: "imgpipe.lister", every: max(0.5, options.heartbeatSeconds / 2)) { [self] in
            listIfNobodyDoes(using: listerRun)
        }
        return Threads(all: [heartbeat, recorderThread, lister, watchdog], recorderRun: recorderRun)
    }

    /// Lists the feed into the database when this worker can take the lister's lease,
    /// from the cursor the previous lister left, one page (at most a chunk) per transaction.
    /// A feed that can start after the cursor does (an S3 listing after its key, a paged
    /// API at the cursor's page); the others list from their start, and what the run has
    /// already is left out by the insert itself (`ON CONFLICT DO NOTHING`), so no item is
    /// lost even when the cursor's own item left the feed meanwhile.
    private func listIfNobodyDoes(using shared: SharedRun) {
        guard !stopping.isCancelled, listingError.withLock({ $0 }) == nil,
            let lease = try? shared.acquireLister()
        else { return }
        let environment = pipeline.environment
        // The cursor is stored with `${…}` references in place of secrets, like every item.
        let cursor = lease.cursor.flatMap { try? JSONDecoder().decode(FeedCursor.self, from: Data($0.utf8)) }
            .map { FeedCursor(key: environment.restored($0.key), listed: $0.listed, page: $0.page.map(environment.restored)) }
        logger.info("listing the feed", metadata: ["after": "\(cursor?.key ?? "-")"])
        var page: [FeedItem] = []
        var last = cursor
        var lostLease = false
        // With `--limit`, the items the run may still take: a page never holds more, and
        // only the items a page added count (a key the run has is not added again).
        var room = run.itemLimit.map { max(0, $0 - lease.items) }
        func flush(complete: Bool) throws {
            let stored = last.map {
                FeedCursor(
                    key: environment.recorded($0.key), listed: $0.listed,
                    page: $0.page.map(environment.recorded))
            }
            let text = stored.flatMap { try? JSONEncoder.sorted.encode($0) }.map { String(decoding: $0, as: UTF8.self) }
            let recorded = try shared.recordPage(page, cursor: text, complete: complete, lease: lease)
            room = run.itemLimit.map { max(0, $0 - recorded.items) }
            page.removeAll()
        }
        do {
            if room != 0 {
                try pipeline.feed.list(after: cursor, expecting: { _ in }) { item in
                    if stopping.isCancelled { return false }
                    page.append(item.forSharedState(environment))
                    last = FeedCursor(key: item.key, listed: (last?.listed ?? 0) + 1, page: item.resumePage)
                    if page.count >= min(run.chunkSize, room ?? .max) { try flush(complete: false) }
                    return room != 0
                }
            }
            if !stopping.isCancelled || room == 0 {
                try flush(complete: true)
            } else if !page.isEmpty {
                try flush(complete: false)
            }
        } catch SharedRun.SharedRunError.listerLeaseLost {
            lostLease = true
        } catch let error as PostgresError {
            // The database, not the feed: the page was not recorded; listing goes on from the
            // cursor on the next turn (of this worker or another).
            logger.warning("recording a page failed: \(pipeline.environment.redact(String(describing: error)))")
        } catch {
            let message = pipeline.environment.redact(String(describing: error))
            // The items listed before the error are the run's: they are recorded and done.
            if !page.isEmpty { try? flush(complete: false) }
            if lease.refreshing {
                // A listing again that failed leaves the run as complete as it was: the
                // `resume --refresh-feed` that asked for it says so and exits 1; this worker
                // (maybe another) goes on.
                try? shared.endRefresh(lease, error: message)
                reporter.notice("listing the feed again failed, the run is as complete as before: \(message)")
            } else {
                listingError.withLock { $0 = message }
                reporter.notice("the feed could not be listed: \(message)")
            }
        }
        if lostLease {
            logger.warning("the lister's lease was lost; another worker lists now")
        } else {
            // Whatever stopped the listing, the lease is not kept (a completed feed has none).
            try? shared.releaseLister(lease)
        }
    }
}

public struct SharedWorkerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A thread that runs `body` every `interval` seconds until stopped (then once more is
/// not promised: `stop` waits for a body under way to end), and at once each time `wake`
/// is signalled.
final class LoopThread: Sendable {
    private let wake: DispatchSemaphore
    private let stopped = LockedBox(false)
    private let ended = DispatchSemaphore(value: 0)

    init(
        name: String, every interval: Double, wake: DispatchSemaphore = DispatchSemaphore(value: 0),
        _ body: @escaping @Sendable () -> Void
    ) {
        self.wake = wake
        let thread = Thread { [stopped, ended] in
            repeat {
                body()
                _ = wake.wait(timeout: .now() + interval)
            } while !stopped.withLock({ $0 })
            ended.signal()
        }
        thread.name = name
        thread.start()
    }

    func stop() {
        stopped.withLock { $0 = true }
        wake.signal()
        ended.wait()
    }
}

/// The chunks this worker holds, the key → sequence number of each item it was given, and
/// how many of each chunk's items have ended. Claims are kept by their lease token, not
/// their chunk's number: a chunk taken from this worker can be cut by another's claim and
/// its rest claimed here again under the same number, and the items of the old claim that
/// are not in the new one (now another worker's) must still be known as lost.
final class ChunkLedger: Sendable {
    private struct Held {
        var chunk: SharedRun.Chunk
        var given: Int
        var settled = 0
        var allGiven = false
        var lost = false
        /// Items whose end was taken under this claim (`end`).
        var ended: Set<String> = []
        /// Of those, the ones the store has queued for the recorder (`queued`).
        var queued = 0
    }

    /// The chunks held, each item's place, and the items whose deliveries were dropped (their
    /// chunk lost) and not taken back since.
    private let state = Mutex<(chunks: [Int64: Held], items: [String: (token: Int64, seq: Int64)], dropped: Set<String>)>(
        ([:], [:], []))
    /// When the last heartbeat that renewed the leases began: each lease held then runs at
    /// least a lease from there.
    private let renewedAt = Mutex(Date())
    /// How long after a renewal a delivery may start without a newer one: three quarters of
    /// the lease, so that a delivery never starts on a lease that may have run out (a worker
    /// stopped, SIGSTOP, longer than that waits for its next heartbeat to learn which
    /// leases it still holds).
    let freshFor: Double

    /// Signalled when a claim all given has every end in the recorder's queue (`queued`,
    /// `allGiven`).
    let claimEnded = DispatchSemaphore(value: 0)
    /// Signalled when a chunk is finished (for the feed waiting for the run's end).
    let chunkFinished = DispatchSemaphore(value: 0)

    init(leaseSeconds: Double = 60) { freshFor = leaseSeconds * 0.75 }

    /// The leases held when a heartbeat that began at `start` renewed them (after the ones it
    /// found lost were marked).
    func renewed(at start: Date) { renewedAt.withLock { $0 = max($0, start) } }

    /// When the last heartbeat that renewed the leases began.
    var lastRenewal: Date { renewedAt.withLock { $0 } }

    /// Whether a delivery of `key` may start: `go` when its chunk's lease stands (or it is
    /// not a chunk's item: nothing here to hold); `wait` while the last renewal is too old
    /// to tell; `drop` when the chunk was lost: the key is remembered, for `takeBack`.
    func deliveryGate(_ key: String) -> DeliveryGate {
        let stale = Date().timeIntervalSince(lastRenewal) > freshFor
        return state.withLock { state in
            guard let place = state.items[key], let held = state.chunks[place.token] else { return .go }
            if held.lost {
                state.dropped.insert(key)
                return .drop
            }
            return stale ? .wait : .go
        }
    }

    /// `key` is to be taken back by the runner when it is given again (a failure the run
    /// put back to pending, for a retry).
    func giveBack(_ key: String) { state.withLock { _ = $0.dropped.insert(key) } }

    /// Whether `key` was dropped (and is not any more: the caller takes it back).
    func takeBack(_ key: String) -> Bool { state.withLock { $0.dropped.remove(key) != nil } }

    /// Whether `key` was dropped and not taken back yet.
    func wasDropped(_ key: String) -> Bool { state.withLock { $0.dropped.contains(key) } }

    func add(_ chunk: SharedRun.Chunk, items: [SharedRun.Item]) {
        state.withLock { state in
            state.chunks[chunk.token] = Held(chunk: chunk, given: items.count)
            for item in items { state.items[item.key] = (chunk.token, item.seq) }
        }
    }

    func allGiven(_ chunk: SharedRun.Chunk) {
        let over = state.withLock { state in
            state.chunks[chunk.token]?.allGiven = true
            return state.chunks[chunk.token].map { $0.queued >= $0.given } ?? false
        }
        if over { claimEnded.signal() }
    }

    /// The claim `key` is held under, when it stands (not lost).
    func claim(of key: String) -> SharedRun.Chunk? {
        state.withLock { state in
            guard let place = state.items[key], let held = state.chunks[place.token], !held.lost else { return nil }
            return held.chunk
        }
    }

    /// The chunk and sequence number of an item whose end is to be recorded; nil when it is
    /// not one of this worker's, or its end was already taken under this claim.
    func end(_ key: String) -> (chunk: SharedRun.Chunk, seq: Int64)? {
        state.withLock { state in
            guard let place = state.items[key], var held = state.chunks[place.token],
                held.ended.insert(key).inserted
            else { return nil }
            state.chunks[place.token] = held
            return (held.chunk, place.seq)
        }
    }

    /// An end `end` gave is now in the recorder's queue: when it is the last of a claim
    /// all given, `claimEnded` wakes the recorder (after the queueing, so that the flush it
    /// wakes finds the end there).
    func queued(_ chunk: SharedRun.Chunk) {
        let over = state.withLock { state in
            guard var held = state.chunks[chunk.token] else { return false }
            held.queued += 1
            state.chunks[chunk.token] = held
            return held.allGiven && held.queued >= held.given
        }
        if over { claimEnded.signal() }
    }

    // Each call below names a claim (the chunk and its lease token) and changes nothing
    // when the chunk is held under another claim now: a chunk rescued from this worker and
    // claimed by it again is a new claim, which an answer about the old one (its writes
    // refused, its heartbeat missing) must not mark lost.

    /// Counts `count` ends of the items of `chunk`'s claim; returns the chunk when all have ended.
    func settled(_ count: Int, of chunk: SharedRun.Chunk) -> SharedRun.Chunk? {
        state.withLock { state in
            guard var held = state.chunks[chunk.token] else { return nil }
            held.settled += count
            state.chunks[chunk.token] = held
            return held.allGiven && held.settled >= held.given && !held.lost ? held.chunk : nil
        }
    }

    func finished(_ chunk: SharedRun.Chunk) {
        let held = state.withLock { state in
            guard state.chunks[chunk.token] != nil else { return false }
            state.chunks[chunk.token] = nil
            state.items = state.items.filter { $0.value.token != chunk.token }
            return true
        }
        if held { chunkFinished.signal() }
    }

    /// Marks `chunk`'s claim lost; false when it is not held (any more) under that claim.
    @discardableResult
    func markLost(_ chunk: SharedRun.Chunk) -> Bool {
        let marked = state.withLock { state in
            guard state.chunks[chunk.token] != nil else { return false }
            state.chunks[chunk.token]?.lost = true
            return true
        }
        if marked { losses.withLock { $0 += 1 } }
        return marked
    }

    /// How many claims have been marked lost: what a worker knew of its items' ends may be
    /// wrong since (`SharedDedup` asks the database again).
    private let losses = Mutex(0)
    var lossCount: Int { losses.withLock { $0 } }

    /// `ask` (the claimer's question for the run's end), after forgetting the finish
    /// signals that came while the claimer was busy: each would otherwise wake one wait,
    /// and the claimer would ask again at once as many times. A chunk finished after this
    /// signals after it, so the wait that follows `ask` still wakes for it.
    func freshly<T>(_ ask: () throws -> T) rethrows -> T {
        while chunkFinished.wait(timeout: .now()) == .success {}
        return try ask()
    }

    /// Chunks held and not finished (lost ones left out: they are not this worker's).
    func unfinished() -> [SharedRun.Chunk] {
        state.withLock { $0.chunks.values.filter { !$0.lost }.map(\.chunk) }
    }

}

/// The runner's feed in a worker: claims a chunk, gives its pending items, claims the next.
/// When nothing is claimable it waits (rescuing expired leases) until the feed is listed
/// to its end and every chunk is done, then ends.
///
/// A chunk can come back to the worker that had it (its lease ran out, it was rescued, and
/// this worker claimed it again): an item that already ended in this worker's journal
/// is recorded from there, not given to the runner again (which would pass over it as a
/// key it has, and never end it); one still under way there ends under the new lease.
/// A database error is tried again for up to `patience` seconds before listing fails.
final class ChunkFeed: Feed, Sendable {
    // `shared` (its connection) is used only by the producer thread that lists.
    private let shared: SharedRun
    private let ledger: ChunkLedger
    private let stopping: CancellationFlag
    private let listingError: LockedBox<String?>
    private let environment: Environment
    private let store: SharedStateStore
    private let patience: Double
    /// Commits the session's open batches while this waits for chunks to end.
    private let flush: BatchFlush

    init(
        shared: SharedRun, ledger: ChunkLedger, stopping: CancellationFlag, listingError: LockedBox<String?>,
        environment: Environment, store: SharedStateStore, patience: Double, flush: BatchFlush
    ) {
        self.flush = flush
        self.environment = environment
        self.shared = shared
        self.ledger = ledger
        self.stopping = stopping
        self.listingError = listingError
        self.store = store
        self.patience = patience
    }

    /// The chunks' items, claimed one chunk at a time (no cursor: the shared run's own
    /// lister keeps one; no count: the shared run's counters are the total).
    func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool) throws {
        // Nothing to claim: look again soon (the lister is writing the first page), then
        // less and less often: four times a second while the feed is being listed, ten
        // once it is listed to its end (the end of the run is then noticed within a tenth
        // of a second; `SharedRun.ending` is two index lookups), and at once when one of
        // this worker's chunks is finished.
        var pause = 0.02
        // The items of every chunk this worker claimed, as ranges of feed positions (a chunk
        // claimed again may come back cut in two: its number says less than its items do).
        var claimedBefore: [ClosedRange<Int64>] = []
        while !stopping.isCancelled {
            if let chunk = try patiently({ try shared.claimShare() }) {
                pause = 0.02
                let items = try patiently { try shared.items(of: chunk) }
                ledger.add(chunk, items: items)
                // Only items this worker held before can be in its journal.
                let range = chunk.firstSeq...max(chunk.firstSeq, chunk.lastSeq)
                let again = claimedBefore.contains { $0.overlaps(range) }
                claimedBefore.append(range)
                let ready = items.map { $0.numbered(environment) }
                store.claimAhead(ready)
                for item in ready {
                    if again, store.knownHere(item.key) { continue }
                    guard try body(item) else { return }
                }
                ledger.allGiven(chunk)
                continue
            }
            // The end: the feed listed and every chunk done, this worker's own included (its
            // items are still being worked on while this waits; a chunk of its own whose
            // lease it lost meanwhile is rescued here and claimed again).
            let state = try ledger.freshly { try patiently { try shared.ending() } }
            let listed = state.feedComplete || listingError.withLock({ $0 }) != nil
            if listed && !state.chunksOpen { return }
            // Nothing to claim: what this worker's sinks hold is committed, or its own chunks,
            // their items held in a batch that is not full, would never end.
            flush.flush()
            try patiently { _ = try shared.rescueExpired() }
            _ = ledger.chunkFinished.wait(timeout: .now() + pause)
            pause = min(pause * 2, listed ? 0.1 : 0.25)
        }
    }

    /// `body`, tried again once a second while the database answers with an error, for up
    /// to `patience` seconds (a failover, a restart); then its error.
    private func patiently<T>(_ body: () throws -> T) throws -> T {
        let deadline = Date().addingTimeInterval(patience)
        while true {
            do {
                return try body()
            } catch let error as PostgresError where Date() < deadline && !stopping.isCancelled {
                _ = error
                Thread.sleep(forTimeInterval: 1)
            }
        }
    }
}
