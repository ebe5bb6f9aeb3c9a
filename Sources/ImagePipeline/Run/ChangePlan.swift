import Foundation

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
    public let outputs: [String: OutputPlan]
    /// The previous run's seconds per item, times the items with an output to make.
    public let estimatedSeconds: Double

    public static func make(pipeline: BuiltPipeline, store: RunStore?, scratch: String) throws -> ChangePlan {
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let detector = try store.flatMap { try ChangeDetector(store: $0, pipeline: pipeline, scratch: scratch) }
        let environment = pipeline.environment
        var counts: [ChangeDetector.Source: Int] = [:]
        var redo: [String: Int] = [:]
        var working = 0
        var listed = Set<String>()
        try pipeline.feed.list(after: nil, expecting: { _ in }) { found in
            let item = found.withoutSecrets(environment)
            guard listed.insert(item.key).inserted else { return true }
            // The detector reads the file or fetches the image: the location as fetched.
            let verdict = detector?.classify(FeedItem(key: item.key, location: found.location, metadata: found.metadata,
                                                      nameKey: item.nameKey, nameStem: item.nameStem,
                                                      fromFallback: found.fromFallback, isLocal: found.isLocal))
                ?? ChangeDetector.Verdict(source: .new, redo: pipeline.spec.outputs.map(\.id))
            counts[verdict.source, default: 0] += 1
            for id in verdict.redo { redo[id, default: 0] += 1 }
            if !verdict.redo.isEmpty { working += 1 }
            return true
        }
        var gone = 0
        if let store, let baseline = detector?.baseline {
            var after = 0
            while true {
                let page = try store.keys(runId: baseline.id, after: after, limit: 1000)
                guard let last = page.last else { break }
                gone += page.count { !listed.contains($0.key) }
                after = last.seq
            }
        }
        let new = counts[.new] ?? 0, changed = counts[.changed] ?? 0
        var outputs: [String: OutputPlan] = [:]
        for output in pipeline.spec.outputs {
            var reasons: [String] = []
            if let reason = detector?.outputReasons[output.id] { reasons.append(reason) }
            if new > 0 { reasons.append("\(new) new item(s)") }
            if changed > 0 { reasons.append("\(changed) changed source(s)") }
            outputs[output.id] = OutputPlan(redo: redo[output.id] ?? 0, reasons: reasons)
        }
        var perItem = 0.0
        if let store, let baseline = detector?.baseline {
            let ended = try store.counts(runId: baseline.id)
            perItem = baseline.elapsed / Double(max(1, ended.done + ended.failed + ended.skipped))
        }
        return ChangePlan(baseline: detector?.baseline.id, new: new, changed: changed, gone: gone,
                          unchanged: counts[.unchanged] ?? 0, outputs: outputs,
                          estimatedSeconds: (perItem * Double(working) * 100).rounded() / 100)
    }
}
