/// `"type": "json-feed"`: a JSON array of objects with an image URL each, on one page or on
/// pages linked by `next`.
public struct JSONFeedSourceParameters: RemoteSourceParameters {
    public static let typeName = "json-feed"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("url", PipelineSchema.string), ("urlField", PipelineSchema.nonEmpty), ("keyField", PipelineSchema.nonEmpty),
        ("items", PipelineSchema.jsonPointer), ("next", PipelineSchema.jsonPointer),
        ("maxPageBytes", PipelineSchema.maxPageBytes),
    ]
    public static let required = ["url"]

    public var url: EnvString
    public var urlField: String
    public var keyField: String?
    public var shape: JSONFeedShape
    public var remoteOptions: RemoteOptions

    public init(_ object: SpecObject) throws {
        url = try object.required("url") { try EnvString($0) }
        urlField = try object.optional("urlField", default: "url") { try $0.nonEmptyString() }
        keyField = try object.optional("keyField") { try $0.nonEmptyString() }
        shape = JSONFeedShape(
            items: try object.optional("items") { try $0.jsonPointer() },
            next: try object.optional("next") { try $0.jsonPointer() })
        remoteOptions = try RemoteOptions(object)
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        JSONFeed(
            url: try context.webURL(url), urlField: urlField, keyField: keyField, items: shape.items, next: shape.next,
            pages: try context.pages(for: url.path), notice: context.notice)
    }
}

/// Where a `json-feed` page holds its entries and the next page's URL: JSON Pointers into
/// the page (`items`, `next`), nil for the plain shape (the page is the array, and the only one).
public struct JSONFeedShape: Sendable, Equatable {
    public var items: JSONPointer?
    public var next: JSONPointer?

    public init(items: JSONPointer? = nil, next: JSONPointer? = nil) {
        self.items = items
        self.next = next
    }
}
