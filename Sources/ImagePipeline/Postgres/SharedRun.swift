import Foundation
import PipelineKit

/// One worker's view of a run shared through PostgreSQL: joining (or creating) the run,
/// listing the feed under the lister's lease, claiming chunks of consecutive items under
/// leases, renewing them, rescuing expired ones, and writing results fenced by the lease.
///
/// The rules, each against a failure seen in other PostgreSQL-backed queues:
/// - a claim is one `UPDATE … FROM (SELECT … ORDER BY id LIMIT <literal> FOR UPDATE SKIP
///   LOCKED)` over a partial index of pending chunks: no two workers get one chunk, and the
///   plan is an index scan that stops at the limit (the limit is a literal in the SQL text,
///   never a bound parameter);
/// - a rescue puts back only chunks that are still `leased` and expired, checked inside the
///   `UPDATE` itself, so a chunk finished a moment before is never rewritten;
/// - every write of a worker locks its chunk row and checks (owner, token, unexpired lease)
///   in the same transaction: a worker stopped past its lease has its late writes refused,
///   and an item is written only from `pending` (never done and then failed);
/// - `status` adds per-chunk counters; it never counts item rows.
///
/// One connection, used by one thread at a time: a worker's stages each hold their own.
public final class SharedRun: @unchecked Sendable {
    // @unchecked: `connection` is used by one thread at a time (the owner's contract).
    public let connection: PostgresConnection
    public let runId: Int64
    public let uuid: String
    /// `host:pid`, the worker's name in leases and `status`.
    public let worker: String
    public let leaseSeconds: Double
    public let chunkSize: Int
    /// The run's `--limit`: the lister lists at most this many items.
    public let itemLimit: Int?
    /// This connection and its siblings', for `abandonConnections()`.
    private let family: PostgresConnectionFamily
    /// With `resume --retry-failed`: failed items left as they are because their chunk is
    /// still being worked on (only the failed items of finished chunks are put back).
    public private(set) var failedOutOfReach = 0

    /// A claim of a chunk: the chunk and the lease token it was claimed under (its items are
    /// claimed with it, its lease is fenced by `token`).
    public struct Chunk: Sendable, Hashable {
        public let id: Int64
        public let token: Int64
        public let firstSeq: Int64
        public let lastSeq: Int64
        public let items: Int
    }

    /// An item of a claimed chunk still to be done, as its feed listed it.
    public struct Item: Sendable, Equatable {
        public let seq: Int64
        public let item: FeedItem
        public var key: String { item.key }

        /// The item ready for the runner: its location expanded, and numbered as the run
        /// numbered it (the lister's `seq` counts from 0, `{index}` from 1).
        func numbered(_ environment: Environment) -> FeedItem {
            var ready = item.fromSharedState(environment)
            ready.position = Int(seq) + 1
            return ready
        }
    }

    /// How an item ended.
    public struct Outcome: Sendable {
        public enum Status: String, Sendable { case done, failed, skipped }
        public let seq: Int64
        public let status: Status
        public let reason: String?
        public let message: String?
        /// Tier, outputs and deliveries as JSON (`SharedItemDetail`), for `export`.
        public let detail: String?
        /// Attempts the worker made (nil: one).
        public let attempts: Int?
        /// What the item adds to the run's `status` counters (`SharedItemDetail.tally`).
        public let tally: [String: Int]

        public init(
            seq: Int64, status: Status, reason: String? = nil, message: String? = nil, detail: String? = nil,
            attempts: Int? = nil, tally: [String: Int] = [:]
        ) {
            self.seq = seq
            self.status = status
            self.reason = reason
            self.message = message
            self.detail = detail
            self.attempts = attempts
            self.tally = tally
        }

        /// This outcome with the item's record from the worker's journal attached.
        func with(_ record: ExportRecord?) -> Outcome {
            guard let record else { return self }
            let detail = SharedItemDetail(record)
            return Outcome(
                seq: seq, status: status, reason: reason, message: message, detail: detail.text,
                attempts: record.attempts, tally: detail.tally)
        }
    }

    public enum SharedRunError: Error, CustomStringConvertible, Equatable {
        /// The lease this write was fenced by is gone (expired, rescued, claimed again).
        case leaseLost(chunk: Int64)
        case listerLeaseLost
        /// The latest run of the pipeline finished; a new one takes `run --new`.
        case runFinished(id: Int64)
        /// The run was made by a worker whose outputs would differ (versions, filters).
        case fingerprintDiffers(id: Int64, fields: [String])
        /// `run` found an unfinished run (`run --new` abandons it; `resume` or `work` joins it).
        case unfinishedRun(id: Int64)
        /// `resume` found no unfinished run.
        case nothingToResume

        public var description: String {
            switch self {
            case .leaseLost(let chunk):
                return "the lease on chunk \(chunk) was lost (expired or taken over): the write was refused"
            case .listerLeaseLost: return "the lister's lease was lost: another worker lists the feed now"
            case .runFinished(let id):
                return "run #\(id) of this pipeline already finished; `imgpipe work --new` (one worker) starts another"
            case .unfinishedRun(let id):
                return "run #\(id) of this pipeline is unfinished: continue it with `imgpipe resume` or `imgpipe work`, "
                    + "or pass --new to abandon it and start over"
            case .nothingToResume:
                return "no unfinished run of this pipeline to resume; start one with `imgpipe run` or `imgpipe work`"
            case .fingerprintDiffers(let id, let fields):
                return "run #\(id) of this pipeline's name was made with other \(fields.joined(separator: ", ")): "
                    + "this worker would not do the same run, so it does not join (`imgpipe run --new` abandons an "
                    + "unfinished run and starts one of this pipeline; `imgpipe work --new` does after a finished one)"
            }
        }
    }

