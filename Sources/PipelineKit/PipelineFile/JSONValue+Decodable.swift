import Foundation

/// Third-party JSON (feed pages, upload answers, `.jsonl` lines) is read with Foundation's
/// `JSONDecoder`, leniently, unlike pipeline files (`JSONParser`, strict): a server's
/// duplicate key is not an error — Foundation's decoder on Linux (swift-foundation, Swift
/// 6.3) keeps the first value of a repeated key, as the tests check — and the work is
/// linear in the key count.
extension JSONValue: Decodable {
    /// Deeper nesting than this is refused, so that decoding cannot exhaust a thread's stack.
    static let maxDecodingDepth = 128

    /// Any JSON value. An object's keys come out sorted: the decoder does not keep their order.
    public init(from decoder: any Decoder) throws {
        guard decoder.codingPath.count < Self.maxDecodingDepth else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "nesting deeper than \(Self.maxDecodingDepth) levels"))
        }
        let scalar = try decoder.singleValueContainer()
        if scalar.decodeNil() {
            self = .null
        } else if let text = try? scalar.decode(String.self) {
            self = .string(text)
        } else if var items = try? decoder.unkeyedContainer() {
            var values: [JSONValue] = []
            while !items.isAtEnd { values.append(try items.decode(JSONValue.self)) }
            self = .array(values)
        } else if let members = try? decoder.container(keyedBy: AnyKey.self) {
            self = .object(
                try members.allKeys.sorted { $0.stringValue < $1.stringValue }.map { key in
                    (key.stringValue, try members.decode(JSONValue.self, forKey: key))
                })
        } else if let flag = try? scalar.decode(Bool.self) {
            self = .bool(flag)
        } else if let integer = try? scalar.decode(Int64.self) {
            self = .number(Double(integer), isInteger: true)
        } else if let number = try? scalar.decode(Double.self) {
            self = .number(number, isInteger: false)
        } else {
            // A value no Swift type holds (a string with a lone surrogate, `"\ud800"`): one
            // odd field of a third-party item is dropped, never the item or its page.
            self = .null
        }
    }

    /// `text` read leniently (as a feed page is), or nil when it is not JSON at all.
    package static func lenient(_ text: String) -> JSONValue? {
        try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    /// The text (`stringValue`) of member `name` of an item's metadata, the JSON object's
    /// text as imgpipe stores it; nil when there is none. The one reading of a caption or an
    /// expected hash, for sinks, the hash check and `{caption}` alike.
    package static func text(of name: String, inMetadata metadata: String?) -> String? {
        guard let metadata, let value = try? JSONParser.parse(metadata) else { return nil }
        return value[name]?.stringValue
    }

    /// A text value: a string, or a number written as text (`12`, `1.5`); else nil.
    var stringValue: String? {
        switch self {
        case .string(let text): text
        case .number(let value, let isInteger): isInteger ? String(Int64(value)) : String(value)
        default: nil
        }
    }

    /// A string; nil for any other type. What an image URL is read with: a number is no
    /// URL (`"url": 123` is missing, not the URL "123"), where a key may be one.
    package var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    package var arrayValue: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }
}

/// Any key of a JSON object.
struct AnyKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// A value that reads as nil when it has another shape than `T`, so that one odd field or
/// element of a server's answer does not fail the whole answer.
struct Lenient<T: Decodable>: Decodable {
    let value: T?
    init(from decoder: any Decoder) throws { value = try? T(from: decoder) }
}

/// The elements of an array that read as `T`; empty when the value is not an array.
struct LenientArray<T: Decodable>: Decodable {
    let elements: [T]
    init(from decoder: any Decoder) throws {
        elements = (try? [Lenient<T>](from: decoder))?.compactMap(\.value) ?? []
    }
}

enum ThirdPartyJSON {
    /// `data` decoded as `T`; a syntax error (or a shape `T` refuses) is a `FeedError`
    /// "`what` is not valid JSON". Foundation on Linux says no more than that about a syntax
    /// error (no position), so only a refused shape gets an explanation.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data, what: String) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: data)
        } catch DecodingError.dataCorrupted {
            throw FeedError("\(what) is not valid JSON")
        } catch {
            throw FeedError("\(what) is not valid JSON (\(error))")
        }
    }
}
