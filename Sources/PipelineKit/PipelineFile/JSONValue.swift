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
        var out: [UInt8] = []
        serialize(into: &out, sortedKeys: sortedKeys)
        return String(decoding: out, as: UTF8.self)
    }

    /// `serialized` as UTF-8 appended to `out`: one buffer grows, nothing is made per value.
    public func serialize(into out: inout [UInt8], sortedKeys: Bool = false) {
        switch self {
        case .null: out += "null".utf8
        case .bool(let value): out += (value ? "true" : "false").utf8
        case .number(let value, let isInteger):
            // Every integer a double holds exactly (to 2⁵³) is written as one.
            if isInteger, abs(value) <= 9_007_199_254_740_992 {
                Self.decimal(Int64(value), into: &out)
            } else {
                out += String(value).utf8
            }
        case .string(let value): JSONValue.quote(value, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.serialize(into: &out, sortedKeys: sortedKeys)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, member) in (sortedKeys ? members.sorted { $0.key < $1.key } : members).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.quote(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.serialize(into: &out, sortedKeys: sortedKeys)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// `value` in decimal digits appended to `out`, without a `String` made for it.
    package static func decimal(_ value: Int64, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned: `Int64.min` has no positive twin.
        var rest = value.magnitude
        let start = out.count
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        out[start...].reverse()
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

    /// `text` as a JSON string.
    package static func quote(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 2)
        quote(text, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `text` as a JSON string appended to `out` as UTF-8: runs of bytes with nothing to
    /// escape are copied whole, each multi-byte letter as it is.
    package static func quote(_ text: String, into out: inout [UInt8]) {
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
