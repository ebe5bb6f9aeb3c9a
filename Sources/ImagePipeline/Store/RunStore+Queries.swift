import Foundation
import GRDB
import PipelineKit

extension RunStore {
    /// Items of a run by status, from the run's counters (`RunStore+Tally.swift`).
    public func counts(runId: Int64) throws -> ItemCounts {
        var counts = ItemCounts()
        for (_, status, n) in try tally(runId: runId, kind: "item") {
            counts.total += n
            switch ItemStatus(rawValue: status) {
            case .pending?: counts.pending = n
            case .fetched?: counts.fetched = n
            case .processed?: counts.processed = n
            case .done?: counts.done = n
            case .skipped?: counts.skipped = n
            case .failed?: counts.failed = n
            case nil: break
            }
        }
        return counts
    }

    /// Each sink's deliveries by status (one per item and output it takes).
    public func deliveryCounts(runId: Int64) throws -> [String: DeliveryCounts] {
        try deliveryCounts(runId: runId, by: "sink")
    }

    /// Each output's deliveries by status, over every sink that takes it.
    public func deliveryCountsByOutput(runId: Int64) throws -> [String: DeliveryCounts] {
        try deliveryCounts(runId: runId, by: "output")
    }

    /// Deliveries by status, by `sink` or `output`, from the run's counters. A delivery
    /// still pending for an item that failed or was skipped before reaching its sinks is
    /// not waiting for anything: the counters leave it out.
    private func deliveryCounts(runId: Int64, by kind: String) throws -> [String: DeliveryCounts] {
        var result: [String: DeliveryCounts] = [:]
        for (name, status, n) in try tally(runId: runId, kind: kind) {
            var counts = result[name] ?? DeliveryCounts()
            switch status {
            case "done": counts.done = n
            case "failed": counts.failed = n
            default: counts.pending = n
            }
            result[name] = counts
        }
        return result
    }

