import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct FiltersCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "filters",
        abstract: "List the filter ops and their parameters."
    )

    @Flag(help: "Print every op with its parameters, types, ranges and defaults as JSON.")
    var json = false

    func run() throws {
        let registry = FilterRegistry.standard
        if json {
            Console.json(registry.catalogue)
            return
        }
        for op in registry.definitions {
            Console.out("\(op.name): \(op.summary)")
            for parameter in op.parameters {
                var line = "    \(parameter.name) (\(parameter.type.summary))"
                if let fallback = parameter.defaultValue { line += " = \(fallback.serialized())" }
                if parameter.required { line += " required" }
                Console.out(line + ": \(parameter.summary)")
            }
        }
    }
}
