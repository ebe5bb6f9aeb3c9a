import Foundation
import PipelineKit
import Synchronization

/// `dedup` in a run shared through PostgreSQL: the verdicts every worker reads and writes
/// (`DedupLedger`), and the floor that holds each verdict until every item before it in
/// feed order has had its own, on whichever worker (`DedupFloor`).
///
/// - The floor: an item's verdict may be made once no item before it is still `pending`
///   and not `judged` in `imgpipe_item` (on `imgpipe_item_unjudged`, in feed order), the
///   items this worker ended without a verdict aside (their end is written 0.1 s later by
///   the recorder). Verdicts are therefore made one at a time, in feed order, across the
///   workers, and what a worker reads when it makes one holds every verdict before it:
///   the item kept of each group is the first in feed order, whichever worker saw it first.
///   An item whose floor is not clear is watched: asked again every `pollSeconds`.
/// - The verdict is written in one statement fenced by the item's chunk's lease: the
///   item `judged`; when kept, its input hash and perceptual hash (in four indexed 16-bit
///   bands) in `imgpipe_kept`; its sighting in `imgpipe_sighting`, and the items it finds
///   were made with a placeholder flagged in `imgpipe_item.placeholder`.
/// - A near copy is looked up by the bands: every kept item one of whose bands is within
///   `distance / 4` bits of the query's (`NearHashIndex.probes`), compared in full in the
///   index; in the same query, a kept item with the same input hash.
/// - The floor's question is asked only when the item before is not known to be judged:
///   an item whose predecessor this worker judged or ended is in turn at once.
///
/// A worker that stops after some verdicts leaves them: its items, redone by another
/// worker, are judged again with the same answer (the same items before them).
public final class SharedDedup: DedupLedger, Sendable {
    /// The connection and the floor's state, shared with the poller's thread.
    private final class Core: Sendable {
        /// Verdicts, lookups and floor questions, one at a time on a connection of their own.
        let shared: Mutex<SharedRun>
        /// Items this worker ended without a verdict, and when: left out of the floor's
        /// question until the recorder has surely written their end (a minute).
        let left = Mutex<[Int: Date]>([:])
        /// The item being watched, and what to call when its floor clears; nil: none.
        let watched = Mutex<(seq: Int, then: @Sendable () -> Void)?>(nil)
        let stopped = Mutex(false)
        /// Every item before this one is known to have had its verdict or ended: found so
        /// by the floor's question, or by this worker's own verdicts and ends, made in turn
        /// after it. Items in turn on this worker need no question then.
        let clearBelow = Mutex(1)

        let ledger: ChunkLedger
        /// The ledger's count of lost claims when the cache was last trusted.
        let lossesSeen = Mutex(0)

        init(_ shared: SharedRun, ledger: ChunkLedger) {
            self.shared = Mutex(shared)
            self.ledger = ledger
        }

        /// `seq` had its verdict or ended: when every item before it had, so has every
        /// item before the next.
        func passed(_ seq: Int) {
            clearBelow.withLock { if $0 >= seq { $0 = max($0, seq + 1) } }
        }

        /// A claim was lost since the cache was last trusted: an item this worker ended
        /// may have had its end refused, and is another worker's to make again. What was
        /// known from its own ends goes; the database is asked.
        func forgetIfLost() {
            let losses = ledger.lossCount
            guard
                lossesSeen.withLock({ seen in
                    defer { seen = losses }
                    return seen != losses
                })
            else { return }
            clearBelow.withLock { $0 = 1 }
            left.withLock { $0.removeAll() }
        }

        func isClear(below seq: Int) -> Bool {
            forgetIfLost()
            if clearBelow.withLock({ $0 >= seq }) { return true }
            let excluded = left.withLock { left -> [String?] in
                let old = Date().addingTimeInterval(-60)
                left = left.filter { $0.value > old }
                return left.keys.filter { $0 < seq }.map(SharedDedup.databaseSeq)
            }
            let waiting = try? shared.withLock { shared in
                try shared.connection.execute(
                    SharedDedup.floorSQL, [String(shared.runId), SharedDedup.databaseSeq(seq), postgresTextArray(excluded)]
                ).count > 0
            }
            guard waiting == false else { return false }
            clearBelow.withLock { $0 = max($0, seq) }
            return true
        }

