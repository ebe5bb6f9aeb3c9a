import Foundation
import PipelineKit

/// What imgpipe reports of a run, the one report type of every command: `status` of a
/// state file (`latest(in:)`, `run(_:in:)`) or of a run shared in PostgreSQL (`shared(at:…)`,
/// which sets `uuid`, `pagesListed`, `chunks` and `workers`; a state file's report leaves
/// them out of its JSON), and the end of a session of `run`, `resume` and `work`: the same
/// report of the run as that session leaves it, with `session` set (what it did).
public struct StatusReport: Sendable, Codable {
    public let run: Int64
    public let state: String
    public let pipeline: String
    public let name: String
    /// Items the run has: every item of the feed once `feedComplete`, else those listed so far.
    public let total: Int
    /// Whether the feed has been listed to its end (false: a run stopped while listing,
    /// whose `total` and `pending` leave out what the feed has still to list).
    public let feedComplete: Bool
    public let done: Int
    /// Items settled without an output: opted out, refused by robots.txt, outside `accept`.
    public let skipped: Int
    public let failed: Int
    /// Items not yet done, skipped or failed (pending, fetched or processed).
    public let pending: Int
    public let fetched: Int
    public let processed: Int
    /// Deliveries by sink (one per item and output the sink takes).
    public let sinks: [String: DeliveryCounts]
    /// Each output's deliveries (over every sink that takes it) and its format, by id.
    public let outputs: [String: OutputCounts]
    public let failuresByReason: [String: Int]
    public let failures: [FailureRecord]
    /// Skipped items by reason (`opt-out`, `robots`, `too-small`, `aspect`, `format`).
    public let skipsByReason: [String: Int]
    public let skips: [SkipRecord]
    /// Items by the tier that served their input: `remote`, `cache`, `fallback`, `local`.
    public let tiers: [String: Int]
    public let startedAt: String
    public let finishedAt: String?
    /// Items a later `run --incremental` took over whole from this run (`HandOn`): this run
    /// made them, and counts them no more; nil when there are none.
    public var handedOn: Int? = nil
    /// Items made before their bytes were found to be their host's placeholder
    /// (`dedup.placeholders`; `export` flags them); nil when there are none.
    public var placeholders: Int? = nil
    /// Seconds spent running, over every session.
    public let elapsed: Double
    /// Finished items per second of running time.
    public let itemsPerSecond: Double
    /// A shared run's UUID.
    public var uuid: String? = nil
    /// Pages of a shared run's feed recorded so far.
    public var pagesListed: Int? = nil
    /// A shared run's chunks by state.
    public var chunks: Chunks? = nil
    /// A shared run's workers, by name.
    public var workers: [Worker]? = nil
    /// What the session this report ends did (`run`, `resume` and `work`); nil for `status`.
    public var session: Session? = nil

    /// One session of a run: the items it ended, its time, how it stopped. Its counts are
    /// this session's, where the report's are the whole run's.
    public struct Session: Sendable, Codable {
        /// The items this session ended, by how (a shared run's worker: those it recorded).
        public var done = 0
        public var skipped = 0
        public var failed = 0
        /// Seconds this session ran.
        public var elapsed: Double = 0
        /// True when stopped by a signal: the run can be resumed.
        public var interrupted = false
        /// Set when the feed could not be listed to its end (the run can be resumed later).
        public var listingError: String? = nil
        /// The state file; a shared run's worker's journal, nil when it was removed at a
        /// clean end (nothing of this worker's was left unrecorded).
        public var stateFile: String?
        /// A shared run's worker, by name.
        public var worker: String? = nil
        /// True when `run --incremental` found the feed and the pipeline as the run it
        /// compared with left them, and made no run (`UpToDate`): the report is that run's.
        public var upToDate: Bool? = nil

        public init(stateFile: String?) { self.stateFile = stateFile }

        /// Items ended in this session (done, skipped or failed).
        public var ended: Int { done + skipped + failed }
        /// Items ended per second of this session.
        public var itemsPerSecond: Double { elapsed > 0 ? Double(ended) / elapsed : 0 }

        private enum Derived: String, CodingKey { case ended, itemsPerSecond }

