import PipelineKit

/// Compact JSON written straight into UTF-8 bytes, for records written by the hundred
/// thousand (`imgpipe export`): no tree of values is built first, and the text grows in one
/// byte buffer. Objects only need `open`, `key` and `close`; the commas come by themselves.
struct JSONBytes {
    private(set) var bytes: [UInt8] = []
    /// Whether the next key is the first of its object (no comma before it).
    private var first = true

    init(capacity: Int = 512) {
        bytes.reserveCapacity(capacity)
    }

    /// The text written.
    var text: String { String(decoding: bytes, as: UTF8.self) }

    mutating func open() {
        bytes.append(UInt8(ascii: "{"))
        first = true
    }

    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        first = false
    }

    mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        JSONValue.quote(name, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// A member holding a string, or `null` for nil.
    mutating func member(_ name: String, _ value: String?) {
        key(name)
        string(value)
    }

    /// A member holding an integer, or `null` for nil.
    mutating func member(_ name: String, int value: Int?) {
        key(name)
        int(value)
    }

    /// A member holding a number (as `JSONValue` writes one).
    mutating func member(_ name: String, number value: Double) {
        key(name)
        self.value(.number(value, isInteger: false))
    }

    /// A string, or `null` for nil.
    mutating func string(_ value: String?) {
        guard let value else { return null() }
        JSONValue.quote(value, into: &bytes)
    }

    /// An integer, or `null` for nil.
    mutating func int(_ value: Int?) {
        guard let value else { return null() }
        JSONValue.decimal(Int64(value), into: &bytes)
    }

    mutating func null() {
        bytes.append(contentsOf: [UInt8(ascii: "n"), UInt8(ascii: "u"), UInt8(ascii: "l"), UInt8(ascii: "l")])
    }

    /// A value as compact JSON (`JSONValue.serialize`).
    mutating func value(_ value: JSONValue) {
        value.serialize(into: &bytes)
    }
}