        /// The poller's turn: calls the watched item's `then` once its floor is clear (or
        /// the floor stopped), if it is still the one watched.
        func poll() {
            guard let watch = watched.withLock({ $0 }) else { return }
            guard stopped.withLock({ $0 }) || isClear(below: watch.seq) else { return }
            let current = watched.withLock { current -> Bool in
                guard current?.seq == watch.seq else { return false }
                current = nil
                return true
            }
            if current { watch.then() }
        }
    }

    private let core: Core
    private let ledger: ChunkLedger
    private let wake = DispatchSemaphore(value: 0)
    private let poller: LoopThread

    /// `shared`: a connection of this worker's own; the floor of a watched item is asked
    /// every `pollSeconds`.
    init(shared: SharedRun, ledger: ChunkLedger, pollSeconds: Double = 0.02) throws {
        // Verdicts are written without waiting for the server's disk. One lost in a crash
        // of the server takes every later write with it (the log is written in order), the
        // items' ends that rest on it included: those items are made and judged again, with
        // the same verdicts. Waiting, each verdict would take a flush of the server's log
        // (milliseconds on a disk), and verdicts are made one at a time across the workers.
        try shared.connection.execute("SET synchronous_commit = off")
        let core = Core(shared, ledger: ledger)
        self.core = core
        self.ledger = ledger
        poller = LoopThread(name: "imgpipe.dedup-floor", every: pollSeconds, wake: wake) { core.poll() }
    }

    /// Refuses a server older than PostgreSQL 14: `bit_count` (the distance in
    /// `matchesSQL`) came with it.
    static func checkServer(_ connection: PostgresConnection) throws {
        let version = try connection.execute("SHOW server_version_num").first?["server_version_num"]
        if let version = version.flatMap({ Int($0) }), version < 140_000 {
            throw SharedWorkerError(
                "dedup: a shared run needs PostgreSQL 14 or later to look for duplicates (this server is \(version / 10_000))")
        }
    }

    /// A reader of `shared`'s kept items, holding no chunk (its `judged` refuses): for
    /// `imgpipe-hashbench`'s measure of the near-copy lookup.
    public convenience init(reading shared: SharedRun) throws { try self.init(shared: shared, ledger: ChunkLedger()) }

    /// Stops watching: a watched item is called (its gate then finds the run stopping).
    public func stop() {
        core.stopped.withLock { $0 = true }
        poller.stop()
        let watch = core.watched.withLock { current in
            defer { current = nil }
            return current
        }
        watch?.then()
    }

    // MARK: - queries (their plans are checked in `SharedRunTests`)

    /// The first item before `$2` still waited for (pending and not judged), the items `$3`
    /// aside; no row: none. In order on `imgpipe_item_unjudged`, which holds only the items
    /// still pending: an `EXISTS` was planned as a scan of the whole table from its first
    /// row, which in a run under way is an item long done.
    static let floorSQL = """
        SELECT seq FROM imgpipe_item WHERE run_id = $1 AND status = 'pending' AND NOT judged
          AND seq < $2 AND seq <> ALL($3::bigint[])
        ORDER BY seq LIMIT 1
        """

    /// The first kept item with input hash `$2`, other than key `$3`: on `imgpipe_kept_sha256`.
    static let keptSQL = """
        SELECT key, seq FROM imgpipe_kept WHERE run_id = $1 AND sha256 = $2 AND key IS DISTINCT FROM $3
        ORDER BY seq LIMIT 1
        """

