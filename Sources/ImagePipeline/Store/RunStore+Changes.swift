import Foundation
import GRDB
import PipelineKit

extension RunStore {
    /// Writes a batch of changes in one transaction and says what became of each.
    public func apply(_ changes: [StoreChange], runId: Int64, now: Date = Date()) throws -> [ChangeOutcome] {
        try apply(changes, runId: runId, now: now, namesHeldElsewhere: [:], skipsGiveNamesUp: true)
    }

    /// `apply`, with output names that items this file does not have hold (name → key: a
    /// shared run's, claimed by other workers), refused as a name this file's items hold is.
    ///
    /// With `skipsGiveNamesUp`, a skipped item's output names are free again, and an item
    /// that failed because one was taken gets it (`ChangeOutcome.revived`). A shared run's
    /// journal does not: there the names are claimed in the shared database, and stay.
    func apply(
        _ changes: [StoreChange], runId: Int64, now: Date, namesHeldElsewhere held: [String: String],
        skipsGiveNamesUp: Bool = false
    ) throws -> [ChangeOutcome] {
        let time = now.timeIntervalSince1970
        return try write { db in
            // The run a re-run compares with: the names its items had stay theirs.
            let inserts = changes.contains { if case .insert = $0 { true } else { false } }
            let baseline =
                inserts ? try Int64.fetchOne(db, sql: "SELECT baseline FROM run WHERE id = ?", arguments: [runId]) : nil
            // Items taken over whole are checked one by one and moved together (`HandOn`):
            // before any other change, so that every change sees the file as if each had been
            // moved in its turn.
            var handOn = HandOn()
            var outcomes: [ChangeOutcome] = []
            outcomes.reserveCapacity(changes.count)
            for change in changes {
                if case .insert(let item) = change, let carried = item.carried {
                    if handOn.overlaps(item) { try handOn.move(runId: runId, time: time, db: db) }
                    if try handOn.canTake(item, carried, runId: runId, held: held, db: db) {
                        handOn.add(item, carried)
                        outcomes.append(.completed)
                        continue
                    }
                }
                try handOn.move(runId: runId, time: time, db: db)
                let outcome = try apply(change, runId: runId, time: time, held: held, baseline: baseline, db: db)
                guard skipsGiveNamesUp, case .skipped(let key, _) = change else {
                    outcomes.append(outcome)
                    continue
                }
                outcomes.append(try giveNamesUp(of: key, runId: runId, time: time, db: db))
            }
            try handOn.move(runId: runId, time: time, db: db)
            return outcomes
        }
    }

