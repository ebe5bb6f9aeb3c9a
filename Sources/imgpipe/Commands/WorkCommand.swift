import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

/// `imgpipe work`: the command every machine of a shared run runs, the same on all of them.
struct WorkCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "work",
        abstract: "Work on a run shared through PostgreSQL, beside any number of other workers.",
        discussion: """
            Joins the latest unfinished run of the pipeline in the database (the first worker \
            creates it; a finished run is not started again: the worker exits at once as the run \
            ended, 0 or 1, and `imgpipe work --new` starts another), \
            claims chunks of items under leases, lists the feed when no other worker does, and \
            exits when the feed is listed and no chunk is left: 0, or 1 when the run has failed \
            items, 130 when interrupted. Ctrl-C or SIGTERM: no new claims, the items in flight \
            finish within the grace period, unfinished chunks are handed back at once.
            """
    )

    @OptionGroup var options: PipelineOptions

    @OptionGroup var workerOptions: WorkerOptions

    @Option(help: ArgumentHelp("Items per chunk of a new run.", valueName: "N"))
    var chunkSize = 500

    @Option(help: ArgumentHelp("Seconds a claim lasts without a heartbeat.", valueName: "SECONDS"))
    var lease: Double = 60

    @Option(help: ArgumentHelp("Seconds between heartbeats (less than the lease).", valueName: "SECONDS"))
    var heartbeat: Double = 10

    @Flag(
        help:
            "Start a new run when the latest has finished (an unfinished run is joined). Give it to one worker, not in a Job every pod repeats."
    )
    var new = false

    @Flag(
        help:
            "Exit 0, not 1, when the run finished with failed items: the batch is complete (a Kubernetes Job completes instead of restarting pods). `imgpipe status --exit-code` still exits 1 for it."
    )
    var completeWithFailures = false

    @OptionGroup var output: OutputOptions

    @OptionGroup var metrics: MetricsOptions

    func validate() throws {
        guard (1...1_000_000).contains(chunkSize) else {
            throw ValidationError("--chunk-size must be from 1 to 1000000, got \(chunkSize)")
        }
        guard lease >= 1, lease <= 86_400 else { throw ValidationError("--lease must be from 1 to 86400 seconds, got \(lease)") }
        guard heartbeat > 0, heartbeat < lease else {
            throw ValidationError("--heartbeat must be more than 0 and less than --lease (\(lease)), got \(heartbeat)")
        }
    }

    func run() throws {
        guard case .postgres(let url)? = options.stateLocation else {
            throw CommandError.usage(
                "imgpipe work shares a run through PostgreSQL: give --state postgres://user:password@host:port/database "
                    + "(or set IMGPIPE_STATE)")
        }
        var settings = SharedWorker.Options()
        settings.chunkSize = chunkSize
        settings.leaseSeconds = lease
        settings.heartbeatSeconds = heartbeat
        settings.joining = new ? .workOrAfterFinished : .work
        var session = SharedSession(
            options: options, workers: workerOptions, quiet: output.quiet, json: output.json, url: url, settings: settings)
        session.completeWithFailures = completeWithFailures
        session.metrics = metrics
        try session.perform()
    }
}