    /// Failed items in feed order (at most `limit`).
    public func failures(runId: Int64, limit: Int = Int.max) throws -> [FailureRecord] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT key, reason, message, attempts, httpStatus FROM item
                    WHERE runId = ? AND status = 'failed' ORDER BY seq LIMIT ?
                    """, arguments: [runId, min(limit, Int(Int32.max))]
            ).map { row in
                try FailureRecord(
                    key: Environment.shown(row.decode(String.self, forColumn: "key")),
                    reason: row.decodeEnum(FailureReason.self, forColumn: "reason").rawValue,
                    message: row.decode(String?.self, forColumn: "message") ?? "",
                    attempts: row.decode(Int.self, forColumn: "attempts"),
                    httpStatus: row.decode(Int?.self, forColumn: "httpStatus"))
            }
        }
    }

    /// Skipped items in feed order (at most `limit`).
    public func skips(runId: Int64, limit: Int = Int.max) throws -> [SkipRecord] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT key, reason, message FROM item WHERE runId = ? AND status = 'skipped' ORDER BY seq LIMIT ?
                    """, arguments: [runId, min(limit, Int(Int32.max))]
            ).map { row in
                try SkipRecord(
                    key: Environment.shown(row.decode(String.self, forColumn: "key")),
                    reason: row.decodeEnum(SkipReason.self, forColumn: "reason").rawValue,
                    message: row.decode(String?.self, forColumn: "message") ?? "")
            }
        }
    }

    /// Skipped items counted by reason.
    public func skipCounts(runId: Int64) throws -> [String: Int] {
        try reasonCounts(runId: runId, status: .skipped, unknown: "unknown")
    }

    /// Items counted by the tier that served their input (remote, cache, fallback, local).
    public func tierCounts(runId: Int64) throws -> [String: Int] {
        Dictionary(try tally(runId: runId, kind: "tier").map { ($0.name, $0.n) }, uniquingKeysWith: +)
    }

    /// Failed items counted by reason.
    public func failureCounts(runId: Int64) throws -> [String: Int] {
        try reasonCounts(runId: runId, status: .failed, unknown: FailureReason.process.rawValue)
    }

    /// Items of one status counted by their `reason` (`unknown` for a row without one).
    private func reasonCounts(runId: Int64, status: ItemStatus, unknown: String) throws -> [String: Int] {
        try read { db in
            var result: [String: Int] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT reason, COUNT(*) AS n FROM item WHERE runId = ? AND status = ? GROUP BY reason",
                arguments: [runId, status.rawValue])
            {
                result[row["reason"] ?? unknown] = row["n"]
            }
            return result
        }
    }

    /// Up to `limit` unfinished items (pending, fetched, processed) after `seq`, in feed order.
    public func unfinishedItems(runId: Int64, after seq: Int, limit: Int) throws -> [ItemRecord] {
        try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM item WHERE runId = ? AND seq > ? AND status IN ('pending', 'fetched', 'processed')
                    ORDER BY seq LIMIT ?
                    """, arguments: [runId, seq, limit]
            ).map { try ItemRecord(row: $0) }
        }
    }

    /// One item, or nil.
    public func item(runId: Int64, key: String) throws -> ItemRecord? {
        try read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM item WHERE runId = ? AND key = ?"), arguments: [runId, key])
                .map { try ItemRecord(row: $0) }
        }
    }

    /// Every item of a run in feed order (for tests and small runs).
    public func items(runId: Int64) throws -> [ItemRecord] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM item WHERE runId = ? ORDER BY seq", arguments: [runId])
                .map { try ItemRecord(row: $0) }
        }
    }

    /// The (output, sink) deliveries of an item still to be made.
    public func pendingDeliveries(runId: Int64, key: String) throws -> [(output: String, sink: String)] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT output, sink FROM delivery WHERE runId = ? AND itemKey = ? AND status = 'pending' ORDER BY output, sink
                        """), arguments: [runId, key]
            ).map { (output: $0["output"], sink: $0["sink"]) }
        }
    }

    /// What an item's source was when it was processed (nil before then).
    public func source(runId: Int64, key: String) throws -> SourceStamp? {
        try read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT sourceSize, sourceModified, sourceHash, sourceVersion, sourceWidth, sourceHeight FROM item
                        WHERE runId = ? AND key = ?
                        """), arguments: [runId, key]
            ).map { row in
                SourceStamp(
                    size: row[0], modified: row[1], sha256: row[2], version: row[3], width: row[4], height: row[5])
            }
        }
    }

    public func fingerprint(runId: Int64, key: String) throws -> ImageFingerprint? {
        try read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT phash, thumbhash, dominant FROM item WHERE runId = ? AND key = ?"),
                arguments: [runId, key]
            ).flatMap { ImageFingerprint(row: $0, from: 0) }
        }
    }

    public func keptFingerprint(runId: Int64, key: String) throws -> ImageFingerprint? {
        try read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT phash, thumbhash, dominant FROM item WHERE runId = ? AND key = ? AND kept = 1"),
                arguments: [runId, key]
            ).flatMap { ImageFingerprint(row: $0, from: 0) }
        }
    }

    /// On `item_kept_hash`: the kept items with one hash, in feed order.
    public func keptItem(runId: Int64, sha256: String, except key: String?) throws -> (key: String, seq: Int)? {
        try read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT key, seq FROM item WHERE runId = ? AND sourceHash = ? AND kept = 1 AND key IS NOT ?
                        ORDER BY seq LIMIT 1
                        """), arguments: [runId, sha256, key]
            ).map { (key: $0[0], seq: $0[1]) }
        }
    }

    public func inheritSightings(runId: Int64, from baseline: Int64) throws {
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO sighting (runId, host, sha256, count, keys)
                    SELECT ?, host, sha256, count, keys FROM sighting WHERE runId = ?
                    ON CONFLICT (runId, host, sha256) DO NOTHING
                    """, arguments: [runId, baseline])
        }
    }

    /// On `sighting`'s primary key.
    public func sighting(runId: Int64, host: String, sha256: String) throws -> (count: Int, keys: [String])? {
        try read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT count, keys FROM sighting WHERE runId = ? AND host = ? AND sha256 = ?"),
                arguments: [runId, host, sha256]
            ).map { row in
                let keys = (try? JSONDecoder().decode([String].self, from: Data((row[1] as String).utf8))) ?? []
                return (count: row[0], keys: keys)
            }
        }
    }

    public func isFlaggedPlaceholder(runId: Int64, key: String) throws -> Bool {
        try read { db in
            try Int.fetchOne(
                db.cachedStatement(sql: "SELECT placeholder FROM item WHERE runId = ? AND key = ?"), arguments: [runId, key]
            ) == 1
        }
    }

    /// Items flagged as made with a host's placeholder (`dedup.placeholders`), on
    /// `item_placeholder`.
    public func placeholderCount(runId: Int64) throws -> Int {
        try read { db in
            try Int.fetchOne(
                db.cachedStatement(sql: "SELECT count(*) FROM item WHERE runId = ? AND placeholder = 1"), arguments: [runId]
            ) ?? 0
        }
    }

    /// One pass over the run's items (once per session of a run with `dedup.similar`).
    public func keptHashes(runId: Int64, _ body: (Int, String, ImageFingerprint) throws -> Void) throws {
        try read { db in
            let rows = try Row.fetchCursor(
                db.cachedStatement(
                    sql: """
                        SELECT seq, key, phash, thumbhash, dominant FROM item
                        WHERE runId = ? AND kept = 1 AND phash IS NOT NULL
                        """),
                arguments: [runId])
            while let row = try rows.next() {
                if let fingerprint = ImageFingerprint(row: row, from: 2) { try body(row[0], row[1], fingerprint) }
            }
        }
    }

    /// An item's staged outputs (those with a staged file recorded), by output id.
    public func stagedOutputs(runId: Int64, key: String) throws -> [StagedOutput] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT output, name, stagedPath, hash, bytes, width, height, format FROM output
                        WHERE runId = ? AND itemKey = ? AND stagedPath IS NOT NULL ORDER BY rowid
                        """), arguments: [runId, key]
            ).map { row in
                StagedOutput(
                    id: row["output"], path: row["stagedPath"], name: row["name"] ?? "", sha256: row["hash"] ?? "",
                    bytes: row["bytes"] ?? 0, width: row["width"] ?? 0, height: row["height"] ?? 0,
                    format: (row["format"] as String?).flatMap(OutputFormat.init(rawValue:)))
            }
        }
    }

    /// Every read of the state file, from cached statements: each SELECT is a read
    /// transaction of its own, and statements stepped together (`exportRecords`' three)
    /// share the one SQLite opens for the first. Not `database.read`: GRDB brackets that with
    /// `PRAGMA query_only = 1` and `= 0`, and SQLite expires every prepared statement after a
    /// flag pragma, so a read between two writes made SQLite compile the writer's cached
    /// statements again (callgrind, 500 small items: `sqlite3Reprepare` 1.9 % of all
    /// instructions, and two pragmas prepared per item). The queue lets no write of this
    /// process in while it runs, and a connection opened read-only (`plan`) writes nothing.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        try database.unsafeRead(body)
    }

    /// The highest `seq` of a run, or 0.
    public func lastSeq(runId: Int64) throws -> Int {
        try read { db in
            try Int.fetchOne(db, sql: "SELECT MAX(seq) FROM item WHERE runId = ?", arguments: [runId]) ?? 0
        }
    }

    /// The key of the item listed last in a run (the highest `seq`): where a resumed
    /// listing starts after.
    public func lastKey(runId: Int64) throws -> String? {
        try read { db in
            try String.fetchOne(db, sql: "SELECT key FROM item WHERE runId = ? ORDER BY seq DESC LIMIT 1", arguments: [runId])
        }
    }
}

