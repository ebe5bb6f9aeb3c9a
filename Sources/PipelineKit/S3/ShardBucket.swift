import Foundation
import Synchronization

/// Shards under a prefix of a bucket. A shard is written in the state file's work folder
/// and published by an upload that only succeeds if no object has its number's key
/// (`If-None-Match: *` on the `PutObject`, or on the completion of a multipart upload):
/// S3 answers 412 when another process took the number first, and the shard goes up
/// again under the next one. The object carries the SHA-256 of its bytes
/// (`x-amz-meta-imgpipe-sha256`), which is what the shards' journal compares after a kill.
///
/// Each request that may pass (5xx, a cut connection) is tried again on the committing
/// thread (`RetryLoop`, the pipeline's `retry`): a commit that failed would fail a whole
/// shard's items.
final class ShardBucket: ShardPlace {
    let client: S3Client
    /// The prefix, ending with `/` unless empty.
    let folder: String
    let options: S3SinkOptions
    /// `x-amz-meta-<name>` values, expanded.
    let metadata: [(String, String)]
    let retry: RetryLoop
    /// The journal of multipart uploads, known once `prepare` ran.
    private let journal = Mutex("")

    init(client: S3Client, folder: String, options: S3SinkOptions, metadata: [(String, String)], retry: RetryPolicy) {
        self.client = client
        self.folder = folder
        self.options = options
        self.metadata = metadata
        // Once the run is stopping, a request is made once, not tried again: a commit's items
        // whose shard did not go up are then left pending (`RunStages.record`).
        let http = client.http
        self.retry = RetryLoop(
            attempts: retry.attempts, backoff: retry.backoff, isCancelled: { http.cancellation?.isCancelled ?? false })
    }

    func staging(workRoot: String, sink: String) -> String {
        workRoot + "/webdataset-" + FeedItem.safeName(sink) + ".shards"
    }

    private var uploads: S3Uploads {
        // Every process that writes here uploads the same keys: an upload is only aborted by
        // its id, never as one of its key's.
        S3Uploads(
            client: client, journal: journal.withLock { $0 }, multipartThreshold: options.multipartThreshold,
            partSize: options.partSize, abortsByKey: false)
    }

    /// Makes the staging folder and aborts the multipart uploads a killed process left
    /// (which checks the bucket and the credentials first).
    func prepare(workRoot: String, sink: String) throws {
        let staging = staging(workRoot: workRoot, sink: sink)
        do {
            try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(sink): cannot make folder \(staging): \(error.localizedDescription)")
        }
        journal.withLock { $0 = workRoot + "/s3-uploads/" + FeedItem.safeName(sink) }
        try uploads.abortLeftBehind(prefix: folder, sink: sink)
    }

    func address(of name: String) -> String { client.address(of: folder + name) }

    /// An upload whose answer was lost may have been stored.
    var failureMayHavePublished: Bool { true }

    func shards() throws -> [String: Int] {
        var sizes: [String: Int] = [:]
        var continuation: String?
        repeat {
            let page: S3Client.Page
            do throws(HTTPFailure) {
                page = try retry.run { _ throws(HTTPFailure) in
                    try client.listObjects(prefix: folder, continuation: continuation, startAfter: nil, maxKeys: 1000)
                }
            } catch {
                throw SinkError(error.message)
            }
            for object in page.objects where object.key.hasPrefix(folder) {
                let name = String(object.key.dropFirst(folder.count))
                if WebDatasetSink.shardNumber(name) != nil { sizes[name] = object.size }
            }
            guard page.next != continuation else { break }
            continuation = page.next
        } while continuation != nil
        return sizes
    }

    func sha256(of name: String) throws -> String? {
        do throws(HTTPFailure) {
            return try retry.run { _ throws(HTTPFailure) in try client.headObject(key: folder + name) }?[
                "x-amz-meta-imgpipe-sha256"]
        } catch {
            throw SinkError(error.message)
        }
    }

