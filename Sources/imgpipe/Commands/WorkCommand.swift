import ArgumentParser
import Foundation
import ImagePipeline

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

    @Flag(help: "Start a new run when the latest has finished (an unfinished run is joined). Give it to one worker, not in a Job every pod repeats.")
    var new = false

    @Flag(help: "Print nothing but errors.")
    var quiet = false

    @Flag(help: "Print a machine-readable summary on standard output.")
    var json = false

    func validate() throws {
        guard chunkSize >= 1 else { throw ValidationError("--chunk-size must be 1 or more, got \(chunkSize)") }
        guard lease >= 1 else { throw ValidationError("--lease must be at least 1 second, got \(lease)") }
        guard heartbeat > 0, heartbeat < lease else {
            throw ValidationError("--heartbeat must be more than 0 and less than --lease (\(lease)), got \(heartbeat)")
        }
    }

    func run() throws {
        guard case let .postgres(url)? = options.stateLocation else {
            throw CommandError.usage("imgpipe work shares a run through PostgreSQL: give --state postgres://user:password@host:port/database "
                                     + "(or set IMGPIPE_STATE)")
        }
        var spec = try options.loadSpec()
        workerOptions.apply(to: &spec)
        // `{index}` is an item's number in a run; a worker only knows its own items' numbers.
        if spec.document.serialized().contains("{index}") {
            throw CommandError.usage("\(options.pipeline): {index} cannot be used in a shared run (each worker numbers "
                                     + "only the items it takes); use {key} or {stem}")
        }
        let environment = Environment()
        let reporter = ConsoleReporter(quiet: quiet || json, environment: environment)
        let pipeline = try options.build(spec, environment: environment) { reporter.notice($0) }
        var settings = SharedWorker.Options()
        settings.chunkSize = chunkSize
        settings.leaseSeconds = lease
        settings.heartbeatSeconds = heartbeat
        settings.startNew = new
        let stem = URL(fileURLWithPath: options.pipeline).deletingPathExtension().lastPathComponent
        let scratchFolder = ".imgpipe/\(stem).workers"
        let scratch = "\(scratchFolder)/\(FeedItem.safeName(ProcessInfo.processInfo.hostName))-\(getpid()).sqlite"
        let worker: SharedWorker
        do {
            try FileManager.default.createDirectory(atPath: scratchFolder, withIntermediateDirectories: true)
            worker = try SharedWorker(pipeline: pipeline, url: url, scratchState: scratch, reporter: reporter,
                                      logger: options.logging.logger(), options: settings)
        } catch let SharedRun.SharedRunError.runFinished(id) {
            // Nothing to do is not a failure: a worker restarted after the others finished
            // (a Kubernetes pod, a Slurm requeue) ends as they did, 0, or 1 with failed items.
            let status = try? SharedStatus.latest(at: url, pipelineName: spec.name)
            let failed = status?.failed ?? 0
            if !quiet && !json {
                Console.out("run #\(id) already finished" + (status.map { ": \($0.done) done, \($0.skipped) skipped, \($0.failed) failed" } ?? "")
                            + "; nothing to do (`imgpipe work --new` starts another run)")
            }
            if failed > 0 { throw Exit.failedItems }
            return
        } catch {
            // libpq's messages name the host and user, never the password; masked anyway.
            throw CommandError.usage(StateLocation.masking(in: environment.redact(String(describing: error)), url: url))
        }
        let trap = SignalTrap(
            onSignal: {
                reporter.notice("interrupted: no new claims; finishing the items in flight, then handing the rest back")
                worker.interrupt()
            },
            onRepeat: {
                worker.interrupt(now: true)
                DispatchQueue.global().asyncAfter(deadline: .now() + 5) {
                    reporter.endLine()
                    FileHandle.standardError.write(Data("stopped at once; the leases this worker held expire and other workers take them\n".utf8))
                    _exit(130)
                }
            })
        defer { trap.cancel() }
        let summary: SharedWorker.Summary
        do {
            defer { reporter.endLine() }
            summary = try worker.execute()
        } catch {
            throw CommandError.failure(StateLocation.masking(in: environment.redact(String(describing: error)), url: url))
        }
        if json {
            Console.json(summary)
        } else if !quiet {
            Console.out("worker \(summary.worker) of run #\(summary.run): \(summary.done) done, \(summary.skipped) skipped, "
                        + "\(summary.failed) failed here")
            Console.out("run #\(summary.run): \(summary.runDone) done, \(summary.runSkipped) skipped, \(summary.runFailed) failed, "
                        + "\(summary.runPending) pending of \(summary.total)" + (summary.finished ? " (finished)" : ""))
            if let listingError = summary.listingError { Console.out("the feed could not be listed to its end: \(listingError)") }
        }
        if summary.interrupted { throw Exit.interrupted }
        if !summary.finished {
            // Never 0 while the run has work left: a Job must not complete over it.
            throw CommandError.failure("run #\(summary.run) is not finished (\(summary.runPending) items pending); "
                                       + "run `imgpipe work` again to go on")
        }
        if summary.runFailed > 0 || summary.listingError != nil { throw Exit.failedItems }
    }
}
