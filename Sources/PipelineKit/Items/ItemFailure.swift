/// The class of an item's failure, as recorded in the state file and shown by `status`.
public enum FailureReason: String, Sendable, CaseIterable, Codable {
    /// The input could not be fetched (read or downloaded).
    case download
    /// The input is not an image imgpipe accepts, or it is corrupt or truncated.
    case decode
    /// The input is over a limit (`maxBytes`, `maxPixels`).
    case limit
    /// A filter failed.
    case process
    /// The output could not be encoded or named.
    case encode
    /// A sink did not take the output.
    case upload
    /// A local file could not be written (a full disk, a read-only folder): retried like a
    /// download, and again by `resume --retry-failed`.
    case io
    /// The address a URL (an item's, a redirect's, an upload's) resolved to is one the
    /// pipeline's `network` policy refuses: no connection was opened (`AddressPolicy`).
    case blockedAddress = "blocked-address"
    /// The input's bytes do not have the SHA-256 its source gave (a table's `sha256`
    /// column): never retried.
    case hashMismatch = "hash-mismatch"
}

/// Why one item failed.
public struct ItemFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: FailureReason
    public let message: String
    /// For HTTP failures, the status code.
    public let httpStatus: Int?
    public init(_ reason: FailureReason, _ message: String, httpStatus: Int? = nil) {
        self.reason = reason
        self.message = message
        self.httpStatus = httpStatus
    }

    public var description: String { "\(reason.rawValue): \(message)" }
}
