import Foundation
import Synchronization

/// `s3`: each output becomes one object, `prefix` + the `key` template (default: the
/// output's name), with its `Content-Type`, `Content-MD5`, storage class and metadata
/// (`x-amz-meta-…`, plus `imgpipe-sha256` and `imgpipe-run`).
///
/// Exactly once by construction: the key is a function of the item, so sending an output
/// again (a retry, or a resume after a kill between S3 storing it and imgpipe recording
/// it) replaces the object with the same bytes; the delivery is recorded per (item, sink)
/// as for the other sinks.
///
/// Outputs of `multipartThreshold` bytes or more go up as a multipart upload of
/// `partSize` parts (each with its `Content-MD5`, read from the staged file one at a
/// time). A failure at any step aborts the upload before the delivery is retried. So that
/// a killed process leaves no upload behind, each upload is written to a journal in the
/// state file's work folder before it is started and removed when it is completed or
/// aborted; `prepare` aborts what the journal still holds (an entry killed before S3
/// answered with its id is found by listing the uploads of its key).
public final class S3Sink: OutputSink {
    public let name: String
    package let client: S3Client
    /// The prefix, ending with `/` unless empty.
    package let folder: String
    package let options: S3SinkOptions
    /// `x-amz-meta-<name>` values, expanded.
    package let metadata: [(String, String)]
    package let retry: RetryPolicy
    /// The journal's folder, known once `prepare(workRoot:)` ran (before any delivery).
    private let journal = Mutex("")

    public init(
        name: String, client: S3Client, folder: String, options: S3SinkOptions, metadata: [(String, String)],
        retry: RetryPolicy
    ) {
        self.name = name
        self.client = client
        self.folder = folder
        self.options = options
        self.metadata = metadata
        self.retry = retry
    }

    /// Checks the bucket and the credentials with one listing of the uploads in progress
    /// under the prefix (a wrong key stops the command before a run starts), then aborts
    /// every upload the journal holds.
    public func prepare(workRoot: String) throws {
        let directory = workRoot + "/s3-uploads/" + FeedItem.safeName(name)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(name): cannot make its journal folder \(directory): \(error.localizedDescription)")
        }
        journal.withLock { $0 = directory }
        let inProgress = try uploadsLeftBehind()
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
            let path = directory + "/" + entry
            // The temporary file of an entry's atomic write that a kill cut short: the entry
            // it was replacing (written first, with the key) is still there.
            guard entry.hasSuffix(".upload") else {
                unlink(path)
                continue
            }
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            guard let key = lines.first, !key.isEmpty else {
                unlink(path)
                continue
            }
            let ids = lines.count > 1 && !lines[1].isEmpty ? [lines[1]] : inProgress.filter { $0.key == key }.map(\.uploadId)
            do throws(HTTPFailure) {
                for id in ids { try client.abortMultipartUpload(key: key, uploadId: id) }
                unlink(path)
            } catch {
                throw SinkError("sink \(name): cannot abort an unfinished upload of \(client.address(of: key)): \(error.message)")
            }
        }
    }

    /// The uploads in progress under the prefix. A key allowed to write but not to list
    /// uploads (`AccessDenied`) lists none: the journal's entries with an id are still
    /// aborted; a wrong key or secret is refused.
    private func uploadsLeftBehind() throws -> [S3Client.Upload] {
        do throws(HTTPFailure) {
            return try client.listMultipartUploads(prefix: folder)
        } catch  where error.status == 403 && error.message.contains("AccessDenied") {
            return []
        } catch {
            throw SinkError("sink \(name): \(error.message)")
        }
    }

    /// The object's key: the prefix and the `key` template (or the output's name).
    func objectKey(_ delivery: Delivery) -> String {
        let name =
            options.key?.render(
                key: delivery.nameKey, stem: delivery.nameStem, index: delivery.index,
                format: delivery.format, hash: String(delivery.sha256.prefix(16)),
                output: delivery.output, size: (delivery.width, delivery.height)) ?? delivery.name
        return folder + name
    }

    public func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt {
        let key = objectKey(delivery)
        guard let file = FileHandle(forReadingAtPath: delivery.stagedPath) else {
            throw DeliveryFailure(ItemFailure(.upload, "cannot read the staged output"), attempts: attempt)
        }
        defer { try? file.close() }
        let size = (try? file.seekToEnd()).map(Int.init) ?? 0
        var headers = [
            "Content-Type": delivery.format.contentType, "x-amz-meta-imgpipe-sha256": delivery.sha256,
            "x-amz-meta-imgpipe-run": delivery.runUUID,
        ]
        if let storageClass = options.storageClass { headers["x-amz-storage-class"] = storageClass }
        for (field, value) in metadata { headers["x-amz-meta-" + field.lowercased()] = value }
        do throws(HTTPFailure) {
            if size < options.multipartThreshold {
                try client.putObject(key: key, data: try Self.read(file, at: 0, count: size), headers: headers)
            } else {
                try multipart(key: key, file: file, size: size, headers: headers)
            }
            return .delivered(DeliveryReceipt(remoteURL: client.address(of: key), httpStatus: 200, attempts: attempt))
        } catch {
            return try error.deliveryAttempt(attempt, retry: retry)
        }
    }

    /// Create, the parts in order, complete; on any failure, abort (and keep the journal
    /// entry if even that fails, for the next `prepare`).
    private func multipart(key: String, file: FileHandle, size: Int, headers: [String: String]) throws(HTTPFailure) {
        let entry = journal.withLock { $0 } + "/" + sha256Hex(key).prefix(32) + ".upload"
        func note(_ text: String) throws(HTTPFailure) {
            do {
                try Data(text.utf8).write(to: URL(fileURLWithPath: entry), options: .atomic)
            } catch {
                throw HTTPFailure(
                    kind: .io, message: "cannot write the upload journal \(entry): \(error.localizedDescription)",
                    status: nil, retryAfter: nil)
            }
        }
        try note(key + "\n")
        let uploadId = try client.createMultipartUpload(key: key, headers: headers)
        do throws(HTTPFailure) {
            try note(key + "\n" + uploadId + "\n")
            var parts: [S3Client.Part] = []
            var offset = 0
            while offset < size {
                let data = try Self.read(file, at: offset, count: options.partSize)
                guard !data.isEmpty else { break }
                parts.append(try client.uploadPart(key: key, uploadId: uploadId, number: parts.count + 1, data: data))
                offset += data.count
            }
            try client.completeMultipartUpload(key: key, uploadId: uploadId, parts: parts)
            unlink(entry)
        } catch {
            if (try? client.abortMultipartUpload(key: key, uploadId: uploadId)) != nil { unlink(entry) }
            throw error
        }
    }

    /// Up to `count` bytes of the staged output from `offset`.
    private static func read(_ file: FileHandle, at offset: Int, count: Int) throws(HTTPFailure) -> Data {
        do {
            try file.seek(toOffset: UInt64(offset))
            return try file.read(upToCount: count) ?? Data()
        } catch {
            throw HTTPFailure(
                kind: .io, message: "cannot read the staged output: \(error.localizedDescription)",
                status: nil, retryAfter: nil)
        }
    }
}
