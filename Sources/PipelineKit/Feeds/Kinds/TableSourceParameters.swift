import Foundation

/// `"type": "table"`: a table of image URLs (`.csv`, `.tsv`, `.jsonl`, `.parquet`, each optionally
/// `.gz`) whose columns `columns` names: `url`, and optionally `key`, `caption` and
/// `sha256`; `keep` lists more columns that travel with each item (`TableFeed`). With `s3`
/// (a bucket as an `s3` source names one), `path` is the object's key under the prefix.
public struct TableSourceParameters: RemoteSourceParameters {
    public static let typeName = "table"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("path", PipelineSchema.string),
        (
            "columns",
            PipelineSchema.object(
                [
                    ("url", PipelineSchema.nonEmpty), ("key", PipelineSchema.nonEmpty),
                    ("caption", PipelineSchema.nonEmpty), ("sha256", PipelineSchema.nonEmpty),
                ], required: ["url"])
        ),
        ("keep", .object([("type", .string("array")), ("items", PipelineSchema.nonEmpty)])),
        ("s3", PipelineSchema.object(PipelineSchema.s3Location, required: ["bucket"])),
    ]
    public static let required = ["path", "columns"]

    public var path: EnvString
    public var columns: TableColumns
    public var keep: [String]
    /// The bucket the table is in, when it is not a local file.
    public var s3: S3Spec?
    public var remoteOptions: RemoteOptions

    public init(_ object: SpecObject) throws {
        path = try object.required("path") { try EnvString($0) }
        columns = try object.required("columns") { node in
            let fields = try node.object(allowing: ["url", "key", "caption", "sha256"])
            func name(_ node: SpecNode) throws -> String {
                let text = try node.string()
                guard !text.isEmpty else { throw node.fail("a column's name may not be empty") }
                return text
            }
            return TableColumns(
                url: try fields.required("url", name), key: try fields.optional("key", name),
                caption: try fields.optional("caption", name), sha256: try fields.optional("sha256", name))
        }
        keep = try object.optional("keep", default: []) { node in
            try node.array().map { item in
                let text = try item.string()
                guard !text.isEmpty else { throw item.fail("a column's name may not be empty") }
                return text
            }
        }
        s3 = try object.optional("s3") { node in try S3Spec(try node.object(allowing: PipelineSchema.s3Location.map(\.key))) }
        remoteOptions = try RemoteOptions(object)
    }

    public func objectClient(in environment: Environment, http: HTTPClient) throws -> S3Client? {
        try s3?.client(in: environment, http: http)
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        if let s3 {
            guard let client = context.fetcher?.objects, let http = context.fetcher?.client else {
                throw SpecError(path: s3.path, message: "no S3 client")
            }
            let key = try s3.folder(in: context.environment) + (try path.expanded(in: context.environment))
            guard let format = TableFeed.Format(fileName: key) else {
                throw SpecError(
                    path: path.path,
                    message:
                        "a table is a .csv, .tsv, .jsonl or .parquet file (optionally .gz); \(client.address(of: key)) is none")
            }
            let retry = context.spec.retry
            var feed = TableFeed(
                path: client.address(of: key), format: format, columns: columns, keep: keep, notice: context.notice)
            feed.object = TableFeed.Object(client: client, key: key, http: http, attempts: retry.attempts, backoff: retry.backoff)
            return feed
        }
        let file = context.spec.resolvePath(try path.expanded(in: context.environment))
        guard let format = TableFeed.Format(fileName: file) else {
            throw SpecError(
                path: path.path,
                message:
                    "a table is a .csv, .tsv, .jsonl or .parquet file (optionally .gz); \(context.environment.redact(file)) is none"
            )
        }
        guard FileManager.default.isReadableFile(atPath: file) else {
            throw SpecError(
                path: path.path, message: "table \(context.environment.redact(file)) does not exist or cannot be read")
        }
        return TableFeed(path: file, format: format, columns: columns, keep: keep, notice: context.notice)
    }

    public var captionField: String? { columns.caption }
    public var sha256Field: String? { columns.sha256 }
}

/// Which columns of a table hold what imgpipe reads.
public struct TableColumns: Sendable, Equatable {
    public var url: String
    public var key: String?
    public var caption: String?
    public var sha256: String?
}
