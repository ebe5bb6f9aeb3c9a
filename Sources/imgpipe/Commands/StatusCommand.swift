import ArgumentParser
import Foundation
import ImagePipeline

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the latest run of a state file: counts by status, per sink, failures by reason, throughput."
    )

    @Argument(help: "The pipeline file; its default state file is read.")
    var pipeline: String?

    @Option(help: "The state file (default: .imgpipe/<pipeline file stem>.sqlite).")
    var state: String?

    @Flag(help: "Print one JSON object.")
    var json = false

    func validate() throws {
        if pipeline == nil, state == nil { throw ValidationError("give a pipeline file or --state") }
    }

    func run() throws {
        let stateFile = StateFiles.path(explicit: state, pipeline: pipeline)
        guard FileManager.default.fileExists(atPath: stateFile) else {
            throw CommandError.usage("no state file at \(Console.display(stateFile)): nothing has run yet")
        }
        let report: StatusReport?
        do {
            report = try StatusReport.latest(in: try RunStore(path: stateFile))
        } catch {
            throw CommandError.usage(String(describing: error))
        }
        guard let report else {
            throw CommandError.usage("state file \(Console.display(stateFile)) has no runs")
        }
        if json {
            Console.json(report)
            return
        }
        Console.out("run #\(report.run) (\(report.name)): \(report.state), started \(report.startedAt)"
                    + (report.finishedAt.map { ", finished \($0)" } ?? ""))
        Console.out("items: \(report.total) total, \(report.done) done, \(report.failed) failed, \(report.pending) pending"
                    + (report.pending > 0 ? " (\(report.fetched) fetched, \(report.processed) processed)" : ""))
        for (name, counts) in report.sinks.sorted(by: { $0.key < $1.key }) {
            Console.out("sink \(name): \(counts.done) done, \(counts.failed) failed, \(counts.pending) pending")
        }
        if !report.tiers.isEmpty {
            Console.out("served from: " + report.tiers.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
                .joined(separator: ", "))
        }
        Console.out(String(format: "throughput: %.1f items/s over %.1f s of running", report.itemsPerSecond, report.elapsed))
        if !report.failuresByReason.isEmpty {
            Console.out("failures by reason: " + report.failuresByReason.sorted { $0.key < $1.key }
                .map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            for failure in report.failures.prefix(50) {
                Console.out("  \(failure.key): \(failure.reason): \(failure.message)"
                            + (failure.attempts > 1 ? " (\(failure.attempts) attempts)" : ""))
            }
            if report.failures.count > 50 { Console.out("  … \(report.failed - 50) more (use --json)") }
        }
    }
}