        /// The stored fields, then `ended` and `itemsPerSecond` for readers of the JSON.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(done, forKey: .done)
            try container.encode(skipped, forKey: .skipped)
            try container.encode(failed, forKey: .failed)
            try container.encode(elapsed, forKey: .elapsed)
            try container.encode(interrupted, forKey: .interrupted)
            try container.encodeIfPresent(listingError, forKey: .listingError)
            try container.encodeIfPresent(stateFile, forKey: .stateFile)
            try container.encodeIfPresent(worker, forKey: .worker)
            try container.encodeIfPresent(upToDate, forKey: .upToDate)
            var derived = encoder.container(keyedBy: Derived.self)
            try derived.encode(ended, forKey: .ended)
            try derived.encode(itemsPerSecond, forKey: .itemsPerSecond)
        }
    }

    /// Whether the run has ended: every item of its feed done, skipped or failed.
    public var isFinished: Bool { state == RunRecord.State.finished.rawValue }

    /// One worker of a shared run.
    public struct Worker: Sendable, Codable {
        public let name: String
        public let lastHeartbeatSecondsAgo: Double
        public let itemsDone: Int
        public let chunksHeld: Int
    }

    /// A shared run's chunks by state.
    public struct Chunks: Sendable, Codable {
        public let pending: Int
        public let leased: Int
        public let done: Int
    }

    /// Reads the latest run of `store`; nil when it has none.
    public static func latest(in store: RunStore, failureLimit: Int = 1000) throws -> StatusReport? {
        guard let run = try store.latestRun() else { return nil }
        return try report(of: run, in: store, failureLimit: failureLimit)
    }

    /// Reads run number `id` of `store` (any run, abandoned ones included); nil when there
    /// is none.
    public static func run(_ id: Int64, in store: RunStore, failureLimit: Int = 1000) throws -> StatusReport? {
        guard let run = try store.run(id: id) else { return nil }
        return try report(of: run, in: store, failureLimit: failureLimit)
    }

    static func report(of run: RunRecord, in store: RunStore, failureLimit: Int) throws -> StatusReport {
        let counts = try store.counts(runId: run.id)
        var sinks = try store.deliveryCounts(runId: run.id)
        for name in run.sinks where sinks[name] == nil { sinks[name] = DeliveryCounts() }
        let formats = RunStore.outputFormats(ofDocument: run.document)
        var outputs: [String: OutputCounts] = [:]
        for (id, counts) in try store.deliveryCountsByOutput(runId: run.id) {
            outputs[id] = OutputCounts(format: formats[id] ?? OutputFormat.jpeg.rawValue, deliveries: counts)
        }
        let formatter = ISO8601DateFormatter()
        // Items handed on were finished here: they count in the time per item.
        let finishedItems = counts.done + counts.skipped + counts.failed + run.handedOn
        var report = StatusReport(
            run: run.id, state: run.state.rawValue, pipeline: run.pipelinePath, name: run.pipelineName,
            total: counts.total, feedComplete: run.feedComplete, done: counts.done, skipped: counts.skipped,
            failed: counts.failed, pending: counts.unfinished,
            fetched: counts.fetched, processed: counts.processed, sinks: sinks, outputs: outputs,
            failuresByReason: try store.failureCounts(runId: run.id),
            failures: try store.failures(runId: run.id, limit: failureLimit),
            skipsByReason: try store.skipCounts(runId: run.id),
            skips: try store.skips(runId: run.id, limit: failureLimit),
            tiers: try store.tierCounts(runId: run.id),
            startedAt: formatter.string(from: run.startedAt), finishedAt: run.finishedAt.map(formatter.string(from:)),
            elapsed: run.elapsed, itemsPerSecond: run.elapsed > 0 ? Double(finishedItems) / run.elapsed : 0)
        if run.handedOn > 0 { report.handedOn = run.handedOn }
        let placeholders = try store.placeholderCount(runId: run.id)
        if placeholders > 0 { report.placeholders = placeholders }
        return report
    }
}

extension RunStore {
    /// Run number `runId`'s report (`StatusReport.run`), for the end of a session.
    public func report(runId: Int64) throws -> StatusReport {
        guard let report = try StatusReport.run(runId, in: self) else {
            throw StoreError("no run #\(runId) in the state file \(path)")
        }
        return report
    }
}

/// One output's share of a run, for `status`.
public struct OutputCounts: Sendable, Equatable, Codable {
    public let format: String
    public let deliveries: DeliveryCounts
}
