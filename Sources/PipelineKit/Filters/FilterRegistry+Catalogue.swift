/// The registry as data, for `imgpipe filters --json`.
public struct FilterCatalogueEntry: Sendable, Encodable {
    public struct Parameter: Sendable, Encodable {
        public let name: String
        public let type: String
        public let minimum: Double?
        public let maximum: Double?
        public let values: [String]?
        public let defaultValue: JSONValue?
        public let required: Bool
        public let description: String

        enum CodingKeys: String, CodingKey {
            case name, type, minimum, maximum, values, required, description
            case defaultValue = "default"
        }
    }

    public let op: String
    public let description: String
    public let parameters: [Parameter]
}

extension FilterRegistry {
    public var catalogue: [FilterCatalogueEntry] {
        definitions.map { definition in
            FilterCatalogueEntry(
                op: definition.name, description: definition.summary,
                parameters: definition.parameters.map { p in
                    var type = "string"
                    var minimum: Double?
                    var maximum: Double?
                    var values: [String]?
                    switch p.type {
                    case .integer(let range):
                        type = "integer"
                        minimum = Double(range.lowerBound)
                        maximum = range.upperBound == Int.max ? nil : Double(range.upperBound)
                    case .number(let range):
                        type = "number"
                        minimum = range.lowerBound
                        maximum = range.upperBound
                    case .boolean: type = "boolean"
                    case .string: type = "string"
                    case .choice(let options):
                        type = "string"
                        values = options
                    case .colour: type = "colour"
                    case .aspect: type = "aspect"
                    case .point: type = "point"
                    }
                    return .init(
                        name: p.name, type: type, minimum: minimum, maximum: maximum, values: values,
                        defaultValue: p.defaultValue, required: p.required, description: p.summary)
                })
        }
    }
}

extension JSONValue: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value, let isInteger):
            if isInteger, abs(value) < 9e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let items): try container.encode(items)
        case .object(let members):
            var keyed = encoder.container(keyedBy: AnyKey.self)
            for member in members { try keyed.encode(member.value, forKey: AnyKey(member.key)) }
        }
    }

    private struct AnyKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(_ key: String) { stringValue = key }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
}
