import Crypto
import Foundation

/// One output to hand to a sink.
public struct Delivery: Sendable {
    public let runId: Int64
    /// The run's UUID (unique across state files and machines).
    public let runUUID: String
    public let key: String
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

    /// The `Idempotency-Key` for this item and sink: `imgpipe-<run UUID>-<digest of item
    /// and sink>`, the same for every retry and resume of the run, different for any other
    /// run (of any state file, on any machine), item or sink.
    public func idempotencyKey(sink: String) -> String {
        let digest = SHA256.hash(data: Data("\(runUUID)\u{0}\(key)\u{0}\(sink)".utf8))
        return "imgpipe-\(runUUID)-" + digest.prefix(16).map { String(format: "%02x", $0) }.joined()
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

/// A sink's final refusal of one output, after its retries.
public struct DeliveryFailure: Error, Sendable {
    public let failure: ItemFailure
    public let attempts: Int
    /// The run stopped while a retry was due: the delivery stays pending for resume.
    public let interrupted: Bool

    public init(_ failure: ItemFailure, attempts: Int = 1, interrupted: Bool = false) {
        self.failure = failure
        self.attempts = attempts
        self.interrupted = interrupted
    }
}

/// A destination for outputs. Delivery must be idempotent: after a crash, resume may hand
/// the same output to a sink again.
public protocol Sink: Sendable {
    var name: String { get }
    /// Called before a run or resume delivers anything (create folders, sweep leftovers).
    func prepare() throws
    /// Delivers one output, retrying what may pass; throws the final failure.
    func deliver(_ delivery: Delivery) throws(DeliveryFailure) -> DeliveryReceipt
    /// Called when the run stops.
    func finish()
}

/// Set when a run is interrupted, so that retry loops stop waiting.
// @unchecked because `value` is guarded by `lock`.
public final class CancellationFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false

    public init() {}

    public var isCancelled: Bool { lock.withLock { value } }

    public func cancel() { lock.withLock { value = true } }
}
