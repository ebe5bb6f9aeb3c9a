import Foundation

/// `"type": "webdataset"`: items written into WebDataset tar shards of `samplesPerShard`
/// samples in the folder `path`, or under a prefix of a bucket (`s3`: where, as an `s3`
/// sink says it, and how objects are written; `path` is then a folder below the prefix)
/// (`WebDatasetSink`).
public struct WebDatasetSinkParameters: SinkParameters {
    public static let typeName = "webdataset"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("path", PipelineSchema.string), ("samplesPerShard", PipelineSchema.integerSchema(1...1_000_000)),
        ("s3", PipelineSchema.object(bucketKeys, required: ["bucket"])),
    ]
    public static let required: [String] = []
    static let bucketKeys = PipelineSchema.s3Location + S3SinkOptions.properties

    public var path: EnvString?
    public var samplesPerShard: Int
    public var s3: S3Spec?
    public var options: S3SinkOptions

    public init(_ object: SpecObject) throws {
        path = try object.optional("path") { try EnvString($0) }
        samplesPerShard = try object.optional("samplesPerShard", default: 10_000) { try $0.integer(in: 1...1_000_000) }
        let bucket = try object.optional("s3") { node in try node.object(allowing: Self.bucketKeys.map(\.key)) }
        s3 = try bucket.map(S3Spec.init)
        options = try bucket.map(S3SinkOptions.init) ?? S3SinkOptions()
        guard path != nil || s3 != nil else {
            throw SpecError(
                path: object.path.description,
                message: "a webdataset sink writes its shards into a folder (\"path\") or a bucket (\"s3\"): give one")
        }
    }

    public func make(_ context: SinkContext) throws -> any Sink {
        let outputs = try checkedOutputs(context)
        guard let s3 else { return try folderSink(context, outputs: outputs) }
        let client = try s3.client(in: context.environment, http: context.client())
        let folder = try bucketFolder(in: context.environment)
        // Two such sinks under one prefix (however it is spelled) would write every sample twice.
        let here = Self.place(client, folder)
        for other in context.spec.sinks where other.name != context.name {
            guard let parameters = other.parameters as? Self, let theirs = parameters.s3,
                let bucket = try? theirs.client(in: context.environment, http: context.client()),
                let them = try? Self.place(bucket, parameters.bucketFolder(in: context.environment)),
                them == here
            else { continue }
            throw SpecError(
                path: s3.path,
                message: "sink \(other.name) writes shards under \(client.address(of: folder)) too: "
                    + "each sample would be written twice")
        }
        let place = ShardBucket(
            client: client, folder: folder, options: options, metadata: try options.expandedMetadata(in: context.environment),
            retry: context.retry)
        return WebDatasetSink(name: context.name, place: place, samplesPerShard: samplesPerShard, outputs: outputs)
    }

    /// A prefix of a bucket as one string, whatever the spelling of its endpoint (a `/` at its
    /// end) or its addressing (`pathStyle`).
    private static func place(_ client: S3Client, _ folder: String) -> String {
        let endpoint = client.endpoint
        let path = endpoint.path.hasSuffix("/") ? String(endpoint.path.dropLast()) : endpoint.path
        return [
            endpoint.scheme ?? "", endpoint.host?.lowercased() ?? "", endpoint.port.map(String.init) ?? "", path,
            client.bucket, folder,
        ].joined(separator: "\u{0}")
    }

    /// The prefix of the shards in the bucket: the `s3` prefix and `path` below it, ending
    /// with `/` unless empty.
    private func bucketFolder(in environment: Environment) throws -> String {
        let below = try path.map { try $0.expanded(in: environment) } ?? ""
        var folder =
            try (s3?.folder(in: environment) ?? "") + below.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
        if !folder.isEmpty, !folder.hasSuffix("/") { folder += "/" }
        return folder
    }

    /// The sink's outputs. Member names hold the output's id when the sink takes several: an
    /// id long enough to push them past ustar's 100 bytes would need pax headers some readers
    /// do not know.
    private func checkedOutputs(_ context: SinkContext) throws -> [String] {
        let outputs = context.spec.outputs(of: context.name)
        if outputs.count > 1, let long = outputs.first(where: { $0.utf8.count > 40 }) {
            throw SpecError(
                path: path?.path ?? s3?.path ?? "",
                message: "output id \"\(long)\" is \(long.utf8.count) bytes: member names of a webdataset sink "
                    + "that takes several outputs hold the id, which may be at most 40 bytes")
        }
        return outputs
    }

    private func folderSink(_ context: SinkContext, outputs: [String]) throws -> any Sink {
        guard let path else { throw SpecError(path: "", message: "no folder") }
        let root = context.spec.resolvePath(try path.expanded(in: context.environment))
        try PipelineSpec.checkFolder(root, at: path.path, what: "sink folder")
        _ = try context.spec.checkNotSource(root, at: path.path, environment: context.environment)
        // Two such sinks on one folder would write every sample twice.
        for other in context.spec.sinks where other.name != context.name {
            // Compared with symbolic links resolved, also on the way to a folder not made yet:
            // a link to the folder (or to a folder above it) is the folder.
            guard let parameters = other.parameters as? Self, parameters.s3 == nil,
                let folder = try? parameters.path.map({ try context.spec.resolvePath($0.expanded(in: context.environment)) }),
                folder.realPath == root.realPath
            else { continue }
            throw SpecError(
                path: path.path,
                message: "sink \(other.name) writes shards into \(folder) too: each sample would be written twice")
        }
        return WebDatasetSink(
            name: context.name, root: root, samplesPerShard: samplesPerShard,
            outputs: outputs)
    }

    public var folder: EnvString? { s3 == nil ? path : nil }

    /// Shards are only ever added to: a change of `samplesPerShard` (or of how objects are
    /// written) shapes the shards to come, and delivers nothing again.
    public func deliversLike(_ other: any SinkParameters) -> Bool {
        guard let other = other as? Self, other.path?.raw == path?.raw else { return false }
        guard let s3, let theirs = other.s3 else { return s3 == nil && other.s3 == nil }
        return s3.bucket.raw == theirs.bucket.raw && s3.prefix?.raw == theirs.prefix?.raw
            && s3.endpoint?.raw == theirs.endpoint?.raw
    }
}
