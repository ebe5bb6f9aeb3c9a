import Foundation

/// `"type": "upload"`, the two-step upload: `GET endpoint` → `{"url": U}` → `POST U`
/// (multipart).
public struct UploadSinkParameters: SinkParameters {
    public static let typeName = "upload"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("endpoint", PipelineSchema.string), ("fields", PipelineSchema.ref("strings")),
        ("fileField", PipelineSchema.nonEmpty), ("originalField", PipelineSchema.nonEmpty),
        ("allowHosts", .object([("type", .string("array")), ("items", PipelineSchema.nonEmpty)])),
    ]
    public static let required = ["endpoint"]

    public var endpoint: EnvString
    public var fields: [NamedValue]
    public var fileField: String
    public var originalField: String
    /// Hosts besides the endpoint's that the second step may go to with fields that hold a
    /// `${…}` value.
    public var allowHosts: [String]

    public init(_ object: SpecObject) throws {
        endpoint = try object.required("endpoint") { try EnvString($0) }
        fields = try object.optional("fields", default: []) { try $0.namedValues() }
        fileField = try object.optional("fileField", default: "file") { try $0.nonEmptyString() }
        originalField = try object.optional("originalField", default: "original") { try $0.nonEmptyString() }
        allowHosts = try object.optional("allowHosts", default: []) { node in
            try node.array().map { try $0.nonEmptyString() }
        }
    }

    public func make(_ context: SinkContext) throws -> any Sink {
        let url = try endpoint.expandedWebURL(in: context.environment)
        let expanded = try fields.map { ($0.name, try $0.value.expanded(in: context.environment)) }
        return UploadSink(
            name: context.name, endpoint: url, fields: expanded,
            fieldsHoldSecrets: fields.contains { $0.value.hasReferences },
            allowHosts: allowHosts, fileField: fileField, originalField: originalField,
            client: context.client(), retry: context.retry)
    }
}