    /// Which run a worker takes part in.
    public enum Joining: Sendable, Equatable {
        /// `work`: the latest unfinished run, else the first (a finished one is not started again).
        case work
        /// `work --new`: as `work`, and a new run when the latest has finished.
        case workOrAfterFinished
        /// `run`: a new run of at most `limit` items (`--limit`: the lister stops there);
        /// an unfinished one refuses (`unfinishedRun`) unless `replace` abandons it (`run --new`).
        case fresh(replace: Bool, limit: Int? = nil)
        /// `resume`: the latest unfinished run; refuses (`nothingToResume`) when there is none.
        /// `retryFailed` (`--retry-failed`) first puts the failed items of its finished chunks
        /// back to pending, reopening a finished run that has failures. `refreshFeed`
        /// (`--refresh-feed`) lists the feed again from its start, adding only the items the
        /// run does not have (a finished run is reopened for it; a listing that fails leaves
        /// the run as complete as it was). `retryReasons` (`--retry-failed=REASON,…`) puts
        /// back only the failed items of these reasons.
        case resume(retryFailed: Bool, refreshFeed: Bool = false, retryReasons: Set<FailureReason>? = nil)
    }

    /// Makes the tables if needed, then takes part in a run of `pipelineName` as `joining`
    /// says. Workers that race here serialise on an advisory lock per pipeline: with `work`
    /// exactly one creates the run and the others join it; none starts a second run after
    /// the first finished (an unfinished one is joined even with `--new`, so workers racing
    /// with it make one run too).
    public init(
        connection: PostgresConnection, pipelineName: String, fingerprint: [String: String],
        chunkSize: Int = 500, leaseSeconds: Double = 60, worker: String? = nil, joining: Joining = .work
    ) throws {
        self.connection = connection
        family = PostgresConnectionFamily(connection)
        self.leaseSeconds = leaseSeconds
        // host:pid and a nonce: a container restarted in place is pid 1 on the same host
        // again, and must not renew (or write under) the leases of the process it replaces.
        self.worker = worker ?? "\(ProcessInfo.processInfo.hostName):\(getpid()):\(UUID().uuidString.prefix(6).lowercased())"
        try SharedRunSchema.make(on: connection)
        let fingerprintText = String(decoding: try JSONEncoder.sorted.encode(fingerprint), as: UTF8.self)
        // Made before the transaction: when its commit went through but the answer was lost,
        // the replay finds the run it made (instead of taking it for another's unfinished
        // run, refusing to start, or with `--new` abandoning it for a third).
        let newUUID = UUID().uuidString.lowercased()
        var outOfReach = 0
        let joined = try connection.transaction { () -> PostgresRow in
            try connection.execute("SELECT pg_advisory_xact_lock(hashtext('imgpipe-run:' || $1))", [pipelineName])
            if let made = try connection.execute(
                """
                SELECT id, uuid, state, fingerprint, chunk_size, item_limit FROM imgpipe_run WHERE uuid = $1
                """, [newUUID]
            ).first {
                return made
            }
            let latest = try connection.execute(
                """
                SELECT id, uuid, state, fingerprint, chunk_size, item_limit FROM imgpipe_run
                WHERE pipeline_name = $1 AND state <> 'abandoned' ORDER BY id DESC LIMIT 1
                """, [pipelineName]
            ).first
            var unfinished = latest.flatMap { $0["state"] == "finished" ? nil : $0 }
            if case .resume(retryFailed: true, _, let reasons) = joining, let latest {
                let id = latest.int("id") ?? 0
                if try Self.requeueFailed(runId: id, reasons: reasons, on: connection) > 0 { unfinished = latest }
                outOfReach = Int(
                    try connection.execute(
                        """
                        SELECT count(*) AS n FROM imgpipe_item i JOIN imgpipe_chunk c ON c.run_id = i.run_id AND c.id = i.chunk
                        WHERE i.run_id = $1 AND i.status = 'failed' AND c.state <> 'done'
                        """, [String(id)]
                    ).first?.int("n") ?? 0)
            }
            if case .resume(_, refreshFeed: true, _) = joining, let latest {
                // Listed again from the start; `refreshing` remembers that the feed was
                // complete, for a listing that fails.
                try connection.execute(
                    """
                    UPDATE imgpipe_run SET refreshing = feed_complete OR refreshing, feed_complete = false, feed_cursor = NULL,
                        state = 'running', finished_at = NULL, refresh_error = NULL
                    WHERE id = $1
                    """, [String(latest.int("id") ?? 0)])
                unfinished = latest
            }
            switch joining {
            case .resume where unfinished == nil:
                if let latest { throw SharedRunError.runFinished(id: latest.int("id") ?? 0) }
                throw SharedRunError.nothingToResume
            case .fresh(let replace, _) where unfinished != nil:
                let id = unfinished?.int("id") ?? 0
                guard replace else { throw SharedRunError.unfinishedRun(id: id) }
                try connection.execute(
                    "UPDATE imgpipe_run SET state = 'abandoned' WHERE id = $1 AND state <> 'finished'", [String(id)])
            default: break
            }
            let joins: Bool
            switch joining {
            case .work: joins = latest != nil
            case .workOrAfterFinished, .resume: joins = unfinished != nil
            case .fresh: joins = false
            }
            if joins, let latest {
                let id = latest.int("id") ?? 0
                // Checked first, finished or not: a run of other filters, or of a pipeline of the
                // same name, is not this pipeline's run to join, nor its "nothing to do".
                let recorded =
                    (try? JSONDecoder().decode([String: String].self, from: Data((latest["fingerprint"] ?? "").utf8))) ?? [:]
                let differing = Set(recorded.keys).union(fingerprint.keys).sorted().filter { key in
                    recorded[key] != fingerprint[key] && !(recorded[key] == nil && SharedWorker.recordedSince.contains(key))
                }
                if !differing.isEmpty { throw SharedRunError.fingerprintDiffers(id: id, fields: differing) }
                if latest["state"] == "finished" && unfinished == nil { throw SharedRunError.runFinished(id: id) }
                return latest
            }
            var limit: String?
            if case .fresh(_, let itemLimit) = joining { limit = itemLimit.map(String.init) }
            return try connection.execute(
                """
                INSERT INTO imgpipe_run (uuid, pipeline_name, fingerprint, state, chunk_size, item_limit)
                VALUES ($1, $2, $3, 'running', $4, $5::bigint) RETURNING id, uuid, state, fingerprint, chunk_size, item_limit
                """, [newUUID, pipelineName, fingerprintText, String(chunkSize), limit]
            ).first!
        }
        runId = joined.int("id") ?? 0
        failedOutOfReach = outOfReach
        itemLimit = joined.int("item_limit").map(Int.init)
        uuid = joined["uuid"] ?? ""
        self.chunkSize = Int(joined.int("chunk_size") ?? Int64(chunkSize))
        try connection.execute(
            """
            INSERT INTO imgpipe_worker (run_id, name) VALUES ($1, $2)
            ON CONFLICT (run_id, name) DO UPDATE SET heartbeat_at = now()
            """, [String(runId), self.worker])
    }

