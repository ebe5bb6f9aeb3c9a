/// `"type": "s3"`: one object per output in a bucket (`PutObject`, or a multipart upload
/// when large).
public struct S3SinkParameters: SinkParameters {
    public static let typeName = "s3"
    public static let properties: [(key: String, value: JSONValue)] =
        PipelineSchema.s3Location + [("key", PipelineSchema.nonEmpty)] + S3SinkOptions.properties
    public static let required = ["bucket"]

    public var location: S3Spec
    public var options: S3SinkOptions

    public init(_ object: SpecObject) throws {
        options = try S3SinkOptions(object)
        options.key = try object.optional("key") { try NameTemplate($0) }
        location = try S3Spec(object)
    }

    /// Each output of an item is its own object: a key template must tell them apart.
    public func checkSeveralOutputs(entry: SpecNode) throws {
        guard let key = options.key, !key.uses("output") else { return }
        throw SpecError(
            path: entry.path.appending("key").description,
            message: "this sink takes several outputs: put {output} in its key template, "
                + "or give the sink \"outputs\": [one id]")
    }

    public func make(_ context: SinkContext) throws -> any Sink {
        let client = try location.client(in: context.environment, http: context.client())
        return S3Sink(
            name: context.name, client: client, folder: try location.folder(in: context.environment), options: options,
            metadata: try options.expandedMetadata(in: context.environment), retry: context.retry)
    }
}

/// What an `s3` sink does besides where it writes.
public struct S3SinkOptions: Sendable, Equatable {
    /// The object's name below the prefix (a `NameTemplate`: `{key}`, `{stem}`, `{ext}`,
    /// `{index}`, `{hash}`, `{output}`, `{width}`, `{height}`); nil: the output's name.
    public var key: NameTemplate?
    /// `x-amz-storage-class`; nil: the bucket's default (`STANDARD`).
    public var storageClass: String?
    /// `x-amz-meta-<name>` headers.
    public var metadata: [NamedValue] = []
    /// Outputs of this many bytes or more go up as a multipart upload.
    public var multipartThreshold = 16 << 20
    /// The size of each part but the last.
    public var partSize = 8 << 20

    public static let storageClasses = [
        "STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
        "GLACIER", "GLACIER_IR", "DEEP_ARCHIVE", "EXPRESS_ONEZONE",
    ]
    /// S3's smallest part (but the last): 5 MiB.
    public static let minimumPartSize = 5 << 20

    public init() {}

    /// The keys of an entry that writes objects (every one but `key`), with their schema.
    static let properties: [(key: String, value: JSONValue)] = [
        ("storageClass", .object([("enum", PipelineSchema.strings(storageClasses))])),
        ("metadata", PipelineSchema.ref("strings")),
        ("multipartThreshold", PipelineSchema.integerSchema(1...5 << 30)),
        ("partSize", PipelineSchema.integerSchema(minimumPartSize...5 << 30)),
    ]

    /// Reads `properties` from an entry whose keys are already checked.
    init(_ object: SpecObject) throws {
        var options = S3SinkOptions()
        options.storageClass = try object.optional("storageClass") { try $0.choice(S3SinkOptions.storageClasses) }
        options.metadata = try object.optional("metadata", default: []) { node in
            let list = try node.namedValues(headers: true)
            for item in list where !item.value.hasReferences && !item.value.raw.isS3MetadataValue {
                throw SpecError(path: item.value.path, message: "S3 metadata values are ASCII on one line")
            }
            return list
        }
        options.multipartThreshold = try object.optional("multipartThreshold", default: options.multipartThreshold) {
            try $0.integer(in: 1...5 << 30)
        }
        options.partSize = try object.optional("partSize", default: options.partSize) {
            try $0.integer(in: S3SinkOptions.minimumPartSize...5 << 30)
        }
        self = options
    }

    /// The metadata with `${…}` expanded, each value checked.
    func expandedMetadata(in environment: Environment) throws -> [(String, String)] {
        let expanded = try metadata.map { ($0.name, try $0.value.expanded(in: environment)) }
        for (index, (_, value)) in expanded.enumerated() where !value.isS3MetadataValue {
            throw SpecError(path: metadata[index].value.path, message: "S3 metadata values are ASCII on one line")
        }
        return expanded
    }
}
