import Foundation
import GRDB
import PipelineKit

/// One run of a pipeline, as stored: read through GRDB's Codable records, so a row that
/// does not decode (an unknown state, a fingerprint that is not JSON) is an error naming
/// the column, never a silent default.
public struct RunRecord: Sendable, Equatable, Decodable, FetchableRecord {
    public enum State: String, Sendable, Codable {
        /// Being worked on, or killed while it was.
        case running
        /// Stopped by SIGINT/SIGTERM; resumable.
        case interrupted
        /// Every item listed reached `done`, `skipped` or `failed`.
        case finished
        /// Replaced by a newer run (`run --new`).
        case abandoned
    }

    public let id: Int64
    /// Unique across state files, databases and machines: idempotency keys are made from it.
    public let uuid: String
    public let pipelinePath: String
    public let pipelineName: String
    /// The pipeline document as written (no `${…}` expanded).
    public let document: String
    /// Canonical JSON of the parts that decide outputs (`filters`, `output`), stored as
    /// a JSON object.
    public let fingerprint: [String: String]
    /// Stored as a JSON array.
    public let sinks: [String]
    public var state: State
    public var feedComplete: Bool
    /// The run's listing last ended with an error (a folder it could not read): the next
    /// resume lists the feed from its start, not after its last item (`RunStore.markListingCut`).
    public var listingCut: Bool
    public let itemLimit: Int?
    public let workDirectory: String
    public let startedAt: Date
    public var finishedAt: Date?
    /// Seconds spent running, over every session of the run.
    public var elapsed: Double
    /// The run an incremental run compares with (`run --incremental`); nil for others.
    public let baseline: Int64?
    /// Items an incremental run carried over from `baseline` without a stage.
    public let carried: Int
    /// Items a later incremental run took over from this one (`HandOn`): this run
    /// listed (and made or carried) them, and no longer holds their rows.
    public let handedOn: Int

    /// True unless the run finished or was replaced.
    public var isUnfinished: Bool { state == .running || state == .interrupted }

    /// Times are stored as seconds since 1970.
    public static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        .timeIntervalSince1970
    }
}

/// An item's stage in the lifecycle: pending → fetched → processed → done, or skipped
/// (opted out, refused by robots.txt, outside `accept`), or failed. The last three are
/// terminal: a resume does not take them up again (only `--retry-failed`, failed ones).
public enum ItemStatus: String, Sendable, CaseIterable, Codable {
    case pending, fetched, processed, done, skipped, failed
}

/// One item of a run, as stored.
public struct ItemRecord: Sendable, Equatable {
    public let key: String
    public let seq: Int
    /// As recorded: a `${…}` value in it is kept as the reference.
    public private(set) var location: String
    public var status: ItemStatus
    public var attempts: Int
    /// Why a failed item failed.
    public var reason: FailureReason?
    /// Why a skipped item was skipped (the same column as `reason`, read by status).
    public var skipReason: SkipReason?
    public var message: String?
    public var spoolPath: String?
    public var updatedAt: Double
    public var nameKey: String
    public var nameStem: String
    public var tier: Tier?
    /// The metadata the feed listed with the item (a JSON object), nil for local files.
    public var metadata: String?

    init(row: Row) throws {
        key = try row.decode(String.self, forColumn: "key")
        seq = try row.decode(Int.self, forColumn: "seq")
        location = try row.decode(String.self, forColumn: "location")
        status = try row.decodeEnum(ItemStatus.self, forColumn: "status")
        attempts = try row.decode(Int.self, forColumn: "attempts")
        if status == .skipped {
            skipReason = try row.decodeEnum(SkipReason?.self, forColumn: "reason")
        } else {
            reason = try row.decodeEnum(FailureReason?.self, forColumn: "reason")
        }
        message = try row.decode(String?.self, forColumn: "message")
        spoolPath = try row.decode(String?.self, forColumn: "spoolPath")
        updatedAt = try row.decode(Double.self, forColumn: "updatedAt")
        // Rows of state files made before names were recorded (migration v2) have none.
        nameKey = try row.decode(String?.self, forColumn: "nameKey") ?? key
        nameStem = try row.decode(String?.self, forColumn: "nameStem") ?? NameTemplate.stem(of: key)
        tier = try row.decodeEnum(Tier?.self, forColumn: "tier")
        metadata = try row.decode(String?.self, forColumn: "metadata")
    }

    /// The record with `${…}` references in its location expanded, ready to fetch.
    func restoringLocation(_ environment: Environment) -> ItemRecord {
        var copy = self
        copy.location = environment.restored(location)
        return copy
    }
}

/// A sink's share of a run's items.
public struct DeliveryCounts: Sendable, Equatable, Codable {
    public var done = 0
    public var failed = 0
    public var pending = 0

    public init(done: Int = 0, failed: Int = 0, pending: Int = 0) {
        self.done = done
        self.failed = failed
        self.pending = pending
    }
}

/// An item's failure, for `status`.
public struct FailureRecord: Sendable, Equatable, Codable {
    public let key: String
    public let reason: String
    public let message: String
    public let attempts: Int
    public let httpStatus: Int?

    public init(key: String, reason: String, message: String, attempts: Int, httpStatus: Int?) {
        self.key = key
        self.reason = reason
        self.message = message
        self.attempts = attempts
        self.httpStatus = httpStatus
    }
}

/// A skipped item, for `status`.
public struct SkipRecord: Sendable, Equatable, Codable {
    public let key: String
    public let reason: String
    public let message: String

    public init(key: String, reason: String, message: String) {
        self.key = key
        self.reason = reason
        self.message = message
    }
}

/// Counts of a run's items by status.
public struct ItemCounts: Sendable, Equatable {
    public var total = 0
    public var pending = 0
    public var fetched = 0
    public var processed = 0
    public var done = 0
    public var skipped = 0
    public var failed = 0

    /// Items not yet done, skipped or failed.
    public var unfinished: Int { pending + fetched + processed }
}

extension Row {
    /// A text column as an enum case; a value that is no case is an error naming both.
    func decodeEnum<Value: RawRepresentable>(_ type: Value.Type, forColumn column: String) throws -> Value
    where Value.RawValue == String {
        let raw = try decode(String.self, forColumn: column)
        guard let value = Value(rawValue: raw) else {
            throw StoreError("state file: column \(column) holds \(JSONValue.quote(raw)), not a known \(Value.self)")
        }
        return value
    }

    func decodeEnum<Value: RawRepresentable>(_ type: Value?.Type, forColumn column: String) throws -> Value?
    where Value.RawValue == String {
        guard try decode(String?.self, forColumn: column) != nil else { return nil }
        return try decodeEnum(Value.self, forColumn: column)
    }
}