    /// Frees the output names of `key` (just skipped: it makes nothing) and passes each to
    /// the first item, in feed order, that failed because `key` held it; that item goes
    /// back to `pending`. An item of one output has the name claimed for it at once, as
    /// its insert would have; an item of several outputs claims its names when processed.
    private func giveNamesUp(of key: String, runId: Int64, time: Double, db: Database) throws -> ChangeOutcome {
        let names = try String.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT name FROM output WHERE runId = ? AND itemKey = ? AND name IS NOT NULL ORDER BY output
                    """), arguments: [runId, key])
        guard !names.isEmpty else { return .applied }
        try db.cachedStatement(sql: "UPDATE output SET name = NULL WHERE runId = ? AND itemKey = ?")
            .execute(arguments: [runId, key])
        var revived: [String] = []
        for name in names {
            let refusal = Self.nameTaken(name, by: key).message
            guard
                let loser = try String.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT key FROM item WHERE runId = ? AND status = 'failed' AND reason = ? AND message = ?
                            ORDER BY seq LIMIT 1
                            """), arguments: [runId, FailureReason.encode.rawValue, refusal])
            else { continue }
            // The others that failed for the name now fail for its new holder.
            try db.cachedStatement(
                sql: """
                    UPDATE item SET message = ? WHERE runId = ? AND status = 'failed' AND reason = ? AND message = ? AND key != ?
                    """
            ).execute(arguments: [
                Self.nameTaken(name, by: loser).message, runId, FailureReason.encode.rawValue,
                refusal, loser,
            ])
            try db.cachedStatement(
                sql: """
                    UPDATE item SET status = 'pending', reason = NULL, message = NULL, httpStatus = NULL, updatedAt = ?
                    WHERE runId = ? AND key = ?
                    """
            ).execute(arguments: [time, runId, loser])
            try db.cachedStatement(
                sql: """
                    UPDATE output SET name = ? WHERE runId = ? AND itemKey = ?
                    AND (SELECT count(*) FROM output WHERE runId = ? AND itemKey = ?) = 1
                    """
            ).execute(arguments: [name, runId, loser, runId, loser])
            revived.append(loser)
        }
        return revived.isEmpty ? .applied : .revived(revived)
    }

    private func apply(
        _ change: StoreChange, runId: Int64, time: Double, held: [String: String], baseline: Int64?, db: Database
    ) throws
        -> ChangeOutcome
    {
        switch change {
        case .insert(let item):
            if let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT seq, status FROM item WHERE runId = ? AND key = ?"),
                arguments: [runId, item.key])
            {
                return .existing(seq: row["seq"], status: ItemStatus(rawValue: row["status"]) ?? .pending)
            }
            var failure: ItemFailure?
            var outputNames = item.outputs.map(\.name)
            var nameStem = item.nameStem
            let names = outputNames.compactMap { $0 }
            let ownClash = Dictionary(grouping: names, by: { $0 }).first(where: { $0.value.count > 1 })?.key
            if let name = ownClash {
                // Two of the item's own outputs would overwrite each other: the item fails,
                // and none of its names is claimed.
                failure = ItemFailure(.encode, "two outputs of the item are both named \"\(name)\"")
            }
            // A name is taken when another item of the run holds it; and, for an item that has
            // names of its own to take instead, when another held it in the run a re-run
            // compares with (`run --incremental`): an item new in the feed and listed first
            // does not take the name an item kept until then.
            let canTakeOthers = item.uniqueStem != nil && item.outputs.allSatisfy { $0.name == nil || $0.uniqueName != nil }
            func firstTaken(_ names: [String], reserved: Int64? = nil) throws -> ItemFailure? {
                for name in names {
                    if let owner = try held[name].flatMap({ $0 == item.key ? nil : $0 }) ?? nameOwner(name, runId: runId, db: db)
                        ?? reserved.flatMap({ try reservedOwner(name, baseline: $0, runId: runId, db: db) })
                        .flatMap({ $0 == item.key ? nil : $0 })
                    {
                        return Self.nameTaken(name, by: owner)
                    }
                }
                return nil
            }
            if failure == nil { failure = try firstTaken(names, reserved: canTakeOthers ? baseline : nil) }
            // A name held by another item: the names made from the item's unique stem instead, when
            // each of its named outputs has one and none of those is held either.
            if failure != nil, ownClash == nil, canTakeOthers, let stem = item.uniqueStem {
                let uniques = item.outputs.map { $0.name == nil ? nil : $0.uniqueName }
                let named = uniques.compactMap { $0 }
                if Set(named).count == named.count, try firstTaken(named) == nil {
                    failure = nil
                    outputNames = uniques
                    nameStem = stem
                }
            }
            try db.cachedStatement(
                sql: """
                    INSERT INTO item (runId, seq, key, location, metadata, status, reason, message, nameKey, nameStem, tier, updatedAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                runId, item.seq, item.key, item.location, item.metadata,
                failure == nil ? "pending" : "failed", failure?.reason.rawValue, failure?.message,
                item.nameKey, nameStem, item.tier?.rawValue, time,
            ])
            for (output, name) in zip(item.outputs, outputNames) {
                try db.cachedStatement(sql: "INSERT INTO output (runId, itemKey, output, name) VALUES (?, ?, ?, ?)")
                    .execute(arguments: [runId, item.key, output.id, failure == nil ? name : nil])
                for sink in output.sinks {
                    try db.cachedStatement(
                        sql: """
                            INSERT INTO delivery (runId, itemKey, output, sink, status, updatedAt) VALUES (?, ?, ?, ?, 'pending', ?)
                            """
                    ).execute(arguments: [runId, item.key, output.id, sink, time])
                }
            }
            if let failure { return .failed(failure) }
            if let carried = item.carried, try carry(item.key, carried, runId: runId, time: time, db: db) {
                return .completed
            }
            return nameStem == item.nameStem ? .applied : .renamed(stem: nameStem)

        case .fetched(let key, let spoolPath, let tier):
            try db.cachedStatement(
                sql: """
                    UPDATE item SET status = 'fetched', spoolPath = ?, tier = COALESCE(?, tier), updatedAt = ?
                    WHERE runId = ? AND key = ?
                    """
            ).execute(arguments: [spoolPath, tier?.rawValue, time, runId, key])
            return .applied

        case .processed(let key, let outputs, let source, let fingerprint, let kept):
            if let name = Dictionary(grouping: outputs, by: \.name).first(where: { $0.value.count > 1 })?.key {
                let failure = ItemFailure(.encode, "two outputs of the item are both named \"\(name)\"")
                try markFailed(key: key, failure: failure, attempts: 1, runId: runId, time: time, db: db)
                return .failed(failure)
            }
            for output in outputs {
                if let owner = try held[output.name].flatMap({ $0 == key ? nil : $0 })
                    ?? String.fetchOne(
                        db.cachedStatement(
                            sql: """
                                SELECT itemKey FROM output WHERE runId = ? AND name = ? AND NOT (itemKey = ? AND output = ?)
                                """), arguments: [runId, output.name, key, output.id])
                {
                    let failure = Self.nameTaken(output.name, by: owner)
                    try markFailed(key: key, failure: failure, attempts: 1, runId: runId, time: time, db: db)
                    return .failed(failure)
                }
            }
            for output in outputs {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO output (runId, itemKey, output, name, stagedPath, hash, bytes, width, height, quality, ssim,
                            format)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (runId, itemKey, output) DO UPDATE SET name = excluded.name, stagedPath = excluded.stagedPath,
                            hash = excluded.hash, bytes = excluded.bytes, width = excluded.width, height = excluded.height,
                            quality = excluded.quality, ssim = excluded.ssim, format = excluded.format
                        """
                ).execute(arguments: [
                    runId, key, output.id, output.name, output.path, output.sha256, output.bytes,
                    output.width, output.height, output.choice?.quality, output.choice?.ssim, output.format?.rawValue,
                ])
            }
            try db.cachedStatement(
                sql: """
                    UPDATE item SET status = 'processed', attempts = attempts + 1, updatedAt = ?,
                        sourceSize = ?, sourceModified = ?, sourceHash = ?, sourceVersion = ?, sourceWidth = ?, sourceHeight = ?,
                        phash = ?, thumbhash = ?, dominant = ?, kept = ?, duplicateOf = NULL, distance = NULL
                    WHERE runId = ? AND key = ?
                    """
            ).execute(arguments: [
                time, source?.size, source?.modified, source?.sha256, source?.version, source?.width, source?.height,
                fingerprint?.phash, fingerprint?.thumbhash, fingerprint?.dominant, kept ? 1 : nil, runId, key,
            ])
            return .applied

        case .delivered(let key, let output, let sink, let remoteURL, let httpStatus, let attempts):
            try db.cachedStatement(
                sql: """
                    UPDATE delivery SET status = 'done', attempts = attempts + ?, remoteURL = ?, httpStatus = ?,
                                        message = NULL, updatedAt = ?
                    WHERE runId = ? AND itemKey = ? AND output = ? AND sink = ?
                    """
            ).execute(arguments: [attempts, remoteURL, httpStatus, time, runId, key, output, sink])
            // Done when no delivery of the item is left open: one statement.
            try db.cachedStatement(
                sql: """
                    UPDATE item SET status = 'done', updatedAt = ?
                    WHERE runId = ? AND key = ? AND NOT EXISTS
                        (SELECT 1 FROM delivery WHERE runId = ? AND itemKey = ? AND status != 'done')
                    """
            ).execute(arguments: [time, runId, key, runId, key])
            guard db.changesCount > 0 else { return .applied }
            try clearStaged(key: key, runId: runId, db: db)
            return .completed

        case .deliveryFailed(let key, let output, let sink, let failure, let attempts):
            try db.cachedStatement(
                sql: """
                    UPDATE delivery SET status = 'failed', attempts = attempts + ?, httpStatus = ?, message = ?, updatedAt = ?
                    WHERE runId = ? AND itemKey = ? AND output = ? AND sink = ?
                    """
            ).execute(arguments: [attempts, failure.httpStatus, failure.message, time, runId, key, output, sink])
            let several =
                try Int.fetchOne(
                    db.cachedStatement(sql: "SELECT COUNT(*) FROM output WHERE runId = ? AND itemKey = ?"),
                    arguments: [runId, key]) ?? 1
            let message = (several > 1 ? "sink \(sink), output \(output): " : "sink \(sink): ") + failure.message
            // The sink's reason: `upload`, or `blocked-address` for a target the policy refused.
            let reason = failure.reason
            try db.cachedStatement(
                sql: """
                    UPDATE item SET status = 'failed', reason = ?, message = ?, httpStatus = ?, updatedAt = ?
                    WHERE runId = ? AND key = ?
                    """
            ).execute(arguments: [reason.rawValue, message, failure.httpStatus, time, runId, key])
            return .failed(ItemFailure(reason, message, httpStatus: failure.httpStatus))

        case .failed(let key, let failure, let attempts):
            try markFailed(key: key, failure: failure, attempts: attempts, runId: runId, time: time, db: db)
            return .applied

        case .skipped(let key, let skip):
            try db.cachedStatement(
                sql: """
                    UPDATE item SET status = 'skipped', reason = ?1, message = ?2, httpStatus = NULL, spoolPath = NULL, updatedAt = ?3,
                        kept = NULL, placeholder = CASE WHEN ?1 = 'placeholder' THEN placeholder END,
                        duplicateOf = ?4, distance = ?5
                    WHERE runId = ?6 AND key = ?7
                    """
            ).execute(arguments: [skip.reason.rawValue, skip.message, time, skip.duplicateOf, skip.distance, runId, key])
            try clearStaged(key: key, runId: runId, db: db)
            return .applied

        case .feedComplete:
            try db.cachedStatement(sql: "UPDATE run SET feedComplete = 1 WHERE id = ?").execute(arguments: [runId])
            return .applied

        case .sighted(let host, let sha256, let key, let flagging):
            // The first keys are kept (to flag them, and to know an item seen again).
            try db.cachedStatement(
                sql: """
                    INSERT INTO sighting (runId, host, sha256, count, keys) VALUES (?, ?, ?, 1, json_array(?))
                    ON CONFLICT (runId, host, sha256) DO UPDATE SET count = count + 1,
                        keys = CASE WHEN json_array_length(keys) < 16 THEN json_insert(keys, '$[#]', ?) ELSE keys END
                    """
            ).execute(arguments: [runId, host, sha256, key, key])
            if !flagging.isEmpty {
                let list = String(decoding: try JSONEncoder().encode(flagging), as: UTF8.self)
                try db.cachedStatement(
                    sql: """
                        UPDATE item SET placeholder = 1
                        WHERE runId = ? AND key IN (SELECT value FROM json_each(?)) AND status != 'skipped'
                          AND (sourceHash IS NULL OR sourceHash = ?)
                        """
                ).execute(arguments: [runId, list, sha256])
            }
            return .applied

        case .reset(let key, let status):
            try db.cachedStatement(sql: "UPDATE item SET status = ?, updatedAt = ? WHERE runId = ? AND key = ?")
                .execute(arguments: [status.rawValue, time, runId, key])
            if status == .pending || status == .fetched { try clearStaged(key: key, runId: runId, db: db) }
            return .applied
        }
    }

    private func markFailed(
        key: String, failure: ItemFailure, attempts: Int, runId: Int64, time: Double,
        db: Database
    ) throws {
        try db.cachedStatement(
            sql: """
                UPDATE item SET status = 'failed', reason = ?, message = ?, httpStatus = ?, attempts = attempts + ?, updatedAt = ?
                WHERE runId = ? AND key = ?
                """
        ).execute(arguments: [failure.reason.rawValue, failure.message, failure.httpStatus, attempts, time, runId, key])
        try clearStaged(key: key, runId: runId, db: db)
    }

    /// Copies outputs of an item from an earlier run (`run --incremental`): the name, what
    /// was made, the deliveries done then to the sinks `carried` names, and what its source
    /// was (with the feed's version of it now, when it has one). An output is not copied when this run names it otherwise (a template whose name
    /// is known before making, `{index}` after items before it left the feed), nor when its
    /// name is another item's in this run: it is made again. Returns true when the item has
    /// nothing left to deliver: done (and counted in the run's `carried`).
    private func carry(_ key: String, _ carried: NewItem.Carried, runId: Int64, time: Double, db: Database) throws -> Bool {
        for output in carried.outputs {
            guard
                let made = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT name, hash, bytes, width, height, quality, ssim, format FROM output
                            WHERE runId = ? AND itemKey = ? AND output = ?
                            """), arguments: [carried.holder, key, output])
            else { continue }
            let name: String? = made["name"]
            let wanted = try String.fetchOne(
                db.cachedStatement(sql: "SELECT name FROM output WHERE runId = ? AND itemKey = ? AND output = ?"),
                arguments: [runId, key, output])
            if let wanted, wanted != name { continue }
            if let name, let owner = try nameOwner(name, runId: runId, db: db), owner != key { continue }
            try db.cachedStatement(
                sql: """
                    UPDATE output SET name = ?, hash = ?, bytes = ?, width = ?, height = ?, quality = ?, ssim = ?, format = ?
                    WHERE runId = ? AND itemKey = ? AND output = ?
                    """
            ).execute(arguments: [
                name, made["hash"], made["bytes"], made["width"], made["height"], made["quality"], made["ssim"], made["format"],
                runId, key, output,
            ])
            for sink in carried.sinks {
                try db.cachedStatement(
                    sql: """
                        UPDATE delivery SET status = 'done', remoteURL = b.remoteURL, httpStatus = b.httpStatus, updatedAt = ?
                        FROM (SELECT remoteURL, httpStatus FROM delivery
                              WHERE runId = ? AND itemKey = ? AND output = ? AND sink = ? AND status = 'done') AS b
                        WHERE delivery.runId = ? AND delivery.itemKey = ? AND delivery.output = ? AND delivery.sink = ?
                        """
                ).execute(arguments: [time, carried.holder, key, output, sink, runId, key, output, sink])
            }
        }
        try db.cachedStatement(
            sql: """
                UPDATE item SET (sourceSize, sourceModified, sourceHash, sourceVersion, sourceWidth, sourceHeight, tier) =
                    (SELECT sourceSize, sourceModified, sourceHash, COALESCE(?, sourceVersion), sourceWidth, sourceHeight, tier
                     FROM item
                     WHERE runId = ? AND key = ?)
                WHERE runId = ? AND key = ?
                """
        ).execute(arguments: [carried.version, carried.holder, key, runId, key])
        try db.cachedStatement(
            sql: """
                UPDATE item SET status = 'done', updatedAt = ?
                WHERE runId = ? AND key = ? AND NOT EXISTS (SELECT 1 FROM delivery WHERE runId = ? AND itemKey = ? AND status != 'done')
                """
        ).execute(arguments: [time, runId, key, runId, key])
        guard db.changesCount > 0 else { return false }
        try db.cachedStatement(sql: "UPDATE run SET carried = carried + 1 WHERE id = ?").execute(arguments: [runId])
        return true
    }

    /// Forgets where an item's outputs were staged (what was made is kept, for export).
    private func clearStaged(key: String, runId: Int64, db: Database) throws {
        try db.cachedStatement(
            sql: "UPDATE output SET stagedPath = NULL WHERE runId = ? AND itemKey = ? AND stagedPath IS NOT NULL"
        )
        .execute(arguments: [runId, key])
    }

    /// The failure of an item whose output name another item holds.
    static func nameTaken(_ name: String, by owner: String) -> ItemFailure {
        ItemFailure(.encode, "output name \"\(name)\" is already used by item \"\(owner)\"")
    }

    /// The item of run `baseline` that holds `name`: in that run, or in a later one compared
    /// with it too (other than `runId`) that took the item over (`HandOn`).
    private func reservedOwner(_ name: String, baseline: Int64, runId: Int64, db: Database) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT itemKey FROM output WHERE runId = ?1 AND name = ?2
                    UNION ALL
                    SELECT o.itemKey FROM run r
                    JOIN output o ON o.runId = r.id AND o.name = ?2
                    JOIN item i ON i.runId = o.runId AND i.key = o.itemKey AND i.carriedFrom = ?1
                    WHERE r.baseline = ?1 AND r.id != ?3
                    LIMIT 1
                    """), arguments: [baseline, name, runId])
    }

    private func nameOwner(_ name: String, runId: Int64, db: Database) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(sql: "SELECT itemKey FROM output WHERE runId = ? AND name = ?"),
            arguments: [runId, name])
    }
}

