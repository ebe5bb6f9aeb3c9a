import Foundation
import PipelineKit

/// Where the runner keeps a run's state: everything `PipelineRunner` and `RunStages` read
/// and write goes through this protocol, and nothing else of a store is visible to them.
///
/// Two implementations:
/// - `RunStore`, the state file (SQLite): one machine, one process, the whole run.
/// - `SharedStateStore` (`Postgres/`), one worker's part of a run shared through
///   PostgreSQL: the items it was given, with their files on this machine kept in a journal
///   of its own, and what the whole run must agree on (each item's end, fenced by the
///   chunk's lease; each output name, claimed run-wide) written to the shared database.
///
/// The contract both keep (the run-store tests run on both):
/// - `apply` writes a batch in order and says what became of each change; an item moves
///   `pending → fetched → processed → done` or to `failed`/`skipped`, and is done once its
///   last delivery is (`ChangeOutcome.completed`);
/// - an output name belongs to one item of the run: a second item wanting it fails;
/// - a key inserted twice is `.existing`, and changes nothing;
/// - every method may be called from any thread (the writer calls `apply` from one).
public protocol RunStateStore: AnyObject, Sendable {
    /// A local path the run's work folder is made next to (`<path without extension>.work/`),
    /// and the state file named in summaries.
    var path: String { get }

    /// Opens the run this session works on, with the rules of `mode`.
    func begin(_ mode: RunMode, _ identity: RunIdentity) throws -> RunStart
    func setState(_ state: RunRecord.State, runId: Int64, addingElapsed elapsed: Double) throws

    /// Writes a batch of changes and says what became of each.
    func apply(_ changes: [StoreChange], runId: Int64, now: Date) throws -> [ChangeOutcome]

    func counts(runId: Int64) throws -> ItemCounts
    /// The run's report as `status` gives it (a shared run's worker: its own part).
    func report(runId: Int64) throws -> StatusReport

    func item(runId: Int64, key: String) throws -> ItemRecord?
    /// Items not yet done, failed or skipped, in feed order after `seq`.
    func unfinishedItems(runId: Int64, after seq: Int, limit: Int) throws -> [ItemRecord]
    /// The highest sequence number of the run (0: none yet).
    func lastSeq(runId: Int64) throws -> Int
    /// The key of the run's last listed item.
    func lastKey(runId: Int64) throws -> String?
    /// Records whether the run's listing ended with an error (`RunRecord.listingCut`).
    func markListingCut(runId: Int64, _ cut: Bool) throws
    func stagedOutputs(runId: Int64, key: String) throws -> [StagedOutput]
    /// What an item's source was when it was processed (`SourceStamp`), nil before.
    func source(runId: Int64, key: String) throws -> SourceStamp?
    func pendingDeliveries(runId: Int64, key: String) throws -> [(output: String, sink: String)]
    /// What an item's first output looks like (`ImageFingerprint`), nil before it is made.
    func fingerprint(runId: Int64, key: String) throws -> ImageFingerprint?

    /// Whether an item was flagged as made with its host's placeholder (`dedup.placeholders`).
    func isFlaggedPlaceholder(runId: Int64, key: String) throws -> Bool

    /// Whether a delivery of `key` may start now. Always `go` for a state file; a shared
    /// run's worker delivers only items whose chunk it still holds (`SharedStateStore`).
    func deliveryGate(key: String) -> DeliveryGate
    /// Whether an item this store had the runner drop (`DeliveryGate.drop`), now listed
    /// again, is to be taken up where it stood instead of passed over as a key the run has.
    func takeBack(key: String) -> Bool
}

/// What a store says of a delivery about to start.
public enum DeliveryGate: Sendable, Equatable {
    case go
    /// Not yet: ask again shortly (a shared run's worker that cannot tell whether it still
    /// holds the item's lease until its next heartbeat lands).
    case wait
    /// Never, in this session: the item is another worker's now. It is left as it stands
    /// here, and taken back (`takeBack`) if this worker is given it again.
    case drop
}

extension RunStateStore {
    public func deliveryGate(key: String) -> DeliveryGate { .go }
    /// A store that does not flag items: none is.
    public func isFlaggedPlaceholder(runId: Int64, key: String) throws -> Bool { false }
    public func takeBack(key: String) -> Bool { false }

    /// The folder the runs' work folders go in: `<path without extension>.work`.
    var workRoot: String { RunStore.workRoot(ofStateFile: path) }

    func apply(_ changes: [StoreChange], runId: Int64) throws -> [ChangeOutcome] {
        try apply(changes, runId: runId, now: Date())
    }

    func setState(_ state: RunRecord.State, runId: Int64) throws {
        try setState(state, runId: runId, addingElapsed: 0)
    }
}

extension RunStore: RunStateStore {
    /// The folder next to a state file that holds its runs' work folders (and the scratch
    /// of `plan` and `run --incremental`): `<file without extension>.work`.
    public static func workRoot(ofStateFile path: String) -> String {
        URL(fileURLWithPath: path).deletingPathExtension().path + ".work"
    }
}
