/// The JSON Schema (draft 2020-12) of pipeline files, made from the same definitions the
/// decoder uses: the filter registry, the output formats, sources and sinks. Editors use
/// it for completion; it rejects unknown ops and unknown parameters, like `validate`.
public enum PipelineSchema {
    public static func document(registry: FilterRegistry = .standard) -> JSONValue {
        allowingComments(definitions(registry: registry))
    }

    /// Every closed object also takes `//…` keys, which the decoder reads as comments.
    static func allowingComments(_ value: JSONValue) -> JSONValue {
        switch value {
        case .array(let items):
            return .array(items.map(allowingComments))
        case .object(let members):
            var out = members.map { (key: $0.key, value: allowingComments($0.value)) }
            if let closed = out.firstIndex(where: { $0.key == "additionalProperties" && $0.value == .bool(false) }) {
                out.insert((key: "patternProperties", value: .object([("^//", .object([]))])), at: closed)
            }
            return .object(out)
        default:
            return value
        }
    }

    package static func definitions(registry: FilterRegistry) -> JSONValue {
        .object([
            ("$schema", .string("https://json-schema.org/draft/2020-12/schema")),
            ("title", .string("imgpipe pipeline file, version 1")),
            ("type", .string("object")),
            ("additionalProperties", .bool(false)),
            ("required", strings(["version", "source"])),
            (
                "properties",
                .object([
                    ("version", .object([("const", integer(1))])),
                    ("name", .object([("type", .string("string")), ("minLength", integer(1))])),
                    ("source", ref("source")),
                    ("filters", .object([("type", .string("array")), ("items", ref("filter"))])),
                    ("output", ref("output")),
                    ("outputs", .object([("type", .string("array")), ("minItems", integer(1)), ("items", ref("output"))])),
                    ("sink", ref("sink")),
                    ("sinks", .object([("type", .string("array")), ("minItems", integer(1)), ("items", ref("sink"))])),
                    (
                        "limits",
                        object([
                            ("downloads", integerSchema(1...1024)),
                            ("workers", integerSchema(0...1024)),
                            ("uploads", integerSchema(1...1024)),
                            ("timeout", numberSchema(0.001...86400)),
                            ("maxBytes", integerSchema(1...Int.max)),
                            ("maxPixels", integerSchema(1...Int.max)),
                            ("maxFrames", integerSchema(1...1_000_000)),
                            ("memory", integerSchema(16...1 << 30)),
                            ("rate", numberSchema(0.001...1_000_000)),
                            ("burst", integerSchema(1...1000)),
                        ])
                    ),
                    (
                        "retry",
                        object([
                            ("attempts", integerSchema(1...100)),
                            ("backoff", numberSchema(0...3600)),
                        ])
                    ),
                    (
                        "userAgent",
                        .object([
                            ("type", .string("string")), ("minLength", integer(1)),
                            ("pattern", .string("^[ -~]+$")),
                            ("default", .string(ImgpipeIdentity.defaultUserAgent)),
                        ])
                    ),
                    (
                        "accept",
                        object([
                            ("minWidth", integerSchema(1...Int.max)),
                            ("minHeight", integerSchema(1...Int.max)),
                            ("maxAspect", numberSchema(1...1_000_000)),
                            ("minBytes", integerSchema(1...Int.max)),
                            (
                                "formats",
                                .object([
                                    ("type", .string("array")), ("minItems", integer(1)),
                                    ("items", .object([("enum", strings(SpecNode.withAliases(AcceptRules.formatNames)))])),
                                ])
                            ),
                        ])
                    ),
                    (
                        "network",
                        object([
                            (
                                "deny",
                                .object([
                                    ("type", .string("array")),
                                    (
                                        "items",
                                        .object([
                                            (
                                                "anyOf",
                                                .array([
                                                    .object([
                                                        ("enum", strings(AddressPolicy.AddressClass.allCases.map(\.rawValue)))
                                                    ]),
                                                    addressRange,
                                                ])
                                            )
                                        ])
                                    ),
                                    ("default", strings(AddressPolicy.defaultDeny.sorted().map(\.rawValue))),
                                ])
                            ),
                            ("allow", .object([("type", .string("array")), ("items", addressRange)])),
                        ])
                    ),
                    ("dedup", DedupPolicy.schema),
                ])
            ),
            (
                "oneOf",
                .array([
                    .object([("required", strings(["sink"]))]),
                    .object([("required", strings(["sinks"]))]),
                ])
            ),
            ("not", .object([("required", strings(["output", "outputs"]))])),
            (
                "$defs",
                .object([
                    ("source", .object([("oneOf", .array(sourceSchemas(fallback: true)))])),
                    ("sourceWithoutFallback", .object([("oneOf", .array(sourceSchemas(fallback: false)))])),
                    (
                        "cache",
                        .object([
                            (
                                "oneOf",
                                .array([
                                    .object([("type", .string("boolean"))]),
                                    object([("path", string), ("revalidate", boolean), ("maxSize", integerSchema(1...Int.max))]),
                                ])
                            )
                        ])
                    ),
                    ("strings", .object([("type", .string("object")), ("additionalProperties", string)])),
                    ("sink", .object([("oneOf", .array(SinkRegistry.standard.kinds.map { $0.schema }))])),
                    ("outputID", .object([("type", .string("string")), ("pattern", .string("^[a-z0-9-]+$"))])),
                    ("outputIDs", .object([("type", .string("array")), ("minItems", integer(1)), ("items", ref("outputID"))])),
                    (
                        "output",
                        object([
                            ("id", ref("outputID")),
                            ("filters", .object([("type", .string("array")), ("items", ref("filter"))])),
                            (
                                "format",
                                .object([
                                    ("enum", strings(SpecNode.withAliases(OutputFormat.allCases.map(\.rawValue)) + ["best"]))
                                ])
                            ),
                            (
                                "formats",
                                .object([
                                    ("type", .string("array")), ("minItems", integer(1)), ("uniqueItems", .bool(true)),
                                    ("items", .object([("enum", strings(OutputSpec.bestCandidates.map(\.rawValue)))])),
                                ])
                            ),
                            (
                                "quality",
                                .object([
                                    (
                                        "oneOf",
                                        .array([
                                            integerSchema(1...100),
                                            object([("ssim", numberSchema(0.5...0.9999))], required: ["ssim"]),
                                        ])
                                    )
                                ])
                            ),
                            ("maxBytes", integerSchema(1...Int.max)),
                            ("minQuality", integerSchema(1...100)),
                            ("strip", .object([("type", .string("boolean"))])),
                            ("progressive", .object([("type", .string("boolean"))])),
                            ("compression", integerSchema(0...9)),
                            ("lossless", .object([("type", .string("boolean"))])),
                            ("effort", integerSchema(0...9)),
                            ("animation", .object([("enum", strings(["keep", "first"]))])),
                            ("name", .object([("type", .string("string")), ("minLength", integer(1))])),
                        ])
                    ),
                    ("filter", .object([("oneOf", .array(registry.definitions.map(filterSchema)))])),
                ])
            ),
        ])
    }

