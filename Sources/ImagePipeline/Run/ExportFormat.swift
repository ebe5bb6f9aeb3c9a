import Foundation
import ParquetKit
import PipelineKit

/// How `imgpipe export` writes records: one JSON object per line, CSV, or Parquet.
///
/// JSON Lines keep the record's shape: `outputs` and `deliveries` are objects by output id
/// (and by sink, then output id), `metadata` is the feed's own object. CSV flattens it into
/// fixed columns: `key`, `location`, `status`, `reason`, `message`, `attempts`, `tier`,
/// `metadata` (the JSON text), `sha256` (of the input's bytes), `phash`, `thumbhash`,
/// `dominant` (`ImageFingerprint`), `duplicateOf`, `distance` (a `dedup` duplicate's),
/// `placeholder` (1 for an item made before its bytes were found to be its host's
/// placeholder),
/// `output.name`, `output.format`, `output.width`,
/// `output.height`, `output.bytes`, `output.sha256`, `output.quality`, `output.ssim` (a
/// quality search's choice, and the SSIM reached with an SSIM target; empty otherwise),
/// then for each sink `S` of the run
/// `delivery.S.status`, `delivery.S.remoteURL`, `delivery.S.httpStatus`,
/// `delivery.S.attempts` (RFC 4180 quoting; an empty cell for a missing value). With
/// several outputs, each output `O` has its own columns `output.O.name` … `output.O.ssim`,
/// and each sink its `delivery.S.O.status` … `delivery.S.O.attempts`, in the pipeline's
/// order of outputs. Parquet has CSV's columns, typed: `attempts`, `distance`, `placeholder`, `output.width`,
/// `output.height`, `output.bytes`, `output.quality`, `delivery.S.httpStatus` and
/// `delivery.S.attempts` are 64-bit integers, `output.ssim` a double, the others text; a
/// missing value is null.
public enum ExportFormat: String, Sendable, CaseIterable {
    case jsonl, csv, parquet

    static let outputFields = ["name", "format", "width", "height", "bytes", "sha256", "quality", "ssim"]
    static let deliveryFields = ["status", "remoteURL", "httpStatus", "attempts"]

    /// A cell of the flat layout CSV and Parquet share.
    public enum Cell {
        case text(String?)
        case int(Int?)
        case number(Double?)
    }

    /// What a column of the flat layout holds.
    enum Kind {
        case text, integer, number
    }

    /// The flat layout's columns, each with what it holds. `outputs` are the run's output ids.
    static func columns(sinks: [String], outputs: [String]) -> [(name: String, kind: Kind)] {
        func kind(_ field: String) -> Kind {
            switch field {
            case "attempts", "width", "height", "bytes", "httpStatus", "quality", "distance", "placeholder": .integer
            case "ssim": .number
            default: .text
            }
        }
        let fixed = [
            "key", "location", "status", "reason", "message", "attempts", "tier", "metadata", "sha256", "phash", "thumbhash",
            "dominant", "duplicateOf", "distance", "placeholder",
        ].map { ($0, kind($0)) }
        let one = outputs == [OutputSpec.defaultID]
        let perOutput = outputs.flatMap { id in
            Self.outputFields.map { (one ? "output.\($0)" : "output.\(id).\($0)", kind($0)) }
        }
        let perSink = sinks.flatMap { sink in
            outputs.flatMap { id in
                Self.deliveryFields.map { (one ? "delivery.\(sink).\($0)" : "delivery.\(sink).\(id).\($0)", kind($0)) }
            }
        }
        return (fixed + perOutput + perSink).map { (name: $0.0, kind: $0.1) }
    }

    /// The first line (CSV's header), or nil. `outputs` are the run's output ids.
    public func header(sinks: [String], outputs: [String] = [OutputSpec.defaultID]) -> String? {
        guard self == .csv else { return nil }
        return Self.columns(sinks: sinks, outputs: outputs).map { Self.csvCell($0.name) }.joined(separator: ",")
    }

    /// Parquet's columns for a run's sinks and outputs.
    public static func parquetColumns(sinks: [String], outputs: [String]) -> [ParquetColumn] {
        columns(sinks: sinks, outputs: outputs).map { column in
            switch column.kind {
            case .integer: ParquetColumn(name: column.name, type: .int64)
            case .number: ParquetColumn(name: column.name, type: .double)
            case .text: .text(column.name)
            }
        }
    }

    /// One record as a Parquet row, in `parquetColumns`' order.
    public static func parquetRow(
        _ record: ExportRecord, sinks: [String], outputs: [String], redact: (String) -> String
    ) -> [ParquetValue?] {
        cells(record, sinks: sinks, outputs: outputs, redact: redact).map { cell in
            switch cell {
            case .text(let text): text.map(ParquetValue.text)
            case .int(let number): number.map { .int(Int64($0)) }
            case .number(let number): number.map(ParquetValue.double)
            }
        }
    }

