import Foundation

/// `"type": "webdataset"`: items written into WebDataset tar shards of `samplesPerShard`
/// samples in the folder `path` (`WebDatasetSink`).
public struct WebDatasetSinkParameters: SinkParameters {
    public static let typeName = "webdataset"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("path", PipelineSchema.string), ("samplesPerShard", PipelineSchema.integerSchema(1...1_000_000)),
    ]
    public static let required = ["path"]
    public static let sendsRequests = false

    public var path: EnvString
    public var samplesPerShard: Int

    public init(_ object: SpecObject) throws {
        path = try object.required("path") { try EnvString($0) }
        samplesPerShard = try object.optional("samplesPerShard", default: 10_000) { try $0.integer(in: 1...1_000_000) }
    }

    public func make(_ context: SinkContext) throws -> any Sink {
        let root = context.spec.resolvePath(try path.expanded(in: context.environment))
        try PipelineSpec.checkFolder(root, at: path.path, what: "sink folder")
        _ = try context.spec.checkNotSource(root, at: path.path, environment: context.environment)
        // Two such sinks on one folder would write every sample twice.
        for other in context.spec.sinks where other.name != context.name {
            // Compared with symbolic links resolved, also on the way to a folder not made yet:
            // a link to the folder (or to a folder above it) is the folder.
            guard let parameters = other.parameters as? Self,
                let folder = try? context.spec.resolvePath(parameters.path.expanded(in: context.environment)),
                folder.realPath == root.realPath
            else { continue }
            throw SpecError(
                path: path.path,
                message: "sink \(other.name) writes shards into \(folder) too: each sample would be written twice")
        }
        // Member names hold the output's id when the sink takes several: an id long enough to
        // push them past ustar's 100 bytes would need pax headers some readers do not know.
        let outputs = context.spec.outputs(of: context.name)
        if outputs.count > 1, let long = outputs.first(where: { $0.utf8.count > 40 }) {
            throw SpecError(
                path: path.path,
                message: "output id \"\(long)\" is \(long.utf8.count) bytes: member names of a webdataset sink "
                    + "that takes several outputs hold the id, which may be at most 40 bytes")
        }
        return WebDatasetSink(
            name: context.name, root: root, samplesPerShard: samplesPerShard,
            outputs: outputs)
    }

    public var folder: EnvString? { path }

    /// Shards are only ever added to: a change of `samplesPerShard` shapes the shards to
    /// come, and delivers nothing again.
    public func deliversLike(_ other: any SinkParameters) -> Bool {
        (other as? Self)?.path == path
    }
}