    package static let string = JSONValue.object([("type", .string("string"))])
    static let nonEmpty = JSONValue.object([("type", .string("string")), ("minLength", integer(1))])
    package static let boolean = JSONValue.object([("type", .string("boolean"))])
    /// `"pacing"` of a source or sink.
    package static let pacing = JSONValue.object([("enum", strings(["on", "off"]))])
    /// An address or CIDR block, IPv4 or IPv6 (checked as such when the file is read).
    static let addressRange = JSONValue.object([
        ("type", .string("string")), ("pattern", .string("^[0-9A-Fa-f.:]+(/[0-9]{1,3})?$")),
    ])
    /// An RFC 6901 JSON Pointer: empty, or `/` and tokens in which `~` is only `~0` or `~1`.
    static let jsonPointer = JSONValue.object([
        ("type", .string("string")), ("pattern", .string("^(/([^~/]|~[01])*)*$")),
    ])
    static func constant(_ value: String) -> JSONValue { .object([("const", .string(value))]) }

    /// Every source kind as a whole source, or those that can be a fallback (`fallback` false).
    static func sourceSchemas(fallback: Bool) -> [JSONValue] {
        SourceRegistry.standard.kinds.filter { fallback || $0.fallbackRefusal == nil }.map { $0.schema(fallback: fallback) }
    }