    /// Puts the failed items of the run's finished chunks back to pending (their chunks
    /// pending again, their counters down) and reopens the run; returns how many. Items of
    /// chunks still pending or leased are left: a worker may be ending them now. With
    /// `reasons`, only the failed items of these reasons.
    static func requeueFailed(
        runId: Int64, reasons: Set<FailureReason>? = nil, on connection: PostgresConnection
    ) throws -> Int {
        let run = String(runId)
        // The names are the enum's own (`download`, …): written into the statement as they are.
        let only = reasons.map { " AND reason IN (" + $0.map { "'\($0.rawValue)'" }.sorted().joined(separator: ", ") + ")" } ?? ""
        let requeued = try connection.execute(
            """
            WITH requeued AS (
                UPDATE imgpipe_item SET status = 'pending', reason = NULL, message = NULL, detail = NULL, tally = NULL
                WHERE run_id = $1 AND status = 'failed'\(only)
                  AND chunk IN (SELECT id FROM imgpipe_chunk WHERE run_id = $1 AND state = 'done')
                RETURNING chunk, seq
            ), per AS (SELECT chunk, count(*) AS n FROM requeued GROUP BY chunk)
            UPDATE imgpipe_chunk c SET failed = c.failed - per.n, state = 'pending',
                -- from the items' own tallies, the requeued ones left out (this statement
                -- still sees them as they were)
                tally = \(SharedRunSchema.chunkTally(itemsWhere: "i.seq NOT IN (SELECT seq FROM requeued)"))
            FROM per WHERE c.run_id = $1 AND c.id = per.chunk
            RETURNING per.n
            """, [run]
        ).all.reduce(0) { $0 + Int($1.int("n") ?? 0) }
        if requeued > 0 {
            try connection.execute("UPDATE imgpipe_run SET state = 'running', finished_at = NULL WHERE id = $1", [run])
        }
        return requeued
    }

    private init(sibling of: SharedRun, connection: PostgresConnection) {
        self.connection = connection
        family = of.family
        family.add(connection)
        runId = of.runId
        uuid = of.uuid
        worker = of.worker
        leaseSeconds = of.leaseSeconds
        chunkSize = of.chunkSize
        itemLimit = of.itemLimit
    }

    /// The same worker of the same run on a connection of its own, for another thread.
    public func sibling() throws -> SharedRun {
        try SharedRun(
            sibling: self,
            connection: PostgresConnection(
                url: connection.url,
                idleInTransactionTimeoutSeconds: connection.idleInTransactionTimeout))
    }

    /// Gives up this worker's connections, this one and its siblings' (from any thread): the
    /// calls under way on them fail now, and every later one at once (`PostgresConnection.abandon`).
    public func abandonConnections() { family.abandon() }

    private var run: String { String(runId) }

    /// What a chunk that is not leased holds of a lease (the table's CHECK requires it).
    static let noLease = "owner = NULL, token = NULL, lease_expires = NULL"
    /// The state a chunk given back takes: `done` when every item in it has ended (its
    /// holder recorded them all, then lost the write that marks it done, or was stopped
    /// before it), else `pending` for another worker. Without it a chunk of ended items
    /// would wait, `pending`, for a worker to claim it only to mark it done, and the run
    /// would stay unfinished meanwhile.
    static let pendingUnlessEnded = "CASE WHEN done + failed + skipped >= items THEN 'done' ELSE 'pending' END"
    private var lease: String { String(leaseSeconds) }

    // MARK: - claims and leases

    /// Claims up to `count` pending chunks (oldest first), each under a new lease token.
    /// Whole chunks, as listed: `claimShare` is the worker's claim, sized to the work left.
    public func claim(_ count: Int = 1) throws -> [Chunk] {
        // Not replayed after a lost connection: the first claim may have committed, and a
        // second would lease a chunk this worker never hears of.
        try connection.execute(Self.claimSQL(count), [run, worker, lease], idempotent: false).all.map(Self.chunk)
    }

    /// The fewest items a claim is cut down to (`claimShare`): below this, a claim's round
    /// trips would cost more than the imbalance they save.
    public static let smallestShare = 8

