import Foundation
import PipelineKit
import Synchronization

/// `run --incremental` when nothing changed: the run it would make would hold every item of
/// the run it compares with, each as it is there, and deliver nothing, so none is made. The
/// feed is listed and compared as `plan` does, and the first difference ends the look.
///
/// Up to date means all of this, checked in this order (the cheap ones first):
/// - the run compared with is the state file's latest run, finished (no later run took
///   items from it or delivered over its files);
/// - the pipeline file is the one it recorded, with the same values of its `${…}` and the
///   same watermark images (`BuiltPipeline.runFingerprint`), and looks for no duplicates
///   (`dedup` keeps verdicts of its own per run);
/// - each of its items is `done`, and a pruning folder sink has no file of an earlier run
///   to remove (`DirectorySink.wouldPrune`);
/// - the feed lists as many items as it has (when the feed counts them before listing,
///   a feed that grew ends the look there), each once, each unchanged with every output kept
///   (`ChangeDetector`), at the number, location, metadata and name key it recorded.
///
/// A remote item compared by its bytes would be fetched here and again by the run: it is
/// not fetched, and counts as a difference (`ChangeDetector.classify(_:index:fetching:)`).
public enum UpToDate {
    /// The run compared with when the feed and the pipeline are as it left them; nil at the
    /// first difference, or when the feed cannot be listed (the run that follows says why).
    public static func check(_ detector: ChangeDetector, pipeline: BuiltPipeline, store: RunStore) throws -> RunRecord? {
        let baseline = detector.baseline
        let spec = pipeline.spec
        guard baseline.state == .finished, try store.latestRun()?.id == baseline.id, detector.heirs.isEmpty,
            detector.outputReasons.isEmpty, detector.sinkReasons.isEmpty, !spec.dedup.isOn,
            baseline.document == spec.document.serialized(), baseline.fingerprint == pipeline.runFingerprint
        else { return nil }
        let counts = try store.counts(runId: baseline.id)
        guard counts.total > 0, counts.done == counts.total else { return nil }
        for sink in pipeline.sinks where sink.prunes {
            guard !sink.wouldPrune(try store.prunable(after: baseline.id, sink: sink.name)) else { return nil }
        }
        let environment = pipeline.environment
        let otherCount = Atomic(false)
        struct Differs: Error {}
        var listed = Set<String>()
        var seq = 0
        do {
            try ListingAhead.list(
                pipeline.feed,
                expecting: { count in
                    guard !count.isEstimate, count.items != counts.total else { return true }
                    otherCount.store(true, ordering: .relaxed)
                    return false
                }
            ) { found in
                let item = found.withoutSecrets(environment)
                guard listed.insert(item.key).inserted else { throw Differs() }
                // Numbered as the run numbers it (`RunStages.list`).
                seq = found.position ?? seq + 1
                let verdict = detector.classify(
                    FeedItem(
                        key: item.key, location: found.location, metadata: found.metadata,
                        nameKey: item.nameKey, nameStem: item.nameStem,
                        fromFallback: found.fromFallback, isLocal: found.isLocal),
                    index: seq, fetching: false)
                let now = RunStore.ComparedItem.Listed(
                    seq: seq, location: environment.recorded(item.location), metadata: item.metadata,
                    nameKey: item.nameKey)
                guard verdict.source == .unchanged, verdict.remake.isEmpty, verdict.holder == baseline.id,
                    verdict.listed == now
                else { throw Differs() }
            }
        } catch {
            return nil
        }
        guard !otherCount.load(ordering: .relaxed), listed.count == counts.total else { return nil }
        return baseline
    }
}
