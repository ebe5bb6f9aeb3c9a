/// An RFC 6901 JSON Pointer: `""` is the whole document, `/data/items` the member `items`
/// of the member `data`; in a token `~1` stands for `/` and `~0` for `~`, and an array is
/// indexed by a decimal number without leading zeros (`/pages/0`). `json-feed` finds its
/// items (`items`) and the next page's URL (`next`) with one.
public struct JSONPointer: Sendable, Equatable, CustomStringConvertible {
    /// The pointer as written.
    public let raw: String
    /// Its reference tokens, unescaped.
    public let tokens: [String]

    /// Reads `text`; nil with the reason when it is no JSON Pointer.
    public static func parse(_ text: String) -> Result<JSONPointer, PointerError> {
        guard !text.isEmpty else { return .success(JSONPointer(raw: text, tokens: [])) }
        guard text.hasPrefix("/") else {
            return .failure(PointerError("a JSON Pointer is empty or starts with \"/\" (e.g. \"/data/items\")"))
        }
        var tokens: [String] = []
        for part in text.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            var token = ""
            var escaped = false
            for character in part {
                if escaped {
                    switch character {
                    case "0": token.append("~")
                    case "1": token.append("/")
                    default:
                        return .failure(
                            PointerError("\"~\(character)\" is no escape: write \"~0\" for \"~\" and \"~1\" for \"/\""))
                    }
                    escaped = false
                } else if character == "~" {
                    escaped = true
                } else {
                    token.append(character)
                }
            }
            if escaped { return .failure(PointerError("a \"~\" at the end of a token: write \"~0\" for \"~\"")) }
            tokens.append(token)
        }
        return .success(JSONPointer(raw: text, tokens: tokens))
    }

    /// Why a text is no JSON Pointer.
    public struct PointerError: Error, Sendable, CustomStringConvertible {
        public let description: String
        package init(_ description: String) { self.description = description }
    }

    public var description: String { raw }

    /// The value `document` holds where this points; nil when nothing is there (a member
    /// missing, an index past the end or not a number, or a step into a string or number).
    public func resolve(in document: JSONValue) -> JSONValue? {
        var value = document
        for token in tokens {
            switch value {
            case .object:
                guard let member = value[token] else { return nil }
                value = member
            case .array(let items):
                // No leading zeros, no sign: `0`, `1`, …, `10` (RFC 6901, section 4).
                guard token == "0" || (token.first != "0" && token.allSatisfy { ("0"..."9").contains($0) }),
                    let index = Int(token), index < items.count
                else { return nil }
                value = items[index]
            default:
                return nil
            }
        }
        return value
    }
}