/// `run --incremental`'s take-over of items carried whole (every output kept, each done
/// there for the same sinks as now, under the same names) from the run that holds their
/// rows, instead of copying them: the item, its outputs and deliveries change run, with what
/// the listing says of the item now. A re-run that changes nothing adds nothing to the
/// file; the run compared with no longer lists the item (`status --run` and `export --run`
/// of it leave it out), and `carriedFrom` says which run that was.
///
/// Each item is checked on its own (`canTake`) and the batch's items are moved together
/// (`move`): five statements for a batch instead of five for each item. An item that cannot
/// be taken over is copied (`RunStore.carry`) after the items before it have moved.
struct HandOn {
    private struct Taken {
        let item: NewItem
        let carried: NewItem.Carried
    }

    private var taken: [Taken] = []
    private var keys: Set<String> = []
    /// The names the items taken hold, and those they want: an item of the same batch that
    /// wants one of them waits until they have moved.
    private var names: Set<String> = []

    /// Whether `item` has a key or a name of an item taken and not moved yet (the names an
    /// item taken holds are those it wants).
    func overlaps(_ item: NewItem) -> Bool {
        !taken.isEmpty
            && (keys.contains(item.key)
                || item.outputs.contains { output in
                    [output.name, output.uniqueName].contains { $0.map(names.contains) ?? false }
                })
    }

