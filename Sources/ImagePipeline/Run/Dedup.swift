import Foundation
import PipelineKit
import Synchronization

/// Holds each item's `dedup` verdict until every item before it in feed order has had its
/// own (or has ended without one), so that the item kept of each group is the first in feed
/// order however the items' downloads and pixel work overlap.
///
/// An item enters when it starts towards the pixel stage (`enter`), arrives once its outputs
/// are staged (`arrive`), and its verdict runs when no item that entered before it is still
/// waiting for one. Items a run admits in feed order (`RunStages.produce`), so an item only
/// waits for items that hold a slot and move on: no thread waits, and no slot is taken by an
/// item that could not start.
final class DedupGate: Sendable {
    private struct State {
        /// Items that entered and have had no verdict yet.
        var waiting: Set<Int> = []
        /// Items that arrived before their turn, with what to run then.
        var parked: [Int: @Sendable (Bool) -> Void] = [:]
        var shut = false

        /// The first waiting item's body, when it has arrived: taken out to be run.
        mutating func takeNext() -> (@Sendable (Bool) -> Void)? {
            guard let first = waiting.min() else { return nil }
            return parked.removeValue(forKey: first)
        }
    }

    private let state = Mutex(State())

    /// An item that may reach the verdict started: the items after it wait for its verdict.
    func enter(_ seq: Int) {
        state.withLock { state in
            if !state.shut { state.waiting.insert(seq) }
        }
    }

    /// An item ended without a verdict (failed, skipped before its outputs were made): no
    /// longer waited for.
    func leave(_ seq: Int) {
        run(
            state.withLock { state in
                state.waiting.remove(seq)
                return state.takeNext()
            })
    }

    /// Runs `body(true)` once every item that entered before `seq` has had its verdict or
    /// left; at once when the item did not enter (an item made again, already judged).
    /// `body(false)` when the run stops first: the item is left as it was recorded. The body
    /// must end with `pass(seq)` after a verdict.
    func arrive(_ seq: Int, _ body: @escaping @Sendable (Bool) -> Void) {
        let now = state.withLock { state -> Bool? in
            if state.shut { return false }
            guard state.waiting.contains(seq), state.waiting.min() != seq else { return true }
            state.parked[seq] = body
            return nil
        }
        if let now { body(now) }
    }

    /// `seq` had its verdict: the next waiting item may have its own.
    func pass(_ seq: Int) { leave(seq) }

    /// The run is stopping: every item waiting for its turn is given `false`, and so is
    /// every item that arrives from now on.
    func shut() {
        let parked = state.withLock { state -> [@Sendable (Bool) -> Void] in
            state.shut = true
            state.waiting.removeAll()
            defer { state.parked.removeAll() }
            return Array(state.parked.values)
        }
        for body in parked { DispatchQueue.global().async { body(false) } }
    }

    private func run(_ body: (@Sendable (Bool) -> Void)?) {
        guard let body else { return }
        DispatchQueue.global().async { body(true) }
    }
}

/// `dedup`'s judge: whether an item repeats one the run kept.
///
/// - Exact (`dedup.exact`): the input's SHA-256 is looked up among the kept items in the
///   store (`RunStateStore.keptItem`, an index of kept items by hash), and among the items
///   kept in this session whose record is not written yet.
/// - Similar (`dedup.similar`): the first output's perceptual hash is looked up in a
///   multi-index hash table of every kept item's (`NearHashIndex`), read from the store when
///   the session starts and added to as items are kept.
///
/// An item that repeats none is kept (`StoreChange.processed`'s `kept`), and later items
/// are compared with it. The same items in the same order give the same verdicts: a
/// resumed run reaches the verdicts the interrupted one would have.
final class DedupJudge: Sendable {
    /// A kept item, ordered by its place in the feed.
    struct Kept: Comparable, Sendable {
        let seq: Int
        let key: String

        static func < (a: Kept, b: Kept) -> Bool { a.seq < b.seq }
    }

    private struct State {
        var near: NearHashIndex<Kept>?
        /// Items kept in this session whose `processed` record is not written yet, by hash.
        var unwritten: [String: Kept] = [:]
    }

    let policy: DedupPolicy
    private let store: any RunStateStore
    private let runId: Int64
    private let state: Mutex<State>

    /// Reads the perceptual hashes of the items the run kept before this session.
    init(policy: DedupPolicy, store: any RunStateStore, runId: Int64) throws {
        self.policy = policy
        self.store = store
        self.runId = runId
        var near = policy.similarDistance.map { NearHashIndex<Kept>(distance: $0) }
        if near != nil {
            try store.keptHashes(runId: runId) { seq, key, phash in
                near?.insert(phash, id: Kept(seq: seq, key: key))
            }
        }
        state = Mutex(State(near: near))
    }

    /// The item's verdict: nil, kept (and remembered as such), or the skip of a duplicate.
    func verdict(key: String, seq: Int, sha256: String?, fingerprint: ImageFingerprint?) throws -> ItemSkip? {
        let me = Kept(seq: seq, key: key)
        if policy.exact, let sha256 {
            let seen = state.withLock { $0.unwritten[sha256] }
            if let seen, seen.key != key { return .duplicate(of: seen.key, distance: 0) }
            if let kept = try store.keptItem(runId: runId, sha256: sha256, except: key) {
                return .duplicate(of: kept.key, distance: 0)
            }
        }
        let phash = fingerprint?.perceptualHash?.bits
        return state.withLock { state -> ItemSkip? in
            if let phash, let found = state.near?.earliest(within: phash), found.id.key != key {
                return .duplicate(of: found.id.key, distance: found.distance)
            }
            if let phash { state.near?.insert(phash, id: me) }
            if policy.exact, let sha256 { state.unwritten[sha256] = state.unwritten[sha256] ?? me }
            return nil
        }
    }

    /// The key of a kept item before `seq` in feed order whose input had `sha256`, if any:
    /// the first of its group (its verdict came after every item before it), so an item
    /// with these bytes is its duplicate whatever else is in flight.
    func keptBefore(seq: Int, sha256: String) throws -> String? {
        if let seen = state.withLock({ $0.unwritten[sha256] }) { return seen.seq < seq ? seen.key : nil }
        guard let kept = try store.keptItem(runId: runId, sha256: sha256, except: "") else { return nil }
        return kept.seq < seq ? kept.key : nil
    }

    /// A kept item's record is written: the store answers for it from now on.
    func written(sha256: String?) {
        guard let sha256 else { return }
        state.withLock { _ = $0.unwritten.removeValue(forKey: sha256) }
    }
}
