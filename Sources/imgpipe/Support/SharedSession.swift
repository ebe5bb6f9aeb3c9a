import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

/// What `work`, and `run` and `resume` given a PostgreSQL state, share: join (or start) the
/// shared run, trap signals, work until nothing is left, report, map the end to an exit code.
struct SharedSession {
    let options: PipelineOptions
    let workers: WorkerOptions
    let quiet: Bool
    let json: Bool
    let url: String
    let settings: SharedWorker.Options
    /// A run that finished with failed items ends this process 0, not 1 (`work
    /// --complete-with-failures`): a batch system's job completes; `status --exit-code`
    /// still says 1.
    var completeWithFailures = false
    /// `--metrics`, where the command takes it.
    var metrics: MetricsOptions?

    func perform() throws {
        var spec = try options.loadSpec()
        workers.apply(to: &spec)
        let environment = Environment()
        let reporter = ConsoleReporter(quiet: quiet || json, environment: environment)
        var settings = settings
        settings.runner.pixelHelper = Imgpipe.pixelHelper
        settings.onStuck = { message in
            Console.exitNow(
                1, reporter: reporter,
                saying: "error: \(message); a call to the database still hangs, so the "
                    + "process exits here (its leases run out and other workers take its chunks)")
        }
        let pipeline = try options.build(spec, environment: environment) { reporter.notice($0) }
        let serving = try metrics?.start(pipeline: spec.name)
        var ran = false
        defer { serving?.finish(ran: ran) }
        settings.runner.metrics = serving?.metrics
        let stem = URL(fileURLWithPath: options.pipeline).deletingPathExtension().lastPathComponent
        let worker: SharedWorker
        // Kept for the life of the process (`WorkerJournal`).
        let journal: (path: String, lock: StateLock)
        do {
            journal = try WorkerJournal.claim(
                folder: ".imgpipe/\(stem).workers",
                base: "\(FeedItem.safeName(ProcessInfo.processInfo.hostName))-\(getpid())")
        } catch {
            throw CommandError.usage("cannot make this worker's journal: \(error)")
        }
        defer { withExtendedLifetime(journal.lock) {} }
        do {
            worker = try SharedWorker(
                pipeline: pipeline, url: url, journalPath: journal.path, reporter: reporter,
                logger: options.logging.logger(), options: settings)
        } catch let SharedRun.SharedRunError.runFinished(id) {
            unlink(journal.path)  // made empty by the claim; nothing was written to it
            // Nothing to do is not a failure: a worker restarted after the others finished
            // (a Kubernetes pod, a Slurm requeue) ends as they did, 0, or 1 with failed items.
            let status = try? StatusReport.shared(at: url, pipelineName: spec.name)
            let failed = status?.failed ?? 0
            if !quiet && !json {
                Console.out(
                    "run #\(id) already finished"
                        + (status.map { ": \($0.done) done, \($0.skipped) skipped, \($0.failed) failed" } ?? "")
                        + "; nothing to do (`imgpipe work --new` starts another run"
                        + (failed > 0 ? "; `imgpipe resume --retry-failed` tries the failed items again)" : ")"))
            }
            if failed > 0, !completeWithFailures { throw Exit.failedItems }
            return
        } catch {
            unlink(journal.path)
            // libpq's messages name the host and user, never the password; masked anyway.
            throw CommandError.usage(StateLocation.masking(in: environment.redact(String(describing: error)), url: url))
        }
        serving?.metrics.identify(run: worker.run.runId, worker: worker.run.worker)
        // Joined: `status` and the others, given no state, can now say where this run is.
        SharedStateNote.remember(url, pipeline: options.pipeline)
        if worker.run.failedOutOfReach > 0 {
            reporter.notice(
                "\(worker.run.failedOutOfReach) failed item(s) are in chunks other workers are still working on "
                    + "and were left as they are; once the run has finished, `imgpipe resume --retry-failed` tries them again")
        }
        let trap = SignalTrap.stoppingWork(
            reporter: reporter, notice: "interrupted: no new claims; finishing the items in flight, then handing the rest back",
            grace: 5, stopped: "stopped at once; the leases this worker held expire and other workers take them"
        ) {
            worker.interrupt(now: $0)
        }
        defer { trap.cancel() }
        let report: StatusReport
        do {
            defer { reporter.endLine() }
            report = try worker.execute()
            ran = true
        } catch {
            throw CommandError.failure(StateLocation.masking(in: environment.redact(String(describing: error)), url: url))
        }
        guard let session = report.session else { preconditionFailure("SharedWorker.execute reports its session") }
        if json {
            Console.json(report)
        } else if !quiet {
            Console.out(
                "worker \(worker.run.worker) of run #\(report.run): \(session.done) done, \(session.skipped) skipped, "
                    + "\(session.failed) failed here")
            Console.out(
                "run #\(report.run): \(report.done) done, \(report.skipped) skipped, \(report.failed) failed, "
                    + "\(report.pending) pending of \(report.total)" + (report.isFinished ? " (finished)" : ""))
            if let listingError = session.listingError { Console.out("the feed could not be listed to its end: \(listingError)") }
        }
        if session.interrupted { throw Exit.interrupted }
        if !report.isFinished {
            // Never 0 while the run has work left: a Job must not complete over it.
            throw CommandError.failure(
                "run #\(report.run) is not finished (\(report.pending) items pending); "
                    + "run `imgpipe work` again to go on")
        }
        if report.failed > 0 && !completeWithFailures || session.listingError != nil { throw Exit.failedItems }
    }
}
