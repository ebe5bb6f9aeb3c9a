/// One output to hand to a sink.
public struct Delivery: Sendable {
    public let runId: Int64
    public let key: String
    /// The staged output file.
    public let stagedPath: String
    /// The output name from the template, already made safe (relative, no `..`).
    public let name: String
    public let format: OutputFormat
    /// Where the input came from (a path or URL).
    public let origin: String
}

/// What a sink reports for a delivered output.
public struct DeliveryReceipt: Sendable, Equatable {
    public let remoteURL: String?
    public let httpStatus: Int?

    public init(remoteURL: String? = nil, httpStatus: Int? = nil) {
        self.remoteURL = remoteURL
        self.httpStatus = httpStatus
    }
}

/// A destination for outputs. Delivery must be idempotent: after a crash, resume may hand
/// the same output to a sink again.
public protocol Sink: Sendable {
    var name: String { get }
    /// Called before a run or resume delivers anything (create folders, sweep leftovers).
    func prepare() throws
    func deliver(_ delivery: Delivery) throws(ItemFailure) -> DeliveryReceipt
    /// Called when the run stops.
    func finish()
}
