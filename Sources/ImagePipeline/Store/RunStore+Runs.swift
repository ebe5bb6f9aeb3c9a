import Foundation
import GRDB
import PipelineKit

extension RunStore {
    /// The newest run that was not replaced, if any.
    public func latestRun() throws -> RunRecord? {
        try read { db in
            try RunRecord.fetchOne(db, sql: "SELECT * FROM run WHERE state != 'abandoned' ORDER BY id DESC LIMIT 1")
        }
    }

    /// Every run of the state file, the newest first.
    public func runs() throws -> [RunRecord] {
        try read { db in try RunRecord.fetchAll(db, sql: "SELECT * FROM run ORDER BY id DESC") }
    }

    /// Why run `run` did not list the whole feed, or nil when it did: run with `--limit N`,
    /// a listing that did not reach the end, or one that listed nothing at all (a source
    /// folder not mounted). Such a run knows only part of the feed: items it did not list
    /// are neither gone (pruning) nor new (as the run a re-run compares with).
    public func partialListing(of run: RunRecord) -> String? {
        if (try? counts(runId: run.id).total) ?? 0 == 0, run.handedOn == 0 { return "the feed listed no item at all" }
        if let limit = run.itemLimit { return "--limit \(limit)" }
        return run.feedComplete ? nil : "its listing did not reach the end"
    }

    public func run(id: Int64) throws -> RunRecord? {
        try read { db in
            try RunRecord.fetchOne(db, sql: "SELECT * FROM run WHERE id = ?", arguments: [id])
        }
    }

    /// Starts a new run. `workRoot` gets a folder `run-<id>` for spooled and staged files.
    /// `uuid` is the run's own by default; a worker of a shared run passes the shared run's,
    /// so that idempotency keys are the same whichever worker delivers an item.
    public func createRun(
        pipelinePath: String, pipelineName: String, document: String,
        fingerprint: [String: String], sinks: [String], itemLimit: Int?,
        workRoot: String, uuid: String? = nil, baseline: Int64? = nil, now: Date = Date()
    ) throws -> RunRecord {
        let fingerprintText = String(decoding: try JSONEncoder.sorted.encode(fingerprint), as: UTF8.self)
        let sinksText = String(decoding: try JSONEncoder.sorted.encode(sinks), as: UTF8.self)
        return try write { db in
            try db.execute(
                sql: """
                    INSERT INTO run (uuid, pipelinePath, pipelineName, document, fingerprint, sinks, state, itemLimit,
                                     workDirectory, startedAt, baseline)
                    VALUES (?, ?, ?, ?, ?, ?, 'running', ?, '', ?, ?)
                    """,
                arguments: [
                    uuid ?? UUID().uuidString.lowercased(), pipelinePath, pipelineName, document, fingerprintText,
                    sinksText, itemLimit, now.timeIntervalSince1970, baseline,
                ])
            let id = db.lastInsertedRowID
            let work = URL(fileURLWithPath: workRoot).appendingPathComponent("run-\(id)").path
            try db.execute(sql: "UPDATE run SET workDirectory = ? WHERE id = ?", arguments: [work, id])
            guard let run = try RunRecord.fetchOne(db, sql: "SELECT * FROM run WHERE id = ?", arguments: [id]) else {
                throw StoreError("run \(id) vanished")
            }
            return run
        }
    }

    /// Records a run's state; `finished` also stamps the finishing time.
    public func setState(_ state: RunRecord.State, runId: Int64, addingElapsed elapsed: Double = 0) throws {
        try write { db in
            try db.execute(
                sql: """
                    UPDATE run SET state = ?, elapsed = elapsed + ?,
                                   finishedAt = CASE WHEN ? = 'finished' THEN ? ELSE finishedAt END
                    WHERE id = ?
                    """, arguments: [state.rawValue, elapsed, state.rawValue, Date().timeIntervalSince1970, runId])
        }
    }

    public func markFeedComplete(runId: Int64, _ complete: Bool = true) throws {
        try write { db in
            try db.execute(sql: "UPDATE run SET feedComplete = ? WHERE id = ?", arguments: [complete, runId])
        }
    }

    /// Records that the run's listing ended with an error (or, `false`, that a listing
    /// reached the end since): items before its last one may never have been listed.
    public func markListingCut(runId: Int64, _ cut: Bool) throws {
        try write { db in
            try db.execute(sql: "UPDATE run SET listingCut = ? WHERE id = ?", arguments: [cut, runId])
        }
    }

