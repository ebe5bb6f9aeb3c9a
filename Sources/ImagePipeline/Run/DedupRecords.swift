import Foundation
import PipelineKit

/// What `dedup`'s judge reads of a run's state file: the items it kept and the sightings
/// it counted. `RunStore` answers; a shared run's worker has `DedupLedger` instead, as
/// its journal knows only its own items.
public protocol DedupStore: Sendable {
    /// The first item in feed order the run kept whose input had `sha256`, other than
    /// `key` (nil: any); nil when there is none.
    func keptItem(runId: Int64, sha256: String, except key: String?) throws -> (key: String, seq: Int)?
    /// `dedup.placeholders` in `run --incremental`: the counts of `baseline` (the run it is
    /// compared with) become the run's own, where it has none for a host and hash yet.
    func inheritSightings(runId: Int64, from baseline: Int64) throws
    /// `dedup.placeholders`: how many items of the run `host` gave `sha256`'s bytes for, and
    /// the keys of the first ones; nil when none.
    func sighting(runId: Int64, host: String, sha256: String) throws -> (count: Int, keys: [String])?
    /// Calls `body` with each kept item's place, key and fingerprint.
    func keptHashes(runId: Int64, _ body: (Int, String, ImageFingerprint) throws -> Void) throws
    /// An item's fingerprint when the run kept it (`StoreChange.processed`'s `kept`), else nil.
    func keptFingerprint(runId: Int64, key: String) throws -> ImageFingerprint?
}

extension RunStore: DedupStore {}

/// Tells `DedupGate` when every item of a run before a given one has had its verdict, on
/// whichever machine: a shared run's items are judged by several workers, each holding
/// only some of them, and an item's verdict must wait for every item before it in feed
/// order, its own worker's or not.
public protocol DedupFloor: AnyObject, Sendable {
    /// Whether every item before `seq` has had its verdict or has ended without one.
    func isClear(below seq: Int) -> Bool
    /// Calls `then` (once, on a thread of its own) when `isClear(below: seq)` would say yes,
    /// or when the floor is stopped.
    func watch(_ seq: Int, then: @escaping @Sendable () -> Void)
    /// An item of this worker ended without a verdict (failed, or skipped before its
    /// pixel work): not waited for, though its end may not have reached the others yet.
    func left(_ seq: Int, key: String)
}

/// A verdict as a shared run records it, for every worker to read (`DedupLedger.judged`).
public struct DedupJudgement: Sendable {
    public let key: String
    public let seq: Int
    /// What the item is compared by when it is kept: its input's SHA-256 and its first
    /// output's fingerprint. nil: not kept (a duplicate or a placeholder).
    public var kept: (sha256: String?, fingerprint: ImageFingerprint?)?
    /// A sighting of its bytes from its host (`dedup.placeholders`): the count and keys
    /// after it, and the items it finds were made with a placeholder.
    public var sighting: (host: String, sha256: String, count: Int, keys: [String], flagging: [String])?
}

/// Where a shared run keeps `dedup`'s verdicts (PostgreSQL: `SharedDedup`): every worker
/// reads them before judging an item, and writes its own as it judges one. Verdicts are
/// made one at a time in feed order across the workers (`DedupFloor`), so what a worker
/// reads holds every verdict before the item it judges.
public protocol DedupLedger: DedupFloor {
    /// The first kept item in feed order whose input had `sha256`, other than `key` (nil: any).
    func kept(sha256: String, except key: String?) throws -> (key: String, seq: Int)?
    /// In one lookup, the kept items whose input had `sha256` and those whose perceptual
    /// hash is within `distance` bits of `phash`.
    func matches(sha256: String?, phash: UInt64?, within distance: Int) throws -> [DedupMatch]
    /// `dedup.placeholders`: how many items of the run `host` gave `sha256`'s bytes for,
    /// and the keys of the first ones; nil when none.
    func sighting(host: String, sha256: String) throws -> (count: Int, keys: [String])?
    /// Records a verdict: the item judged (the items after it may have theirs), kept or
    /// not, and its sighting.
    func judged(_ judgement: DedupJudgement) throws
    /// A kept item was taken out of a sink's open batch as a placeholder: later items are
    /// not compared with it.
    func unkeep(seq: Int) throws
}

/// A kept item a shared run's lookup found (`DedupLedger.matches`).
public struct DedupMatch: Sendable {
    public let key: String
    public let seq: Int
    /// Its input's SHA-256.
    public let sha256: String?
    /// Bits between its perceptual hash and the query's, when within the distance asked.
    public let distance: Int?
    /// The average colour its ThumbHash keeps.
    public let colour: SIMD3<Double>?
}
