import Foundation
import PipelineKit
import Synchronization

/// `dedup`'s judge: whether an item repeats one the run kept.
///
/// - Exact (`dedup.exact`): the input's SHA-256 is looked up among the kept items in the
///   store (`DedupStore.keptItem`, an index of kept items by hash), and among the items
///   kept in this session whose record is not written yet.
/// - Similar (`dedup.similar`): the first output's perceptual hash is looked up in a
///   multi-index hash table of every kept item's (`NearHashIndex`), read from the store when
///   the session starts and added to as items are kept.
///
/// In a shared run (`DedupLedger`), both are looked up in the shared database instead,
/// and each verdict is written there before the next item's, on any worker, is made.
///
/// An item that repeats none is kept (`StoreChange.processed`'s `kept`), and later items
/// are compared with it. The same items in the same order give the same verdicts: a
/// resumed run reaches the verdicts the interrupted one would have.
final class DedupJudge: Sendable {
    /// A kept item, ordered by its place in the feed.
    struct Kept: Comparable, Sendable {
        let seq: Int
        let key: String
        /// The average colour its ThumbHash keeps (`ImageFingerprint.averageColour`).
        var colour: SIMD3<Double>?

        static func < (a: Kept, b: Kept) -> Bool { a.seq < b.seq }
        static func == (a: Kept, b: Kept) -> Bool { a.seq == b.seq && a.key == b.key }

        /// Whether two items with near hashes are copies by their average colours (a flat or
        /// smooth picture's hash is mostly noise). Unknown colours are alike.
        static func alike(_ a: SIMD3<Double>?, _ b: SIMD3<Double>?) -> Bool {
            guard let a, let b else { return true }
            return ImageFingerprint.coloursAlike(a, b)
        }
    }

    private struct State {
        var near: NearHashIndex<Kept>?
        /// Items kept in this session whose `processed` record is not written yet, by hash.
        var unwritten: [String: Kept] = [:]
        /// Kept items taken out of a sink's open batch as placeholders: not compared with.
        var withdrawn: Set<String> = []
        /// Sightings of bytes from a host (`host` newline `sha256`) counted in this session
        /// and not all written yet: what the store will say, with the writes still to come.
        var sightings: [String: (count: Int, keys: [String], pending: Int)] = [:]
    }

    /// Where the kept items are: a state file's (with this session's overlay, `State`), or
    /// a shared run's ledger.
    private enum Records: Sendable {
        case local(any DedupStore, runId: Int64)
        case shared(any DedupLedger)
    }

    /// A verdict: the item's skip (nil: kept), and the sighting to record with it.
    struct Verdict {
        var skip: ItemSkip?
        var sighting: StoreChange?
        /// The items this verdict finds were made with a placeholder (`dedup.placeholders`).
        var flagging: [String] = []
    }

    let policy: DedupPolicy
    private let records: Records
    private let state: Mutex<State>

    /// Reads the perceptual hashes of the items the run kept before this session; a run
    /// compared with `baseline` (`run --incremental`) counts on from its sightings.
    init(policy: DedupPolicy, store: any DedupStore, runId: Int64, baseline: Int64? = nil) throws {
        self.policy = policy
        records = .local(store, runId: runId)
        if policy.placeholdersAfter != nil, let baseline { try store.inheritSightings(runId: runId, from: baseline) }
        var near = policy.similarDistance.map { NearHashIndex<Kept>(distance: $0) }
        if near != nil {
            try store.keptHashes(runId: runId) { seq, key, fingerprint in
                guard let hash = fingerprint.perceptualHash?.bits else { return }
                near?.insert(hash, id: Kept(seq: seq, key: key, colour: fingerprint.averageColour))
            }
        }
        state = Mutex(State(near: near))
    }

    /// A judge of a shared run's items: each verdict is read from and written to `ledger`.
    init(policy: DedupPolicy, ledger: any DedupLedger) {
        self.policy = policy
        records = .shared(ledger)
        state = Mutex(State())
    }