    /// Frees the output names skipped items still hold (imgpipe before 2026-11-25 kept
    /// them): a failed item retried, or an item listed anew, may take them.
    func freeSkippedItemsNames(runId: Int64) throws {
        try write { db in try db.execute(sql: Self.freeSkippedNamesSQL, arguments: [runId, runId]) }
    }

    /// Looks up the outputs of the run's skipped items by their primary key. `+name`: on
    /// the index of names (`output_name`) the statement read every named output of the
    /// run, a second at a million items, on every resume.
    static let freeSkippedNamesSQL = """
        UPDATE output SET name = NULL
        WHERE runId = ? AND itemKey IN (SELECT key FROM item WHERE runId = ? AND status = 'skipped') AND +name IS NOT NULL
        """

    /// Puts a run's failed items back in the queue: to `processed` when their output is
    /// still staged (only deliveries failed), else to `pending`. Failed deliveries become
    /// pending again. Returns how many items were requeued.
    ///
    /// With `onlyUnreachable`, only the items set aside because their host did not answer
    /// (reason `download`, message `host unreachable: …`), which a plain `resume` retries.
    ///
    /// With `key`, only that item (a shared run's worker whose recorded failure the run put
    /// back to pending). With `reasons`, only the failed items of these reasons
    /// (`resume --retry-failed=REASON,…`).
    @discardableResult
    public func requeueFailed(
        runId: Int64, onlyUnreachable: Bool = false, key only: String? = nil, reasons: Set<FailureReason>? = nil
    ) throws -> Int {
        try write { db in
            var sql = "SELECT key FROM item WHERE runId = ? AND status = 'failed'"
            var arguments: StatementArguments = [runId]
            if onlyUnreachable { sql += " AND reason = 'download' AND message LIKE '\(HostHealth.hostUnreachable):%'" }
            if let only {
                sql += " AND key = ?"
                _ = arguments.append(contentsOf: [only])
            }
            if let reasons {
                let names = reasons.map(\.rawValue).sorted()
                sql += " AND reason IN (" + names.map { _ in "?" }.joined(separator: ", ") + ")"
                _ = arguments.append(contentsOf: StatementArguments(names))
            }
            let keys = try String.fetchAll(db, sql: sql, arguments: arguments)
            for key in keys {
                // Every output still staged: only deliveries are left to do.
                let staged = try String?.fetchAll(
                    db, sql: "SELECT stagedPath FROM output WHERE runId = ? AND itemKey = ?",
                    arguments: [runId, key])
                let keepsOutput =
                    !staged.isEmpty && staged.allSatisfy { $0.map { FileManager.default.fileExists(atPath: $0) } ?? false }
                try db.execute(
                    sql:
                        "UPDATE item SET status = ?, reason = NULL, message = NULL, httpStatus = NULL WHERE runId = ? AND key = ?",
                    arguments: [keepsOutput ? "processed" : "pending", runId, key])
                if !keepsOutput {
                    try db.execute(
                        sql: "UPDATE output SET stagedPath = NULL WHERE runId = ? AND itemKey = ?", arguments: [runId, key])
                }
                try db.execute(
                    sql:
                        "UPDATE delivery SET status = 'pending', message = NULL WHERE runId = ? AND itemKey = ? AND status = 'failed'",
                    arguments: [runId, key])
            }
            return keys.count
        }
    }
}

extension JSONEncoder {
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

extension RunStore {
    /// The pipeline file, state and baseline (an incremental run's) of the latest run in the
    /// state file at `path`, read without opening it as a store: no folder made, no
    /// migration, no write; nil when there is no run or the file cannot be read. For
    /// deciding which state file a command uses, and how, before it is locked and opened.
    public static func peekLatestRun(at path: String) -> (pipelinePath: String, state: RunRecord.State, baseline: Int64?)? {
        var configuration = Configuration()
        configuration.readonly = true
        // `*`: a file made before incremental runs has no `baseline` column (read as nil).
        guard let queue = try? DatabaseQueue(path: path, configuration: configuration),
            let row = try? queue.read({ try Row.fetchOne($0, sql: "SELECT * FROM run ORDER BY id DESC LIMIT 1") }),
            let state = RunRecord.State(rawValue: row["state"])
        else { return nil }
        return (row["pipelinePath"], state, row["baseline"])
    }
}
