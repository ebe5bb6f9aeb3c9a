/// The sink kinds a pipeline file may name, in the order messages and the schema list them.
public struct SinkRegistry: Sendable {
    public let kinds: [any SinkParameters.Type]

    public static let standard = SinkRegistry(kinds: [
        DirectorySinkParameters.self,
        UploadSinkParameters.self,
        HTTPSinkParameters.self,
        S3SinkParameters.self,
        WebDatasetSinkParameters.self,
    ])

    public var typeNames: [String] { kinds.map { $0.typeName } }

    public func kind(named type: String) -> (any SinkParameters.Type)? {
        kinds.first { $0.typeName == type }
    }
}
