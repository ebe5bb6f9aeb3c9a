import Foundation
import PipelineKit

/// `imgpipe status` of a shared run: the run row, the chunks' counters, the workers, in the
/// same report as a state file's run (`StatusReport`), with `uuid`, `pagesListed`, `chunks`
/// and `workers` set. Read without counting item rows (only failed and skipped ones, through
/// partial indexes, for their reasons and the first thousand of each).
extension StatusReport {
    /// What `status` knows of the pipeline from its file: where it is, and which outputs
    /// each sink takes (for the deliveries still pending), with the outputs' formats.
    public struct SharedPipeline: Sendable {
        public var path: String
        public var outputsOfSink: [String: [String]]
        public var formats: [String: String]

        public init(path: String, outputsOfSink: [String: [String]], formats: [String: String]) {
            self.path = path
            self.outputsOfSink = outputsOfSink
            self.formats = formats
        }

        public init(_ spec: PipelineSpec, path: String) {
            self.init(
                path: path,
                outputsOfSink: Dictionary(uniqueKeysWithValues: spec.sinks.map { ($0.name, spec.outputs(of: $0.name)) }),
                formats: Dictionary(
                    uniqueKeysWithValues: spec.outputs.map { ($0.id, $0.formatName) }))
        }
    }

    /// Every run of `pipelineName` (of any when nil), newest first: number, state, start.
    public static func sharedRuns(at url: String, pipelineName: String?) throws -> [(
        run: Int64, pipeline: String, state: String, startedAt: String
    )] {
        let connection = try PostgresConnection(url: url)
        defer { connection.close() }
        guard try SharedRunSchema.present(on: connection) else { return [] }
        return try connection.execute(
            """
            SELECT id, pipeline_name, state, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS started
            FROM imgpipe_run WHERE ($1::text IS NULL OR pipeline_name = $1) ORDER BY id DESC
            """, [pipelineName]
        ).all.map { ($0.int("id") ?? 0, $0["pipeline_name"] ?? "", $0["state"] ?? "", $0["started"] ?? "") }
    }

    /// The latest run of `pipelineName` (of any pipeline when nil), or run `runNumber`; nil
    /// when there is none.
    public static func shared(
        at url: String, pipelineName: String?, runNumber: Int64? = nil,
        pipeline: SharedPipeline? = nil
    ) throws -> StatusReport? {
        let connection = try PostgresConnection(url: url)
        defer { connection.close() }
        guard try SharedRunSchema.present(on: connection) else { return nil }
        return try shared(on: connection, pipelineName: pipelineName, runNumber: runNumber, pipeline: pipeline)
    }

