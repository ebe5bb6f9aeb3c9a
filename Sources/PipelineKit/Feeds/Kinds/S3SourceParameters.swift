import Logging

/// `"type": "s3"`: the objects of a bucket under a prefix, listed with ListObjectsV2
/// `pageSize` keys a page.
public struct S3SourceParameters: RemoteSourceParameters {
    public static let typeName = "s3"
    public static let properties: [(key: String, value: JSONValue)] =
        PipelineSchema.s3Location + [
            ("pageSize", PipelineSchema.integerSchema(1...1000)), ("maxItems", PipelineSchema.integerSchema(1...Int.max)),
        ]
    public static let required = ["bucket"]
    public static let fallbackRefusal: String? =
        "an s3 source cannot be a fallback (a fallback is a local folder or list)"

    /// robots.txt and X-Robots-Tag are for other people's web servers, not a bucket read
    /// with its owner's keys: only `cache`, `fallback` and `pacing`.
    public static func remoteProperties(fallback: Bool) -> [(key: String, value: JSONValue)] {
        [
            ("cache", PipelineSchema.ref("cache")), ("fallback", PipelineSchema.ref("sourceWithoutFallback")),
            ("pacing", PipelineSchema.pacing),
        ]
    }

    public var location: S3Spec
    public var pageSize: Int
    public var maxItems: Int?
    public var remoteOptions: RemoteOptions

    public init(_ object: SpecObject) throws {
        var remote = try RemoteOptions(object)
        remote.respectOptOut = false
        remoteOptions = remote
        location = try S3Spec(object)
        pageSize = try object.optional("pageSize", default: 1000) { try $0.integer(in: 1...1000) }
        maxItems = try object.optional("maxItems") { try $0.integer(in: 1...Int.max) }
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        guard let client = context.fetcher?.objects else { throw SpecError(path: location.path, message: "no S3 client") }
        let cancellation = context.fetcher?.client.cancellation
        let retry = context.spec.retry
        return S3Feed(
            client: client, folder: try location.folder(in: context.environment), pageSize: pageSize, maxItems: maxItems,
            retry: RetryLoop(
                attempts: retry.attempts, backoff: retry.backoff, isCancelled: { cancellation?.isCancelled ?? false }),
            logger: context.fetcher?.logger ?? Logger(label: "imgpipe"), redact: context.environment.redact,
            notice: context.notice)
    }

    public func objectClient(in environment: Environment, http: HTTPClient) throws -> S3Client? {
        try location.client(in: environment, http: http)
    }
}
