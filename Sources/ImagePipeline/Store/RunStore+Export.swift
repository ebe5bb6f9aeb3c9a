import Foundation
import GRDB

/// One item of a run as `imgpipe export` hands it over: what it was, how it ended, what
/// came out and where it went.
public struct ExportRecord: Sendable {
    public struct Output: Sendable {
        public let name: String
        public let format: String
        public let width: Int?
        public let height: Int?
        public let bytes: Int?
        public let sha256: String?
    }

    public struct Delivery: Sendable {
        public let status: String
        public let remoteURL: String?
        public let httpStatus: Int?
        public let attempts: Int
        public let message: String?
    }

    public let key: String
    public let location: String
    public let status: String
    public let reason: String?
    public let message: String?
    public let attempts: Int
    public let tier: String?
    /// The feed's metadata for the item (a JSON object), nil for local files.
    public let metadata: String?
    /// By output id; empty until the item was processed.
    public let outputs: [(id: String, output: Output)]
    /// By sink name, then output id.
    public let deliveries: [(sink: String, byOutput: [(id: String, delivery: Delivery)])]
}

extension RunStore {
    /// The id of the one output of a pipeline written with `output` (not yet `outputs`).
    public static let defaultOutputID = "default"

    /// Calls `body` with each item of run `runId` in feed order (optionally only those
    /// with status `only`), streamed from one read transaction through a cursor: memory
    /// stays flat however many items the run has.
    public func exportRecords(runId: Int64, only: ItemStatus? = nil, _ body: (ExportRecord) throws -> Void) throws {
        guard let run = try self.run(id: runId) else { throw StoreError("no run #\(runId)") }
        let format = Self.outputFormat(ofDocument: run.document)
        try database.read { db in
            var sql = """
                SELECT i.key, i.location, i.status, i.reason, i.message, i.attempts, i.tier, i.metadata,
                       i.outputName, i.outputHash, i.outputBytes, i.width, i.height,
                       d.sink, d.status AS dStatus, d.remoteURL, d.httpStatus AS dHttpStatus, d.attempts AS dAttempts,
                       d.message AS dMessage
                FROM item i LEFT JOIN delivery d ON d.runId = i.runId AND d.itemKey = i.key
                WHERE i.runId = ?
                """
            var arguments: StatementArguments = [runId]
            if let only {
                sql += " AND i.status = ?"
                _ = arguments.append(contentsOf: [only.rawValue])
            }
            sql += " ORDER BY i.seq, d.sink"
            let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
            var current: (row: Row, deliveries: [(sink: String, byOutput: [(id: String, delivery: ExportRecord.Delivery)])])?
            func flush() throws {
                guard let (row, deliveries) = current else { return }
                try body(Self.record(row, deliveries: deliveries, format: format))
                current = nil
            }
            while let row = try rows.next() {
                let key: String = row["key"]
                if let open = current, open.row["key"] as String != key { try flush() }
                if current == nil { current = (row.copy(), []) }
                if let sink: String = row["sink"] {
                    let delivery = ExportRecord.Delivery(status: row["dStatus"], remoteURL: row["remoteURL"],
                                                         httpStatus: row["dHttpStatus"], attempts: row["dAttempts"],
                                                         message: row["dMessage"])
                    current?.deliveries.append((sink, [(Self.defaultOutputID, delivery)]))
                }
            }
            try flush()
        }
    }

    private static func record(_ row: Row, deliveries: [(sink: String, byOutput: [(id: String, delivery: ExportRecord.Delivery)])],
                               format: String) -> ExportRecord {
        var outputs: [(id: String, output: ExportRecord.Output)] = []
        if let name: String = row["outputName"], row["outputHash"] as String? != nil {
            outputs.append((defaultOutputID, ExportRecord.Output(name: name, format: format, width: row["width"],
                                                                 height: row["height"], bytes: row["outputBytes"],
                                                                 sha256: row["outputHash"])))
        }
        return ExportRecord(key: row["key"], location: row["location"], status: row["status"], reason: row["reason"],
                            message: row["message"], attempts: row["attempts"], tier: row["tier"],
                            metadata: row["metadata"], outputs: outputs, deliveries: deliveries)
    }

    /// The output format the run's pipeline named (`jpeg` when it cannot be read).
    static func outputFormat(ofDocument document: String) -> String {
        guard let parsed = try? JSONParser.parse(document),
              let spec = try? PipelineSpec.decode(parsed, baseDirectory: "/", defaultName: "run") else { return OutputFormat.jpeg.rawValue }
        return spec.output.format.rawValue
    }
}
