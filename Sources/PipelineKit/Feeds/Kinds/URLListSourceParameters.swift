import Foundation

/// `"type": "url-list"`: a local file of URLs (`.txt`, `.csv`, `.jsonl`, optionally `.gz`).
public struct URLListSourceParameters: RemoteSourceParameters {
    public static let typeName = "url-list"
    public static let properties: [(key: String, value: JSONValue)] = [("path", PipelineSchema.string)]
    public static let required = ["path"]

    public var path: EnvString
    public var remoteOptions: RemoteOptions

    public init(_ object: SpecObject) throws {
        path = try object.required("path") { try EnvString($0) }
        remoteOptions = try RemoteOptions(object)
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        let file = context.spec.resolvePath(try path.expanded(in: context.environment))
        guard FileManager.default.isReadableFile(atPath: file) else {
            throw SpecError(
                path: path.path,
                message: "URL list \(context.environment.redact(file)) does not exist or cannot be read")
        }
        return URLListFeed(path: file)
    }
}