extension RunStore {
    /// One delivery of an item's output that a run recorded done, with what it delivered.
    public struct DeliveredFile: Sendable {
        public let output: String
        public let sink: String
        /// Where it went (a folder sink's file path, an object's or upload's URL).
        public let location: String
        public let bytes: Int?
        public let hash: String?
    }

    /// What run `runId` recorded of item `key`, for a re-run to compare with.
    public struct ComparedItem: Sendable {
        public let status: ItemStatus
        /// What its source was when it was processed (nil: never processed, or recorded
        /// before stamps were).
        public let stamp: SourceStamp?
        /// Its outputs' names by id.
        public internal(set) var names: [String: String]
        /// For a failed item, the advice on its failure.
        public let failure: FailureAdvice?
        /// Its deliveries recorded done, with a location.
        public internal(set) var delivered: [DeliveredFile]
        /// How the run listed it (read with `listing`): its number, its location and the
        /// feed's metadata as recorded, and the key its names are made from.
        public let listed: Listed?

        public struct Listed: Sendable, Equatable {
            public let seq: Int
            public let location: String
            public let metadata: String?
            public let nameKey: String?
        }
    }

    /// What run `runId` recorded of item `key`; nil when the run has no such item. With
    /// `carriedFrom`, only an item run `runId` took over whole from that run.
    public func comparedItem(runId: Int64, key: String, carriedFrom: Int64? = nil, listing: Bool = false) throws
        -> ComparedItem?
    {
        try comparedItems(runId: runId, from: key, limit: 1, carriedFrom: carriedFrom, listing: listing).item(key)
    }