    /// The kept items within `$7` bits of the perceptual hash `$6` (one of whose bands is
    /// among its probes, `$2`…`$5`), and those whose input hash is `$8`. One arm per band on
    /// its own index (`imgpipe_kept_band0`…`3`: both columns in the index condition, the
    /// hash in the index, so the distance is taken there without reading a row); a match
    /// found through two bands comes once. The matches' rows are then read by their primary
    /// key (an array, not `IN`: the planner, guessing a third of the candidates match, took
    /// a scan of the run's rows for `IN`). (The four arms as one `OR` were planned as such a
    /// scan too; fetching every candidate, 0.8 % of the kept items at distance 8, cost
    /// 25 ms a query at a million: `bench/dedup.sh`.)
    static let matchesSQL = """
        SELECT key, seq, sha256, phash, thumbhash FROM imgpipe_kept WHERE run_id = $1 AND seq = ANY(ARRAY(
        \((0..<4).map { band in
            "SELECT seq FROM imgpipe_kept WHERE run_id = $1 AND band\(band) = ANY($\(band + 2)::integer[]) "
                + "AND bit_count((phash # $6::bigint)::bit(64)) <= $7::integer"
        }.joined(separator: "\nUNION ALL\n"))
        UNION ALL
        SELECT seq FROM imgpipe_kept WHERE run_id = $1 AND sha256 = $8::text))
        """

    /// A verdict, in one statement: the chunk's lease checked and its row locked (as
    /// `SharedRun.fence`), the item `judged`, a kept item's hashes, the sighting, and the
    /// items it flags. Gives `held` 0 when the lease is not this worker's (nothing written).
    static let judgedSQL = """
        WITH held AS (
            SELECT 1 FROM imgpipe_chunk
            WHERE run_id = $1 AND id = $2 AND state = 'leased' AND owner = $3 AND token = $4 AND lease_expires > now()
            FOR UPDATE
        ), item AS (
            UPDATE imgpipe_item SET judged = true
            WHERE run_id = $1 AND seq = $5 AND NOT judged AND EXISTS (SELECT 1 FROM held)
        ), kept AS (
            INSERT INTO imgpipe_kept (run_id, seq, key, sha256, phash, band0, band1, band2, band3, thumbhash)
            SELECT $1, $5, $6, $7, $8::bigint, $9::integer, $10::integer, $11::integer, $12::integer, $13
            WHERE $14::boolean AND EXISTS (SELECT 1 FROM held)
            ON CONFLICT (run_id, seq) DO UPDATE SET key = excluded.key, sha256 = excluded.sha256, phash = excluded.phash,
                band0 = excluded.band0, band1 = excluded.band1, band2 = excluded.band2, band3 = excluded.band3,
                thumbhash = excluded.thumbhash
        ), unkept AS (
            -- Judged again (`resume --retry-failed`) and not kept now: no longer compared with.
            DELETE FROM imgpipe_kept WHERE run_id = $1 AND seq = $5 AND NOT $14::boolean AND EXISTS (SELECT 1 FROM held)
        ), sighting AS (
            INSERT INTO imgpipe_sighting (run_id, host, sha256, count, keys)
            SELECT $1, $15::text, $16::text, $17::integer, $18::text WHERE $15::text IS NOT NULL AND EXISTS (SELECT 1 FROM held)
            ON CONFLICT (run_id, host, sha256) DO UPDATE SET count = excluded.count, keys = excluded.keys
        ), flagged AS (
            UPDATE imgpipe_item SET placeholder = true
            WHERE run_id = $1 AND key = ANY($19::text[]) AND EXISTS (SELECT 1 FROM held)
        )
        SELECT count(*) AS held FROM held
        """

    // MARK: - DedupFloor

    /// The runner's sequence numbers count from 1 (`{index}`), the database's from 0.
    static func databaseSeq(_ seq: Int) -> String { String(seq - 1) }

    public func isClear(below seq: Int) -> Bool { core.isClear(below: seq) }

    public func watch(_ seq: Int, then: @escaping @Sendable () -> Void) {
        // Stopped once the session is over: nothing is left to wait.
        if core.stopped.withLock({ $0 }) { return }
        core.watched.withLock { $0 = (seq, then) }
        wake.signal()
    }

    public func left(_ seq: Int, key: String) {
        // Its end is written only while its chunk is held: one lost is another worker's.
        guard ledger.claim(of: key) != nil else { return }
        core.left.withLock { $0[seq] = Date() }
        core.passed(seq)
    }

