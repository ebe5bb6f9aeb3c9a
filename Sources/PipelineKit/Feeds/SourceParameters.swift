/// One kind of source, described once: the `type` that names it in a pipeline file, the
/// keys its entry takes (decoded with the strict readers of `SpecNode`, whose errors name
/// the JSON path), their JSON Schema, and how its `Feed` is made for a run. A value is the
/// decoded entry. Adding a kind is one conforming type in `Feeds/Kinds/` and one line in
/// `SourceRegistry.standard`; `validate`, `schema` and the docs' table follow from there.
public protocol SourceParameters: Sendable, Equatable {
    /// The `type` of the entry, e.g. `"url-list"`.
    static var typeName: String { get }
    /// The kind's own keys with their JSON Schema, in the order an unknown key's message
    /// lists them (`type` is every source's).
    static var properties: [(key: String, value: JSONValue)] { get }
    /// The own keys that must be given.
    static var required: [String] { get }
    /// The keys it takes besides its own as a whole source (`fallback` true) or as another
    /// source's fallback: a remote source's `cache`, `fallback`, … (`RemoteSourceParameters`);
    /// none for a local one.
    static func remoteProperties(fallback: Bool) -> [(key: String, value: JSONValue)]
    /// Why the kind cannot be a fallback (nil: it can).
    static var fallbackRefusal: String? { get }

    /// Reads the entry, whose keys are already checked.
    init(_ object: SpecObject) throws
    /// The feed of a run: `${…}` expanded, paths resolved and checked.
    func makeFeed(_ context: FeedContext) throws -> any Feed
    /// The folder a local source lists, as written, and whether it lists its subfolders
    /// (nil: it lists no folder of this machine).
    var localFolder: (path: EnvString, recursive: Bool)? { get }
    /// The client that fetches its items from a bucket (nil: they are fetched by URL).
    func objectClient(in environment: Environment, http: HTTPClient) throws -> S3Client?
    /// The member of an item's metadata that holds its caption (nil: items have none).
    var captionField: String? { get }
    /// The member of an item's metadata that holds the SHA-256 its bytes must have (nil:
    /// none is expected).
    var sha256Field: String? { get }
}

/// A source that lists or fetches over the network: it takes `cache`, `fallback` and the
/// other `RemoteOptions`, and a run fetches its items with a `RemoteFetcher`.
public protocol RemoteSourceParameters: SourceParameters {
    var remoteOptions: RemoteOptions { get set }
}

extension SourceParameters {
    public static func remoteProperties(fallback: Bool) -> [(key: String, value: JSONValue)] { [] }
    public static var fallbackRefusal: String? { nil }
    public var localFolder: (path: EnvString, recursive: Bool)? { nil }
    public func objectClient(in environment: Environment, http: HTTPClient) throws -> S3Client? { nil }
    public var captionField: String? { nil }
    public var sha256Field: String? { nil }

    /// Whether `other` is of this kind and equal to this.
    func isEqual(_ other: any SourceParameters) -> Bool { (other as? Self) == self }

    /// The entry's JSON Schema, as a whole source or as a fallback.
    package static func schema(fallback: Bool) -> JSONValue {
        PipelineSchema.object(
            [("type", PipelineSchema.constant(typeName))] + properties + remoteProperties(fallback: fallback),
            required: ["type"] + required)
    }
}

extension RemoteSourceParameters {
    /// `cache` everywhere; at the top level also what applies to the fallback's items too.
    public static func remoteProperties(fallback: Bool) -> [(key: String, value: JSONValue)] {
        guard fallback else { return [("cache", PipelineSchema.ref("cache"))] }
        return [
            ("cache", PipelineSchema.ref("cache")), ("fallback", PipelineSchema.ref("sourceWithoutFallback")),
            ("respectOptOut", PipelineSchema.boolean),
            ("optOutHostAfter", PipelineSchema.integerSchema(0...1_000_000)), ("robots", PipelineSchema.boolean),
            ("versionField", PipelineSchema.nonEmpty), ("pacing", PipelineSchema.pacing),
        ]
    }
}

/// What a source kind's `makeFeed` is given.
public struct FeedContext {
    package let spec: PipelineSpec
    package let environment: Environment
    /// The fetcher of a remote source's pages and images (nil for a local source).
    package let fetcher: RemoteFetcher?
    /// Folders a directory source must not list besides its directory sinks'.
    package let excluding: [String]
    /// Told what the feed has to say while listing, with secrets masked.
    package let notice: @Sendable (String) -> Void

    package init(
        spec: PipelineSpec, environment: Environment, fetcher: RemoteFetcher?, excluding: [String],
        notice: @escaping @Sendable (String) -> Void
    ) {
        self.spec = spec
        self.environment = environment
        self.fetcher = fetcher
        self.excluding = excluding
        self.notice = notice
    }

    /// `value` expanded, as an http(s) URL with a host.
    func webURL(_ value: EnvString) throws -> String {
        try value.expandedWebURL(in: environment).absoluteString
    }

    /// The fetcher of a remote source's feed pages (`path`: where the source is written).
    package func pages(for path: String) throws -> RemoteFetcher {
        guard let fetcher else { throw SpecError(path: path, message: "no fetcher for a remote source") }
        return fetcher
    }
}