    /// Items of a run read together in key order (`comparedItems`), by their keys' bytes:
    /// the state file tells keys apart by their bytes, where Swift's `String` takes two
    /// spellings of `é` (precomposed, decomposed) for one key.
    public struct ComparedWindow: Sendable {
        let items: [HashedBytes: ComparedItem]
        /// The greatest key read, as stored; nil when the run's end came first.
        public let last: [UInt8]?

        public func item(_ key: String) -> ComparedItem? { item(bytes: Self.bytes(of: key)) }

        /// The item whose key has `bytes` (`bytes(of:)`).
        public func item(bytes: [UInt8]) -> ComparedItem? { items[HashedBytes(bytes)] }

        /// A key's bytes as the state file has them: up to a NUL, where GRDB ends the text
        /// it binds.
        public static func bytes(of key: String) -> [UInt8] { Array(key.utf8.prefix { $0 != 0 }) }
    }

    /// What run `runId` recorded of its first `limit` items in key order from `key` on
    /// (`carriedFrom` as in `comparedItem`), in one statement on primary keys: every item of
    /// the run from `key` to the window's `last` (to the end when it is nil) is in it. Keys
    /// are ordered and told apart by their bytes, as SQLite does.
    public func comparedItems(
        runId: Int64, from key: String, limit: Int, carriedFrom: Int64? = nil, listing: Bool = false
    ) throws -> ComparedWindow {
        try read { db in
            var items: [HashedBytes: ComparedItem] = [:]
            var last: [UInt8]?
            // Columns by position, NULL-able ones through `Row.optional`: this is read for
            // each item of the feed. A row for each output and delivery done. The key as
            // stored (its bytes, not a decoded `String`).
            let rows = try Row.fetchCursor(
                db.cachedStatement(sql: listing ? Self.comparedListingSQL : Self.comparedItemsSQL),
                arguments: [runId, key, carriedFrom, carriedFrom, limit])
            while let row = try rows.next() {
                let bytes = [UInt8](row[0] as Data)
                let key = HashedBytes(bytes)
                if items[key] == nil {
                    let rawStatus: String = row[1]
                    guard let status = ItemStatus(rawValue: rawStatus) else {
                        throw StoreError("state file: column status holds \(JSONValue.quote(rawStatus)), not a known ItemStatus")
                    }
                    let stamp = (row.optional(4) as String?).map {
                        SourceStamp(size: row.optional(2), modified: row.optional(3), sha256: $0, version: row.optional(5))
                    }
                    var failure: FailureAdvice?
                    if status == .failed, let reason: String = row.optional(6) {
                        failure = FailureAdvice.of(reason: reason, message: row.optional(7) ?? "", httpStatus: row.optional(8))
                    }
                    let listed =
                        listing
                        ? ComparedItem.Listed(
                            seq: row[15], location: row[16], metadata: row.optional(17), nameKey: row.optional(18)) : nil
                    items[key] = ComparedItem(
                        status: status, stamp: stamp, names: [:], failure: failure, delivered: [], listed: listed)
                    if last.map({ $0.lexicographicallyPrecedes(bytes) }) ?? true { last = bytes }
                }
                guard let id: String = row.optional(9) else { continue }
                if let name: String = row.optional(10) { items[key]?.names[id] = name }
                if let sink: String = row.optional(13), let location: String = row.optional(14) {
                    items[key]?.delivered.append(
                        DeliveredFile(output: id, sink: sink, location: location, bytes: row.optional(11), hash: row.optional(12))
                    )
                }
            }
            return ComparedWindow(items: items, last: items.count < limit ? nil : last)
        }
    }

    /// `comparedItems`' statement: the items from a key on (by the primary key, in its
    /// order), each of their outputs (none: one row of NULLs), each output's deliveries done
    /// to a location. Arguments: the run, the key, `carriedFrom` twice, the limit.
    static let comparedItemsSQL = """
        SELECT i.key, i.status, i.sourceSize, i.sourceModified, i.sourceHash, i.sourceVersion, i.reason, i.message,
            i.httpStatus, o.output, o.name, o.bytes, o.hash, d.sink, d.remoteURL
        FROM (SELECT * FROM item WHERE runId = ? AND key >= ? AND (? IS NULL OR carriedFrom = ?) ORDER BY key LIMIT ?) i
        LEFT JOIN output o ON o.runId = i.runId AND o.itemKey = i.key
        LEFT JOIN delivery d ON d.runId = o.runId AND d.itemKey = o.itemKey AND d.output = o.output
            AND d.status = 'done' AND d.remoteURL IS NOT NULL
        """

