import Foundation
import ParquetKit

/// Where a `WebDatasetSink` puts the shards it commits, with their manifests and stats: a
/// folder (`ShardFolder`) or a prefix of a bucket (`ShardBucket`). The sink writes each
/// shard under a temporary name in the place's staging folder, then has the place publish
/// it under the first free number.
protocol ShardPlace: Sendable {
    /// The folder temporary shards of the sink `sink` are written in, for a state file
    /// whose work folder is `workRoot`.
    func staging(workRoot: String, sink: String) -> String
    /// Makes what must exist and settles what a killed process left at the place (the
    /// shards' journal aside); throws a `SinkError` naming `sink`.
    func prepare(workRoot: String, sink: String) throws
    /// How receipts and messages name a file of the place: a path, or `s3://bucket/key`.
    func address(of name: String) -> String
    /// The shards there (`00000.tar`, …), with their sizes in bytes.
    func shards() throws -> [String: Int]
    /// The SHA-256 of a shard's bytes; nil when the place cannot say (a shard imgpipe did
    /// not write).
    func sha256(of name: String) throws -> String?
    /// Whether a `publish` that failed may have published the shard all the same (an upload
    /// stored whose answer was lost): its journal entry is then kept for the next session.
    var failureMayHavePublished: Bool { get }
    /// Publishes the whole, flushed temporary shard `partial` under the first free number
    /// from `first` (never one another process took, so numbers have no gaps); its number.
    /// `partial` stays where it is.
    func publish(_ partial: String, sha256: String, from first: Int) throws(ItemFailure) -> Int
    /// Puts the local file `path` in place as `name` (a manifest or stats file), replacing
    /// what is there; `path` is gone after.
    func place(_ path: String, as name: String) throws(ItemFailure)
    /// Whether `name` is there and whole.
    func holds(_ name: String) -> Bool
    /// A local file with the bytes of shard `name`, and whether it is a copy the caller
    /// removes.
    func localCopy(of name: String, in staging: String) throws -> (path: String, isCopy: Bool)
}

extension ShardPlace {
    /// The number after the highest shard there (0 when there is none).
    func nextNumber() throws -> Int {
        (try shards().keys.compactMap(WebDatasetSink.shardNumber).max() ?? -1) + 1
    }

    /// Puts `stats` in place as `name`, written first into a file of their own in `staging`
    /// (one a sweep removes, should a kill leave it).
    func place(_ stats: ShardStats, as name: String, staging: String) throws(ItemFailure) {
        let path =
            staging + "/" + WebDatasetSink.partialPrefix + WebDatasetSink.processPart + "-" + UUID().uuidString
            + ".tar.stats.json"
        do throws(ItemFailure) {
            try ShardFiles.write(path, stats.serialized)
            try place(path, as: name)
        } catch {
            unlink(path)
            throw error
        }
    }
}

/// Shards in a folder, which may be shared by several processes: a shard is published by
/// a `link` from its temporary name, which fails on a name that exists.
struct ShardFolder: ShardPlace {
    let root: String

    func staging(workRoot: String, sink: String) -> String { root }

    /// A `link` that failed made no name.
    var failureMayHavePublished: Bool { false }

    func prepare(workRoot: String, sink: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(sink): cannot make folder \(root): \(error.localizedDescription)")
        }
    }

    func address(of name: String) -> String { root + "/" + name }

    func shards() throws -> [String: Int] {
        var sizes: [String: Int] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        where WebDatasetSink.shardNumber(name) != nil {
            var info = stat()
            if lstat(root + "/" + name, &info) == 0 { sizes[name] = Int(info.st_size) }
        }
        return sizes
    }

    func sha256(of name: String) throws -> String? { try ShardFiles.sha256(of: root + "/" + name) }

    func publish(_ partial: String, sha256: String, from first: Int) throws(ItemFailure) -> Int {
        var number = first
        while link(partial, root + "/" + WebDatasetSink.shardName(number)) != 0 {
            guard errno == EEXIST else {
                throw ItemFailure(.upload, "cannot publish \(partial) as \(WebDatasetSink.shardName(number)): \(CError())")
            }
            number += 1
        }
        ShardFiles.syncFolder(root)
        return number
    }

    func place(_ path: String, as name: String) throws(ItemFailure) {
        guard rename(path, root + "/" + name) == 0 else {
            let failure = ItemFailure(.upload, "cannot put \(root)/\(name) in place: \(CError())")
            unlink(path)
            throw failure
        }
    }

    func holds(_ name: String) -> Bool {
        let path = root + "/" + name
        if name.hasSuffix(".parquet") { return (try? ParquetReader(path: path)) != nil }
        guard let data = FileManager.default.contents(atPath: path) else { return false }
        return (try? JSONParser.parse(bytes: Array(data))) != nil
    }

    func localCopy(of name: String, in staging: String) throws -> (path: String, isCopy: Bool) { (root + "/" + name, false) }
}
