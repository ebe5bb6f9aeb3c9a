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
        switch self {
        case .null: return "null"
        case .bool(let value): return value ? "true" : "false"
        case .number(let value, let isInteger):
            if isInteger, abs(value) < 1e15 { return String(Int64(value)) }
            return String(value)
        case .string(let value): return JSONValue.quote(value)
        case .array(let items):
            return "[" + items.map { $0.serialized(sortedKeys: sortedKeys) }.joined(separator: ",") + "]"
        case .object(let members):
            let ordered = sortedKeys ? members.sorted { $0.key < $1.key } : members
            return "{"
                + ordered.map { JSONValue.quote($0.key) + ":" + $0.value.serialized(sortedKeys: sortedKeys) }
                .joined(separator: ",") + "}"
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
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20:
                out +=
                    "\\u" + String(repeating: "0", count: 4 - String(c.value, radix: 16).count)
                    + String(c.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
