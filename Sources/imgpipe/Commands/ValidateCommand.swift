import ArgumentParser
import Foundation
import ImagePipeline

struct ValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check a pipeline file; exit 0 when valid, 2 naming the fault otherwise."
    )

    @Argument(help: "The pipeline file (JSON).", completion: .file(extensions: ["json"]))
    var pipeline: String

    func run() throws {
        let spec = try PipelineOptions.loadSpec(pipeline)
        let sinks = spec.sinks.map { "\($0.name) (\($0.typeName))" }.joined(separator: ", ")
        Console.out("\(pipeline): valid — \(spec.source.typeName) source, \(spec.filters.count) filter(s)"
                    + (spec.filters.isEmpty ? "" : " [\(spec.filters.map(\.op).joined(separator: " → "))]")
                    + ", \(spec.output.format.rawValue) output, sinks: \(sinks)")
    }
}
