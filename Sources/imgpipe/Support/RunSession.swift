import ArgumentParser
import Foundation
import ImagePipeline
import Logging
import PipelineKit
import Synchronization

/// What `run` and `resume` share: open the state file, trap signals, run, report, map the
/// result to an exit code.
struct RunSession {
    let options: PipelineOptions
    let workers: WorkerOptions
    let quiet: Bool
    let json: Bool
    /// `run --incremental`: compare with the last finished run, carry over what did not change.
    var incremental = false
    /// `--metrics`, where the command takes it.
    var metrics: MetricsOptions?

    func perform(_ mode: RunMode) throws {
        if case .postgres(let url)? = options.stateLocation {
            if incremental {
                throw CommandError.usage(
                    "--incremental takes a state file, not a PostgreSQL state (a shared run does not "
                        + "compare with an earlier one yet)")
            }
            return try performShared(mode, url: url)
        }
        var spec = try options.loadSpec()
        workers.apply(to: &spec)
        // Comparing remote images with the last run asks their servers again, not the cache:
        // in an incremental run, and in the resume of one.
        var resumesIncremental = false
        if case .resume = mode, let latest = RunStore.peekLatestRun(at: try options.stateFile()),
            latest.state == .running || latest.state == .interrupted
        {
            resumesIncremental = latest.baseline != nil
        }
        if incremental || resumesIncremental { spec.revalidateCache() }
        let environment = Environment()
        let reporter = ConsoleReporter(quiet: quiet || json, environment: environment)
        let held = HeldNotices()
        let pipeline = try options.build(spec, environment: environment) { message in
            if !held.hold(message) { reporter.notice(message) }
        }
        let serving = try metrics?.start(pipeline: spec.name)
        var ran = false
        defer { serving?.finish(ran: ran) }
        let stateFile = try options.stateFile()
        // Only `run` starts a state file: resuming where there is none is a mistake of
        // folder or name, and an empty state file left behind would hide it.
        if case .resume = mode, !FileManager.default.fileExists(atPath: stateFile) {
            if StateFiles.explicit(options.state) == nil,
                let shared = SharedStateNote.message(pipeline: options.pipeline, doing: "to resume it")
            {
                throw CommandError.usage("\(StateFiles.missing(explicit: nil, pipeline: options.pipeline)); \(shared)")
            }
            throw CommandError.usage(
                "\(StateFiles.missing(explicit: options.state, pipeline: options.pipeline)): "
                    + "nothing to resume; start a run with `imgpipe run \(options.pipeline)`")
        }
        let store: RunStore
        let lock: StateLock
        do {
            try FileManager.default.createDirectory(
                atPath: (stateFile as NSString).deletingLastPathComponent,
                withIntermediateDirectories: true)
            lock = try StateLock(stateFile: stateFile)
            store = try RunStore(path: stateFile)
        } catch {
            throw CommandError.usage(String(describing: error))
        }
        // A resumed run that was left `running` was killed (or crashed): the moment a state
        // file is most likely to be damaged, so it is checked before anything is added.
        if case .resume = mode, (try? store.latestRun())??.state == .running, let damage = store.damage() {
            throw CommandError.usage(
                "state file \(stateFile) is damaged (\(damage)): it cannot be resumed; "
                    + "start over with `imgpipe run \(options.pipeline) --new --state <another file>`")
        }
        let scratch = RunStore.workRoot(ofStateFile: stateFile) + "/compare"
        // Nothing changed since the run compared with: no run is made (a new one would hold
        // its items as they are and deliver nothing). Looked at before the run's own
        // comparison is set up, which is then not needed.
        if case .fresh(nil, _) = mode, incremental {
            let started = Date()
            // The feed's notices (entries left out) are the run's to give when one follows.
            held.start()
            let looked = Result {
                try UpToDate.check(pipeline: pipeline, store: store, scratch: scratch)
            }
            let notices = held.stop()
            let current: RunRecord?
            do { current = try looked.get() } catch { throw CommandError.failure(environment.redact(String(describing: error))) }
            if let current {
                ran = true
                for notice in notices { reporter.notice(notice) }
                var summary = try store.report(runId: current.id)
                var session = StatusReport.Session(stateFile: store.path)
                session.elapsed = Date().timeIntervalSince(started)
                session.upToDate = true
                summary.session = session
                serving?.metrics.upToDate(summary)
                reporter.info("up to date: the feed and the pipeline are as run #\(current.id) left them; no run made")
                report(summary, session: session, stateFile: store.path, pipeline: options.pipeline)
                return
            }
        }
        let logger = options.logging.logger()
        var runnerOptions = PipelineRunner.Options()
        runnerOptions.pixelHelper = Imgpipe.pixelHelper
        runnerOptions.metrics = serving?.metrics
        // An incremental run, and the resume of one, compare with the run it started from.
        var baselineID: Int64?
        var current: Int64?
        if case .resume = mode, let latest = try? store.latestRun(), latest.isUnfinished {
            baselineID = latest.baseline
            current = latest.id
        }
        if incremental || baselineID != nil {
            do {
                runnerOptions.changes = try ChangeDetector(
                    store: store, pipeline: pipeline, scratch: scratch, baselineID: baselineID, current: current)
            } catch {
                throw CommandError.failure(environment.redact(String(describing: error)))
            }
            if runnerOptions.changes == nil { reporter.info("no finished run to compare with: every item is new") }
        }
        let runner = PipelineRunner(pipeline: pipeline, store: store, reporter: reporter, logger: logger, options: runnerOptions)
        // After a second signal, work in flight is abandoned; a libvips job cannot be cut
        // short, so the process does not wait for it: after 2 s it exits as a kill would
        // leave it, which the state file is made for (each change is one committed row).
        let trap = SignalTrap.stoppingWork(
            reporter: reporter, notice: "interrupted: finishing the items in flight (a second Ctrl-C stops at once)", grace: 2,
            stopped: "stopped at once; the state is saved, and the items that were in flight are redone by "
                + "`imgpipe resume \(options.pipeline)`"
        ) { runner.interrupt(now: $0) }
        defer { trap.cancel() }

        let summary: StatusReport
        do {
            // Whatever comes next (the summary, an error) starts on a clean line.
            defer { reporter.endLine() }
            summary = try runner.execute(mode)
            ran = true
        } catch let error as RunError {
            throw CommandError.usage(environment.redact(error.description))
        } catch {
            throw CommandError.failure(environment.redact(String(describing: error)))
        }
        // The state file must still be the one this session wrote to, whole.
        if let problem = lock.problem() ?? stateFileProblem(store, lock: lock) {
            throw CommandError.failure(problem)
        }
        // A feed that could not be listed at all is the pipeline's fault (or its server's),
        // and the run holds nothing to resume: it is abandoned, so the next `run` starts anew.
        guard let session = summary.session else { preconditionFailure("PipelineRunner.execute reports its session") }
        if session.listingError != nil, summary.total == 0, !session.interrupted {
            try? store.setState(.abandoned, runId: summary.run)
            throw CommandError.usage(
                "no item could be listed, so there is nothing to resume: check the pipeline's source "
                    + "(\(pipeline.spec.source.typeName): its path or URL, and that its server answers), "
                    + "then run it again with `imgpipe run \(options.pipeline)`")
        }
        if runnerOptions.changes != nil, !session.interrupted {
            prune(summary: summary, store: store, pipeline: pipeline, reporter: reporter)
        }
        report(summary, session: session, stateFile: store.path, pipeline: options.pipeline)
        if session.interrupted { throw Exit.interrupted }
        // Items left unfinished by a session that was not interrupted: not "every item done".
        if summary.failed > 0 || session.listingError != nil || summary.pending > 0 { throw Exit.failedItems }
    }

