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
    /// Calls `body` with each item of run `runId` in feed order (optionally only those
    /// with status `only`), streamed from one read transaction through a cursor: memory
    /// stays flat however many items the run has. Each item's outputs and deliveries are
    /// read with two indexed lookups.
    /// `key` narrows it to that one item (a shared run's worker copies each item's record),
    /// and `formats` (each output's format by id, `outputFormats(ofDocument:)`), when given,
    /// saves reading the run's pipeline document again for every item.
    public func exportRecords(runId: Int64, only: ItemStatus? = nil, key: String? = nil, formats: [String: String]? = nil,
                              _ body: (ExportRecord) throws -> Void) throws {
        let formats = try formats ?? {
            guard let run = try self.run(id: runId) else { throw StoreError("no run #\(runId)") }
            return Self.outputFormats(ofDocument: run.document)
        }()
        try database.read { db in
            var sql = """
                SELECT key, location, status, reason, message, attempts, tier, metadata FROM item WHERE runId = ?
                """
            var arguments: StatementArguments = [runId]
            if let only {
                sql += " AND status = ?"
                _ = arguments.append(contentsOf: [only.rawValue])
            }
            if let key {
                sql += " AND key = ?"
                _ = arguments.append(contentsOf: [key])
            }
            sql += " ORDER BY seq"
            let outputsOf = try db.makeStatement(sql: """
                SELECT output, name, hash, bytes, width, height FROM output
                WHERE runId = ? AND itemKey = ? AND hash IS NOT NULL ORDER BY rowid
                """)
            let deliveriesOf = try db.makeStatement(sql: """
                SELECT output, sink, status, remoteURL, httpStatus, attempts, message FROM delivery
                WHERE runId = ? AND itemKey = ? ORDER BY sink, output
                """)
            let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
            while let row = try rows.next() {
                let key: String = row["key"]
                let outputs = try Row.fetchAll(outputsOf, arguments: [runId, key]).map { output in
                    (id: output["output"] as String,
                     output: ExportRecord.Output(name: output["name"] ?? "", format: formats[output["output"] as String] ?? "jpeg",
                                                 width: output["width"], height: output["height"], bytes: output["bytes"],
                                                 sha256: output["hash"]))
                }
                var deliveries: [(sink: String, byOutput: [(id: String, delivery: ExportRecord.Delivery)])] = []
                // A skipped item's sinks were never asked for it (its delivery rows, made when
                // it was listed, stay pending): it has none, as `status` counts it in none.
                let skipped = row["status"] as String == ItemStatus.skipped.rawValue
                for delivery in try skipped ? [] : Row.fetchAll(deliveriesOf, arguments: [runId, key]) {
                    let sink: String = delivery["sink"]
                    let made = ExportRecord.Delivery(status: delivery["status"], remoteURL: delivery["remoteURL"],
                                                     httpStatus: delivery["httpStatus"], attempts: delivery["attempts"],
                                                     message: delivery["message"])
                    if deliveries.last?.sink == sink {
                        deliveries[deliveries.count - 1].byOutput.append((delivery["output"], made))
                    } else {
                        deliveries.append((sink, [(delivery["output"], made)]))
                    }
                }
                try body(ExportRecord(key: key, location: row["location"], status: row["status"], reason: row["reason"],
                                      message: row["message"], attempts: row["attempts"], tier: row["tier"],
                                      metadata: row["metadata"], outputs: outputs, deliveries: deliveries))
            }
        }
    }

    /// The outputs of a run's pipeline (from the document the state file keeps), in its
    /// order; one `default` JPEG output when the document cannot be read.
    static func outputSpecs(ofDocument document: String) -> [OutputSpec] {
        guard let parsed = try? JSONParser.parse(document),
              let spec = try? PipelineSpec.decode(parsed, baseDirectory: "/", defaultName: "run") else { return [OutputSpec()] }
        return spec.outputs
    }

    /// The ids of the outputs of a run's pipeline, in its order.
    public static func outputIDs(ofDocument document: String) -> [String] {
        outputSpecs(ofDocument: document).map(\.id)
    }

    /// The format of each output of a run's pipeline, by id.
    static func outputFormats(ofDocument document: String) -> [String: String] {
        Dictionary(outputSpecs(ofDocument: document).map { ($0.id, $0.format.rawValue) }, uniquingKeysWith: { first, _ in first })
    }
}
