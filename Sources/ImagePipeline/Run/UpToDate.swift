import Foundation
import PipelineKit
import Synchronization

/// `run --incremental` when nothing changed: the run it would make would hold every item of
/// the run it compares with, each as it is there, and deliver nothing, so none is made. The
/// feed is listed and compared as `plan` does, and the first difference ends the look.
///
/// Up to date means all of this, checked in this order (the cheap ones first):
/// - the feed is listed from local files (`Feed.listsLocally`: a folder, a table on disk, a
///   fallback of such), and its items are local or have a `versionField`: a feed listed
///   from a server would be asked for its pages again by the run that follows a difference
///   found late, or a failure;
/// - the run compared with is the state file's latest run, finished (no later run took
///   items from it or delivered over its files);
/// - the pipeline file is the one it recorded, with the same values of its `${…}` and the
///   same watermark images (`BuiltPipeline.runFingerprint`), and looks for no duplicates
///   (`dedup` keeps verdicts of its own per run);
/// - each of its items is `done`, and a pruning folder sink has no file of an earlier run
///   to remove (`DirectorySink.wouldPrune`);
/// - the feed lists as many items as it has (when the feed counts them before listing,
///   a feed that grew ends the look there), each once, each unchanged with every output kept
///   (`ChangeDetector`), at the number, location, metadata and name key it recorded. A count
///   of entries some of which may be left out (`FeedCount.Kind.atMost`) ends the look only when
///   it is below the run's.
///
/// A remote item compared by its bytes would be fetched here and again by the run: it is
/// not fetched, and counts as a difference (`ChangeDetector.classify(_:index:fetching:)`);
/// a source of remote items without a `versionField` (a URL list) is not looked at.
public enum UpToDate {
    /// The run compared with when the feed and the pipeline are as it left them; nil at the
    /// first difference, or when the feed cannot be listed (the run that follows says why).
    public static func check(pipeline: BuiltPipeline, store: RunStore, scratch: String) throws -> RunRecord? {
        // Remote items with no version to compare (a URL list, a table without
        // `versionField`) would each be fetched: the look would end at the first.
        if let remote = pipeline.spec.source.remote, remote.versionField == nil { return nil }
        guard pipeline.feed.listsLocally,
            let detector = try ChangeDetector(store: store, pipeline: pipeline, scratch: scratch, listing: true)
        else { return nil }
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
        var listed = 0
        var seq = 0
        do {
            try ListingAhead.list(
                pipeline.feed,
                expecting: { count in
                    let differs =
                        switch count.kind {
                        case .exact: count.items != counts.total
                        // Entries some of which may be left out say too few, never too many.
                        case .atMost: count.items < counts.total
                        case .estimate: false
                        }
                    if differs { otherCount.store(true, ordering: .relaxed) }
                    return !differs
                }
            ) { found in
                let item = found.withoutSecrets(environment)
                // Numbered as the run numbers it (`RunStages.list`). A key listed twice is
                // found at the first one's number the second time: a difference.
                seq = found.position ?? seq + 1
                listed += 1
                let verdict = detector.classify(ChangeDetector.compared(found, recorded: item), index: seq, fetching: false)
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
        // Each item listed matched a recorded one of its own number: as many, and all are.
        guard !otherCount.load(ordering: .relaxed), listed == counts.total else { return nil }
        return baseline
    }
}
