import Foundation

/// What a shard's `NNNNN_stats.json` says: made by the commit that publishes the shard, or
/// again from the journal's entry when a kill lost it (`recovered`: what only the writing
/// session knew is left out).
struct ShardStats {
    var samples: Int
    /// Bytes of the tar.
    var bytes: Int
    var firstKey: String
    var lastKey: String
    /// The UUID of the run of the shard's first sample.
    var run: String
    /// Known to the writing session only: bytes of the outputs, seconds from the first
    /// sample to the commit, the host and process, and the items of the run that ended
    /// without reaching the sink, by status (`failed`, `skipped`) and reason.
    var written: (outputBytes: Int, seconds: Double, writer: String)?
    var undelivered: [String: [String: Int]] = [:]

    mutating func add(_ more: [String: [String: Int]]) {
        undelivered.merge(more) { $0.merging($1, uniquingKeysWith: +) }
    }

    /// The file's bytes: one JSON object and a newline.
    var serialized: [UInt8] {
        var members: [(key: String, value: JSONValue)] = [
            ("samples", PipelineSchema.integer(samples)), ("bytes", PipelineSchema.integer(bytes)),
        ]
        if let written {
            func byReason(_ status: String) -> JSONValue {
                .object(
                    (undelivered[status] ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, PipelineSchema.integer($0.value)) })
            }
            members += [
                ("failed", byReason("failed")), ("skipped", byReason("skipped")),
                ("outputBytes", PipelineSchema.integer(written.outputBytes)),
                ("seconds", .number(written.seconds, isInteger: false)),
            ]
        }
        members += [("firstKey", .string(firstKey)), ("lastKey", .string(lastKey)), ("run", .string(run))]
        members.append(written.map { ("writer", .string($0.writer)) } ?? ("recovered", .bool(true)))
        return Array((JSONValue.object(members).serialized() + "\n").utf8)
    }
}
