import Foundation
import GRDB

extension RunStore {
    /// Writes a batch of changes in one transaction and says what became of each.
    public func apply(_ changes: [StoreChange], runId: Int64, now: Date = Date()) throws -> [ChangeOutcome] {
        let time = now.timeIntervalSince1970
        return try database.write { db in
            try changes.map { try apply($0, runId: runId, time: time, db: db) }
        }
    }

    private func apply(_ change: StoreChange, runId: Int64, time: Double, db: Database) throws -> ChangeOutcome {
        switch change {
        case let .insert(item):
            if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT seq, status FROM item WHERE runId = ? AND key = ?"),
                                          arguments: [runId, item.key]) {
                return .existing(seq: row["seq"], status: ItemStatus(rawValue: row["status"]) ?? .pending)
            }
            var failure: ItemFailure?
            if let name = item.outputName, let owner = try nameOwner(name, runId: runId, db: db) {
                failure = ItemFailure(.encode, "output name \"\(name)\" is already used by item \"\(owner)\"")
            }
            try db.cachedStatement(sql: """
                INSERT INTO item (runId, seq, key, location, metadata, status, reason, message, outputName, nameKey,
                                  nameStem, tier, updatedAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [runId, item.seq, item.key, item.location, item.metadata,
                                 failure == nil ? "pending" : "failed", failure?.reason.rawValue, failure?.message,
                                 failure == nil ? item.outputName : nil, item.nameKey, item.nameStem, item.tier?.rawValue, time])
            for sink in item.sinks {
                try db.cachedStatement(sql: "INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (?, ?, ?, 'pending', ?)")
                    .execute(arguments: [runId, item.key, sink, time])
            }
            return failure.map { .failed($0) } ?? .applied

        case let .fetched(key, spoolPath, tier):
            try db.cachedStatement(sql: """
                UPDATE item SET status = 'fetched', spoolPath = ?, tier = COALESCE(?, tier), updatedAt = ?
                WHERE runId = ? AND key = ?
                """).execute(arguments: [spoolPath, tier?.rawValue, time, runId, key])
            return .applied

        case let .processed(key, output):
            if let owner = try nameOwner(output.name, runId: runId, db: db), owner != key {
                let failure = ItemFailure(.encode, "output name \"\(output.name)\" is already used by item \"\(owner)\"")
                try markFailed(key: key, failure: failure, attempts: 1, runId: runId, time: time, db: db)
                return .failed(failure)
            }
            try db.cachedStatement(sql: """
                UPDATE item SET status = 'processed', stagedPath = ?, outputName = ?, outputHash = ?,
                                outputBytes = ?, width = ?, height = ?, attempts = attempts + 1, updatedAt = ?
                WHERE runId = ? AND key = ?
                """).execute(arguments: [output.path, output.name, output.sha256, output.bytes, output.width, output.height,
                                 time, runId, key])
            return .applied

        case let .delivered(key, sink, remoteURL, httpStatus, attempts):
            try db.cachedStatement(sql: """
                UPDATE delivery SET status = 'done', attempts = attempts + ?, remoteURL = ?, httpStatus = ?,
                                    message = NULL, updatedAt = ?
                WHERE runId = ? AND itemKey = ? AND sink = ?
                """).execute(arguments: [attempts, remoteURL, httpStatus, time, runId, key, sink])
            // Done when no delivery of the item is left open: one statement.
            try db.cachedStatement(sql: """
                UPDATE item SET status = 'done', stagedPath = NULL, updatedAt = ?
                WHERE runId = ? AND key = ? AND NOT EXISTS
                    (SELECT 1 FROM delivery WHERE runId = ? AND itemKey = ? AND status != 'done')
                """).execute(arguments: [time, runId, key, runId, key])
            return db.changesCount > 0 ? .completed : .applied

        case let .deliveryFailed(key, sink, failure, attempts):
            try db.cachedStatement(sql: """
                UPDATE delivery SET status = 'failed', attempts = attempts + ?, httpStatus = ?, message = ?, updatedAt = ?
                WHERE runId = ? AND itemKey = ? AND sink = ?
                """).execute(arguments: [attempts, failure.httpStatus, failure.message, time, runId, key, sink])
            let message = "sink \(sink): \(failure.message)"
            try db.cachedStatement(sql: """
                UPDATE item SET status = 'failed', reason = ?, message = ?, httpStatus = ?, updatedAt = ?
                WHERE runId = ? AND key = ?
                """).execute(arguments: [FailureReason.upload.rawValue, message, failure.httpStatus, time, runId, key])
            return .failed(ItemFailure(.upload, message, httpStatus: failure.httpStatus))

        case let .failed(key, failure, attempts):
            try markFailed(key: key, failure: failure, attempts: attempts, runId: runId, time: time, db: db)
            return .applied

        case let .skipped(key, skip):
            try db.cachedStatement(sql: """
                UPDATE item SET status = 'skipped', reason = ?, message = ?, httpStatus = NULL, stagedPath = NULL,
                                spoolPath = NULL, updatedAt = ?
                WHERE runId = ? AND key = ?
                """).execute(arguments: [skip.reason.rawValue, skip.message, time, runId, key])
            return .applied

        case .feedComplete:
            try db.cachedStatement(sql: "UPDATE run SET feedComplete = 1 WHERE id = ?").execute(arguments: [runId])
            return .applied

        case let .reset(key, status):
            try db.cachedStatement(sql: """
                UPDATE item SET status = ?, stagedPath = CASE WHEN ? IN ('pending', 'fetched') THEN NULL ELSE stagedPath END,
                                updatedAt = ?
                WHERE runId = ? AND key = ?
                """).execute(arguments: [status.rawValue, status.rawValue, time, runId, key])
            return .applied
        }
    }

    private func markFailed(key: String, failure: ItemFailure, attempts: Int, runId: Int64, time: Double,
                            db: Database) throws {
        try db.cachedStatement(sql: """
            UPDATE item SET status = 'failed', reason = ?, message = ?, httpStatus = ?, attempts = attempts + ?,
                            stagedPath = NULL, updatedAt = ?
            WHERE runId = ? AND key = ?
            """).execute(arguments: [failure.reason.rawValue, failure.message, failure.httpStatus, attempts, time, runId, key])
    }

    private func nameOwner(_ name: String, runId: Int64, db: Database) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT key FROM item WHERE runId = ? AND outputName = ?"),
                            arguments: [runId, name])
    }
}