    /// Looks before it uploads: a number another process took since this one last published
    /// costs a `HeadObject` and a listing, not an upload. Only two commits at one moment
    /// race, and the upload's condition settles that race.
    func publish(_ partial: String, sha256: String, from first: Int) throws(ItemFailure) -> Int {
        var headers = ["Content-Type": "application/x-tar"]
        if let storageClass = options.storageClass { headers["x-amz-storage-class"] = storageClass }
        for (field, value) in metadata { headers["x-amz-meta-" + field.lowercased()] = value }
        // After the pipeline's metadata: the journal and the checks below read it.
        headers["x-amz-meta-imgpipe-sha256"] = sha256
        var number = first
        var conflicts = 0
        // Each number taken is followed by a listing, which skips every number taken since: as
        // many turns as processes publishing at once, not as shards.
        for _ in 0..<1000 {
            let name = WebDatasetSink.shardName(number)
            // A look that fails is no answer: the upload's condition still holds. A shard there
            // with this one's digest is this one (an earlier try that S3 finished late).
            if case .some(.some(let there)) = try? client.headObject(key: folder + name) {
                if there["x-amz-meta-imgpipe-sha256"] == sha256 { return number }
                number = try self.number(after: number)
                continue
            }
            do throws(HTTPFailure) {
                try upload(partial, as: name, headers: headers, ifAbsent: true)
                return number
            } catch  where error.status == 412 {
                // Taken: by an earlier try of this very upload, whose answer was lost (the digest
                // says so), or by another process. A digest that cannot be read leaves it open:
                // the shard fails, and its journal entry is kept for the next session to settle.
                let there: String?
                do {
                    there = try self.sha256(of: name)
                } catch {
                    throw ItemFailure(
                        .upload, "cannot tell whether \(address(of: name)) is this shard, uploaded before: \(error)")
                }
                if there == sha256 { return number }
                number = try self.number(after: number)
            } catch  where error.status == 409 {
                // Another conditional write of the key is under way: waited for, then tried again.
                conflicts += 1
                guard conflicts < retry.attempts else {
                    throw ItemFailure(
                        .upload, "cannot publish the shard as \(address(of: name)): \(error.message) (after \(conflicts) tries)")
                }
                guard !retry.isCancelled() else {
                    throw ItemFailure(.upload, "cannot publish the shard as \(address(of: name)): \(error.message)")
                }
                let until = Date().addingTimeInterval(RetryPolicy.delay(afterAttempt: conflicts, backoff: retry.backoff))
                while Date() < until, !retry.isCancelled() { usleep(50_000) }
            } catch {
                // The last try may have been stored with its answer lost.
                if (try? self.sha256(of: name)) == sha256 { return number }
                throw ItemFailure(.upload, "cannot publish the shard as \(address(of: name)): \(error.message)")
            }
        }
        throw ItemFailure(.upload, "cannot publish the shard under \(address(of: "")): other processes took every number tried")
    }

    /// The number after the highest shard there, and after `number` at least.
    private func number(after number: Int) throws(ItemFailure) -> Int {
        do {
            return max(number + 1, try nextNumber())
        } catch {
            throw ItemFailure(.upload, "cannot list the shards under \(address(of: "")): \(error)")
        }
    }

    func place(_ path: String, as name: String) throws(ItemFailure) {
        defer { unlink(path) }
        let type = name.hasSuffix(".parquet") ? "application/vnd.apache.parquet" : "application/json"
        do throws(HTTPFailure) {
            try upload(path, as: name, headers: ["Content-Type": type], ifAbsent: false)
        } catch {
            throw ItemFailure(.upload, "cannot upload \(address(of: name)): \(error.message)")
        }
    }

    private func upload(_ path: String, as name: String, headers: [String: String], ifAbsent: Bool) throws(HTTPFailure) {
        guard let file = FileHandle(forReadingAtPath: path) else {
            throw HTTPFailure(kind: .io, message: "cannot read \(path): \(CError())", status: nil, retryAfter: nil)
        }
        defer { try? file.close() }
        let size: Int
        do {
            size = Int(try file.seekToEnd())
        } catch {
            throw HTTPFailure(kind: .io, message: "cannot read \(path): \(error)", status: nil, retryAfter: nil)
        }
        let uploads = uploads
        try retry.run { _ throws(HTTPFailure) in
            try uploads.upload(key: folder + name, file: file, size: size, headers: headers, ifAbsent: ifAbsent)
        }
    }

    func holds(_ name: String) -> Bool {
        ((try? retry.run { _ throws(HTTPFailure) in try client.headObject(key: folder + name) }) ?? nil) != nil
    }

    func localCopy(of name: String, in staging: String) throws -> (path: String, isCopy: Bool) {
        let path =
            staging + "/" + WebDatasetSink.partialPrefix + WebDatasetSink.processPart + "-copy-" + UUID().uuidString + ".tar"
        do throws(HTTPFailure) {
            try retry.run { _ throws(HTTPFailure) in
                try client.getObject(key: folder + name, to: path, maxBytes: Int.max)
            }
        } catch {
            unlink(path)
            throw SinkError("cannot read \(address(of: name)): \(error.message)")
        }
        return (path, true)
    }
}
