import Foundation
import GRDB
import PipelineKit

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
        /// The quality a search chose and the SSIM it reached (`OutputSpec.searchesQuality`).
        public var quality: Int? = nil
        public var ssim: Double? = nil
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
    /// The SHA-256 of the input's bytes, once processed.
    public var sha256: String? = nil
    /// What the first output looks like (`ImageFingerprint`), once processed.
    public var fingerprint: ImageFingerprint? = nil
    /// A duplicate's (`dedup`): the item it repeats, and the distance between their hashes.
    public var duplicateOf: String? = nil
    public var distance: Int? = nil
    /// Made before its bytes were found to be its host's placeholder (`dedup.placeholders`).
    public var placeholder = false
}

extension RunStore {
    /// Calls `body` with each item of run `runId` in feed order (optionally only those
    /// with status `only`), streamed from one read transaction: memory stays flat however
    /// many items the run has. Three statements walk the run's items in feed order
    /// (`exportSQL`) — the items, their outputs and their deliveries, each joined to the
    /// item by its primary key — and their rows are merged by `seq`: no per-item query,
    /// so the time per record does not grow with the run.
    /// `key` narrows it to that one item (a shared run's worker copies each item's record),
    /// and `formats` (each output's format by id, `outputFormats(ofDocument:)`), when given,
    /// saves reading the run's pipeline document again for every item.
    public func exportRecords(
        runId: Int64, only: ItemStatus? = nil, key: String? = nil, formats: [String: String]? = nil,
        _ body: (ExportRecord) throws -> Void
    ) throws {
        let formats =
            try formats
            ?? {
                guard let run = try self.run(id: runId) else { throw StoreError("no run #\(runId)") }
                return Self.outputFormats(ofDocument: run.document)
            }()
        let sql = Self.exportSQL(only: only != nil, key: key != nil)
        var arguments: StatementArguments = [runId]
        if let only { _ = arguments.append(contentsOf: [only.rawValue]) }
        if let key { _ = arguments.append(contentsOf: [key]) }
        // One item's record is a worker's hot path (each item it ends): cached statements only.
        func walk(_ db: Database) throws {
            let items = try Row.fetchCursor(db.cachedStatement(sql: sql.items), arguments: arguments)
            // Each row decoded as it is read (no row copied), Optionals without the generic path.
            let outputs = try PeekingCursor(Row.fetchCursor(db.cachedStatement(sql: sql.outputs), arguments: arguments)) { row in
                let id: String = row[2]
                let output = ExportRecord.Output(
                    name: row.optional(3) ?? "", format: row.optional(10) ?? formats[id] ?? "jpeg", width: row.optional(6),
                    height: row.optional(7), bytes: row.optional(5), sha256: row.optional(4), quality: row.optional(8),
                    ssim: row.optional(9))
                return (row[0], (order: row[1] as Int64, id: id, output: output))
            }
            let deliveries = try PeekingCursor(Row.fetchCursor(db.cachedStatement(sql: sql.deliveries), arguments: arguments)) {
                row in
                let delivery = ExportRecord.Delivery(
                    status: row[3], remoteURL: row.optional(4), httpStatus: row.optional(5), attempts: row[6],
                    message: row.optional(7))
                return (row[0], (sink: row[2] as String, output: row[1] as String, delivery: delivery))
            }
            while let row = try items.next() {
                let seq: Int64 = row[0]
                var made: [(order: Int64, id: String, output: ExportRecord.Output)] = []
                while let output = try outputs.next(whereSeq: seq) { made.append(output) }
                made.sort { $0.order < $1.order }
                var sent: [(sink: String, output: String, delivery: ExportRecord.Delivery)] = []
                while let delivery = try deliveries.next(whereSeq: seq) { sent.append(delivery) }
                // A skipped item's sinks were never asked for it (its delivery rows, made when
                // it was listed, stay pending): it has none, as `status` counts it in none.
                let status: String = row[3]
                if status == ItemStatus.skipped.rawValue { sent = [] }
                sent.sort { ($0.sink, $0.output) < ($1.sink, $1.output) }
                var bySink: [(sink: String, byOutput: [(id: String, delivery: ExportRecord.Delivery)])] = []
                for delivery in sent {
                    if bySink.last?.sink == delivery.sink {
                        bySink[bySink.count - 1].byOutput.append((delivery.output, delivery.delivery))
                    } else {
                        bySink.append((delivery.sink, [(delivery.output, delivery.delivery)]))
                    }
                }
                var record = ExportRecord(
                    key: row[1], location: row[2], status: status, reason: row.optional(4), message: row.optional(5),
                    attempts: row[6], tier: row.optional(7), metadata: row.optional(8),
                    outputs: made.map { ($0.id, $0.output) }, deliveries: bySink)
                record.sha256 = row.optional(9)
                record.fingerprint = ImageFingerprint(row: row, from: 10)
                record.duplicateOf = row.optional(13)
                record.distance = row.optional(14)
                record.placeholder = (row.optional(15) as Int?) == 1
                try body(record)
            }
        }
        try read(walk)
    }

