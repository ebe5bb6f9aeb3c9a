import ArgumentParser
import ImagePipeline

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Start a new run of a pipeline over its whole feed.",
        discussion: """
            Refuses to start while the state file holds an unfinished run: continue that one \
            with `imgpipe resume`, or pass --new to abandon it and start over.
            """
    )

    @OptionGroup var options: PipelineOptions

    @OptionGroup var workerOptions: WorkerOptions

    // `.unconditional`, so that `--limit -1` is read as a value (and refused as one).
    @Option(parsing: .unconditional, help: "Take at most this many items from the feed.")
    var limit: Int?

    @Flag(help: "Abandon an unfinished run in the state file and start a new one.")
    var new = false

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be a positive integer, got \(limit)") }
    }

    func run() throws {
        try RunSession(options: options, workers: workerOptions, quiet: output.quiet, json: output.json)
            .perform(.fresh(limit: limit, replaceUnfinished: new))
    }
}