    /// Claims the oldest pending chunk, or its first part when the chunk holds more than this
    /// worker's share of the work left: the items not claimed yet divided by twice the live
    /// workers (those whose heartbeat is younger than a lease), never fewer than
    /// `smallestShare`. The rest stays pending under the chunk's own number, so the next
    /// claim takes up where this one stopped; the part claimed becomes a chunk of its own.
    ///
    /// Without it, chunks of 500 gave the tail of a run to whoever claimed last: two workers
    /// over 600 items did 500 and 100. Cut to the work left, claims shrink as the run nears
    /// its end and the workers finish together. The work left is summed over the first
    /// `2 × workers + 1` pending chunks only (a bound on the question's cost at any size):
    /// past that many full chunks, no claim is cut. They are read from the chunk picked on:
    /// the pending index's entries before it are chunks claimed long ago, whose dead
    /// entries a scan from the start would step over again on every claim.
    ///
    /// One transaction: the chunk's row is locked first, then the run's (for the new chunk's
    /// number), then the items moved; the lister takes the run's row before any item, so
    /// the two never wait on each other in a cycle.
    public func claimShare() throws -> Chunk? {
        try connection.transaction { () -> Chunk? in
            guard
                let picked = try connection.execute(
                    """
                    WITH picked AS (
                        SELECT id, items - done - failed - skipped AS open FROM imgpipe_chunk
                        WHERE run_id = $1 AND state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED),
                    live AS (
                        SELECT greatest(1, count(*)) AS workers FROM imgpipe_worker w
                        WHERE w.run_id = $1 AND w.heartbeat_at > now() - make_interval(secs => $2::double precision))
                    SELECT p.id, p.open, live.workers,
                        (SELECT coalesce(sum(items - done - failed - skipped), 0) FROM (
                            SELECT items, done, failed, skipped FROM imgpipe_chunk
                            WHERE run_id = $1 AND state = 'pending' AND id >= p.id
                            ORDER BY id LIMIT 2 * live.workers + 1) s) AS left
                    FROM picked p, live
                    """, [run, lease]
                ).first, let id = picked.int("id")
            else { return nil }
            let open = Int(picked.int("open") ?? 0)
            // At least 1: `greatest` above floors the count of live workers.
            let workers = Int(picked.int("workers") ?? 1)
            let left = picked.int("left")
            let share = Self.share(ofLeft: Int(left ?? 0), workers: workers)
            if open > share, let part = try split(chunk: id, after: share) { return part }
            return try connection.execute(
                """
                UPDATE imgpipe_chunk SET state = 'leased', owner = $3, token = nextval('imgpipe_lease_token'),
                    lease_expires = now() + make_interval(secs => $4::double precision)
                WHERE run_id = $1 AND id = $2
                RETURNING id, token, first_seq, last_seq, items
                """, [run, String(id), worker, lease]
            ).first.map(Self.chunk)
        }
    }

    /// A worker's share of `left` items not claimed yet, among `workers` live workers.
    static func share(ofLeft left: Int, workers: Int) -> Int {
        let even = (left + 2 * workers - 1) / (2 * workers)
        return max(smallestShare, even)
    }

    /// Within `claimShare`'s transaction, the chunk `id` locked: its first `share` pending
    /// items (and any ended item among them) become a new chunk, leased to this worker; the
    /// rest stays chunk `id`, pending. Both chunks' counters and tallies are made anew from
    /// their items (a chunk given back half done has ended items on either side).
    private func split(chunk id: Int64, after share: Int) throws -> Chunk? {
        guard
            let cut = try connection.execute(
                """
                SELECT seq FROM imgpipe_item WHERE run_id = $1 AND chunk = $2 AND status = 'pending'
                ORDER BY seq OFFSET $3::bigint LIMIT 1
                """, [run, String(id), String(share - 1)]
            ).first?.int("seq"),
            let head = try connection.execute(
                "UPDATE imgpipe_run SET next_chunk = next_chunk + 1 WHERE id = $1 RETURNING next_chunk - 1 AS id", [run]
            ).first?.int("id")
        else { return nil }
        try connection.execute(
            "UPDATE imgpipe_item SET chunk = $3 WHERE run_id = $1 AND chunk = $2 AND seq <= $4",
            [run, String(id), String(head), String(cut)])
        let counted = """
            first_seq = m.first, last_seq = m.last, items = m.n, done = m.done, failed = m.failed, skipped = m.skipped,
            tally = \(SharedRunSchema.chunkTally())
            FROM (SELECT min(seq) AS first, max(seq) AS last, count(*) AS n, count(*) FILTER (WHERE status = 'done') AS done,
                         count(*) FILTER (WHERE status = 'failed') AS failed,
                         count(*) FILTER (WHERE status = 'skipped') AS skipped
                  FROM imgpipe_item WHERE run_id = $1 AND chunk = $2) m
            """
        try connection.execute("UPDATE imgpipe_chunk c SET \(counted) WHERE c.run_id = $1 AND c.id = $2", [run, String(id)])
        try connection.execute(
            """
            INSERT INTO imgpipe_chunk (run_id, id, first_seq, last_seq, items, state, owner, token, lease_expires)
            VALUES ($1, $2, 0, 0, 0, 'leased', $3, nextval('imgpipe_lease_token'),
                    now() + make_interval(secs => $4::double precision))
            """, [run, String(head), worker, lease])
        return try connection.execute(
            """
            UPDATE imgpipe_chunk c SET \(counted) WHERE c.run_id = $1 AND c.id = $2
            RETURNING c.id, c.token, c.first_seq, c.last_seq, c.items
            """, [run, String(head)]
        ).first.map(Self.chunk)
    }

