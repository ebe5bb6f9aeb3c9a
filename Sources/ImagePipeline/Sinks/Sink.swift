import Crypto
import Foundation

/// One output to hand to a sink.
public struct Delivery: Sendable {
    public let runId: Int64
    /// The run's UUID (unique across state files and machines).
    public let runUUID: String
    public let key: String
    /// The output's id (`OutputSpec.id`).
    public var output = OutputSpec.defaultID
    /// The output's size in pixels (`{width}`, `{height}` in key templates; 0 unknown).
    public var width = 0
    public var height = 0
    /// The staged output file.
    public let stagedPath: String
    /// The output name from the template, already made safe (relative, no `..`).
    public let name: String
    public let format: OutputFormat
    /// Where the input came from (a path or URL).
    public let origin: String
    /// What `{key}` and `{stem}` become in names and URLs.
    public let nameKey: String
    public let nameStem: String
    /// Lower-case hex SHA-256 of the output.
    public let sha256: String
    /// The item's number in the run (`{index}`).
    public let index: Int

    /// The `Idempotency-Key` for this item, output and sink: `imgpipe-<run UUID>-<digest
    /// of item, output and sink>`, the same for every retry and resume of the run, different
    /// for any other run (of any state file, on any machine), item, output or sink. (The
    /// output `default` is left out of the digest: keys of one-output pipelines are what
    /// they were before several outputs.)
    public func idempotencyKey(sink: String) -> String {
        let outputPart = output == OutputSpec.defaultID ? "" : "\u{0}\(output)"
        let digest = SHA256.hash(data: Data("\(runUUID)\u{0}\(key)\u{0}\(sink)\(outputPart)".utf8))
        return "imgpipe-\(runUUID)-" + digest.prefix(16).hex
    }
}

/// What a sink reports for a delivered output.
public struct DeliveryReceipt: Sendable, Equatable {
    public let remoteURL: String?
    public let httpStatus: Int?
    /// Tries it took.
    public let attempts: Int

    public init(remoteURL: String? = nil, httpStatus: Int? = nil, attempts: Int = 1) {
        self.remoteURL = remoteURL
        self.httpStatus = httpStatus
        self.attempts = attempts
    }
}

/// A sink's final refusal of one output.
public struct DeliveryFailure: Error, Sendable {
    public let failure: ItemFailure
    public let attempts: Int

    public init(_ failure: ItemFailure, attempts: Int = 1) {
        self.failure = failure
        self.attempts = attempts
    }
}

/// What one attempt at a delivery came to, when it did not fail for good.
public enum DeliveryAttempt: Sendable, Equatable {
    case delivered(DeliveryReceipt)
    /// The attempt failed in a way that may pass: the runner tries again after this many
    /// seconds (on a timer: no thread waits), unless the run is stopping.
    case retry(after: Double, ItemFailure)
}

/// A destination for outputs. Delivery must be idempotent: after a crash, resume may hand
/// the same output to a sink again.
public protocol Sink: Sendable {
    var name: String { get }
    /// Called before a run or resume delivers anything (create folders, sweep leftovers),
    /// for a state file whose work folders live in `workRoot` (a sink that keeps a journal
    /// there, of uploads to finish or abandon, reads it here). Throws a `SinkError` naming
    /// the sink.
    func prepare(workRoot: String) throws
    /// Makes attempt number `attempt` (from 1) at one output; throws the final failure.
    func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt
    /// Called when the run stops.
    func finish()
    /// Removes what earlier runs delivered here at these locations (as each delivery
    /// recorded it), when the sink prunes (only `DirectorySink` with `"prune": true`);
    /// returns how many it removed.
    func prune(_ locations: [String]) -> Int
}

extension Sink {
    /// Nothing to make or sweep before a run.
    public func prepare(workRoot: String) throws {}
    /// Nothing to close.
    public func finish() {}
    public func prune(_ locations: [String]) -> Int { 0 }
}

/// A sink that cannot be used at all (its folder cannot be made, …).
public struct SinkError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension HTTPFailure {
    /// The answer of a sink to this failure on attempt `attempt` of `retry.attempts`: try
    /// again later if it may pass and attempts remain, else fail with reason `upload`.
    func deliveryAttempt(_ attempt: Int, retry: RetryPolicy) throws(DeliveryFailure) -> DeliveryAttempt {
        let failure = ItemFailure(
            kind == .blocked ? .blockedAddress : .upload, message + (attempt > 1 ? " (after \(attempt) attempts)" : ""),
            httpStatus: status)
        guard retryable, attempt < retry.attempts else { throw DeliveryFailure(failure, attempts: attempt) }
        return .retry(after: retryDelay(attempt: attempt, backoff: retry.backoff), failure)
    }
}
