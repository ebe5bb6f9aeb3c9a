/// `"type": "nasa-images"`: NASA's image search, paged by `next` links.
public struct NASAImagesSourceParameters: RemoteSourceParameters {
    public static let typeName = "nasa-images"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("query", PipelineSchema.string), ("endpoint", PipelineSchema.string), ("mediaType", PipelineSchema.nonEmpty),
        ("maxItems", PipelineSchema.integerSchema(1...Int.max)), ("maxPageBytes", PipelineSchema.maxPageBytes),
    ]
    public static let required = ["query"]

    public var query: EnvString
    public var endpoint: EnvString
    public var mediaType: String
    public var maxItems: Int?
    public var remoteOptions: RemoteOptions

    public init(_ object: SpecObject) throws {
        query = try object.required("query") { try EnvString($0) }
        endpoint = try object.optional(
            "endpoint",
            default: EnvString(raw: "https://images-api.nasa.gov", path: object.path.appending("endpoint").description)
        ) { try EnvString($0) }
        mediaType = try object.optional("mediaType", default: "image") { try $0.nonEmptyString() }
        maxItems = try object.optional("maxItems") { try $0.integer(in: 1...Int.max) }
        remoteOptions = try RemoteOptions(object)
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        NASAImagesFeed(
            query: try query.expanded(in: context.environment), endpoint: try context.webURL(endpoint),
            mediaType: mediaType, maxItems: maxItems, pages: try context.pages(for: query.path), notice: context.notice)
    }
}
