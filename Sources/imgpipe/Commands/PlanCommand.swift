import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct PlanCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plan",
        abstract: "Say what `run --incremental` would do, without doing it.",
        discussion: """
            Lists the feed and compares it, and the pipeline file, with the last finished run \
            of the state file: items new to the feed, items whose source changed, items gone \
            from it, unchanged items, items that failed or were skipped last time (tried again \
            from the start), and for each output how many items it must make again \
            and why, with an estimate of the time from the previous run. Nothing is processed, \
            written or delivered; a remote image is fetched again to compare it unless the \
            source names a `versionField` (a conditional request when the cache has it).
            """
    )

    @OptionGroup var options: PipelineOptions

    @Flag(help: "Print the plan as one JSON object.")
    var json = false

    func run() throws {
        if case .postgres? = options.stateLocation {
            throw CommandError.usage("plan takes a state file, not a PostgreSQL state")
        }
        var spec = try options.loadSpec()
        spec.revalidateCache(readOnly: true)
        let environment = Environment()
        let pipeline = try options.build(spec, environment: environment) { Console.note($0) }
        let stateFile = try options.stateFile()
        let plan: ChangePlan
        do {
            // No state file yet: everything is new (and none is made by planning).
            let store = FileManager.default.fileExists(atPath: stateFile) ? try RunStore(path: stateFile, readOnly: true) : nil
            plan = try ChangePlan.make(
                pipeline: pipeline, store: store,
                scratch: NSTemporaryDirectory() + "/imgpipe-plan-\(getpid())-\(UUID().uuidString.prefix(8))")
        } catch {
            throw CommandError.failure(environment.redact(String(describing: error)))
        }
        if json { return Console.json(plan) }
        Console.out(
            plan.baseline.map { "compared with run #\($0) of \(Console.display(stateFile))" }
                ?? "no finished run in \(Console.display(stateFile)): every item is new")
        Console.out(
            "items: \(plan.new) new, \(plan.changed) changed, \(plan.unchanged) unchanged, \(plan.gone) gone from the feed")
        if plan.failedLastTime > 0 {
            let forGood =
                plan.failedLastTimeForGood == 0
                ? ""
                : "; \(plan.failedLastTimeForGood) of them failed for a cause that does not pass by itself and fail "
                    + "again unless it is fixed (imgpipe status names the fix)"
            Console.out(
                "failed last time: \(plan.failedLastTime) (run --incremental tries them again from the start, "
                    + "whatever their source\(forGood))")
        }
        if plan.skippedLastTime > 0 {
            Console.out("skipped last time: \(plan.skippedLastTime) (run --incremental tries them again from the start)")
        }
        for (id, output) in plan.outputs.sorted(by: { $0.key < $1.key }) {
            Console.out(
                "output \(id): \(output.redo) to make"
                    + (output.reasons.isEmpty ? "" : " (\(output.reasons.joined(separator: "; ")))"))
        }
        Console.out(String(format: "estimated time: %.1f s", plan.estimatedSeconds))
        let work = plan.outputs.values.contains { $0.redo > 0 } || plan.gone > 0
        if let unfinished = plan.unfinishedRun {
            Console.out(
                "run #\(unfinished) is unfinished: continue it with `imgpipe resume \(options.pipeline)`, or start over "
                    + "from this plan with `imgpipe run \(options.pipeline) --incremental --new`")
        } else {
            Console.out(work ? "next: `imgpipe run \(options.pipeline) --incremental`" : "nothing to do")
        }
    }
}
