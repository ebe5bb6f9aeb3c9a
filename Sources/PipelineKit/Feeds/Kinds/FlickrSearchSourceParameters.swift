/// `"type": "flickr-search"`: Flickr search, page by page.
public struct FlickrSearchSourceParameters: RemoteSourceParameters {
    public static let typeName = "flickr-search"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("text", PipelineSchema.string), ("apiKey", PipelineSchema.string), ("endpoint", PipelineSchema.string),
        ("perPage", PipelineSchema.integerSchema(1...500)), ("maxItems", PipelineSchema.integerSchema(1...Int.max)),
        ("size", .object([("type", .string("string")), ("pattern", .string("^url_"))])),
        ("maxPageBytes", PipelineSchema.maxPageBytes),
    ]
    public static let required = ["text", "apiKey"]

    public var text: EnvString
    public var apiKey: EnvString
    public var endpoint: EnvString
    public var perPage: Int
    public var maxItems: Int?
    /// The size extra whose URL is the image, e.g. `url_l`.
    public var size: String
    public var remoteOptions: RemoteOptions

    public init(_ object: SpecObject) throws {
        text = try object.required("text") { try EnvString($0) }
        apiKey = try object.required("apiKey") { try EnvString($0) }
        endpoint = try object.optional(
            "endpoint",
            default: EnvString(
                raw: "https://api.flickr.com/services/rest/", path: object.path.appending("endpoint").description)
        ) { try EnvString($0) }
        perPage = try object.optional("perPage", default: 100) { try $0.integer(in: 1...500) }
        maxItems = try object.optional("maxItems") { try $0.integer(in: 1...Int.max) }
        size = try object.optional("size", default: "url_l") { node in
            let size = try node.nonEmptyString()
            guard size.hasPrefix("url_") else { throw node.expected("a Flickr size extra such as \"url_l\"") }
            return size
        }
        remoteOptions = try RemoteOptions(object)
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        FlickrSearchFeed(
            text: try text.expanded(in: context.environment), apiKey: try apiKey.expanded(in: context.environment),
            endpoint: try context.webURL(endpoint), perPage: perPage, maxItems: maxItems,
            size: size, pages: try context.pages(for: text.path), notice: context.notice)
    }
}
