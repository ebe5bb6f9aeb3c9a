import PipelineKit

/// Why a run could not start. The command line maps these to exit code 2.
public enum RunError: Error, Sendable, CustomStringConvertible {
    case unfinishedRun(id: Int64, stateFile: String, pipeline: String)
    case nothingToResume(stateFile: String, pipeline: String)
    /// `details`: where the file differs from the run's, `path: old → new`.
    case pipelineChanged(fields: [String], id: Int64, details: [String])
    /// The sinks (by name) are not the ones the run began with.
    case sinksChanged(id: Int64, from: [String], to: [String])
    case stateFileBusy(stateFile: String)
    case feed(String)

    public var description: String {
        switch self {
        case .unfinishedRun(let id, let stateFile, let pipeline):
            "state file \(stateFile) has an unfinished run (#\(id)); continue it with `imgpipe resume \(pipeline)`, or start over with `imgpipe run \(pipeline) --new`"
        case .nothingToResume(let stateFile, let pipeline):
            "state file \(stateFile) has no run to resume; start one with `imgpipe run \(pipeline)`"
        case .pipelineChanged(let fields, let id, let details):
            "the pipeline's \(fields.joined(separator: " and ")) changed since run #\(id) started"
                + (details.isEmpty ? "" : " (" + details.joined(separator: "; ") + ")")
                + ", so its outputs would differ; restore the file, or start over with `imgpipe run --new`"
        case .sinksChanged(let id, let from, let to):
            "the pipeline's sinks changed since run #\(id) started (\(from.joined(separator: ", ")) → \(to.joined(separator: ", "))), "
                + "so its items' deliveries would not be made; restore the sinks, or start over with `imgpipe run --new`"
        case .stateFileBusy(let stateFile):
            "state file \(stateFile) is in use by another imgpipe process"
        case .feed(let message):
            message
        }
    }
}

/// How a run starts.
public enum RunMode: Sendable {
    /// A new run over the feed (at most `limit` items). `replaceUnfinished` (`--new`)
    /// abandons an unfinished run instead of refusing.
    case fresh(limit: Int?, replaceUnfinished: Bool)
    /// Continue the latest unfinished run; `retryFailed` also tries its failed items again
    /// (and reopens a finished run that has failures); `refreshFeed` lists the feed again
    /// and adds only the items the run does not have yet. `retryReasons` (with
    /// `retryFailed`) tries again only the failed items of these reasons.
    case resume(retryFailed: Bool, refreshFeed: Bool = false, retryReasons: Set<FailureReason>? = nil)
}