    /// The three statements of `exportRecords`, each led by the item's `seq` and ordered by
    /// it: the items (on `item_seq`, or `item_status` for one status), and their outputs and
    /// deliveries found from each item by their primary key (`CROSS JOIN` keeps the item the
    /// outer loop, so no statement sorts the run). Arguments: the run, then the status
    /// (`only`), then the key (`key`). `RunStoreTests+Plans` checks their plans.
    static func exportSQL(only: Bool, key: Bool) -> (items: String, outputs: String, deliveries: String) {
        let filter = "i.runId = ?" + (only ? " AND i.status = ?" : "") + (key ? " AND i.key = ?" : "")
        return (
            items: """
            SELECT i.seq, i.key, i.location, i.status, i.reason, i.message, i.attempts, i.tier, i.metadata,
                i.sourceHash, i.phash, i.thumbhash, i.dominant, i.duplicateOf, i.distance, i.placeholder
            FROM item i WHERE \(filter) ORDER BY i.seq
            """,
            outputs: """
            SELECT i.seq, o.rowid, o.output, o.name, o.hash, o.bytes, o.width, o.height, o.quality, o.ssim, o.format
            FROM item i CROSS JOIN output o ON o.runId = i.runId AND o.itemKey = i.key
            WHERE \(filter) AND o.hash IS NOT NULL ORDER BY i.seq
            """,
            deliveries: """
            SELECT i.seq, d.output, d.sink, d.status, d.remoteURL, d.httpStatus, d.attempts, d.message
            FROM item i CROSS JOIN delivery d ON d.runId = i.runId AND d.itemKey = i.key
            WHERE \(filter) ORDER BY i.seq
            """
        )
    }

    /// The outputs of a run's pipeline (from the document the state file keeps), in its
    /// order; one `default` JPEG output when the document cannot be read.
    static func outputSpecs(ofDocument document: String) -> [OutputSpec] {
        guard let parsed = try? JSONParser.parse(document),
            let spec = try? PipelineSpec.decode(parsed, baseDirectory: "/", defaultName: "run")
        else { return [OutputSpec()] }
        return spec.outputs
    }

    /// The ids of the outputs of a run's pipeline, in its order.
    public static func outputIDs(ofDocument document: String) -> [String] {
        outputSpecs(ofDocument: document).map(\.id)
    }

    /// The format of each output of a run's pipeline, by id.
    static func outputFormats(ofDocument document: String) -> [String: String] {
        Dictionary(
            outputSpecs(ofDocument: document).map { ($0.id, $0.formatName) },
            uniquingKeysWith: { first, _ in first })
    }
}

extension ImageFingerprint {
    /// The fingerprint in a row's columns `phash`, `thumbhash`, `dominant` from `index` on;
    /// nil when one is NULL.
    init?(row: Row, from index: Int) {
        guard let phash: String = row.optional(index), let thumbhash: String = row.optional(index + 1),
            let dominant: String = row.optional(index + 2)
        else { return nil }
        self.init(phash: phash, thumbhash: thumbhash, dominant: dominant)
    }
}

/// A cursor of rows led by an item's `seq`, each decoded as it is read and kept one ahead,
/// so that the rows of one item can be taken and the first of the next left for it.
private final class PeekingCursor<Element> {
    private let rows: RowCursor
    private let decode: (Row) throws -> (seq: Int64, element: Element)
    private var ahead: (seq: Int64, element: Element)?
    private var started = false

    init(_ rows: RowCursor, decode: @escaping (Row) throws -> (seq: Int64, element: Element)) {
        self.rows = rows
        self.decode = decode
    }

    /// The next row when it belongs to item `seq`, else nil (and the row is kept).
    func next(whereSeq seq: Int64) throws -> Element? {
        if !started {
            started = true
            ahead = try rows.next().map(decode)
        }
        // Rows are in `seq` order and come from the same items as the item rows: one behind
        // `seq` cannot be, and is passed over rather than trusted.
        while let row = ahead, row.seq < seq { ahead = try rows.next().map(decode) }
        guard let row = ahead, row.seq == seq else { return nil }
        ahead = try rows.next().map(decode)
        return row.element
    }
}

/// A run as `imgpipe export` writes it: its number, and the sinks and outputs that name
/// the CSV columns.
public struct ExportedRun: Sendable {
    public let id: Int64
    public let sinks: [String]
    public let outputs: [String]

    public init(id: Int64, sinks: [String], outputs: [String]) {
        self.id = id
        self.sinks = sinks
        self.outputs = outputs
    }
}

/// Where `imgpipe export` reads a run's records: a state file (`RunStore`) or a run shared
/// through PostgreSQL (`SharedExport`). The command has one path over either.
public protocol ExportSource {
    /// Run number `number`, else the latest; nil when there is none.
    func exportedRun(number: Int64?) throws -> ExportedRun?
    /// Calls `body` with each item of `run` in feed order (only those with status `only`,
    /// when given), in constant memory.
    func exportRecords(of run: ExportedRun, only: ItemStatus?, _ body: (ExportRecord) throws -> Void) throws
}

extension RunStore: ExportSource {
    public func exportedRun(number: Int64?) throws -> ExportedRun? {
        guard let run = try number.map({ try self.run(id: $0) }) ?? latestRun() else { return nil }
        return ExportedRun(id: run.id, sinks: run.sinks, outputs: Self.outputIDs(ofDocument: run.document))
    }

    public func exportRecords(of run: ExportedRun, only: ItemStatus?, _ body: (ExportRecord) throws -> Void) throws {
        try exportRecords(runId: run.id, only: only, body)
    }
}
