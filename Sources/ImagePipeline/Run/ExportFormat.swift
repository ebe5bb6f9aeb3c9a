import Foundation

/// How `imgpipe export` writes records: one JSON object per line, or CSV.
///
/// JSON Lines keep the record's shape: `outputs` and `deliveries` are objects by output id
/// (and by sink, then output id), `metadata` is the feed's own object. CSV flattens it into
/// fixed columns: `key`, `location`, `status`, `reason`, `message`, `attempts`, `tier`,
/// `metadata` (the JSON text), `output.name`, `output.format`, `output.width`,
/// `output.height`, `output.bytes`, `output.sha256`, then for each sink `S` of the run
/// `delivery.S.status`, `delivery.S.remoteURL`, `delivery.S.httpStatus`,
/// `delivery.S.attempts` (RFC 4180 quoting; an empty cell for a missing value).
public enum ExportFormat: String, Sendable, CaseIterable {
    case jsonl, csv

    /// The first line (CSV's header), or nil.
    public func header(sinks: [String]) -> String? {
        guard self == .csv else { return nil }
        let fixed = ["key", "location", "status", "reason", "message", "attempts", "tier", "metadata",
                     "output.name", "output.format", "output.width", "output.height", "output.bytes", "output.sha256"]
        let perSink = sinks.flatMap { sink in ["status", "remoteURL", "httpStatus", "attempts"].map { "delivery.\(sink).\($0)" } }
        return (fixed + perSink).map(Self.csvCell).joined(separator: ",")
    }

    /// One record as one line (without the newline). `redact` masks what must not leave.
    public func line(_ record: ExportRecord, sinks: [String], redact: (String) -> String) -> String {
        switch self {
        case .jsonl: jsonLine(record, redact: redact)
        case .csv: csvLine(record, sinks: sinks, redact: redact)
        }
    }

    private func jsonLine(_ record: ExportRecord, redact: (String) -> String) -> String {
        func text(_ value: String?) -> JSONValue { value.map { .string(redact($0)) } ?? .null }
        func number(_ value: Int?) -> JSONValue { value.map { .number(Double($0), isInteger: true) } ?? .null }
        let metadata: JSONValue = record.metadata.flatMap { JSONValue.lenient(redact($0)) } ?? .null
        let outputs = JSONValue.object(record.outputs.map { id, output in
            (id, .object([("name", .string(output.name)), ("format", .string(output.format)), ("width", number(output.width)),
                          ("height", number(output.height)), ("bytes", number(output.bytes)), ("sha256", text(output.sha256))]))
        })
        let deliveries = JSONValue.object(record.deliveries.map { sink, byOutput in
            (sink, .object(byOutput.map { id, delivery in
                (id, .object([("status", .string(delivery.status)), ("remoteURL", text(delivery.remoteURL)),
                              ("httpStatus", number(delivery.httpStatus)), ("attempts", number(delivery.attempts)),
                              ("message", text(delivery.message))]))
            }))
        })
        return JSONValue.object([
            ("key", .string(redact(record.key))), ("location", .string(redact(record.location))),
            ("status", .string(record.status)), ("reason", text(record.reason)), ("message", text(record.message)),
            ("attempts", number(record.attempts)), ("tier", text(record.tier)), ("metadata", metadata),
            ("outputs", outputs), ("deliveries", deliveries),
        ]).serialized()
    }

    private func csvLine(_ record: ExportRecord, sinks: [String], redact: (String) -> String) -> String {
        let output = record.outputs.first?.output
        var cells: [String?] = [redact(record.key), redact(record.location), record.status, record.reason,
                                record.message.map(redact), String(record.attempts), record.tier, record.metadata.map(redact),
                                output?.name, output?.format, output?.width.map(String.init), output?.height.map(String.init),
                                output?.bytes.map(String.init), output?.sha256]
        for sink in sinks {
            let delivery = record.deliveries.first { $0.sink == sink }?.byOutput.first?.delivery
            cells += [delivery?.status, delivery?.remoteURL.map(redact), delivery?.httpStatus.map(String.init),
                      delivery.map { String($0.attempts) }]
        }
        return cells.map { Self.csvCell($0 ?? "") }.joined(separator: ",")
    }

    /// RFC 4180: quoted when it holds a comma, a quote or a line break; quotes doubled.
    static func csvCell(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