    /// Why the state file cannot be trusted at the end of a session: damaged, as SQLite's
    /// `quick_check` finds once the log is folded in (a file cut short reads as sound until
    /// then; a few milliseconds for 20,000 items), or changed by another program while the
    /// run went on (shorter now than when locked, or found otherwise than after one of this
    /// session's writes: cut short or written to, though writes since may have made it as
    /// long again), which is told even when SQLite finds no damage. Nil when sound.
    ///
    /// A session that changed no row and found the file as it left it (a `resume` of a
    /// finished run) wrote nothing that `quick_check` could find broken: the check, a read
    /// of the whole file (about a second at a million items), is left out.
    private func stateFileProblem(_ store: RunStore, lock: StateLock) -> String? {
        let changed = lock.shrank || store.wasChanged
        let stateFile = lock.stateFile
        store.foldLog()
        guard changed || store.changedRows else { return nil }
        if let damage = store.damage() {
            return "state file \(stateFile) was damaged while the run was going (\(damage)); start over with "
                + "`imgpipe run \(options.pipeline) --new --state <another file>`"
        }
        guard changed else { return nil }
        return "state file \(stateFile) was changed by another program while the run was going (cut short or written to); "
            + "SQLite finds no damage in it, but what this session did may not all be recorded"
    }

