import Foundation
import PipelineKit

/// `imgpipe plan`: what `run --incremental` would do, found without doing any of it. The
/// feed is listed and each item compared with the last finished run (`ChangeDetector`);
/// nothing is processed, written or delivered (a remote image without a version field is
/// fetched to compare its bytes, into a scratch folder).
public struct ChangePlan: Sendable, Codable {
    public struct OutputPlan: Sendable, Codable, Equatable {
        /// Items whose output is made again.
        public let redo: Int
        public let reasons: [String]
    }

    /// The run compared with (nil: the state file has no finished run, and everything is new).
    public let baseline: Int64?
    public let new: Int
    public let changed: Int
    /// Items of the previous run the feed no longer lists.
    public let gone: Int
    public let unchanged: Int
    /// Items that failed in the compared run: `run --incremental` tries each again from the
    /// start (fetched or read anew, every output made), whatever its source. Not `changed`.
    public let failedLastTime: Int
    /// Of those, the ones whose failure does not pass by itself (`FailureAdvice.Outlook`):
    /// tried again as they are, they fail again.
    public let failedLastTimeForGood: Int
    /// Items skipped in the compared run, tried again the same way.
    public let skippedLastTime: Int
    public let outputs: [String: OutputPlan]
    /// The previous run's seconds per item, times the items with an output to make.
    public let estimatedSeconds: Double
    /// The latest run of the state file when it is unfinished (`run --incremental` then
    /// takes `--new`, or the run is resumed first).
    public let unfinishedRun: Int64?

    /// Compares with the latest finished run of `store` (none: every item is new).
    public static func make(pipeline: BuiltPipeline, store: RunStore?, scratch: String) throws -> ChangePlan {
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let detector = try store.flatMap { try ChangeDetector(store: $0, pipeline: pipeline, scratch: scratch) }
        let environment = pipeline.environment
        let ids = pipeline.spec.outputs.map(\.id)
        // The outputs a changed or new sink takes are delivered again for every item.
        let resent = Set(
            pipeline.spec.sinks.filter { detector?.sinkReasons[$0.name] != nil }
                .flatMap { pipeline.spec.outputs(of: $0.name) })
        var counts: [ChangeDetector.Source: Int] = [:]
        var redo: [String: Int] = [:]
        var renamed: [String: Int] = [:]
        var replaced: [String: Int] = [:]
        var working = 0
        var forGood = 0
        var listed = Set<String>()
        try ListingAhead.list(pipeline.feed) { found in
            let item = found.withoutSecrets(environment)
            guard listed.insert(item.key).inserted else { return }
            let verdict =
                detector?.classify(ChangeDetector.compared(found, recorded: item), index: listed.count)
                ?? ChangeDetector.Verdict(source: .new, remake: ids, renamed: [])
            counts[verdict.source, default: 0] += 1
            if verdict.lastFailure?.outlook == .permanent { forGood += 1 }
            // An output is named once in `remake`: a set only when the resent ones join it.
            let made = resent.isEmpty ? verdict.remake : Array(Set(verdict.remake).union(resent))
            for id in made { redo[id, default: 0] += 1 }
            for id in verdict.renamed { renamed[id, default: 0] += 1 }
            for id in verdict.replaced { replaced[id, default: 0] += 1 }
            if !made.isEmpty { working += 1 }
        }
        var gone = 0
        if let store, let detector {
            // The baseline's items, and those later runs took over from it.
            for (run, carriedFrom) in [(detector.baseline.id, nil)] + detector.heirs.map({ ($0, detector.baseline.id) }) {
                var after = 0
                while true {
                    let page = try store.keys(runId: run, after: after, limit: 1000, carriedFrom: carriedFrom)
                    guard let last = page.last else { break }
                    gone += page.count { !listed.contains($0.key) }
                    after = last.seq
                }
            }
        }
        let new = counts[.new] ?? 0
        let changed = counts[.changed] ?? 0
        let failed = counts[.failed] ?? 0
        let skipped = counts[.skipped] ?? 0
        var outputs: [String: OutputPlan] = [:]
        for output in pipeline.spec.outputs {
            var reasons: [String] = []
            if let reason = detector?.outputReasons[output.id] { reasons.append(reason) }
            for sink in pipeline.spec.sinks where pipeline.spec.outputs(of: sink.name).contains(output.id) {
                if let reason = detector?.sinkReasons[sink.name] { reasons.append(reason) }
            }
            if new > 0 { reasons.append("\(new) new item(s)") }
            if changed > 0 { reasons.append("\(changed) changed source(s)") }
            if failed > 0 { reasons.append("\(failed) item(s) that failed last time") }
            if skipped > 0 { reasons.append("\(skipped) item(s) skipped last time") }
            if let count = renamed[output.id] { reasons.append("\(count) item(s) named otherwise") }
            if let count = replaced[output.id] {
                reasons.append("\(count) file(s) delivered then changed, removed or written over since")
            }
            outputs[output.id] = OutputPlan(redo: redo[output.id] ?? 0, reasons: reasons)
        }
        return ChangePlan(
            baseline: detector?.baseline.id, new: new, changed: changed, gone: gone,
            unchanged: counts[.unchanged] ?? 0, failedLastTime: failed, failedLastTimeForGood: forGood,
            skippedLastTime: skipped, outputs: outputs,
            estimatedSeconds: ((try store.map { try secondsPerItem(in: $0) } ?? 0) * Double(working) * 100).rounded() / 100,
            unfinishedRun: try store?.latestRun().flatMap { $0.isUnfinished ? $0.id : nil })
    }

    /// Seconds per item made, in the latest finished run that made any (an incremental run
    /// that carried most items over says little about the time of one).
    static func secondsPerItem(in store: RunStore) throws -> Double {
        for run in try store.runs() where run.state == .finished {
            let counts = try store.counts(runId: run.id)
            // Items later runs took over were listed here all the same.
            let made = counts.done + counts.failed + counts.skipped + run.handedOn - run.carried
            if made > 0 { return run.elapsed / Double(made) }
        }
        return 0
    }
}