    /// `comparedItemsSQL` with how the run listed each item (`ComparedItem.Listed`), for
    /// `UpToDate`: `plan` and the run do not read the text they would not look at.
    static let comparedListingSQL = comparedItemsSQL.replacingOccurrences(
        of: "d.sink, d.remoteURL\n", with: "d.sink, d.remoteURL, i.seq, i.location, i.metadata, i.nameKey\n")

    /// Whether a run after `runId` and up to `upTo` (one abandoned or unfinished since, an
    /// incremental run killed and started over), other than `excluding`, recorded a delivery
    /// to `location` of `sink` with other bytes than `hash`: what is there now is not what run
    /// `runId` delivered for item `key`. Another item's delivery counts only at a file path
    /// (a folder sink's file written over); a URL two items were sent to (one endpoint for
    /// every item) is not one item's, nor is a place run `runId` gave several items.
    public func deliveredOtherwiseSince(
        runId: Int64, upTo: Int64, excluding: Int64?, key: String,
        sink: String, location: String, hash: String?
    ) throws -> Bool {
        try read { db in
            try Bool.fetchOne(
                db.cachedStatement(sql: Self.deliveredOtherwiseSinceSQL),
                arguments: [
                    sink, location, runId, upTo, excluding, hash, location.hasPrefix("/"), key,
                    runId, sink, location, key,
                ]) ?? false
        }
    }

    /// `deliveredOtherwiseSince`'s statement, asked once per delivered file of each item by
    /// `plan` and `run --incremental`: both parts find their rows on `delivery_place`
    /// (`RunStoreTests+Plans` checks it).
    static let deliveredOtherwiseSinceSQL = """
        SELECT EXISTS (SELECT 1 FROM delivery d
            JOIN output o ON o.runId = d.runId AND o.itemKey = d.itemKey AND o.output = d.output
            WHERE d.sink = ? AND d.remoteURL = ? AND d.runId > ? AND d.runId <= ? AND d.runId IS NOT ?
              AND d.status = 'done' AND o.hash IS NOT ? AND (? OR d.itemKey = ?))
        AND NOT EXISTS (SELECT 1 FROM delivery b
            WHERE b.runId = ? AND b.sink = ? AND b.remoteURL = ? AND b.itemKey != ? AND b.status = 'done')
        """

    /// The keys of run `runId` after sequence number `seq` in feed order, at most `limit`,
    /// with their sequence numbers (for paging through a large run in constant memory).
    /// With `carriedFrom`, only the items run `runId` took over whole from that run.
    public func keys(runId: Int64, after seq: Int, limit: Int, carriedFrom: Int64? = nil) throws -> [(seq: Int, key: String)] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT seq, key FROM item WHERE runId = ? AND seq > ? AND (? IS NULL OR carriedFrom = ?)
                        ORDER BY seq LIMIT ?
                        """),
                arguments: [runId, seq, carriedFrom, carriedFrom, limit]
            ).map { ($0["seq"], $0["key"]) }
        }
    }

    /// What pruning `sink` removes after run `runId`: where earlier runs of the state file
    /// delivered to it (each delivery's recorded location, a folder sink's file path) that
    /// this run did not deliver to, except a location some earlier run delivered for an item
    /// this run has and neither finished nor skipped (a failed or unfinished item keeps its
    /// files: it may make them yet). A skipped item's files go, like a gone item's.
    public func prunable(after runId: Int64, sink: String) throws -> [String] {
        try read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT d.remoteURL FROM delivery d
                    WHERE d.runId < ? AND d.sink = ? AND d.status = 'done' AND d.remoteURL IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM delivery c WHERE c.sink = d.sink AND c.remoteURL = d.remoteURL AND c.runId = ?)
                      AND NOT EXISTS (
                          SELECT 1 FROM delivery e JOIN item i ON i.runId = ? AND i.key = e.itemKey
                          WHERE e.sink = d.sink AND e.remoteURL = d.remoteURL AND e.runId < ? AND e.status = 'done'
                            AND i.status NOT IN ('done', 'skipped'))
                    ORDER BY d.remoteURL
                    """, arguments: [runId, sink, runId, runId, runId])
        }
    }
}
