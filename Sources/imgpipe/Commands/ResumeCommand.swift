import ArgumentParser
import ImagePipeline

struct ResumeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Continue the latest unfinished run of the state file.",
        discussion: """
            Items already done are not touched; fetched items are not read again and \
            processed items are not processed again: only what was not durably finished is \
            redone. Refuses when the pipeline's filters or output changed since the run began.
            """
    )

    @OptionGroup var options: PipelineOptions

    @OptionGroup var workerOptions: WorkerOptions

    @Flag(help: "Also try the run's failed items again.")
    var retryFailed = false

    @Flag(help: "List the feed again and add only the items the run does not have yet.")
    var refreshFeed = false

    @OptionGroup var output: OutputOptions

    func run() throws {
        try RunSession(options: options, workers: workerOptions, quiet: output.quiet, json: output.json).perform(
            .resume(retryFailed: retryFailed, refreshFeed: refreshFeed))
    }
}