    /// One record as one line (without the newline). `redact` masks what must not leave.
    /// Parquet is a file, not lines (`export` writes its rows with `parquetRow`): given it,
    /// this writes the CSV line of the same cells.
    public func line(
        _ record: ExportRecord, sinks: [String], outputs: [String] = [OutputSpec.defaultID],
        redact: (String) -> String
    ) -> String {
        switch self {
        case .jsonl: jsonLine(record, redact: redact)
        case .csv, .parquet:
            Self.cells(record, sinks: sinks, outputs: outputs, redact: redact).map { cell in
                switch cell {
                case .text(let text): Self.csvCell(text ?? "")
                case .int(let number): number.map(String.init) ?? ""
                // As JSON Lines write it.
                case .number(let number): number.map { JSONValue.number($0, isInteger: false).serialized() } ?? ""
                }
            }.joined(separator: ",")
        }
    }

    private func jsonLine(_ record: ExportRecord, redact: (String) -> String) -> String {
        var json = JSONBytes()
        json.open()
        json.member("key", redact(Environment.shown(record.key)))
        json.member("location", redact(Environment.shown(record.location)))
        json.member("status", record.status)
        json.member("reason", record.reason.map(redact))
        json.member("message", record.message.map(redact))
        json.member("attempts", int: record.attempts)
        json.member("tier", record.tier.map(redact))
        json.key("metadata")
        if let metadata = record.metadata.flatMap({ JSONValue.lenient(redact($0)) }) { json.value(metadata) } else { json.null() }
        json.member("sha256", record.sha256)
        json.member("phash", record.fingerprint?.phash)
        json.member("thumbhash", record.fingerprint?.thumbhash)
        json.member("dominant", record.fingerprint?.dominant)
        if let duplicateOf = record.duplicateOf {
            json.member("duplicateOf", redact(Environment.shown(duplicateOf)))
            json.member("distance", int: record.distance)
        }
        if record.placeholder {
            json.key("placeholder")
            json.value(.bool(true))
        }
        json.key("outputs")
        json.open()
        for (id, output) in record.outputs {
            json.key(id)
            json.open()
            json.member("name", output.name)
            json.member("format", output.format)
            json.member("width", int: output.width)
            json.member("height", int: output.height)
            json.member("bytes", int: output.bytes)
            json.member("sha256", output.sha256.map(redact))
            if let quality = output.quality { json.member("quality", int: quality) }
            if let ssim = output.ssim { json.member("ssim", number: ssim) }
            json.close()
        }
        json.close()
        json.key("deliveries")
        json.open()
        for (sink, byOutput) in record.deliveries {
            json.key(sink)
            json.open()
            for (id, delivery) in byOutput {
                json.key(id)
                json.open()
                json.member("status", delivery.status)
                json.member("remoteURL", delivery.remoteURL.map(redact))
                json.member("httpStatus", int: delivery.httpStatus)
                json.member("attempts", int: delivery.attempts)
                json.member("message", delivery.message.map(redact))
                json.close()
            }
            json.close()
        }
        json.close()
        json.close()
        return json.text
    }

    /// A record's cells in `columns`' order.
    static func cells(_ record: ExportRecord, sinks: [String], outputs: [String], redact: (String) -> String) -> [Cell] {
        var cells: [Cell] = [
            .text(redact(Environment.shown(record.key))), .text(redact(Environment.shown(record.location))), .text(record.status),
            .text(record.reason), .text(record.message.map(redact)), .int(record.attempts), .text(record.tier),
            .text(record.metadata.map(redact)), .text(record.sha256), .text(record.fingerprint?.phash),
            .text(record.fingerprint?.thumbhash), .text(record.fingerprint?.dominant),
            .text(record.duplicateOf.map { redact(Environment.shown($0)) }), .int(record.distance),
            .int(record.placeholder ? 1 : nil),
        ]
        for id in outputs {
            let output = record.outputs.first { $0.id == id }?.output
            cells += [
                .text(output?.name), .text(output?.format), .int(output?.width), .int(output?.height), .int(output?.bytes),
                .text(output?.sha256), .int(output?.quality), .number(output?.ssim),
            ]
        }
        for sink in sinks {
            let byOutput = record.deliveries.first { $0.sink == sink }?.byOutput ?? []
            for id in outputs {
                let delivery = byOutput.first { $0.id == id }?.delivery
                cells += [
                    .text(delivery?.status), .text(delivery?.remoteURL.map(redact)), .int(delivery?.httpStatus),
                    .int(delivery?.attempts),
                ]
            }
        }
        return cells
    }

    /// RFC 4180: quoted when it holds a comma, a quote or a line break; quotes doubled.
    static func csvCell(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
