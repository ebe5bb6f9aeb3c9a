import Foundation

/// A pipeline ready to run: `${…}` expanded, paths resolved, feed and sinks built.
public struct BuiltPipeline: Sendable {
    public let spec: PipelineSpec
    /// Absolute path of the pipeline file.
    public let path: String
    public let feed: any Feed
    public let sinks: [any Sink]
    public let processor: ImageProcessor
    public let environment: Environment

    /// Expands and resolves everything the run needs; errors are `SpecError`s naming the
    /// path of the value (an unset variable, a source directory that does not exist).
    public static func build(_ spec: PipelineSpec, path: String, environment: Environment) throws -> BuiltPipeline {
        let feed: any Feed
        switch spec.source {
        case let .directory(pathValue, recursive):
            let root = spec.resolvePath(try pathValue.expanded(in: environment))
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw SpecError(path: pathValue.path, message: "directory \(environment.redact(root)) does not exist")
            }
            feed = DirectoryFeed(root: root, recursive: recursive)
        }
        var sinks: [any Sink] = []
        for sink in spec.sinks {
            switch sink {
            case let .directory(name, pathValue):
                sinks.append(DirectorySink(name: name, root: spec.resolvePath(try pathValue.expanded(in: environment))))
            }
        }
        for (index, filter) in spec.filters.enumerated() {
            if case let .watermark(watermark) = filter.step {
                let resolved = spec.resolvePath(watermark.image)
                guard FileManager.default.isReadableFile(atPath: resolved) else {
                    throw SpecError(path: "filters[\(index)].image", message: "cannot read watermark image \(resolved)")
                }
            }
        }
        let processor = ImageProcessor(filters: spec.filters.map(\.step), output: spec.output, limits: spec.limits,
                                       baseDirectory: spec.baseDirectory)
        return BuiltPipeline(spec: spec, path: URL(fileURLWithPath: path).standardizedFileURL.path, feed: feed,
                             sinks: sinks, processor: processor, environment: environment)
    }
}