    /// The claim statement, with `count` written into the SQL as a literal.
    public static func claimSQL(_ count: Int) -> String {
        """
        UPDATE imgpipe_chunk c
        SET state = 'leased', owner = $2, token = nextval('imgpipe_lease_token'),
            lease_expires = now() + make_interval(secs => $3::double precision)
        FROM (SELECT run_id, id FROM imgpipe_chunk
              WHERE run_id = $1 AND state = 'pending'
              ORDER BY id LIMIT \(max(1, count)) FOR UPDATE SKIP LOCKED) picked
        WHERE c.run_id = picked.run_id AND c.id = picked.id
        RETURNING c.id, c.token, c.first_seq, c.last_seq, c.items
        """
    }

    private static func chunk(_ row: PostgresRow) -> Chunk {
        Chunk(
            id: row.int("id") ?? 0, token: row.int("token") ?? 0, firstSeq: row.int("first_seq") ?? 0,
            lastSeq: row.int("last_seq") ?? 0, items: Int(row.int("items") ?? 0))
    }

    /// The chunk's items not yet finished, in feed order.
    public func items(of chunk: Chunk) throws -> [Item] {
        try connection.execute(
            """
            SELECT seq, key, location, metadata, name_key, name_stem, is_local, from_fallback FROM imgpipe_item
            WHERE run_id = $1 AND chunk = $2 AND status = 'pending' ORDER BY seq
            """, [run, String(chunk.id)]
        ).all.map { row in
            Item(
                seq: row.int("seq") ?? 0,
                item: FeedItem(
                    key: row["key"] ?? "", location: row["location"] ?? "", metadata: row["metadata"],
                    nameKey: row["name_key"] ?? "", nameStem: row["name_stem"] ?? "",
                    fromFallback: row.bool("from_fallback"), isLocal: row.bool("is_local")))
        }
    }

    /// Renews the leases `tokens` (the chunks this worker knows it holds; nil: all it holds)
    /// and the lister's lease, and records its heartbeat; returns the chunks it still holds
    /// (a chunk missing from the answer was rescued: stop working on it). Only known tokens
    /// are renewed: a lease this worker does not know of (a claim whose answer was lost)
    /// runs out and is rescued. Each statement commits alone (never wrap them in one
    /// transaction): `record` locks a chunk, then the worker row.
    @discardableResult
    public func heartbeat(tokens: [Int64]? = nil) throws -> [Int64: Int64] {
        try connection.execute("UPDATE imgpipe_worker SET heartbeat_at = now() WHERE run_id = $1 AND name = $2", [run, worker])
        let held = try connection.execute(
            """
            UPDATE imgpipe_chunk SET lease_expires = now() + make_interval(secs => $3::double precision)
            WHERE run_id = $1 AND state = 'leased' AND owner = $2 AND lease_expires > now()
              AND ($4::bigint[] IS NULL OR token = ANY($4::bigint[]))
            RETURNING id, token
            """, [run, worker, lease, tokens.map { postgresTextArray($0.map(String.init)) }])
        try connection.execute(
            """
            UPDATE imgpipe_run SET lister_expires = now() + make_interval(secs => $3::double precision)
            WHERE id = $1 AND lister = $2 AND lister_expires > now()
            """, [run, worker, lease])
        return Dictionary(uniqueKeysWithValues: held.all.map { ($0.int("id") ?? 0, $0.int("token") ?? 0) })
    }

    /// SQL, on the run row `r`: some chunk of the run is pending or leased (each looked up
    /// through its partial index, no chunk row counted).
    private static let chunksOpen = """
        (EXISTS (SELECT 1 FROM imgpipe_chunk c WHERE c.run_id = r.id AND c.state = 'pending')
         OR EXISTS (SELECT 1 FROM imgpipe_chunk c WHERE c.run_id = r.id AND c.state = 'leased'))
        """

    /// Marks the run finished if it is done: its feed listed and no chunk pending or leased
    /// (a refresh may have reopened it since the caller looked). Returns whether it is
    /// finished, by this call or before (a run another worker marked; an abandoned one is not).
    ///
    /// The run's row is locked first, by a statement of its own: the marking statement then
    /// starts after every transaction that held the row has committed, and reads the chunks
    /// as they left them. (Read by the marking statement while it waited for the lock, they
    /// came from a snapshot taken before: a `resume --retry-failed` that put chunks back to
    /// pending, then reopened the run, could have its run marked finished over them.) The
    /// state is read again after the marking, for the same reason: when two workers ended at
    /// once, the second's marking found the run finished by the first, while its snapshot
    /// still said `running`, and that worker exited 1, "not finished (0 items pending)".
    @discardableResult
    public func markFinished() throws -> Bool {
        try connection.transaction {
            let state = try connection.execute("SELECT state FROM imgpipe_run WHERE id = $1 FOR UPDATE", [run]).first?["state"]
            guard state == "running" else { return state == "finished" }
            let marked = try connection.execute(
                """
                UPDATE imgpipe_run r SET state = 'finished', finished_at = now()
                WHERE r.id = $1 AND r.state = 'running' AND r.feed_complete AND NOT \(Self.chunksOpen)
                """, [run])
            return marked.affected == 1
        }
    }

    /// Whether the feed is listed to its end and whether any chunk is still pending or
    /// leased: what a worker waiting for the end asks, a few times a second.
    public func ending() throws -> (feedComplete: Bool, chunksOpen: Bool) {
        let row = try connection.execute(
            "SELECT r.feed_complete, \(Self.chunksOpen) AS open FROM imgpipe_run r WHERE r.id = $1",
            [run]
        ).first
        return (row?.bool("feed_complete") == true, row?.bool("open") ?? true)
    }

    /// The run's state (`running`, `finished`, `abandoned`, …).
    public func state() throws -> String? {
        try connection.execute("SELECT state FROM imgpipe_run WHERE id = $1", [run]).first?["state"]
    }

