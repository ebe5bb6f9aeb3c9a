/// `"type": "directory"`: each output written below `path` under its template name.
public struct DirectorySinkParameters: SinkParameters {
    public static let typeName = "directory"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("path", PipelineSchema.string), ("prune", PipelineSchema.boolean),
    ]
    public static let required = ["path"]
    public static let sendsRequests = false

    public var path: EnvString
    /// An incremental run removes from the folder the files of items gone from the feed
    /// and of names no longer made (nothing else ever deletes).
    public var prune: Bool

    public init(_ object: SpecObject) throws {
        path = try object.required("path") { try EnvString($0) }
        prune = try object.optional("prune", default: false) { try $0.bool() }
    }

    public func make(_ context: SinkContext) throws -> any Sink {
        let root = context.spec.resolvePath(try path.expanded(in: context.environment))
        try PipelineSpec.checkFolder(root, at: path.path, what: "sink folder")
        let sources = try context.spec.checkNotSource(root, at: path.path, environment: context.environment)
        return DirectorySink(name: context.name, root: root, prune: prune, sourceFolders: sources)
    }

    public var folder: EnvString? { path }

    /// `prune` says what to remove, not where to deliver: turning it on or off keeps what
    /// the sink was given.
    public func deliversLike(_ other: any SinkParameters) -> Bool {
        (other as? Self)?.path == path
    }
}
