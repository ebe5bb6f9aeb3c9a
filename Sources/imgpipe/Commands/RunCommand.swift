import ArgumentParser
import ImagePipeline
import PipelineKit

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

    @Flag(
        help: ArgumentHelp(
            "Compare with the last finished run and make only what changed (see `imgpipe plan`).",
            discussion: "Unchanged outputs keep their files and deliveries; a folder sink with "
                + "\"prune\": true removes the files of items gone from the feed."))
    var incremental = false

    @OptionGroup var output: OutputOptions

    @OptionGroup var metrics: MetricsOptions

    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be a positive integer, got \(limit)") }
    }

    func run() throws {
        try RunSession(
            options: options, workers: workerOptions, quiet: output.quiet, json: output.json, incremental: incremental,
            metrics: metrics
        ).perform(.fresh(limit: limit, replaceUnfinished: new))
    }
}