    /// Puts back every chunk of the run whose lease expired; the state check is in the
    /// `UPDATE` itself, so a chunk finished (or renewed) meanwhile is left alone. Returns
    /// the chunks put back.
    @discardableResult
    public func rescueExpired() throws -> [Int64] {
        // SKIP LOCKED: a chunk whose holder is inside a fenced write (even one stalled there)
        // is left for the next rescue instead of holding this worker up.
        try connection.execute(
            """
            UPDATE imgpipe_chunk c SET state = \(Self.pendingUnlessEnded), \(Self.noLease)
            FROM (SELECT run_id, id FROM imgpipe_chunk
                  WHERE run_id = $1 AND state = 'leased' AND lease_expires < now() FOR UPDATE SKIP LOCKED) expired
            WHERE c.run_id = expired.run_id AND c.id = expired.id AND c.state = 'leased' AND c.lease_expires < now()
            RETURNING c.id
            """, [run]
        ).all.compactMap { $0.int("id") }
    }

    /// Gives `chunk` back at once (its finished items stay finished): an interrupted worker
    /// hands its unfinished chunks to the others instead of letting the lease run out.
    public func handBack(_ chunk: Chunk) throws {
        let rows = try connection.execute(
            """
            UPDATE imgpipe_chunk SET state = \(Self.pendingUnlessEnded), \(Self.noLease)
            WHERE run_id = $1 AND id = $2 AND state = 'leased' AND owner = $3 AND token = $4
            """, [run, String(chunk.id), worker, String(chunk.token)])
        if rows.affected == 0 { throw SharedRunError.leaseLost(chunk: chunk.id) }
    }

    // MARK: - fenced writes

    /// Records how items of `chunk` ended, in one transaction fenced by the chunk's lease:
    /// refused with `leaseLost` when the lease is not this worker's any more (or expired).
    /// Only items still `pending` are written; the chunk's counters grow by what was.
    /// Returns how many items were written.
    @discardableResult
    public func record(_ outcomes: [Outcome], in chunk: Chunk) throws -> Int {
        guard !outcomes.isEmpty else { return 0 }
        return try connection.transaction { () -> Int in
            try fence(chunk)
            let written = try connection.execute(
                """
                UPDATE imgpipe_item i SET status = o.status, reason = o.reason, message = o.message, detail = o.detail,
                    attempts = coalesce(o.attempts, i.attempts + 1), tally = o.tally::jsonb
                FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::integer[], $9::text[])
                    AS o(seq, status, reason, message, detail, attempts, tally)
                WHERE i.run_id = $1 AND i.chunk = $2 AND i.seq = o.seq AND i.status = 'pending'
                RETURNING i.seq, i.status
                """,
                [
                    run, String(chunk.id), postgresTextArray(outcomes.map { String($0.seq) }),
                    postgresTextArray(outcomes.map(\.status.rawValue)),
                    postgresTextArray(outcomes.map(\.reason)), postgresTextArray(outcomes.map(\.message)),
                    postgresTextArray(outcomes.map(\.detail)), postgresTextArray(outcomes.map { $0.attempts.map(String.init) }),
                    postgresTextArray(outcomes.map { SharedItemDetail.tallyText($0.tally) }),
                ])
            let statuses = written.all.compactMap { $0["status"] }
            // What the written items add to the chunk's tally (one row per chunk: no two
            // workers wait on one counter row).
            let writtenSeqs = Set(written.all.compactMap { $0.int("seq") })
            var added: [String: Int] = [:]
            for outcome in outcomes where writtenSeqs.contains(outcome.seq) { added.merge(outcome.tally, uniquingKeysWith: +) }
            try connection.execute(
                """
                UPDATE imgpipe_chunk SET done = done + $3, failed = failed + $4, skipped = skipped + $5,
                    tally = CASE WHEN $6::jsonb = '{}'::jsonb THEN tally ELSE \(Self.tallySum("tally", "$6::jsonb")) END
                WHERE run_id = $1 AND id = $2
                """,
                [
                    run, String(chunk.id), String(statuses.count { $0 == "done" }),
                    String(statuses.count { $0 == "failed" }), String(statuses.count { $0 == "skipped" }),
                    SharedItemDetail.tallyText(added),
                ])
            // The worker's count, in the same transaction: a replay after a lost connection
            // counts exactly what it wrote. Lock order is chunk, then worker row; the
            // heartbeat takes them in the other order but commits each statement alone, so
            // it never holds one while waiting for the other.
            if !statuses.isEmpty {
                try connection.execute(
                    "UPDATE imgpipe_worker SET items_done = items_done + $3 WHERE run_id = $1 AND name = $2",
                    [run, worker, String(statuses.count)])
            }
            return statuses.count
        }
    }

    /// Marks `chunk` done when every item in it has ended (fenced like `record`); returns
    /// false, leaving it leased, while some item is still pending.
    @discardableResult
    public func complete(_ chunk: Chunk) throws -> Bool {
        try connection.transaction {
            try fence(chunk)
            let rows = try connection.execute(
                """
                UPDATE imgpipe_chunk SET state = 'done', \(Self.noLease)
                WHERE run_id = $1 AND id = $2 AND done + failed + skipped >= items
                """, [run, String(chunk.id)])
            return rows.affected == 1
        }
    }

    /// SQL for the key-by-key sum of two JSON objects of counters.
    static func tallySum(_ left: String, _ right: String) -> String {
        """
        (SELECT coalesce(jsonb_object_agg(k, n), '{}'::jsonb) FROM (
            SELECT key AS k, sum(value::bigint) AS n
            FROM (SELECT * FROM jsonb_each_text(\(left)) UNION ALL SELECT * FROM jsonb_each_text(\(right))) e GROUP BY key) s)
        """
    }