    /// Whether the rows of `item` can be taken over whole (nothing is changed): the run has
    /// no item of its key yet, and the holder has it done, each output under the name this
    /// run gives it (from its stem, or from its own stem when another held a name) and
    /// delivered to the same sinks as now, no name held by another item of this run. Asked
    /// when `overlaps` is false: the items taken before it have moved when it shares a key or
    /// a name with one of them.
    func canTake(
        _ item: NewItem, _ carried: NewItem.Carried, runId: Int64, held: [String: String], db: Database
    ) throws -> Bool {
        let wanted = Dictionary(item.outputs.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        guard wanted.count == item.outputs.count, item.isCarriedWhole else { return false }
        // One row per (output, sink) the holder has of the item (sink NULL for an output that
        // went to none), with the item's status and stem, who in this run holds the name, and
        // whether this run has an item of the key already.
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT i.status, i.nameStem, o.output, o.name, d.sink, d.status AS delivered,
                        (SELECT x.itemKey FROM output x WHERE x.runId = ? AND x.name = o.name) AS owner,
                        EXISTS (SELECT 1 FROM item y WHERE y.runId = ? AND y.key = i.key) AS present
                    FROM item i JOIN output o ON o.runId = i.runId AND o.itemKey = i.key
                    LEFT JOIN delivery d ON d.runId = o.runId AND d.itemKey = o.itemKey AND d.output = o.output
                    WHERE i.runId = ? AND i.key = ?
                    """), arguments: [runId, runId, carried.holder, item.key])
        var kept: [String: Set<String>] = [:]
        // Columns by position (a name is looked for among the row's columns each time):
        // this is read for each item carried over.
        for row in rows {
            // Named from the item's stem, or from its own one (`uniqueStem`) when another held a name.
            let stem: String? = row.optional(1)
            let unique = stem != item.nameStem && stem != nil && stem == item.uniqueStem
            guard !(row[7] as Bool), row[0] == ItemStatus.done.rawValue, stem == item.nameStem || unique,
                let new = wanted[row[2]], (row.optional(6) as String?) == nil
            else { return false }
            let name: String? = row.optional(3)
            if let want = unique ? new.uniqueName ?? new.name : new.name, want != name { return false }
            if let name, let owner = held[name], owner != item.key { return false }
            var sinks = kept[new.id, default: []]
            if let sink: String = row.optional(4) {
                guard row.optional(5) == "done" else { return false }
                sinks.insert(sink)
            }
            kept[new.id] = sinks
        }
        return kept.count == wanted.count && item.outputs.allSatisfy { kept[$0.id] == Set($0.sinks) }
    }

    /// Adds an item `canTake` said yes to.
    mutating func add(_ item: NewItem, _ carried: NewItem.Carried) {
        taken.append(Taken(item: item, carried: carried))
        keys.insert(item.key)
        for output in item.outputs {
            if let name = output.name { names.insert(name) }
            if let name = output.uniqueName { names.insert(name) }
        }
    }

    /// Moves the items taken into run `runId`, from each holder: the item's row anew in this
    /// run, its outputs and deliveries moved under it, and the old row (nothing refers to it
    /// now) deleted, so that no foreign key is ever left dangling; each run's counts follow.
    mutating func move(runId: Int64, time: Double, db: Database) throws {
        guard !taken.isEmpty else { return }
        defer {
            taken = []
            keys = []
            names = []
        }
        try db.cachedStatement(sql: "DELETE FROM temp.handOn").execute()
        let add = try db.cachedStatement(sql: "INSERT INTO temp.handOn VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        var holders: [Int64: Int] = [:]
        for entry in taken {
            let item = entry.item
            try add.execute(arguments: [
                entry.carried.holder, item.key, item.seq, item.location, item.metadata, item.nameKey,
                entry.carried.version, entry.carried.run,
            ])
            holders[entry.carried.holder, default: 0] += 1
        }
        for (holder, count) in holders.sorted(by: { $0.key < $1.key }) {
            try db.cachedStatement(sql: Self.insertItems).execute(arguments: [runId, time, holder])
            try db.cachedStatement(sql: Self.moveOutputs).execute(arguments: [runId, holder, holder])
            try db.cachedStatement(sql: Self.moveDeliveries).execute(arguments: [runId, time, holder, holder])
            try db.cachedStatement(sql: Self.deleteItems).execute(arguments: [holder, holder])
            try db.cachedStatement(sql: "UPDATE run SET handedOn = handedOn + ? WHERE id = ?").execute(arguments: [count, holder])
        }
        try db.cachedStatement(sql: "UPDATE run SET carried = carried + ? WHERE id = ?").execute(arguments: [taken.count, runId])
    }

    /// The items of a batch taken over: the connection's own table, made when the store
    /// opens the file for writing (`RunStore.init`) and emptied for each batch.
    static let table = """
        CREATE TEMP TABLE IF NOT EXISTS handOn (
            holder INTEGER NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, location TEXT NOT NULL,
            metadata TEXT, nameKey TEXT, version TEXT, carriedFrom INTEGER NOT NULL, PRIMARY KEY (holder, key))
        """

    /// `move`'s statements for one holder, each finding its rows by primary key from the
    /// keys taken (`RunStoreTests+Plans` checks their plans). Arguments: the run, the time,
    /// the holder.
    static let insertItems = """
        INSERT INTO item (runId, seq, key, location, metadata, status, attempts, nameKey, nameStem, tier,
            sourceSize, sourceModified, sourceHash, sourceVersion, sourceWidth, sourceHeight, phash, thumbhash, dominant, kept,
            placeholder, carriedFrom, updatedAt)
        SELECT ?, h.seq, i.key, h.location, h.metadata, 'done', 0, h.nameKey, i.nameStem, i.tier,
            i.sourceSize, i.sourceModified, i.sourceHash, COALESCE(h.version, i.sourceVersion), i.sourceWidth, i.sourceHeight,
            i.phash, i.thumbhash, i.dominant, i.kept, i.placeholder, h.carriedFrom, ?
        FROM temp.handOn h CROSS JOIN item i ON i.runId = h.holder AND i.key = h.key
        WHERE h.holder = ?
        """
    /// Arguments: the run, the holder, the holder.
    static let moveOutputs = """
        UPDATE output SET runId = ? WHERE runId = ? AND itemKey IN (SELECT key FROM temp.handOn WHERE holder = ?)
        """
    /// Arguments: the run, the time, the holder, the holder.
    static let moveDeliveries = """
        UPDATE delivery SET runId = ?, attempts = 0, updatedAt = ?
        WHERE runId = ? AND itemKey IN (SELECT key FROM temp.handOn WHERE holder = ?)
        """
    /// Arguments: the holder, the holder.
    static let deleteItems = """
        DELETE FROM item WHERE runId = ? AND key IN (SELECT key FROM temp.handOn WHERE holder = ?)
        """
}
