import ArgumentParser
import Foundation
import ImagePipeline

/// The pipeline file argument and `--state`, shared by the commands that take them.
struct PipelineOptions: ParsableArguments {
    @Argument(help: "The pipeline file (JSON).", completion: .file(extensions: ["json"]))
    var pipeline: String

    @Option(help: "The state file (default: .imgpipe/<pipeline file stem>.sqlite in the current directory).",
            completion: .file(extensions: ["sqlite"]))
    var state: String?

    @OptionGroup var logging: LogOptions

    var stateFile: String { StateFiles.path(explicit: state, pipeline: pipeline) }

    /// Loads and validates the pipeline file, reporting a fault and exiting 2.
    func loadSpec() throws -> PipelineSpec { try Self.loadSpec(pipeline) }

    /// Loads and validates `path`, reporting a fault (`file: path: message`) and exiting 2.
    static func loadSpec(_ path: String) throws -> PipelineSpec {
        do {
            return try PipelineSpec.load(path: path)
        } catch {
            throw CommandError.usage("\(path): \(error)")
        }
    }

    /// Builds the pipeline for a run (expands `${…}`, resolves paths), exiting 2 on error.
    func build(_ spec: PipelineSpec, environment: Environment,
               notice: @escaping @Sendable (String) -> Void) throws -> BuiltPipeline {
        do {
            return try BuiltPipeline.build(spec, path: pipeline, environment: environment, tuning: Imgpipe.tuning,
                                           logger: logging.logger(),
                                           notice: notice)
        } catch {
            throw CommandError.usage("\(pipeline): \(environment.redact(String(describing: error)))")
        }
    }
}

enum StateFiles {
    /// `explicit`, else `.imgpipe/<stem>.sqlite` in the current directory.
    static func path(explicit: String?, pipeline: String?) -> String {
        if let explicit { return URL(fileURLWithPath: explicit).standardizedFileURL.path }
        let stem = pipeline.map { URL(fileURLWithPath: $0).deletingPathExtension().lastPathComponent } ?? "imgpipe"
        return URL(fileURLWithPath: ".imgpipe/\(stem).sqlite").standardizedFileURL.path
    }
}

/// Writing to the terminal.
enum Console {
    static func error(_ message: String) {
        FileHandle.standardError.write(Data("error: \(message)\n".utf8))
    }

    static func out(_ message: String) {
        FileHandle.standardOutput.write(Data((message + "\n").utf8))
    }

    static func json<T: Encodable>(_ value: T) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        if let data = try? encoder.encode(value) { out(String(decoding: data, as: UTF8.self)) }
    }

    /// A path relative to the current directory when it lies below it.
    static func display(_ path: String) -> String {
        let cwd = FileManager.default.currentDirectoryPath + "/"
        return path.hasPrefix(cwd) ? String(path.dropFirst(cwd.count)) : path
    }
}