    /// The item's verdict: kept (and remembered as such), or the skip of a placeholder or a
    /// duplicate; with `dedup.placeholders`, the sighting of its bytes from its `host`.
    func verdict(key: String, seq: Int, sha256: String?, fingerprint: ImageFingerprint?, host: String?) throws -> Verdict {
        guard case .local(let store, let runId) = records else {
            return try sharedVerdict(key: key, seq: seq, sha256: sha256, fingerprint: fingerprint, host: host)
        }
        var sighting: StoreChange?
        if let after = policy.placeholdersAfter, let host, let sha256 {
            let id = host + "\n" + sha256
            let counted = state.withLock { $0.sightings[id].map { (count: $0.count, keys: $0.keys) } }
            let seen = try counted ?? store.sighting(runId: runId, host: host, sha256: sha256) ?? (0, [])
            let sighted = Self.sight(key, seen, after: after, host: host)
            if let now = sighted.counted {
                state.withLock { state in
                    let pending = (state.sightings[id]?.pending ?? 0) + 1
                    state.sightings[id] = (now.count, now.keys, pending)
                }
                sighting = .sighted(host: host, sha256: sha256, key: key, flagging: now.flagging)
            }
            if let skip = sighted.skip {
                return Verdict(skip: skip, sighting: sighting, flagging: sighted.counted?.flagging ?? [])
            }
        }
        return Verdict(
            skip: try duplicate(key: key, seq: seq, sha256: sha256, fingerprint: fingerprint, in: store, runId: runId),
            sighting: sighting)
    }

    /// nil (the item is kept, and remembered as such), or the skip of a duplicate.
    private func duplicate(
        key: String, seq: Int, sha256: String?, fingerprint: ImageFingerprint?, in store: any DedupStore, runId: Int64
    ) throws -> ItemSkip? {
        let me = Kept(seq: seq, key: key, colour: fingerprint?.averageColour)
        if policy.exact, let sha256 {
            let seen = state.withLock { $0.unwritten[sha256] }
            if let seen, seen.key != key, !state.withLock({ $0.withdrawn.contains(seen.key) }) {
                return .duplicate(of: seen.key, distance: 0, exact: true)
            }
            if let kept = try store.keptItem(runId: runId, sha256: sha256, except: key) {
                return .duplicate(of: kept.key, distance: 0, exact: true)
            }
        }
        let phash = fingerprint?.perceptualHash?.bits
        return state.withLock { state -> ItemSkip? in
            // Within the distance and of a like colour; never the item itself (made again).
            if let phash,
                let found = state.near?.earliest(
                    within: phash,
                    where: { $0.key != key && Kept.alike($0.colour, me.colour) && !state.withdrawn.contains($0.key) })
            {
                return .duplicate(of: found.id.key, distance: found.distance, exact: false)
            }
            if let phash { state.near?.insert(phash, id: me) }
            if policy.exact, let sha256 { state.unwritten[sha256] = state.unwritten[sha256] ?? me }
            return nil
        }
    }

    /// `key`'s sighting of bytes its host gave for `seen.count` items before (the first of
    /// them `seen.keys`): its skip when the bytes are a placeholder (`after` sightings),
    /// and the counts after it, with the items it finds were made with the placeholder.
    /// A key seen before (an item made again, or one whose sighting was written before a
    /// kill and its own record not) is not counted twice, and is judged as it was then.
    static func sight(
        _ key: String, _ seen: (count: Int, keys: [String]), after: Int, host: String
    ) -> (skip: ItemSkip?, counted: (count: Int, keys: [String], flagging: [String])?) {
        if let index = seen.keys.firstIndex(of: key) {
            let skip = index + 1 >= after ? ItemSkip.placeholder(host: host, count: index + 1, first: seen.keys[0]) : nil
            return (skip, nil)
        }
        let count = seen.count + 1
        let flagging = count == after ? seen.keys : []
        let keys = seen.keys.count < DedupPolicy.maxSightings ? seen.keys + [key] : seen.keys
        let skip = count >= after ? ItemSkip.placeholder(host: host, count: count, first: keys[0]) : nil
        return (skip, (count, keys, flagging))
    }

