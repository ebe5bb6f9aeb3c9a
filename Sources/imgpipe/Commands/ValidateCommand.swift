import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct ValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check a pipeline file; exit 0 when valid, 2 naming the fault otherwise.",
        discussion: """
            Makes every check `run` makes before any work: the file itself (its first fault \
            is reported: fix it and validate again), then what it points at — the source \
            folder or URL list, the feed's URL, the sink folders and URLs, each watermark \
            image, output sizes within limits.maxPixels, and every ${NAME} the file uses — \
            where every fault is listed, not only the first. An unset \
            variable is a warning, not a fault (CI validates without its secrets; `run` \
            refuses until it is set), unless --strict is given; checks that need its value \
            are skipped. Nothing is created (no state file, no cache folder) and nothing is \
            fetched.
            """
    )

    @Argument(help: "The pipeline file (JSON).", completion: .file(extensions: ["json"]))
    var pipeline: String

    @Flag(help: "An unset environment variable is a fault too.")
    var strict = false

    func run() throws {
        var spec = try PipelineOptions.loadSpec(pipeline)
        spec.stateFolder = StateFiles.folder(explicit: StateFiles.explicit(nil), pipeline: pipeline)
        let environment = Environment()
        var faults: [String] = []
        for fault in BuiltPipeline.check(spec, path: pipeline, environment: environment) {
            let text = environment.redact(String(describing: fault))
            if let unset = (fault as? SpecError)?.unsetVariable, !strict {
                Console.warning("\(pipeline): \(text) (run refuses until \(unset) is set; the checks that need it were skipped)")
            } else {
                faults.append("\(pipeline): \(text)")
            }
        }
        guard faults.isEmpty else { throw CommandError.usage(faults.joined(separator: "\nerror: ")) }
        for note in spec.firstFrameNotes { Console.note("\(pipeline): \(note)") }
        let sinks = spec.sinks.map { "\($0.name) (\($0.typeName))" }.joined(separator: ", ")
        Console.out(
            "\(pipeline): valid — \(spec.source.typeName) source, \(spec.filters.count) filter(s)"
                + (spec.filters.isEmpty ? "" : " [\(spec.filters.map(\.op).joined(separator: " → "))]")
                + ", "
                + (spec.outputs.count == 1
                    ? "\(spec.output.formatDescription) output"
                    : "outputs: " + spec.outputs.map { "\($0.id) (\($0.formatDescription))" }.joined(separator: ", "))
                + ", sinks: \(sinks)")
    }
}