    /// `maxPageBytes` of a source that reads feed pages.
    package static let maxPageBytes = integerSchema(1...RemoteOptions.largestMaxPageBytes)

    /// Where a bucket is and how to sign in (the keys `S3Spec` reads, in the order an
    /// unknown key's message lists them); credentials are `${NAME}` references only.
    static let s3Location: [(key: String, value: JSONValue)] = [
        ("bucket", nonEmpty), ("prefix", string),
        ("region", .object([("type", .string("string")), ("pattern", .string("^[A-Za-z0-9-]+$"))])),
        ("endpoint", string), ("pathStyle", boolean),
        ("accessKeyId", reference), ("secretAccessKey", reference), ("sessionToken", reference),
    ]
    static let reference = JSONValue.object([
        ("type", .string("string")), ("pattern", .string("^\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}$")),
    ])

    static func filterSchema(_ definition: FilterDefinition) -> JSONValue {
        var properties: [(key: String, value: JSONValue)] = [
            ("op", .object([("const", .string(definition.name)), ("description", .string(definition.summary))]))
        ]
        for parameter in definition.parameters {
            var schema: [(key: String, value: JSONValue)]
            switch parameter.type {
            case .integer(let range): schema = members(integerSchema(range))
            case .number(let range): schema = members(numberSchema(range))
            case .boolean: schema = [("type", .string("boolean"))]
            case .string: schema = [("type", .string("string"))]
            case .choice(let options): schema = [("enum", strings(SpecNode.withAliases(options)))]
            case .colour:
                schema = [("type", .string("string")), ("pattern", .string("^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$"))]
            case .aspect: schema = [("type", .string("string")), ("pattern", .string("^[0-9]+(\\.[0-9]+)?:[0-9]+(\\.[0-9]+)?$"))]
            case .point:
                let axis: JSONValue = .object([
                    ("oneOf", .array([.object(members(numberSchema(0...1))), .object([("type", .string("string"))])]))
                ])
                schema = [
                    ("type", .string("object")), ("additionalProperties", .bool(false)),
                    ("properties", .object([("x", axis), ("y", axis)])), ("required", strings(["x", "y"])),
                ]
            }
            if let fallback = parameter.defaultValue { schema.append(("default", fallback)) }
            schema.append(("description", .string(parameter.summary)))
            properties.append((parameter.name, .object(schema)))
        }
        let required = ["op"] + definition.parameters.filter(\.required).map(\.name)
        return .object([
            ("type", .string("object")),
            ("additionalProperties", .bool(false)),
            ("required", strings(required)),
            ("properties", .object(properties)),
        ])
    }

    package static func object(_ properties: [(key: String, value: JSONValue)], required: [String] = []) -> JSONValue {
        var members: [(key: String, value: JSONValue)] = [("type", .string("object")), ("additionalProperties", .bool(false))]
        if !required.isEmpty { members.append(("required", strings(required))) }
        members.append(("properties", .object(properties)))
        return .object(members)
    }

    static func integerSchema(_ range: ClosedRange<Int>) -> JSONValue {
        var schema: [(key: String, value: JSONValue)] = [("type", .string("integer")), ("minimum", integer(range.lowerBound))]
        if range.upperBound != Int.max { schema.append(("maximum", integer(range.upperBound))) }
        return .object(schema)
    }

    static func numberSchema(_ range: ClosedRange<Double>) -> JSONValue {
        .object([
            ("type", .string("number")), ("minimum", .number(range.lowerBound, isInteger: false)),
            ("maximum", .number(range.upperBound, isInteger: false)),
        ])
    }

    package static func members(_ value: JSONValue) -> [(key: String, value: JSONValue)] {
        if case .object(let members) = value { return members }
        return []
    }

    static func ref(_ name: String) -> JSONValue { .object([("$ref", .string("#/$defs/\(name)"))]) }
    package static func integer(_ value: Int) -> JSONValue { .number(Double(value), isInteger: true) }
    static func strings(_ values: [String]) -> JSONValue { .array(values.map(JSONValue.string)) }
}
