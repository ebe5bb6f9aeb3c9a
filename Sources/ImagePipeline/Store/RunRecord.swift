import Foundation
import GRDB

/// One run of a pipeline, as stored.
public struct RunRecord: Sendable, Equatable {
    public enum State: String, Sendable {
        /// Being worked on, or killed while it was.
        case running
        /// Stopped by SIGINT/SIGTERM; resumable.
        case interrupted
        /// Every item listed reached `done` or `failed`.
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
    /// Canonical JSON of the parts that decide outputs (`filters`, `output`).
    public let fingerprint: [String: String]
    public let sinks: [String]
    public var state: State
    public var feedComplete: Bool
    public let itemLimit: Int?
    public let workDirectory: String
    public let startedAt: Date
    public var finishedAt: Date?
    /// Seconds spent running, over every session of the run.
    public var elapsed: Double

    /// True unless the run finished or was replaced.
    public var isUnfinished: Bool { state == .running || state == .interrupted }

    init(row: Row) throws {
        id = row["id"]
        uuid = row["uuid"]
        pipelinePath = row["pipelinePath"]
        pipelineName = row["pipelineName"]
        document = row["document"]
        let fingerprintText: String = row["fingerprint"]
        fingerprint = (try? JSONDecoder().decode([String: String].self, from: Data(fingerprintText.utf8))) ?? [:]
        let sinksText: String = row["sinks"]
        sinks = (try? JSONDecoder().decode([String].self, from: Data(sinksText.utf8))) ?? []
        state = State(rawValue: row["state"]) ?? .running
        feedComplete = row["feedComplete"]
        itemLimit = row["itemLimit"]
        workDirectory = row["workDirectory"]
        startedAt = Date(timeIntervalSince1970: row["startedAt"])
        finishedAt = (row["finishedAt"] as Double?).map { Date(timeIntervalSince1970: $0) }
        elapsed = row["elapsed"]
    }
}

/// An item's stage in the lifecycle: pending → fetched → processed → done, or failed.
public enum ItemStatus: String, Sendable, CaseIterable {
    case pending, fetched, processed, done, failed
}

/// One item of a run, as stored.
public struct ItemRecord: Sendable, Equatable {
    public let key: String
    public let seq: Int
    /// As recorded: a `${…}` value in it is kept as the reference.
    public private(set) var location: String
    public var status: ItemStatus
    public var attempts: Int
    public var reason: FailureReason?
    public var message: String?
    public var spoolPath: String?
    public var stagedPath: String?
    public var outputName: String?
    public var outputHash: String?
    public var updatedAt: Double
    public var nameKey: String
    public var nameStem: String
    public var tier: Tier?

    init(row: Row) {
        key = row["key"]
        seq = row["seq"]
        location = row["location"]
        status = ItemStatus(rawValue: row["status"]) ?? .pending
        attempts = row["attempts"]
        reason = (row["reason"] as String?).flatMap(FailureReason.init(rawValue:))
        message = row["message"]
        spoolPath = row["spoolPath"]
        stagedPath = row["stagedPath"]
        outputName = row["outputName"]
        outputHash = row["outputHash"]
        updatedAt = row["updatedAt"]
        nameKey = row["nameKey"] ?? key
        nameStem = row["nameStem"] ?? NameTemplate.stem(of: key)
        tier = (row["tier"] as String?).flatMap(Tier.init(rawValue:))
    }

    /// The record with `${…}` references in its location expanded, ready to fetch.
    func expandingLocation(_ environment: Environment) -> ItemRecord {
        var copy = self
        copy.location = environment.expanding(location)
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

/// Counts of a run's items by status.
public struct ItemCounts: Sendable, Equatable {
    public var total = 0
    public var pending = 0
    public var fetched = 0
    public var processed = 0
    public var done = 0
    public var failed = 0

    /// Items not yet done or failed.
    public var unfinished: Int { pending + fetched + processed }
}
