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
/// `partSize` parts, journaled so that a killed process leaves no upload behind
/// (`S3Uploads`); a failure at any step aborts the upload before the delivery is retried.
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
        let uploads = uploads(journal: workRoot + "/s3-uploads/" + FeedItem.safeName(name))
        journal.withLock { $0 = uploads.journal }
        try uploads.abortLeftBehind(prefix: folder, sink: name)
    }

    private func uploads(journal: String) -> S3Uploads {
        S3Uploads(client: client, journal: journal, multipartThreshold: options.multipartThreshold, partSize: options.partSize)
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
            try uploads(journal: journal.withLock { $0 }).upload(key: key, file: file, size: size, headers: headers)
            return .delivered(DeliveryReceipt(remoteURL: client.address(of: key), httpStatus: 200, attempts: attempt))
        } catch {
            return try error.deliveryAttempt(attempt, retry: retry)
        }
    }
}