    /// After an incremental run that ended (not interrupted): each sink that prunes
    /// (`"prune": true`) removes what earlier runs delivered to it and this one did not.
    /// Only a run that listed the whole feed knows what is gone from it: with `--limit`, a
    /// listing that failed or one that listed nothing (`RunStore.partialListing`), the items
    /// it did not list are not gone, and nothing is removed.
    private func prune(summary: StatusReport, store: RunStore, pipeline: BuiltPipeline, reporter: ConsoleReporter) {
        if let run = try? store.run(id: summary.run), let partial = store.partialListing(of: run) {
            if pipeline.sinks.contains(where: \.prunes) {
                reporter.info(
                    summary.total == 0
                        ? "nothing pruned: \(partial)"
                        : "nothing pruned: this run did not list the whole feed (\(partial)), "
                            + "so the items it did not list are not gone from it")
            }
            return
        }
        for sink in pipeline.sinks {
            guard let locations = try? store.prunable(after: summary.run, sink: sink.name), !locations.isEmpty else { continue }
            let removed = sink.prune(locations)
            if removed > 0 {
                reporter.info("sink \(sink.name): removed \(removed) file(s) of earlier runs that this run no longer makes")
            }
        }
    }

    /// `run` and `resume` of a run shared through PostgreSQL: this process takes part as one
    /// worker (others join with `imgpipe work`), with `work`'s defaults for chunks and leases.
    private func performShared(_ mode: RunMode, url: String) throws {
        var settings = SharedWorker.Options()
        switch mode {
        case .fresh(let limit, let replace):
            settings.joining = .fresh(replace: replace, limit: limit)
        case .resume(let retryFailed, let refreshFeed, let reasons):
            settings.joining = .resume(retryFailed: retryFailed, refreshFeed: refreshFeed, retryReasons: reasons)
        }
        var session = SharedSession(options: options, workers: workers, quiet: quiet, json: json, url: url, settings: settings)
        session.metrics = metrics
        try session.perform()
    }

    private func report(_ summary: StatusReport, session: StatusReport.Session, stateFile: String, pipeline: String) {
        if json {
            Console.json(summary)
            return
        }
        guard !quiet else { return }
        var rest = summary.pending > 0 ? ", \(summary.pending) pending" : ""
        rest += " of \(summary.total)" + (summary.feedComplete ? "" : " listed so far")
        rest += String(
            format: " (%d this session in %.1f s, %.1f items/s)", session.ended, session.elapsed, session.itemsPerSecond)
        Console.out(parts: [
            ("run #\(summary.run): \(summary.done) done, \(summary.skipped) skipped, ", nil),
            ("\(summary.failed) failed", summary.failed > 0 ? .red : nil), (rest, nil),
        ])
        if !summary.failuresByReason.isEmpty {
            let reasons = summary.failuresByReason.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
            Console.out("failures: " + reasons.joined(separator: ", ") + " (details: imgpipe status \(pipeline))")
        }
        if !summary.skipsByReason.isEmpty {
            let reasons = summary.skipsByReason.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
            Console.out("skipped: " + reasons.joined(separator: ", ") + " (details: imgpipe status \(pipeline))")
        }
        if let listingError = session.listingError {
            Console.out(
                "the feed could not be listed to its end (\(listingError)); "
                    + (summary.total > 0 ? "the items listed were run. " : "no item was listed. ")
                    + "Continue later with: imgpipe resume \(pipeline)")
        }
        if session.interrupted || summary.pending > 0 {
            var resume = "imgpipe resume \(pipeline)"
            if options.state != nil { resume += " --state \(options.state!)" }
            Console.out("stopped before the end; state saved in \(Console.display(stateFile)). Continue with: \(resume)")
        }
    }
}

/// Notices held while `UpToDate` lists the feed: given when nothing changed, dropped when a
/// run follows (its own listing gives them again).
final class HeldNotices: Sendable {
    private let state = Mutex<(holding: Bool, held: [String])>((false, []))

    func start() { state.withLock { $0 = (true, []) } }

    /// Stops holding; the notices held.
    func stop() -> [String] {
        state.withLock { state in
            defer { state = (false, []) }
            return state.held
        }
    }

    /// Holds `message` when holding; false when it is to be given now.
    func hold(_ message: String) -> Bool {
        state.withLock { state in
            guard state.holding else { return false }
            state.held.append(message)
            return true
        }
    }
}
