import Foundation

/// A moment of a run, for progress lines.
public struct RunProgress: Sendable {
    public let runId: Int64
    /// Items listed so far.
    public let total: Int
    /// True while the feed is still being listed (`total` may grow).
    public let listing: Bool
    public let done: Int
    public let failed: Int
    /// Items finished (done or failed) in this session.
    public let finishedThisSession: Int
    /// Seconds since this session started.
    public let elapsed: Double

    public var itemsPerSecond: Double { elapsed > 0 ? Double(finishedThisSession) / elapsed : 0 }

    /// Seconds left at the current rate, when it can be told.
    public var eta: Double? {
        let rate = itemsPerSecond
        guard rate > 0, !listing else { return nil }
        return Double(max(0, total - done - failed)) / rate
    }
}

/// The end of a run (or of one session of it).
public struct RunSummary: Sendable, Codable {
    public let run: Int64
    public let stateFile: String
    public let total: Int
    public let done: Int
    public let failed: Int
    public let pending: Int
    /// Items finished in this session.
    public let processed: Int
    public let elapsed: Double
    public let itemsPerSecond: Double
    /// True when stopped by a signal: the run can be resumed.
    public let interrupted: Bool
    public let failuresByReason: [String: Int]
    /// Set when the feed could not be listed to its end (the run can be resumed later).
    public let listingError: String?
}

/// Receives what a run has to say. The library prints nothing itself: the command line
/// passes a reporter that writes to the terminal.
public protocol RunReporter: Sendable {
    /// About four times a second while items are moving.
    func progress(_ progress: RunProgress)
    /// One item failed for good.
    func itemFailed(key: String, failure: ItemFailure)
    /// Something the user should know that is not an item failure.
    func notice(_ message: String)
}

/// A reporter that says nothing (tests, `--quiet` library use).
public struct SilentReporter: RunReporter {
    public init() {}
    public func progress(_ progress: RunProgress) {}
    public func itemFailed(key: String, failure: ItemFailure) {}
    public func notice(_ message: String) {}
}