    /// Locks the chunk's row for this transaction if, and only if, this worker's lease on
    /// it stands: a rescuer's `UPDATE` waits for the lock, then sees the result.
    func fence(_ chunk: Chunk) throws {
        let held = try connection.execute(
            """
            SELECT 1 FROM imgpipe_chunk
            WHERE run_id = $1 AND id = $2 AND state = 'leased' AND owner = $3 AND token = $4 AND lease_expires > now()
            FOR UPDATE
            """, [run, String(chunk.id), worker, String(chunk.token)])
        if held.count == 0 { throw SharedRunError.leaseLost(chunk: chunk.id) }
    }

    // MARK: - output names

    /// Claims output names for items of the run, for the whole run: a name belongs to the
    /// first key that claims it, on whichever worker, and stays that key's (claiming it again
    /// for the same key, as a worker that redoes the item does, is no change). Returns the
    /// names of `wanted` that another key holds, with that key. Not fenced by a lease: a name
    /// is the key's, not the worker's.
    public func claimNames(_ wanted: [(name: String, key: String)]) throws -> [String: String] {
        guard !wanted.isEmpty else { return [:] }
        let inserted = try connection.execute(
            """
            INSERT INTO imgpipe_name (run_id, name, key)
            SELECT $1, name, key FROM unnest($2::text[], $3::text[]) AS w(name, key)
            ON CONFLICT (run_id, name) DO NOTHING
            RETURNING name, key
            """, [run, postgresTextArray(wanted.map(\.name)), postgresTextArray(wanted.map(\.key))])
        var held: [String: String] = [:]
        for row in inserted.all { if let name = row["name"], let key = row["key"] { held[name] = key } }
        // The names that were there already (or came first in this batch): who holds them,
        // read by a statement of its own, which sees a name another worker committed while
        // the insert above waited for it (the insert's own snapshot would not).
        let others = Set(wanted.map(\.name)).subtracting(held.keys)
        if !others.isEmpty {
            let owners = try connection.execute(
                "SELECT name, key FROM imgpipe_name WHERE run_id = $1 AND name = ANY($2::text[])",
                [run, postgresTextArray(others.sorted())])
            for row in owners.all { if let name = row["name"], let key = row["key"] { held[name] = key } }
        }
        var taken: [String: String] = [:]
        for claim in wanted where held[claim.name].map({ $0 != claim.key }) == true { taken[claim.name] = held[claim.name] }
        return taken
    }

    // MARK: - listing

    /// Where the lister stopped, and the lease token this worker lists under.
    public struct ListerLease: Sendable {
        public let token: Int64
        /// The cursor the last page was recorded with (nil before the first page).
        public let cursor: String?
        /// Items the run has so far.
        public var items: Int = 0
        /// The feed is listed again (`resume --refresh-feed`) after it was complete.
        public var refreshing = false
    }

    /// Gives up the lister's lease (a lister that stops before the end of the feed), so
    /// another worker can take over at once.
    public func releaseLister(_ lease: ListerLease) throws {
        try connection.execute(
            "UPDATE imgpipe_run SET lister = NULL, lister_expires = NULL WHERE id = $1 AND lister = $2 AND lister_token = $3",
            [run, worker, String(lease.token)])
    }

    /// Takes the lister's lease when nobody holds it (or its holder's expired, or it is this
    /// worker's own, from a take whose answer was lost); nil when another worker lists, or
    /// the feed is already listed to its end.
    public func acquireLister() throws -> ListerLease? {
        try connection.execute(
            """
            UPDATE imgpipe_run SET lister = $2, lister_token = nextval('imgpipe_lease_token'),
                lister_expires = now() + make_interval(secs => $3::double precision)
            WHERE id = $1 AND NOT feed_complete AND (lister IS NULL OR lister_expires < now() OR lister = $2)
            RETURNING lister_token, feed_cursor, next_seq, refreshing
            """, [run, worker, lease], idempotent: false
        ).first.map {
            ListerLease(
                token: $0.int("lister_token") ?? 0, cursor: $0["feed_cursor"], items: Int($0.int("next_seq") ?? 0),
                refreshing: $0.bool("refreshing") == true)
        }
    }

    /// A listing again (`resume --refresh-feed`) that failed leaves the run as complete as
    /// it was: the feed complete again, the lister's lease given up, and why kept for the
    /// `resume` that asked for it (`refreshError`), whichever worker's lister met it.
    public func endRefresh(_ lease: ListerLease, error: String) throws {
        try connection.execute(
            """
            UPDATE imgpipe_run SET feed_complete = true, refreshing = false, lister = NULL, lister_expires = NULL,
                refresh_error = $4
            WHERE id = $1 AND lister = $2 AND lister_token = $3 AND refreshing
            """, [run, worker, String(lease.token), error])
    }

    /// Why the last refresh of the feed failed (nil: it did not, or none was asked for).
    public func refreshError() throws -> String? {
        try connection.execute("SELECT refresh_error FROM imgpipe_run WHERE id = $1", [run]).first?["refresh_error"]
    }

