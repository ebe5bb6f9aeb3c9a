import Foundation
import PipelineKit

/// How `imgpipe export` writes records: one JSON object per line, or CSV.
///
/// JSON Lines keep the record's shape: `outputs` and `deliveries` are objects by output id
/// (and by sink, then output id), `metadata` is the feed's own object. CSV flattens it into
/// fixed columns: `key`, `location`, `status`, `reason`, `message`, `attempts`, `tier`,
/// `metadata` (the JSON text), `output.name`, `output.format`, `output.width`,
/// `output.height`, `output.bytes`, `output.sha256`, then for each sink `S` of the run
/// `delivery.S.status`, `delivery.S.remoteURL`, `delivery.S.httpStatus`,
/// `delivery.S.attempts` (RFC 4180 quoting; an empty cell for a missing value). With
/// several outputs, each output `O` has its own columns `output.O.name` … `output.O.sha256`,
/// and each sink its `delivery.S.O.status` … `delivery.S.O.attempts`, in the pipeline's
/// order of outputs.
public enum ExportFormat: String, Sendable, CaseIterable {
    case jsonl, csv

    static let outputFields = ["name", "format", "width", "height", "bytes", "sha256"]
    static let deliveryFields = ["status", "remoteURL", "httpStatus", "attempts"]

    /// The first line (CSV's header), or nil. `outputs` are the run's output ids.
    public func header(sinks: [String], outputs: [String] = [OutputSpec.defaultID]) -> String? {
        guard self == .csv else { return nil }
        let fixed = ["key", "location", "status", "reason", "message", "attempts", "tier", "metadata"]
        let one = outputs == [OutputSpec.defaultID]
        let perOutput = outputs.flatMap { id in Self.outputFields.map { one ? "output.\($0)" : "output.\(id).\($0)" } }
        let perSink = sinks.flatMap { sink in
            outputs.flatMap { id in Self.deliveryFields.map { one ? "delivery.\(sink).\($0)" : "delivery.\(sink).\(id).\($0)" } }
        }
        return (fixed + perOutput + perSink).map(Self.csvCell).joined(separator: ",")
    }

    /// One record as one line (without the newline). `redact` masks what must not leave.
    public func line(
        _ record: ExportRecord, sinks: [String], outputs: [String] = [OutputSpec.defaultID],
        redact: (String) -> String
    ) -> String {
        switch self {
        case .jsonl: jsonLine(record, redact: redact)
        case .csv: csvLine(record, sinks: sinks, outputs: outputs, redact: redact)
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

    private func csvLine(_ record: ExportRecord, sinks: [String], outputs: [String], redact: (String) -> String) -> String {
        var cells: [String?] = [
            redact(Environment.shown(record.key)), redact(Environment.shown(record.location)), record.status, record.reason,
            record.message.map(redact), String(record.attempts), record.tier, record.metadata.map(redact),
        ]
        for id in outputs {
            let output = record.outputs.first { $0.id == id }?.output
            cells += [
                output?.name, output?.format, output?.width.map(String.init), output?.height.map(String.init),
                output?.bytes.map(String.init), output?.sha256,
            ]
        }
        for sink in sinks {
            let byOutput = record.deliveries.first { $0.sink == sink }?.byOutput ?? []
            for id in outputs {
                let delivery = byOutput.first { $0.id == id }?.delivery
                cells += [
                    delivery?.status, delivery?.remoteURL.map(redact), delivery?.httpStatus.map(String.init),
                    delivery.map { String($0.attempts) },
                ]
            }
        }
        return cells.map { Self.csvCell($0 ?? "") }.joined(separator: ",")
    }

    /// RFC 4180: quoted when it holds a comma, a quote or a line break; quotes doubled.
    static func csvCell(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
