import Foundation
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The JSON Lines record `imgpipe export` writes, byte for byte: written straight into bytes
/// (`JSONBytes`), it must be the text the tree of values (`JSONValue`) gives, escapes and all.
@Suite("Export format")
struct ExportFormatTests {
    /// Text that needs every kind of escape, letters of several bytes, and a `$$` (a recorded `$`).
    static let awkward = [
        "plain.jpg", "", "quote\"d", "back\\slash", "line\nbreak\r\n", "tab\tbell\u{07}nul\u{00}unit\u{1F}",
        "é, 東京, 😀", "k$$1", "\"\\\n",
    ]

    static func record(_ text: String) -> ExportRecord {
        var record = ExportRecord(
            key: text, location: "/in/" + text, status: "done", reason: text.isEmpty ? nil : text, message: text,
            attempts: 2, tier: "local", metadata: #"{"title": "\u00e9 \"x\"", "n": 3, "list": [1, null, true]}"#,
            outputs: [
                ("small", .init(name: text + ".jpg", format: "jpeg", width: 10, height: nil, bytes: 300, sha256: text)),
                ("big", .init(name: "b", format: "webp", width: nil, height: 20, bytes: nil, sha256: nil)),
            ],
            deliveries: [
                ("disk", [("small", .init(status: "done", remoteURL: text, httpStatus: nil, attempts: 1, message: nil))]),
                ("web", [("big", .init(status: "failed", remoteURL: nil, httpStatus: 503, attempts: 3, message: text))]),
            ])
        // A duplicate's fields with some texts, a fingerprint with the others.
        if text.count % 2 == 0 {
            record.duplicateOf = text
            record.distance = text.count
            record.placeholder = true
        } else {
            record.sha256 = String(repeating: "a", count: 64)
            record.fingerprint = ImageFingerprint(
                phash: "0123456789abcdef", thumbhash: "1QcSHQRnh493V4dIh4eXh1h4kJUI", dominant: "#4a6f8c")
        }
        return record
    }

    /// The record as the tree of values writes it (what `export` wrote before `JSONBytes`).
    static func reference(_ record: ExportRecord, redact: (String) -> String) -> String {
        func text(_ value: String?) -> JSONValue { value.map { .string(redact($0)) } ?? .null }
        func number(_ value: Int?) -> JSONValue { value.map { .number(Double($0), isInteger: true) } ?? .null }
        let outputs = record.outputs.map { id, output -> (key: String, value: JSONValue) in
            (
                id,
                .object([
                    ("name", .string(output.name)), ("format", .string(output.format)), ("width", number(output.width)),
                    ("height", number(output.height)), ("bytes", number(output.bytes)), ("sha256", text(output.sha256)),
                ])
            )
        }
        let deliveries = record.deliveries.map { sink, byOutput -> (key: String, value: JSONValue) in
            (
                sink,
                .object(
                    byOutput.map { id, delivery in
                        (
                            id,
                            .object([
                                ("status", .string(delivery.status)), ("remoteURL", text(delivery.remoteURL)),
                                ("httpStatus", number(delivery.httpStatus)), ("attempts", number(delivery.attempts)),
                                ("message", text(delivery.message)),
                            ])
                        )
                    })
            )
        }
        var members: [(key: String, value: JSONValue)] = [
            ("key", .string(redact(Environment.shown(record.key)))),
            ("location", .string(redact(Environment.shown(record.location)))),
            ("status", .string(record.status)), ("reason", text(record.reason)), ("message", text(record.message)),
            ("attempts", number(record.attempts)), ("tier", text(record.tier)),
            ("metadata", record.metadata.flatMap { JSONValue.lenient(redact($0)) } ?? .null),
        ]
        let fingerprint: [String?] = [
            record.sha256, record.fingerprint?.phash, record.fingerprint?.thumbhash, record.fingerprint?.dominant,
        ]
        for (name, value) in zip(["sha256", "phash", "thumbhash", "dominant"], fingerprint) {
            members.append((name, value.map(JSONValue.string) ?? .null))
        }
        if let duplicateOf = record.duplicateOf {
            members.append(("duplicateOf", .string(redact(Environment.shown(duplicateOf)))))
            members.append(("distance", number(record.distance)))
        }
        if record.placeholder { members.append(("placeholder", .bool(true))) }
        members += [("outputs", .object(outputs)), ("deliveries", .object(deliveries))]
        return JSONValue.object(members).serialized()
    }

    @Test(arguments: awkward)
    func aLineIsTheTextTheTreeOfValuesGives(_ text: String) throws {
        let record = Self.record(text)
        let redact = { (value: String) in value.replacingOccurrences(of: "東京", with: "***") }
        let line = ExportFormat.jsonl.line(record, sinks: ["disk", "web"], redact: redact)
        #expect(line == Self.reference(record, redact: redact))
        // And JSON that a reader gives back as written: the key as shown, `$$` read as `$`.
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(parsed["key"] as? String == redact(Environment.shown(text)))
        #expect(parsed["message"] as? String == redact(text))
        #expect(!line.contains("\n"), "one record, one line")
    }

    @Test(arguments: awkward)
    func aQuotedTextReadsBackAsWritten(_ text: String) {
        var bytes: [UInt8] = []
        JSONValue.quote(text, into: &bytes)
        let read = try? JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed) as? String
        #expect(read == text)
    }

    @Test(arguments: [
        ("plain", #""plain""#), ("say \"hi\"", #""say \"hi\"""#), (#"C:\dir"#, #""C:\\dir""#),
        ("a\nb\rc\td", #""a\nb\rc\td""#), ("\u{01}\u{1f}", #""\u0001\u001f""#), ("東京 é", #""東京 é""#),
    ])
    func aQuoteWritesJSONsEscapes(_ text: String, _ expected: String) {
        #expect(JSONValue.quote(text) == expected)
    }

    @Test(arguments: [(0, "0"), (7, "7"), (-42, "-42"), (Int64.max, "9223372036854775807"), (Int64.min, "-9223372036854775808")])
    func aDecimalIsWrittenDigitByDigit(_ value: Int64, _ expected: String) {
        var bytes = Array("x=".utf8)
        JSONValue.decimal(value, into: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == "x=" + expected)
    }

    /// Every integer a double holds exactly is written as an integer: a 16-digit key or a
    /// timestamp in microseconds is not `4503599627370497.0`.
    @Test(arguments: [
        (1e15, "1000000000000000"), (4_503_599_627_370_497, "4503599627370497"), (-9_007_199_254_740_992, "-9007199254740992"),
        (1_577_836_800_000_000, "1577836800000000"),
    ])
    func anIntegerUpTo2To53IsWrittenAsOne(_ value: Double, _ expected: String) {
        #expect(JSONValue.number(value, isInteger: true).serialized() == expected)
    }
}
