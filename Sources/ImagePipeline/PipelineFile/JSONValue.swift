/// A JSON document as written: objects keep their key order and numbers keep whether they
/// were written as integers, so errors can quote the input faithfully.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// `isInteger` is true when the text had no fraction or exponent.
    case number(Double, isInteger: Bool)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a, _), .number(let b, _)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// The value quoted as in an error message: strings in quotes, containers summarised.
    public var quoted: String {
        switch self {
        case .null: "null"
        case .bool(let value): value ? "true" : "false"
        case .number: serialized()
        case .string(let value): JSONValue.quote(value)
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Compact JSON text with keys in their written order.
    public func serialized(sortedKeys: Bool = false) -> String {
        var out = ""
        serialize(into: &out, sortedKeys: sortedKeys)
        return out
    }

    /// `serialized`, appended to `out`: one string grows, none is made per value.
    public func serialize(into out: inout String, sortedKeys: Bool = false) {
        switch self {
        case .null: out += "null"
        case .bool(let value): out += value ? "true" : "false"
        case .number(let value, let isInteger):
            if isInteger, abs(value) < 1e15 { out += String(Int64(value)) } else { out += String(value) }
        case .string(let value): JSONValue.quote(value, into: &out)
        case .array(let items):
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += "," }
                item.serialize(into: &out, sortedKeys: sortedKeys)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (index, member) in (sortedKeys ? members.sorted { $0.key < $1.key } : members).enumerated() {
                if index > 0 { out += "," }
                JSONValue.quote(member.key, into: &out)
                out += ":"
                member.value.serialize(into: &out, sortedKeys: sortedKeys)
            }
            out += "}"
        }
    }

    /// The value with every `//…` key (a comment) left out, at any depth: a comment
    /// changes no output, so it is no part of what `resume` compares.
    public var withoutComments: JSONValue {
        switch self {
        case .array(let items): .array(items.map(\.withoutComments))
        case .object(let members): .object(members.filter { !$0.key.hasPrefix("//") }.map { ($0.key, $0.value.withoutComments) })
        default: self
        }
    }

    /// A member of an object, or nil.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    static func quote(_ text: String) -> String {
        var out = ""
        quote(text, into: &out)
        return out
    }

    /// `text` as a JSON string appended to `out`. Text with nothing to escape (most keys,
    /// names and URLs) is appended whole; otherwise it goes through the byte writer below.
    static func quote(_ text: String, into out: inout String) {
        func special(_ byte: UInt8) -> Bool { byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") }
        let needsEscape =
            text.utf8.withContiguousStorageIfAvailable { $0.contains(where: special) } ?? text.utf8.contains(where: special)
        guard needsEscape else {
            out += "\""
            out += text
            out += "\""
            return
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 8)
        quote(text, into: &bytes)
        out += String(decoding: bytes, as: UTF8.self)
    }

    /// `text` as a JSON string appended to `out` as UTF-8: runs of bytes with nothing to
    /// escape are copied whole, each multi-byte letter as it is.
    static func quote(_ text: String, into out: inout [UInt8]) {
        var text = text
        out.append(UInt8(ascii: "\""))
        text.withUTF8 { utf8 in
            var start = 0
            var index = 0
            while index < utf8.count {
                let byte = utf8[index]
                index += 1
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index - 1]))
                start = index
                switch byte {
                case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
                case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
                case UInt8(ascii: "\n"): out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
                case UInt8(ascii: "\r"): out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
                case UInt8(ascii: "\t"): out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    out += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
        }
        out.append(UInt8(ascii: "\""))
    }
}
