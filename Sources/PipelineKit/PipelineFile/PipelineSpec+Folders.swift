import Foundation

/// The folders a run writes into, and their checks, made while a pipeline is built.
extension PipelineSpec {
    /// The folders of the directory sinks, resolved: a sink folder inside the source folder
    /// holds this pipeline's outputs, and listing them would make outputs of outputs, more
    /// with every run.
    package func sinkFolders(environment: Environment) -> [String] {
        sinks.compactMap { sink -> String? in
            guard let path = sink.folder, let expanded = try? path.expanded(in: environment) else { return nil }
            return resolvePath(expanded)
        }
    }

    /// A directory sink must not be a directory source's folder (the primary's or a
    /// fallback's, symbolic links followed): each output would replace the image it was
    /// made from, under the same name, and the originals would be lost. Returns the
    /// source folders inside the sink's (real paths), which its outputs must not enter.
    func checkNotSource(_ sinkRoot: String, at jsonPath: String, environment: Environment) throws -> [String] {
        let sink = sinkRoot.realPath
        var inside: [String] = []
        var source: SourceSpec? = self.source
        while let current = source {
            if let pathValue = current.parameters.localFolder?.path, let expanded = try? pathValue.expanded(in: environment) {
                let folder = resolvePath(expanded).realPath
                if folder == sink {
                    throw SpecError(
                        path: jsonPath,
                        message: "sink folder \(environment.redact(sinkRoot)) is the source folder "
                            + "(\(pathValue.path)): its outputs would replace the images they are made from; "
                            + "write them to another folder")
                }
                if folder.hasPrefix(sink + "/") { inside.append(folder) }
            }
            source = current.remote?.fallback
        }
        return inside
    }

    /// A folder imgpipe will write into must be a folder wherever it already exists:
    /// a file in its place (or in place of a folder above it) is the pipeline's fault.
    package static func checkFolder(_ path: String, at jsonPath: String, what: String) throws {
        var url = URL(fileURLWithPath: path).standardizedFileURL
        while url.path != "/" {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) {
                guard isDirectory.boolValue else {
                    throw SpecError(
                        path: jsonPath, message: "\(what) \(path) cannot be made: \(url.path) is a file, not a folder")
                }
                return
            }
            url.deleteLastPathComponent()
        }
    }
}