    /// A shared run's verdict, made from what `ledger` holds (every verdict before this
    /// item's, on any worker: `DedupFloor`) and written there before the next is made.
    private func sharedVerdict(
        key: String, seq: Int, sha256: String?, fingerprint: ImageFingerprint?, host: String?
    ) throws -> Verdict {
        guard case .shared(let ledger) = records else { preconditionFailure("a state file's judge") }
        var judgement = DedupJudgement(key: key, seq: seq)
        var skip: ItemSkip?
        if let after = policy.placeholdersAfter, let host, let sha256 {
            let sighted = Self.sight(key, try ledger.sighting(host: host, sha256: sha256) ?? (0, []), after: after, host: host)
            skip = sighted.skip
            if let now = sighted.counted { judgement.sighting = (host, sha256, now.count, now.keys, now.flagging) }
        }
        let phash = policy.similarDistance == nil ? nil : fingerprint?.perceptualHash?.bits
        let exact = policy.exact ? sha256 : nil
        if skip == nil, exact != nil || phash != nil {
            let matches = try ledger.matches(sha256: exact, phash: phash, within: policy.similarDistance ?? 0)
                .filter { $0.key != key }
            let colour = fingerprint?.averageColour
            if let exact, let same = matches.filter({ $0.sha256 == exact }).min(by: { $0.seq < $1.seq }) {
                skip = .duplicate(of: same.key, distance: 0, exact: true)
            } else if let near = matches.filter({
                $0.distance != nil && Kept.alike($0.colour, colour)
            }).min(by: { $0.seq < $1.seq }), let distance = near.distance {
                skip = .duplicate(of: near.key, distance: distance, exact: false)
            }
        }
        if skip == nil { judgement.kept = (sha256, fingerprint) }
        try ledger.judged(judgement)
        return Verdict(skip: skip, sighting: nil, flagging: judgement.sighting?.flagging ?? [])
    }

    /// The key of a kept item before `seq` in feed order whose input had `sha256`, if any:
    /// the first of its group (its verdict came after every item before it), so an item
    /// with these bytes is its duplicate whatever else is in flight.
    func keptBefore(seq: Int, sha256: String) throws -> String? {
        let kept: (key: String, seq: Int)?
        switch records {
        case .local(let store, let runId):
            if let seen = state.withLock({ $0.unwritten[sha256] }) { return seen.seq < seq ? seen.key : nil }
            kept = try store.keptItem(runId: runId, sha256: sha256, except: nil)
        case .shared(let ledger):
            kept = try ledger.kept(sha256: sha256, except: nil)
        }
        guard let kept else { return nil }
        return kept.seq < seq ? kept.key : nil
    }

    /// An item `run --incremental` carried over whole: when it was kept, later items are
    /// compared with it (its insert came before theirs, in feed order).
    func carried(key: String, seq: Int) throws {
        guard policy.similarDistance != nil, case .local(let store, let runId) = records,
            let fingerprint = try store.keptFingerprint(runId: runId, key: key),
            let hash = fingerprint.perceptualHash?.bits
        else { return }
        state.withLock { $0.near?.insert(hash, id: Kept(seq: seq, key: key, colour: fingerprint.averageColour)) }
    }

    /// A kept item was taken out of a sink's open batch as a placeholder (its record then
    /// says not kept): later items are not compared with it.
    func withdrawn(key: String, seq: Int) {
        // A shared run's kept row goes (a failure leaves it: a later copy is then a duplicate
        // of an item not delivered, as before).
        if case .shared(let ledger) = records { try? ledger.unkeep(seq: seq) }
        state.withLock { state in
            state.withdrawn.insert(key)
            state.unwritten = state.unwritten.filter { $0.value.key != key }
        }
    }

    /// A kept item's record is written: the store answers for it from now on.
    func written(sha256: String?) {
        guard let sha256 else { return }
        state.withLock { _ = $0.unwritten.removeValue(forKey: sha256) }
    }

    /// A sighting is written: once all of its bytes' are, the store answers for them.
    func written(_ sighting: StoreChange) {
        guard case .sighted(let host, let sha256, _, _) = sighting else { return }
        let id = host + "\n" + sha256
        state.withLock { state in
            guard var entry = state.sightings[id] else { return }
            entry.pending -= 1
            state.sightings[id] = entry.pending > 0 ? entry : nil
        }
    }
}
