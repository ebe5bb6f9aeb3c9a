import Foundation

/// `"type": "directory"`: every image file below `path` (recursively unless `recursive` is
/// false).
public struct DirectorySourceParameters: SourceParameters {
    public static let typeName = "directory"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("path", PipelineSchema.string), ("recursive", PipelineSchema.boolean),
    ]
    public static let required = ["path"]

    public var path: EnvString
    public var recursive: Bool

    public init(_ object: SpecObject) throws {
        path = try object.required("path") { try EnvString($0) }
        recursive = try object.optional("recursive", default: true) { try $0.bool() }
    }

    public func makeFeed(_ context: FeedContext) throws -> any Feed {
        let root = context.spec.resolvePath(try path.expanded(in: context.environment))
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw SpecError(path: path.path, message: "directory \(context.environment.redact(root)) does not exist")
        }
        return DirectoryFeed(
            root: root, recursive: recursive,
            excluding: context.spec.sinkFolders(environment: context.environment) + context.excluding)
    }

    public var localFolder: (path: EnvString, recursive: Bool)? { (path, recursive) }
}
