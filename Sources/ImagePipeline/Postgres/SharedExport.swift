import Foundation
import PipelineKit

/// What a shared run keeps of an item beyond its status, as JSON in `imgpipe_item.detail`:
/// the tier that served it, its outputs and its deliveries, copied by the worker that
/// ended it from its journal (where secrets are already masked).
struct SharedItemDetail: Codable {
    struct Output: Codable {
        let id: String
        let name: String
        let format: String
        let width: Int?
        let height: Int?
        let bytes: Int?
        let sha256: String?
        let quality: Int?
        let ssim: Double?
    }

    struct Delivery: Codable {
        let sink: String
        let output: String
        let status: String
        let remoteURL: String?
        let httpStatus: Int?
        let attempts: Int
        let message: String?
    }

    let tier: String?
    let outputs: [Output]
    let deliveries: [Delivery]
    /// The input's SHA-256 and the first output's fingerprint (absent in rows of older runs).
    let sha256: String?
    let fingerprint: ImageFingerprint?
    /// A duplicate's (`dedup`): the item it repeats and the distance between their hashes.
    let duplicateOf: String?
    let distance: Int?

    init(_ record: ExportRecord) {
        tier = record.tier
        sha256 = record.sha256
        fingerprint = record.fingerprint
        duplicateOf = record.duplicateOf
        distance = record.distance
        outputs = record.outputs.map {
            Output(
                id: $0.id, name: $0.output.name, format: $0.output.format, width: $0.output.width,
                height: $0.output.height, bytes: $0.output.bytes, sha256: $0.output.sha256, quality: $0.output.quality,
                ssim: $0.output.ssim)
        }
        deliveries = record.deliveries.flatMap { sink in
            sink.byOutput.map {
                Delivery(
                    sink: sink.sink, output: $0.id, status: $0.delivery.status, remoteURL: $0.delivery.remoteURL,
                    httpStatus: $0.delivery.httpStatus, attempts: $0.delivery.attempts, message: $0.delivery.message)
            }
        }
    }

    var text: String { String(decoding: (try? JSONEncoder.sorted.encode(self)) ?? Data("{}".utf8), as: UTF8.self) }

    /// What the item adds to `status`'s counters, kept per chunk (`imgpipe_chunk.tally`):
    /// `tier/<tier>` 1, and per delivery `sink/<sink>/<status>` and `output/<id>/<status>`
    /// (status `done` or `failed`; a delivery left pending is counted from the items).
    var tally: [String: Int] {
        var tally: [String: Int] = [:]
        if let tier { tally["tier/" + tier] = 1 }
        for delivery in deliveries where delivery.status == "done" || delivery.status == "failed" {
            tally["sink/\(delivery.sink)/\(delivery.status)", default: 0] += 1
            tally["output/\(delivery.output)/\(delivery.status)", default: 0] += 1
        }
        return tally
    }

    /// A tally as a JSON object.
    static func tallyText(_ tally: [String: Int]) -> String {
        String(decoding: (try? JSONEncoder.sorted.encode(tally)) ?? Data("{}".utf8), as: UTF8.self)
    }
}

/// `imgpipe export --state postgres://…`: the records of a shared run, read from the
/// database in feed order a thousand at a time (by sequence number: memory stays flat),
/// with the sinks and outputs the pipeline file names.
public struct SharedExport: ExportSource {
    let connection: PostgresConnection
    let pipelineName: String
    let sinks: [String]
    let outputs: [String]

    public init(connection: PostgresConnection, pipeline spec: PipelineSpec) {
        self.connection = connection
        pipelineName = spec.name
        sinks = spec.sinks.map(\.name)
        outputs = spec.outputs.map(\.id)
    }

    public func exportedRun(number: Int64?) throws -> ExportedRun? {
        guard try SharedRunSchema.present(on: connection),
            let id = try connection.execute(
                """
                SELECT id FROM imgpipe_run WHERE pipeline_name = $1 AND ($2::bigint IS NULL OR id = $2::bigint)
                ORDER BY id DESC LIMIT 1
                """, [pipelineName, number.map(String.init)]
            ).first?.int("id")
        else { return nil }
        return ExportedRun(id: id, sinks: sinks, outputs: outputs)
    }

    public func exportRecords(of run: ExportedRun, only: ItemStatus?, _ body: (ExportRecord) throws -> Void) throws {
        var after: Int64 = -1
        // A database of an earlier version has no `placeholder` column: read as it is.
        let placeholder = try SharedRunSchema.exists(on: connection) ? "placeholder" : "false AS placeholder"
        while true {
            let rows = try connection.execute(
                """
                SELECT seq, key, location, status, reason, message, attempts, metadata, detail, \(placeholder)
                FROM imgpipe_item
                WHERE run_id = $1 AND seq > $2 AND ($3::text IS NULL OR status = $3) ORDER BY seq LIMIT 1000
                """, [String(run.id), String(after), only?.rawValue]
            ).all
            guard let last = rows.last else { return }
            for row in rows { try body(Self.record(row)) }
            after = last.int("seq") ?? after
        }
    }

    static func record(_ row: PostgresRow) -> ExportRecord {
        let detail = row["detail"].flatMap { try? JSONDecoder().decode(SharedItemDetail.self, from: Data($0.utf8)) }
        var deliveries: [(sink: String, byOutput: [(id: String, delivery: ExportRecord.Delivery)])] = []
        for delivery in detail?.deliveries ?? [] {
            let made = ExportRecord.Delivery(
                status: delivery.status, remoteURL: delivery.remoteURL, httpStatus: delivery.httpStatus,
                attempts: delivery.attempts, message: delivery.message)
            if deliveries.last?.sink == delivery.sink {
                deliveries[deliveries.count - 1].byOutput.append((delivery.output, made))
            } else {
                deliveries.append((delivery.sink, [(delivery.output, made)]))
            }
        }
        var record = ExportRecord(
            key: row["key"] ?? "", location: row["location"] ?? "", status: row["status"] ?? "", reason: row["reason"],
            message: row["message"], attempts: Int(row.int("attempts") ?? 0), tier: detail?.tier, metadata: row["metadata"],
            outputs: (detail?.outputs ?? []).map {
                (
                    id: $0.id,
                    output: ExportRecord.Output(
                        name: $0.name, format: $0.format, width: $0.width, height: $0.height,
                        bytes: $0.bytes, sha256: $0.sha256, quality: $0.quality, ssim: $0.ssim)
                )
            },
            deliveries: deliveries)
        record.sha256 = detail?.sha256
        record.fingerprint = detail?.fingerprint
        record.duplicateOf = detail?.duplicateOf
        record.distance = detail?.distance
        record.placeholder = row.bool("placeholder")
        return record
    }
}
