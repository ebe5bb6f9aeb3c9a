/// The source kinds a pipeline file may name, in the order messages and the schema list them.
public struct SourceRegistry: Sendable {
    public let kinds: [any SourceParameters.Type]

    public static let standard = SourceRegistry(kinds: [
        DirectorySourceParameters.self,
        URLListSourceParameters.self,
        TableSourceParameters.self,
        JSONFeedSourceParameters.self,
        NASAImagesSourceParameters.self,
        FlickrSearchSourceParameters.self,
        S3SourceParameters.self,
    ])

    public var typeNames: [String] { kinds.map { $0.typeName } }

    public func kind(named type: String) -> (any SourceParameters.Type)? {
        kinds.first { $0.typeName == type }
    }
}
