import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a run of a state file: counts by status, per sink, failures by reason, throughput, what to do next.",
        discussion: """
            With no pipeline file and no --state, the one state file in .imgpipe/ is read \
            (when there are several, they are listed).
            """
    )

    @Argument(help: "The pipeline file; its default state file is read.", completion: .file(extensions: ["json"]))
    var pipeline: String?

    @Option(
        help:
            "The state file (default: .imgpipe/<pipeline file stem>.sqlite here, or beside the pipeline file), or a postgres:// URL of a shared run. Also IMGPIPE_STATE.",
        completion: .file(extensions: ["sqlite"]))
    var state: String?

    @Option(name: .customLong("run"), help: ArgumentHelp("Show run number N instead of the latest.", valueName: "N"))
    var runNumber: Int64?

    @Flag(help: "List every run of the state file.")
    var runs = false

    @Flag(help: "Print one JSON object.")
    var json = false

    @Flag(
        help:
            "Exit as the run would: 0 when every item is done or skipped, 1 when some failed or are not finished yet (for scripts and a Job's follow-up check)."
    )
    var exitCode = false

    func run() throws {
        if let given = StateFiles.explicit(state), case .postgres(let url) = StateLocation(given) {
            return try sharedStatus(url: url)
        }
        let stateFile = try locateStateFile()
        // Given no state, a run of this pipeline in PostgreSQL is told of.
        let shared = StateFiles.explicit(state) == nil ? pipeline.flatMap { SharedStateNote.find(pipeline: $0) } : nil
        guard FileManager.default.fileExists(atPath: stateFile) else {
            let missing = StateFiles.missing(explicit: state, pipeline: pipeline)
            if let shared { throw CommandError.usage("\(missing); " + SharedStateNote.told(shared.state, doing: "to see it")) }
            throw CommandError.usage("\(missing): nothing has run yet")
        }
        try StateFiles.refuseEmpty(stateFile)
        let written = (try? FileManager.default.attributesOfItem(atPath: stateFile))?[.modificationDate] as? Date
        if let shared, let written, shared.noted > written {
            Console.note(
                "a later run of this pipeline is in PostgreSQL at \(shared.state); set IMGPIPE_STATE to that, "
                    + "with its password, to see it (below: the run of \(Console.display(stateFile)))")
        }
        let store: RunStore
        let report: StatusReport?
        do {
            store = try Self.open(stateFile)
            if runs { return try listRuns(store) }
            report = try runNumber.map { try StatusReport.run($0, in: store) } ?? StatusReport.latest(in: store)
        } catch {
            throw CommandError.usage(String(describing: error))
        }
        guard let report else {
            // Only abandoned runs (`run --new`, a feed that listed nothing): say so.
            let abandoned = (try? store.runs().first).flatMap { $0 }.map {
                "state file \(Console.display(stateFile)) has no run to show: run #\($0.id) was abandoned "
                    + "(started anew with --new, or its feed listed no item); see --runs"
            }
            throw CommandError.usage(
                runNumber.map { "state file \(Console.display(stateFile)) has no run #\($0) (see --runs)" }
                    ?? abandoned ?? "state file \(Console.display(stateFile)) has no runs")
        }
        if json {
            Console.json(report)
        } else {
            print(report)
            for line in nextSteps(report, stateFile: stateFile) { Console.out(line) }
        }
        try exitAsTheRun(report)
    }

    /// With `--exit-code`: 1 when the run has failed or unfinished items (its feed not listed
    /// to its end counts as unfinished).
    func exitAsTheRun(_ report: StatusReport) throws {
        guard exitCode else { return }
        if report.failed > 0 || report.pending > 0 || !report.feedComplete { throw Exit.failedItems }
    }

    /// The explicit state file, the pipeline's default one, or the only one in `.imgpipe/`.
    func locateStateFile() throws -> String {
        if StateFiles.explicit(state) != nil || pipeline != nil {
            return try StateFiles.path(explicit: StateFiles.explicit(state), pipeline: pipeline)
        }
        let folder = ".imgpipe"
        let found = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [])
            .filter { $0.hasSuffix(".sqlite") }.sorted()
        switch found.count {
        case 0:
            throw CommandError.usage("nothing has run here (no state file in .imgpipe/); give a pipeline file or --state")
        case 1:
            return URL(fileURLWithPath: folder + "/" + found[0]).standardizedFileURL.path
        default:
            throw CommandError.usage(
                "several state files in .imgpipe/ (" + found.joined(separator: ", ")
                    + "); give the pipeline file or --state")
        }
    }

    func listRuns(_ store: RunStore) throws {
        let all = try store.runs()
        if json {
            Console.json(try all.compactMap { try StatusReport.run($0.id, in: store, failureLimit: 0) })
            return
        }
        let formatter = ISO8601DateFormatter()
        for record in all {
            let counts = try store.counts(runId: record.id)
            Console.out(
                "run #\(record.id): \(record.state.rawValue), started \(formatter.string(from: record.startedAt)), "
                    + "\(counts.done) done, \(counts.skipped) skipped, \(counts.failed) failed, "
                    + "\(counts.unfinished) pending of \(counts.total)"
                    + (record.handedOn > 0 ? ", \(record.handedOn) handed on to a later run" : ""))
        }
    }

    /// The state file, opened (and brought up to date) as a run opens it. A run that has just
    /// created it may be making its tables at that moment, which fails the open: asked
    /// again a few times, 50 ms apart.
    static func open(_ stateFile: String) throws -> RunStore {
        var tries = 0
        while true {
            do {
                return try RunStore(path: stateFile)
            } catch {
                tries += 1
                guard tries < 5 else { throw error }
                usleep(50_000)
            }
        }
    }

    /// The report as lines, for a state file's run and a shared run alike (`place`: where
    /// a shared run's database is, password masked; a shared run adds its chunks and workers).
    func print(_ report: StatusReport, place: String? = nil) {
        Console.out(
            "run #\(report.run) (\(report.name))" + (place.map { " in \($0)" } ?? "")
                + ": \(report.state), started \(report.startedAt)"
                + (report.finishedAt.map { ", finished \($0)" } ?? ""))
        let listing =
            report.feedComplete
            ? ""
            : " listed so far (the feed is not listed to its end"
                + (report.pagesListed.map { ": \($0) pages so far" } ?? "") + ")"
        // A shared run's items are pending until a worker ends them: the stages between are
        // that worker's own.
        let stages =
            report.pending > 0 && report.workers == nil ? " (\(report.fetched) fetched, \(report.processed) processed)" : ""
        Console.out(
            "items: \(report.total) total" + listing
                + ", \(report.done) done, \(report.skipped) skipped, \(report.failed) failed, "
                + "\(report.pending) pending" + stages)
        if let handedOn = report.handedOn {
            Console.out("handed on: \(handedOn) item(s) kept whole by a later `run --incremental`, which counts them now")
        }
        // With several outputs, a sink's counts are deliveries (an item and an output each).
        let several = report.outputs.count > 1
        for (name, counts) in report.sinks.sorted(by: { $0.key < $1.key }) {
            Console.out(
                "sink \(name): \(counts.done) done, \(counts.failed) failed, \(counts.pending) pending"
                    + (several ? " deliveries" : ""))
        }
        if several {
            for (id, output) in report.outputs.sorted(by: { $0.key < $1.key }) {
                let counts = output.deliveries
                Console.out(
                    "output \(id) (\(output.format)): \(counts.done) done, \(counts.failed) failed, \(counts.pending) pending deliveries"
                )
            }
        }
        if !report.tiers.isEmpty {
            Console.out(
                "served from: "
                    + report.tiers.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
                    .joined(separator: ", "))
        }
        Console.out(String(format: "throughput: %.1f items/s over %.1f s of running", report.itemsPerSecond, report.elapsed))
        if !report.failuresByReason.isEmpty {
            Console.out(
                "failures by reason: "
                    + report.failuresByReason.sorted { $0.key < $1.key }
                    .map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            for failure in report.failures.prefix(50) {
                Console.out(
                    "  \(failure.key.printable): \(failure.reason): \(failure.message.printable)"
                        + (failure.attempts > 1 ? " (\(failure.attempts) attempts)" : ""))
            }
            if report.failures.count > 50 { Console.out("  … \(report.failed - 50) more (use --json)") }
        }
        if !report.skipsByReason.isEmpty {
            Console.out(
                "skips by reason: "
                    + report.skipsByReason.sorted { $0.key < $1.key }
                    .map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            for skip in report.skips.prefix(50) {
                Console.out("  \(skip.key.printable): \(skip.reason): \(skip.message.printable)")
            }
            if report.skips.count > 50 { Console.out("  … \(report.skipped - 50) more (use --json)") }
        }
        if let placeholders = report.placeholders {
            Console.out(
                "placeholders: \(placeholders) item(s) made before their bytes were found to be their host's placeholder "
                    + "(`imgpipe export` flags them)")
        }
        if let chunks = report.chunks {
            Console.out("chunks: \(chunks.pending) pending, \(chunks.leased) leased, \(chunks.done) done")
        }
        for worker in report.workers ?? [] {
            Console.out(
                "worker \(worker.name.printable): last heartbeat \(Int(worker.lastHeartbeatSecondsAgo.rounded())) s ago, "
                    + "\(worker.itemsDone) items ended (done, failed or skipped), \(worker.chunksHeld) chunks held")
        }
    }

    /// What to do next, as commands that work from here.
    func nextSteps(_ report: StatusReport, stateFile: String) -> [String] {
        let pipelineFile = Console.display(report.pipeline)
        let stateOption = state.map { " --state \($0)" } ?? ""
        var steps: [String] = []
        switch report.state {
        case "running", "interrupted":
            let retry = Self.retryReasons(report.failures)
            steps.append(
                "next: continue it with `imgpipe resume \(pipelineFile)\(stateOption)`"
                    + (retry.isEmpty
                        ? ""
                        : " (add --retry-failed=\(retry.joined(separator: ",")) to try again the failed items that may pass)"))
            steps += fixes(report.failures, pipelineFile: pipelineFile, stateOption: stateOption)
        case "finished" where report.failed > 0:
            let retry = Self.retryReasons(report.failures)
            if !retry.isEmpty {
                let advised = report.failures.map { ($0, Self.advice($0)) }
                let passing = advised.filter { $0.1.outlook == .mayPass }.count
                let caught = advised.filter { retry.contains($0.0.reason) && $0.1.outlook == .permanent }.count
                steps.append(
                    "next: \(passing) failed item(s) may pass on another try (network, server, timeout); try them again with "
                        + "`imgpipe resume \(pipelineFile)\(stateOption) --retry-failed=\(retry.joined(separator: ","))`"
                        + (caught > 0 ? " (it also tries \(caught) that will fail again)" : ""))
            }
            steps += fixes(report.failures, pipelineFile: pipelineFile, stateOption: stateOption)
        case "abandoned":
            steps.append("this run was replaced by a newer one (`imgpipe status --runs\(stateOption)` lists them)")
        default:
            steps.append(report.skipped > 0 ? "every item is done or skipped" : "every item is done")
        }
        steps += outputFolders(of: report.pipeline)
        return steps
    }

    static func advice(_ failure: FailureRecord) -> FailureAdvice {
        FailureAdvice.of(reason: failure.reason, message: failure.message, httpStatus: failure.httpStatus)
    }

    /// The reasons of the failures that may pass on another try, sorted.
    static func retryReasons(_ failures: [FailureRecord]) -> [String] {
        Set(failures.filter { advice($0).outlook == .mayPass }.map(\.reason)).sorted()
    }

    /// For the failures that would fail again as they are: what to change, per cause, and
    /// the command that tries them again after.
    func fixes(_ failures: [FailureRecord], pipelineFile: String, stateOption: String) -> [String] {
        var causes: [String] = []
        var byCause: [String: [(FailureRecord, FailureAdvice)]] = [:]
        for failure in failures {
            let advice = Self.advice(failure)
            guard advice.outlook == .permanent else { continue }
            if byCause[advice.cause] == nil { causes.append(advice.cause) }
            byCause[advice.cause, default: []].append((failure, advice))
        }
        guard !causes.isEmpty else { return [] }
        let count = byCause.values.reduce(0) { $0 + $1.count }
        var lines = ["\(count) failed item(s) will fail again as they are (retrying them does not help); to fix:"]
        let resume = "imgpipe resume \(pipelineFile)\(stateOption) --retry-failed="
        for cause in causes {
            let group = byCause[cause] ?? []
            guard let (first, advice) = group.first else { continue }
            var fix = advice.fix ?? ""
            var then = "`\(resume)\(first.reason)`"
            switch cause {
            case "max-pixels":
                if let most = group.compactMap({ FailureAdvice.pixels(in: $0.0.message) }).max() {
                    fix = "raise `limits.maxPixels` to \(most)"
                }
            case "max-bytes":
                if let most = group.compactMap({ FailureAdvice.bytes(in: $0.0.message) }).max() {
                    fix = "raise `limits.maxBytes` to \(most)"
                }
            case "output-budget":
                if let most = group.compactMap({ FailureAdvice.bytes(in: $0.0.message) }).max() {
                    fix = "raise the output's `maxBytes` to \(most) or lower its `minQuality`"
                }
                // The output's settings are part of what a resume keeps: a re-run remakes
                // what they change.
                then = "`imgpipe run \(pipelineFile)\(stateOption) --incremental`"
            case "name-clash":
                // The output's name is part of what a resume keeps: a new run takes it.
                then = "a new run: `imgpipe run \(pipelineFile)\(stateOption)`"
            default: break
            }
            lines.append(
                "  \(first.reason) (\(group.count), e.g. \(first.key.printable)): \(fix), then \(then)")
        }
        return lines
    }

    /// Where the pipeline's directory sinks write, as paths from here (nothing when the
    /// pipeline file is gone or no longer reads).
    func outputFolders(of pipelineFile: String) -> [String] {
        guard let spec = try? PipelineSpec.load(path: pipelineFile) else { return [] }
        let environment = Environment()
        return spec.sinks.compactMap { sink in
            guard let path = sink.folder, let expanded = try? path.expanded(in: environment) else {
                return nil
            }
            // A `${NAME}` in the path is masked, as in everything imgpipe prints.
            return "outputs: \(environment.redact(Console.display(spec.resolvePath(expanded))))/ (sink \(sink.name))"
        }
    }

    /// The latest run of the pipeline (of any, without a pipeline file) in a shared database.
    private func sharedStatus(url: String) throws {
        let spec = try pipeline.map { try PipelineOptions.loadSpec($0) }
        let name = spec?.name
        let known = spec.flatMap { spec in pipeline.map { StatusReport.SharedPipeline(spec, path: $0) } }
        let place = StateLocation.postgres(url: url).displayed
        let status: StatusReport?
        do {
            if runs {
                for run in try StatusReport.sharedRuns(at: url, pipelineName: name) {
                    Console.out("run #\(run.run) of \(run.pipeline): \(run.state), started \(run.startedAt)")
                }
                return
            }
            status = try StatusReport.shared(at: url, pipelineName: name, runNumber: runNumber, pipeline: known)
        } catch {
            throw CommandError.usage(StateLocation.masking(in: String(describing: error), url: url))
        }
        guard let status else {
            throw CommandError.usage(
                "\(place) has no run" + (runNumber.map { " #\($0)" } ?? "") + (name.map { " of pipeline \($0)" } ?? "")
                    + (runNumber != nil ? " (see --runs)" : ""))
        }
        if json { Console.json(status) } else { print(status, place: place) }
        try exitAsTheRun(status)
    }
}