    /// Records one page of the feed in one transaction with the cursor after it: its items
    /// (a key already in the run is left as it is), the chunks they make (at most
    /// `chunkSize` consecutive items each) and whether the feed ended. Fenced by the lister
    /// lease; redoing a page adds nothing. Returns how many items were new, and how many
    /// the run has with them.
    @discardableResult
    public func recordPage(
        _ items: [FeedItem], cursor: String?, complete: Bool,
        lease: ListerLease
    ) throws -> RecordedPage {
        try connection.transaction {
            guard
                let run = try connection.execute(
                    """
                    SELECT next_seq, next_chunk, chunk_size FROM imgpipe_run
                    WHERE id = $1 AND lister = $2 AND lister_token = $3 AND lister_expires > now() FOR UPDATE
                    """, [self.run, worker, String(lease.token)]
                ).first
            else { throw SharedRunError.listerLeaseLost }
            let nextSeq = run.int("next_seq") ?? 0
            let nextChunk = run.int("next_chunk") ?? 0
            let size = Int64(run.int("chunk_size") ?? 500)
            let inserted = try connection.execute(
                """
                WITH page AS (
                    SELECT * FROM unnest($4::text[], $5::text[], $7::text[], $8::text[], $9::text[], $10::boolean[],
                                         $11::boolean[])
                        WITH ORDINALITY AS p(key, location, metadata, name_key, name_stem, is_local, from_fallback, ord)
                ), first AS (
                    SELECT DISTINCT ON (key) * FROM page ORDER BY key, ord
                ), fresh AS (
                    -- Only the items the run does not have are numbered: the numbers (and
                    -- `{index}`) stay consecutive when a page is listed again (a new lister,
                    -- a refresh). The lister's lock on the run row keeps this check true.
                    SELECT f.*, row_number() OVER (ORDER BY ord) AS n FROM first f
                    WHERE NOT EXISTS (SELECT 1 FROM imgpipe_item i WHERE i.run_id = $1 AND i.key = f.key)
                ), added AS (
                    INSERT INTO imgpipe_item (run_id, seq, key, location, metadata, name_key, name_stem, is_local,
                                              from_fallback, chunk, status)
                    SELECT $1, $2::bigint + n - 1, key, location, metadata, name_key, name_stem, is_local, from_fallback,
                           $3::bigint + (n - 1) / $6::bigint, 'pending' FROM fresh
                    ON CONFLICT (run_id, key) DO NOTHING
                    RETURNING seq, chunk
                )
                INSERT INTO imgpipe_chunk (run_id, id, first_seq, last_seq, items, state)
                SELECT $1, chunk, min(seq), max(seq), count(*), 'pending' FROM added GROUP BY chunk
                RETURNING items
                """,
                [
                    self.run, String(nextSeq), String(nextChunk), postgresTextArray(items.map(\.key)),
                    postgresTextArray(items.map(\.location)), String(size), postgresTextArray(items.map(\.metadata)),
                    postgresTextArray(items.map(\.nameKey)), postgresTextArray(items.map(\.nameStem)),
                    postgresTextArray(items.map { $0.isLocal ? "t" : "f" }),
                    postgresTextArray(items.map { $0.fromFallback ? "t" : "f" }),
                ])
            let added = inserted.all.reduce(0) { $0 + Int($1.int("items") ?? 0) }
            let chunks = inserted.count
            let total = try connection.execute(
                """
                UPDATE imgpipe_run SET next_seq = next_seq + $2::bigint, next_chunk = next_chunk + $3::bigint, feed_cursor = $4,
                    feed_complete = $5::boolean, pages_listed = pages_listed + $6::bigint,
                    refreshing = refreshing AND NOT $5::boolean,
                    lister = CASE WHEN $5::boolean THEN NULL ELSE lister END
                WHERE id = $1
                RETURNING next_seq
                """,
                [
                    self.run, String(added), String(chunks), cursor, complete ? "true" : "false",
                    // The empty page that only says the feed ended is not a page of it.
                    items.isEmpty ? "0" : "1",
                ])
            return RecordedPage(added: added, items: Int(total.first?.int("next_seq") ?? 0))
        }
    }

    /// What `recordPage` recorded.
    public struct RecordedPage: Sendable, Equatable {
        /// Items of the page the run did not have.
        public let added: Int
        /// Items the run has now. (A page replayed after its commit's answer was lost adds
        /// none the second time: a `--limit` is reckoned from this, not from the sum of `added`.)
        public let items: Int
    }

    // MARK: - status

    /// The run's counts from the chunks' counters (no item row is counted).
    public struct Counts: Sendable, Equatable {
        public var items = 0, done = 0, failed = 0, skipped = 0
        public var chunksPending = 0, chunksLeased = 0, chunksDone = 0
        public var feedComplete = false
        public var pending: Int { items - done - failed - skipped }
    }

    public func counts() throws -> Counts { try Self.counts(runId: runId, on: connection) }

    static func counts(runId: Int64, on connection: PostgresConnection) throws -> Counts {
        var counts = Counts()
        // One statement, so one snapshot: read apart, a lister finishing between the two
        // made a total of the chunks listed so far look exact (`0/10` over a feed of 12).
        for row in try connection.execute(
            """
            SELECT r.feed_complete, c.state, count(c.id) AS chunks, coalesce(sum(c.items), 0) AS items,
                   coalesce(sum(c.done), 0) AS done, coalesce(sum(c.failed), 0) AS failed,
                   coalesce(sum(c.skipped), 0) AS skipped
            FROM imgpipe_run r LEFT JOIN imgpipe_chunk c ON c.run_id = r.id
            WHERE r.id = $1 GROUP BY r.feed_complete, c.state
            """, [String(runId)]
        ).all {
            counts.feedComplete = row.bool("feed_complete")
            let chunks = Int(row.int("chunks") ?? 0)
            counts.items += Int(row.int("items") ?? 0)
            counts.done += Int(row.int("done") ?? 0)
            counts.failed += Int(row.int("failed") ?? 0)
            counts.skipped += Int(row.int("skipped") ?? 0)
            switch row["state"] {
            case "pending": counts.chunksPending = chunks
            case "leased": counts.chunksLeased = chunks
            case nil: break
            default: counts.chunksDone = chunks
            }
        }
        return counts
    }
}