    // MARK: - DedupLedger

    public func kept(sha256: String, except key: String?) throws -> (key: String, seq: Int)? {
        try core.shared.withLock { shared in
            try shared.connection.execute(
                Self.keptSQL, [String(shared.runId), sha256, key]
            ).first.flatMap { row in row["key"].map { ($0, Int(row.int("seq") ?? 0) + 1) } }
        }
    }

    public func matches(sha256: String?, phash: UInt64?, within distance: Int) throws -> [DedupMatch] {
        let probes = (phash.map { NearHashIndex<Int>.bands(of: $0) } ?? []).map { band in
            postgresTextArray(NearHashIndex<Int>.probes(of: band, radius: distance / 4).map { String($0) })
        }
        let rows = try core.shared.withLock { shared in
            try shared.connection.execute(
                Self.matchesSQL,
                [String(shared.runId)] + (probes.isEmpty ? ["{}", "{}", "{}", "{}"] : probes)
                    + [String(Int64(bitPattern: phash ?? 0)), String(phash == nil ? -1 : distance), sha256])
        }.all
        return rows.compactMap { row -> DedupMatch? in
            guard let key = row["key"], let seq = row.int("seq") else { return nil }
            var apart: Int?
            if let phash, let stored = row.int("phash") { apart = (UInt64(bitPattern: stored) ^ phash).nonzeroBitCount }
            return DedupMatch(
                key: key, seq: Int(seq) + 1, sha256: row["sha256"], distance: apart.flatMap { $0 <= distance ? $0 : nil },
                colour: row["thumbhash"].flatMap(ImageFingerprint.averageColour(ofThumbHash:)))
        }
    }

    public func sighting(host: String, sha256: String) throws -> (count: Int, keys: [String])? {
        try core.shared.withLock { shared in
            try shared.connection.execute(
                "SELECT count, keys FROM imgpipe_sighting WHERE run_id = $1 AND host = $2 AND sha256 = $3",
                [String(shared.runId), host, sha256]
            ).first.map { row in
                let keys = (try? JSONDecoder().decode([String].self, from: Data((row["keys"] ?? "[]").utf8))) ?? []
                return (Int(row.int("count") ?? 0), keys)
            }
        }
    }

    public func unkeep(seq: Int) throws {
        try core.shared.withLock { shared in
            _ = try shared.connection.execute(
                "DELETE FROM imgpipe_kept WHERE run_id = $1 AND seq = $2", [String(shared.runId), Self.databaseSeq(seq)])
        }
    }

    public func judged(_ judgement: DedupJudgement) throws {
        guard let chunk = ledger.claim(of: judgement.key) else {
            throw SharedWorkerError("the item's chunk is not this worker's any more: its verdict is left to its new holder")
        }
        let phash = judgement.kept?.fingerprint?.perceptualHash?.bits
        let bands: [String?] = phash.map { NearHashIndex<Int>.bands(of: $0).map { String($0) } } ?? [nil, nil, nil, nil]
        let sighting = judgement.sighting
        let keys = sighting.map { String(decoding: (try? JSONEncoder().encode($0.keys)) ?? Data("[]".utf8), as: UTF8.self) }
        let held = try core.shared.withLock { shared in
            try shared.connection.execute(
                Self.judgedSQL,
                [
                    String(shared.runId), String(chunk.id), shared.worker, String(chunk.token),
                    Self.databaseSeq(judgement.seq), judgement.key, judgement.kept?.sha256,
                    phash.map { String(Int64(bitPattern: $0)) },
                ] + bands + [
                    judgement.kept?.fingerprint?.thumbhash, judgement.kept == nil ? "false" : "true",
                    sighting?.host, sighting?.sha256, sighting.map { String($0.count) }, keys,
                    postgresTextArray(sighting?.flagging ?? []),
                ]
            ).first?.int("held")
        }
        guard held == 1 else { throw SharedRun.SharedRunError.leaseLost(chunk: chunk.id) }
        core.passed(judgement.seq)
    }
}
