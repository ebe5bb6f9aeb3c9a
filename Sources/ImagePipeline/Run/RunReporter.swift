import Foundation
import PipelineKit

/// A moment of a run, for progress lines.
public struct RunProgress: Sendable {
    /// How many items the run will have when the feed has been listed, as far as is known.
    public enum Total: Sendable, Equatable {
        /// Listing is over (or the feed counted what it will list): the run's items.
        case exact(Int)
        /// The run's items plus what a remote API says is still to come: may be off.
        case estimate(Int)
        /// Nothing said how many are to come: the items listed so far.
        case atLeast(Int)

        public var count: Int {
            switch self {
            case .exact(let count), .estimate(let count), .atLeast(let count): count
            }
        }
    }

    public let runId: Int64
    public let total: Total
    public let done: Int
    public let failed: Int
    /// Items finished (done, skipped or failed) in this session.
    public let finishedThisSession: Int
    /// Seconds since this session started.
    public let elapsed: Double
    public var skipped = 0

    public var itemsPerSecond: Double { elapsed > 0 ? Double(finishedThisSession) / elapsed : 0 }

    /// Seconds left at this session's rate, when it can be told: something has finished
    /// and the total is not just a lower bound. As rough as the total when it is an estimate.
    public var eta: Double? {
        let rate = itemsPerSecond
        if case .atLeast = total { return nil }
        guard rate > 0 else { return nil }
        return Double(max(0, total.count - done - skipped - failed)) / rate
    }
}

/// Receives what a run has to say. The library prints nothing itself: the command line
/// passes a reporter that writes to the terminal.
public protocol RunReporter: Sendable {
    /// About four times a second while items are moving, and once as a session ends.
    func progress(_ progress: RunProgress)
    /// One item failed for good.
    func itemFailed(key: String, failure: ItemFailure)
    /// One item ended (done, failed or skipped) and its end is in the state file. A
    /// shared run's worker records it in the shared database; others need not implement it.
    func itemSettled(key: String, outcome: ItemOutcome)
    /// Something the user should know that is not an item failure: an error of the run
    /// (the state file cannot be written, the feed cannot be listed) or a warning
    /// (entries of a feed left out: no item, failure nor exit code tells of them).
    /// `--quiet` keeps these.
    func notice(_ message: String)
    /// Something that changes nothing the run gives (a duplicate key processed once, an
    /// item taken up again): `--quiet` drops it. By default a notice.
    func info(_ message: String)
}

extension RunReporter {
    public func info(_ message: String) { notice(message) }
}

/// A reporter that says nothing (tests, `--quiet` library use).
public struct SilentReporter: RunReporter {
    public init() {}
    public func progress(_ progress: RunProgress) {}
    public func itemFailed(key: String, failure: ItemFailure) {}
    public func notice(_ message: String) {}
}

/// How an item ended, as `RunReporter.itemSettled` hears it.
public enum ItemOutcome: Sendable, Equatable {
    case done
    case failed(ItemFailure)
    case skipped(ItemSkip)
}

extension RunReporter {
    public func itemSettled(key: String, outcome: ItemOutcome) {}
}
