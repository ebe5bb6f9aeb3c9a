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

    package init(
        runId: Int64, runUUID: String, key: String, output: String = OutputSpec.defaultID, width: Int = 0, height: Int = 0,
        stagedPath: String, name: String, format: OutputFormat, origin: String, nameKey: String, nameStem: String, sha256: String,
        index: Int
    ) {
        self.runId = runId
        self.runUUID = runUUID
        self.key = key
        self.output = output
        self.width = width
        self.height = height
        self.stagedPath = stagedPath
        self.name = name
        self.format = format
        self.origin = origin
        self.nameKey = nameKey
        self.nameStem = nameStem
        self.sha256 = sha256
        self.index = index
    }

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

/// One item as a sink takes it: the item's key, what the feed said of it, and the outputs of
/// the item this sink takes (those not yet delivered to it).
public struct BatchItem: Sendable {
    public let key: String
    /// The feed's metadata for the item (a JSON object's text), if it gave any.
    public let metadata: String?
    /// The item's caption, when its source names a field for one (`SourceParameters.captionField`).
    public let caption: String?
    /// The outputs, each with its staged file. A sink that takes items whole
    /// (`Sink.takesWholeItems`) gets every output it takes at once; any other gets one.
    public let deliveries: [Delivery]
    /// The input as it was decoded: its width and height, and the SHA-256 of its bytes (given
    /// to sinks that take items whole; nil when unknown).
    public var inputWidth: Int?
    public var inputHeight: Int?
    public var inputSHA256: String?
    /// What the item's first output looks like (`ImageFingerprint`), when known.
    public var fingerprint: ImageFingerprint?

    public init(
        key: String, metadata: String?, caption: String?, deliveries: [Delivery], inputWidth: Int? = nil,
        inputHeight: Int? = nil, inputSHA256: String? = nil
    ) {
        self.key = key
        self.metadata = metadata
        self.caption = caption
        self.deliveries = deliveries
        self.inputWidth = inputWidth
        self.inputHeight = inputHeight
        self.inputSHA256 = inputSHA256
    }
}

/// What a sink did with an item it was handed (`Sink.accept`).
public enum Acceptance: Sendable, Equatable {
    /// Delivered for good already: a batch of one, committed as it was accepted.
    case delivered(DeliveryReceipt)
    /// The attempt failed in a way that may pass: the runner tries again after this many
    /// seconds (on a timer: no thread waits), unless the run is stopping.
    case retry(after: Double, ItemFailure)
    /// Held in the sink's open batch, not yet delivered; `full`: the runner commits the
    /// batch now. Only a sink that takes items whole (`Sink.takesWholeItems`) may hold one.
    case held(full: Bool)
}

/// A destination for outputs, which takes items into a batch and commits the batch.
///
/// The runner hands the sink items (`accept`) one at a time, never two at once to one
/// sink. An item the sink holds (`Acceptance.held`) is not delivered: its staged outputs
/// stay, and it is recorded delivered only when the batch it is in commits (`commit`, which
/// the runner calls when the sink says the batch is full and when the session ends, before
/// the run's state is written). A batch open when the process dies is lost whole: its
/// items are still undelivered in the state file, and resume hands them to the sink again.
/// Delivery must be idempotent: after a crash, resume may hand the same output to a sink
/// again.
///
/// A sink that delivers each output at once is an `OutputSink`: its batches are of one.
public protocol Sink: Sendable {
    var name: String { get }
    /// Whether `accept` is given all the outputs of an item it takes together (true), or
    /// each alone (false: every output's delivery retried on its own).
    var takesWholeItems: Bool { get }
    /// Called before a run or resume delivers anything (create folders, sweep leftovers),
    /// for a state file whose work folders live in `workRoot` (a sink that keeps a journal
    /// there, of uploads to finish or abandon, reads it here). Throws a `SinkError` naming
    /// the sink.
    func prepare(workRoot: String) throws
    /// Makes attempt number `attempt` (from 1) at one item; throws the final failure.
    func accept(_ item: BatchItem, attempt: Int) throws(DeliveryFailure) -> Acceptance
    /// Delivers the open batch whole and returns a receipt for each of its items, by key
    /// (an item without one is left undelivered, for resume); throws the failure of the
    /// whole batch, which fails each of its items. Nothing open: nothing to do.
    func commit() throws(DeliveryFailure) -> [String: DeliveryReceipt]
    /// Drops the open batch: its items stay undelivered. The run stops at once, or (a shared
    /// run's worker that lost some of the batch's items) hands the sink the others again.
    func discard()
    /// Takes the items of `keys` out of the open batch, if it holds them (items found, after
    /// they were held, to need no delivery: made with a host's placeholder); returns the
    /// keys taken out. The batch stays open with the others.
    func withdraw(_ keys: Set<String>) -> Set<String>
    /// Called when the run stops, after the last commit.
    func finish()
    /// An item of the run ended without reaching the sink: `status` is `failed` or
    /// `skipped`, `reason` why (a batching sink counts them in its batch's stats).
    func noteUndelivered(_ status: String, reason: String)
    /// Removes what earlier runs delivered here at these locations (as each delivery
    /// recorded it), when the sink prunes (only `DirectorySink` with `"prune": true`);
    /// returns how many it removed.
    func prune(_ locations: [String]) -> Int
    /// Whether `prune` would remove any of these (it removes nothing).
    func wouldPrune(_ locations: [String]) -> Bool
    /// Whether the sink prunes at all.
    var prunes: Bool { get }
}

extension Sink {
    /// Nothing to make or sweep before a run.
    public func prepare(workRoot: String) throws {}
    /// Nothing to close.
    public func finish() {}
    /// Nothing held, or nothing that can be taken out.
    public func withdraw(_ keys: Set<String>) -> Set<String> { [] }
    /// Not counted.
    public func noteUndelivered(_ status: String, reason: String) {}
    public func prune(_ locations: [String]) -> Int { 0 }
    public func wouldPrune(_ locations: [String]) -> Bool { false }
    public var prunes: Bool { false }
}

/// A sink that delivers each output by itself, as soon as it is handed it: a batch of one
/// output, committed as it is accepted.
public protocol OutputSink: Sink {
    /// Makes attempt number `attempt` (from 1) at one output; throws the final failure.
    func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt
}

extension OutputSink {
    public var takesWholeItems: Bool { false }

    /// Delivers the item's outputs (the runner hands one at a time) there and then.
    public func accept(_ item: BatchItem, attempt: Int) throws(DeliveryFailure) -> Acceptance {
        var receipt = DeliveryReceipt(attempts: attempt)
        for delivery in item.deliveries {
            switch try deliver(delivery, attempt: attempt) {
            case .delivered(let made): receipt = made
            case .retry(let delay, let failure): return .retry(after: delay, failure)
            }
        }
        return .delivered(receipt)
    }

    /// Nothing is ever held.
    public func commit() throws(DeliveryFailure) -> [String: DeliveryReceipt] { [:] }
    public func discard() {}
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
