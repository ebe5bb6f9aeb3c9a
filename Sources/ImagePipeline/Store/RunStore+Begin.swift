import Foundation
import PipelineKit

/// What a run is made of, as the store records it.
public struct RunIdentity: Sendable {
    public var pipelinePath: String
    public var pipelineName: String
    /// The pipeline document as written.
    public var document: String
    /// Canonical JSON of the parts that decide outputs, by name (`filters`, `output`).
    public var fingerprint: [String: String]
    public var sinks: [String]
    /// The folder under which each run gets its work folder.
    public var workRoot: String
    /// How the pipeline file is named in messages.
    public var displayPath: String
    /// The UUID a new run takes (nil: its own): a shared run's, for a worker's local run.
    public var uuid: String?
    /// The run a new incremental run compares with.
    public var baseline: Int64?

    public init(
        pipelinePath: String, pipelineName: String, document: String, fingerprint: [String: String],
        sinks: [String], workRoot: String, displayPath: String, uuid: String? = nil, baseline: Int64? = nil
    ) {
        self.uuid = uuid
        self.baseline = baseline
        self.pipelinePath = pipelinePath
        self.pipelineName = pipelineName
        self.document = document
        self.fingerprint = fingerprint
        self.sinks = sinks
        self.workRoot = workRoot
        self.displayPath = displayPath
    }
}

/// The run a session works on, and what the user should be told about it.
public struct RunStart: Sendable {
    public var run: RunRecord
    /// True when the session continues a run (its unfinished items come first).
    public var resuming: Bool
    /// `resume --refresh-feed` of a run whose feed was complete: a listing that fails
    /// leaves it complete.
    public var refreshing: Bool
    public var notices: [String]
}

extension RunStore {
    /// Finds or creates the run a `run` or `resume` works on, with their rules: `run`
    /// refuses an unfinished run (unless `--new`, which abandons it) and starts a new one;
    /// `resume` continues the latest run, refuses one whose outputs would differ (filters or
    /// output changed) or whose sinks are not the same ones (by name), requeues failed items when asked, and reopens a finished run that
    /// has something left to do.
    public func begin(_ mode: RunMode, _ identity: RunIdentity) throws -> RunStart {
        let latest = try latestRun()
        switch mode {
        case .fresh(let limit, let replace):
            if let latest, latest.isUnfinished {
                guard replace else {
                    throw RunError.unfinishedRun(id: latest.id, stateFile: path, pipeline: identity.displayPath)
                }
                try setState(.abandoned, runId: latest.id)
            }
            // A new run makes the previous one unreachable for resume: its staged files
            // (kept for --retry-failed) can go.
            if let latest { try? FileManager.default.removeItem(atPath: latest.workDirectory) }
            let run = try createRun(
                pipelinePath: identity.pipelinePath, pipelineName: identity.pipelineName,
                document: identity.document, fingerprint: identity.fingerprint, sinks: identity.sinks,
                itemLimit: limit, workRoot: identity.workRoot, uuid: identity.uuid,
                baseline: identity.baseline)
            return RunStart(run: run, resuming: false, refreshing: false, notices: [])

        case .resume(let retryFailed, let refreshFeed, let reasons):
            guard var run = latest else {
                throw RunError.nothingToResume(stateFile: path, pipeline: identity.displayPath)
            }
            // Where outputs go is not compared (a sink changed under its name takes what is
            // left), and the watermarks' hashes only when the run recorded them.
            let changed = identity.fingerprint.keys.sorted().filter { key in
                key != BuiltPipeline.sinkTargetsKey && (key != BuiltPipeline.assetsKey || run.fingerprint[key] != nil)
                    && identity.fingerprint[key] != run.fingerprint[key]
            }
            if !changed.isEmpty {
                let details = changed.flatMap { field -> [String] in
                    guard let old = run.fingerprint[field].flatMap({ try? JSONParser.parse($0) }),
                        let new = identity.fingerprint[field].flatMap({ try? JSONParser.parse($0) })
                    else { return [] }
                    return JSONValue.differences(from: old, to: new, at: field)
                }
                throw RunError.pipelineChanged(fields: changed, id: run.id, details: details)
            }
            // Deliveries are recorded per sink when an item is listed: a sink added since
            // would get nothing of the items listed, and one removed or renamed would leave
            // theirs pending for good.
            if Set(identity.sinks) != Set(run.sinks) {
                throw RunError.sinksChanged(id: run.id, from: run.sinks, to: identity.sinks)
            }
            var start = RunStart(run: run, resuming: true, refreshing: false, notices: [])
            // Skipped items of a state file written before skips gave their names up.
            try freeSkippedItemsNames(runId: run.id)
            if retryFailed {
                let requeued = try requeueFailed(runId: run.id, reasons: reasons)
                if requeued > 0 {
                    start.notices.append(
                        "retrying \(requeued) failed item(s) of run #\(run.id)"
                            + (reasons.map { " (" + $0.map(\.rawValue).sorted().joined(separator: ", ") + ")" } ?? ""))
                }
            } else {
                // Items whose host did not answer were set aside, not tried: a resume tries them.
                let requeued = try requeueFailed(runId: run.id, onlyUnreachable: true)
                if requeued > 0 {
                    start.notices.append("retrying \(requeued) item(s) of run #\(run.id) whose host was unreachable")
                }
            }
            if refreshFeed {
                try markFeedComplete(runId: run.id, false)
                run.feedComplete = false
                start.refreshing = true
                if run.state == .finished {
                    try setState(.running, runId: run.id)
                    run.state = .running
                }
            }
            if run.state == .finished {
                let counts = try counts(runId: run.id)
                if counts.unfinished == 0 {
                    start.notices.append(
                        "run #\(run.id) already finished: \(counts.done) done, "
                            + (counts.skipped > 0 ? "\(counts.skipped) skipped, " : "") + "\(counts.failed) failed"
                            + (counts.failed == 0
                                ? ""
                                : retryFailed
                                    ? " (none failed for "
                                        + (reasons.map { $0.map(\.rawValue).sorted().joined(separator: ", ") } ?? "a reason")
                                        + " given to --retry-failed)"
                                    : " (add --retry-failed to try the failed ones again)"))
                    start.run = run
                    return start
                }
                try setState(.running, runId: run.id)
                run.state = .running
            }
            start.run = run
            return start
        }
    }
}
