import ArgumentParser
import ImagePipeline
import PipelineKit

struct SchemaCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Print the JSON Schema (draft 2020-12) of pipeline files, for editors."
    )

    func run() throws {
        Console.out(PipelineSchema.document().serialized())
    }
}