    /// The same, read on `connection` (a worker's own at the end of its session), the
    /// run's counts taken as `counts` when given (read in the same moment as the worker's
    /// last progress line).
    static func shared(
        on connection: PostgresConnection, pipelineName: String?, runNumber: Int64?, pipeline: SharedPipeline?,
        counts given: SharedRun.Counts? = nil
    ) throws -> StatusReport? {
        guard
            let row = try connection.execute(
                """
                SELECT id, uuid, pipeline_name, state, feed_complete, pages_listed,
                       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS started,
                       to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS finished,
                       extract(epoch FROM coalesce(finished_at, now()) - created_at) AS elapsed
                FROM imgpipe_run
                WHERE ($1::text IS NULL OR pipeline_name = $1) AND ($2::bigint IS NULL OR id = $2::bigint) ORDER BY id DESC LIMIT 1
                """, [pipelineName, runNumber.map(String.init)]
            ).first
        else { return nil }
        let id = String(row.int("id") ?? 0)
        let counts = try given ?? SharedRun.counts(runId: row.int("id") ?? 0, on: connection)
        func byReason(_ status: String) throws -> [String: Int] {
            Dictionary(
                uniqueKeysWithValues: try connection.execute(
                    """
                    SELECT coalesce(reason, '?') AS reason, count(*) AS n FROM imgpipe_item
                    WHERE run_id = $1 AND status = $2 GROUP BY 1
                    """, [id, status]
                ).all.map { ($0["reason"] ?? "?", Int($0.int("n") ?? 0)) })
        }
        func first(_ status: String) throws -> [PostgresRow] {
            try connection.execute(
                """
                SELECT key, coalesce(reason, '?') AS reason, coalesce(message, '') AS message, attempts FROM imgpipe_item
                WHERE run_id = $1 AND status = $2 ORDER BY seq LIMIT 1000
                """, [id, status]
            ).all
        }
        let elapsed = Double(row["elapsed"] ?? "") ?? 0
        let ended = counts.done + counts.failed + counts.skipped
        // The chunks' tallies (one row each: no item row is read).
        var tally: [String: Int] = [:]
        // A database of an earlier version (no tallies yet, until a worker of this one joins) has none.
        for entry
            in (try? connection.execute(
                """
                SELECT t.key, sum(t.value::bigint) AS n FROM imgpipe_chunk c, jsonb_each_text(c.tally) t WHERE c.run_id = $1 GROUP BY t.key
                """, [id]
            ).all) ?? []
        {
            if let key = entry["key"] { tally[key] = Int(entry.int("n") ?? 0) }
        }
        func deliveries(_ prefix: String, pendingPerItem: Int) -> DeliveryCounts {
            DeliveryCounts(
                done: tally[prefix + "/done"] ?? 0, failed: tally[prefix + "/failed"] ?? 0,
                pending: counts.pending * pendingPerItem)
        }
        let outputsOfSink = pipeline?.outputsOfSink ?? [:]
        var sinkNames = Set(outputsOfSink.keys)
        var outputIDs = Set((pipeline?.formats ?? [:]).keys)
        for key in tally.keys {
            let parts = key.split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2, let slash = parts[1].lastIndex(of: "/") else { continue }
            if parts[0] == "sink" { sinkNames.insert(String(parts[1][..<slash])) }
            if parts[0] == "output" { outputIDs.insert(String(parts[1][..<slash])) }
        }
        let sinks = Dictionary(
            uniqueKeysWithValues: sinkNames.map {
                ($0, deliveries("sink/" + $0, pendingPerItem: outputsOfSink[$0]?.count ?? 0))
            })
        let outputs = Dictionary(
            uniqueKeysWithValues: outputIDs.map { output in
                (
                    output,
                    OutputCounts(
                        format: pipeline?.formats[output] ?? OutputFormat.jpeg.rawValue,
                        deliveries: deliveries(
                            "output/" + output,
                            pendingPerItem: outputsOfSink.values.count { $0.contains(output) }))
                )
            })
        let tiers = tally.compactMap { key, value in key.hasPrefix("tier/") ? (String(key.dropFirst(5)), value) : nil }
        let workers = try connection.execute(
            """
            SELECT w.name, extract(epoch FROM now() - w.heartbeat_at) AS ago, w.items_done,
                   (SELECT count(*) FROM imgpipe_chunk c WHERE c.run_id = w.run_id AND c.state = 'leased' AND c.owner = w.name) AS held
            FROM imgpipe_worker w WHERE w.run_id = $1 ORDER BY w.name
            """, [id]
        ).all
        let failures = try first("failed").map {
            FailureRecord(
                key: Environment.shown($0["key"] ?? ""), reason: $0["reason"] ?? "?", message: $0["message"] ?? "",
                attempts: Int($0.int("attempts") ?? 0), httpStatus: nil)
        }
        let skips = try first("skipped").map {
            SkipRecord(key: Environment.shown($0["key"] ?? ""), reason: $0["reason"] ?? "?", message: $0["message"] ?? "")
        }
        var report = StatusReport(
            run: row.int("id") ?? 0, state: row["state"] ?? "", pipeline: pipeline?.path ?? row["pipeline_name"] ?? "",
            name: row["pipeline_name"] ?? "", total: counts.items, feedComplete: row.bool("feed_complete"),
            done: counts.done, skipped: counts.skipped, failed: counts.failed, pending: counts.pending,
            fetched: 0, processed: 0, sinks: sinks, outputs: outputs,
            failuresByReason: try byReason("failed"), failures: failures,
            skipsByReason: try byReason("skipped"), skips: skips, tiers: Dictionary(uniqueKeysWithValues: tiers),
            startedAt: row["started"] ?? "", finishedAt: row["finished"], elapsed: elapsed,
            itemsPerSecond: elapsed > 0 ? Double(ended) / elapsed : 0,
            uuid: row["uuid"] ?? "", pagesListed: Int(row.int("pages_listed") ?? 0),
            chunks: Chunks(pending: counts.chunksPending, leased: counts.chunksLeased, done: counts.chunksDone),
            workers: workers.map {
                Worker(
                    name: $0["name"] ?? "", lastHeartbeatSecondsAgo: Double($0["ago"] ?? "") ?? 0,
                    itemsDone: Int($0.int("items_done") ?? 0), chunksHeld: Int($0.int("held") ?? 0))
            })
        // On `imgpipe_item_placeholder` (absent in a database of an earlier version).
        if try SharedRunSchema.exists(on: connection),
            let placeholders = try connection.execute(
                "SELECT count(*) AS n FROM imgpipe_item WHERE run_id = $1 AND placeholder", [id]
            ).first?.int("n"), placeholders > 0
        {
            report.placeholders = Int(placeholders)
        }
        return report
    }
}
