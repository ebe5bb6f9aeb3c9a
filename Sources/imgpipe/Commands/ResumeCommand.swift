import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

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

    @Flag(
        help: ArgumentHelp(
            "Also try the run's failed items again; --retry-failed=REASON,… only those of these reasons "
                + "(\(FailureReason.allCases.map(\.rawValue).joined(separator: ", "))).",
            valueName: "REASON,…"))
    var retryFailed = false

    /// The REASON,… of `--retry-failed=REASON,…` (`Imgpipe.main` turns that into
    /// `--retry-failed --retry-failed-reasons REASON,…`, a flag taking no value).
    @Option(name: .customLong("retry-failed-reasons"), help: .hidden)
    var retryFailedReasons: String?

    @Flag(help: "List the feed again and add only the items the run does not have yet.")
    var refreshFeed = false

    @OptionGroup var output: OutputOptions

    @OptionGroup var metrics: MetricsOptions

    func run() throws {
        let reasons = try retryFailedReasons.map(Self.reasons)
        try RunSession(options: options, workers: workerOptions, quiet: output.quiet, json: output.json, metrics: metrics)
            .perform(
                .resume(retryFailed: retryFailed || reasons != nil, refreshFeed: refreshFeed, retryReasons: reasons))
    }

    /// `download,decode` as reasons; an unknown or missing name is a usage error naming the
    /// valid ones.
    static func reasons(_ list: String) throws -> Set<FailureReason> {
        let names = list.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        let valid = FailureReason.allCases.map(\.rawValue).joined(separator: ", ")
        var reasons: Set<FailureReason> = []
        for name in names {
            guard let reason = FailureReason(rawValue: name.lowercased()) else {
                throw CommandError.usage(
                    "--retry-failed=\(list): " + (name.isEmpty ? "an empty reason" : "unknown failure reason \"\(name)\"")
                        + " (valid: \(valid))")
            }
            reasons.insert(reason)
        }
        return reasons
    }
}
