import Foundation

/// The uploads of one sink's objects, with a journal in the state file's work folder, so
/// that a killed process leaves no multipart upload behind.
///
/// Objects of `multipartThreshold` bytes or more go up as a multipart upload of `partSize`
/// parts (each with its `Content-MD5`, read from the file one at a time). A failure at any
/// step aborts the upload. Each multipart upload is written to the journal before it is
/// started and removed when it is completed or aborted; `abortLeftBehind` aborts what the
/// journal still holds (an entry killed before S3 answered with its id is found by listing
/// the uploads of its key).
struct S3Uploads: Sendable {
    let client: S3Client
    /// The journal's folder (made by `abortLeftBehind`).
    let journal: String
    let multipartThreshold: Int
    let partSize: Int
    /// Whether an entry killed before S3 answered with its upload's id aborts every upload
    /// of its key: true where no other process uploads that key (the `s3` sink's keys are its
    /// items'); false where others do (shard numbers), which leaves such an upload to the
    /// bucket's lifecycle rule.
    var abortsByKey = true

    /// Makes the journal's folder and aborts every upload it holds. The uploads in progress
    /// under `prefix` are listed first, which checks the bucket and the credentials (a
    /// wrong key stops the command before a run starts). Throws a `SinkError` naming `sink`.
    func abortLeftBehind(prefix: String, sink: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: journal, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(sink): cannot make its journal folder \(journal): \(error.localizedDescription)")
        }
        let inProgress = try uploadsInProgress(prefix: prefix, sink: sink)
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: journal)) ?? [] {
            let path = journal + "/" + entry
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
            let ids =
                lines.count > 1 && !lines[1].isEmpty
                ? [lines[1]] : abortsByKey ? inProgress.filter { $0.key == key }.map(\.uploadId) : []
            do throws(HTTPFailure) {
                for id in ids { try client.abortMultipartUpload(key: key, uploadId: id) }
                unlink(path)
            } catch {
                throw SinkError("sink \(sink): cannot abort an unfinished upload of \(client.address(of: key)): \(error.message)")
            }
        }
    }

    /// The uploads in progress under `prefix`. A key allowed to write but not to list
    /// uploads (`AccessDenied`) lists none: the journal's entries with an id are still
    /// aborted; a wrong key or secret is refused.
    private func uploadsInProgress(prefix: String, sink: String) throws -> [S3Client.Upload] {
        do throws(HTTPFailure) {
            return try client.listMultipartUploads(prefix: prefix)
        } catch  where error.status == 403 && error.message.contains("AccessDenied") {
            return []
        } catch {
            throw SinkError("sink \(sink): \(error.message)")
        }
    }

    /// Stores the `size` bytes of `file` as `key` with `headers`: one `PutObject`, or a
    /// multipart upload from `multipartThreshold` bytes. `ifAbsent`: only if no object has
    /// that key (`If-None-Match: *`; S3 answers 412 `PreconditionFailed` when one has).
    func upload(key: String, file: FileHandle, size: Int, headers: [String: String], ifAbsent: Bool = false) throws(HTTPFailure) {
        let condition = ifAbsent ? ["If-None-Match": "*"] : [:]
        if size < multipartThreshold {
            try client.putObject(
                key: key, data: try Self.read(file, at: 0, count: size), headers: headers.merging(condition) { $1 })
        } else {
            try multipart(key: key, file: file, size: size, headers: headers, condition: condition)
        }
    }

    /// Create, the parts in order, complete; on any failure, abort (and keep the journal
    /// entry if even that fails, for the next `abortLeftBehind`).
    private func multipart(
        key: String, file: FileHandle, size: Int, headers: [String: String], condition: [String: String]
    ) throws(HTTPFailure) {
        let entry = journal + "/" + sha256Hex(key).prefix(32) + ".upload"
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
                let data = try Self.read(file, at: offset, count: partSize)
                guard !data.isEmpty else { break }
                parts.append(try client.uploadPart(key: key, uploadId: uploadId, number: parts.count + 1, data: data))
                offset += data.count
            }
            try client.completeMultipartUpload(key: key, uploadId: uploadId, parts: parts, headers: condition)
            unlink(entry)
        } catch {
            if (try? client.abortMultipartUpload(key: key, uploadId: uploadId)) != nil { unlink(entry) }
            throw error
        }
    }

    /// Up to `count` bytes of the file from `offset`.
    private static func read(_ file: FileHandle, at offset: Int, count: Int) throws(HTTPFailure) -> Data {
        do {
            try file.seek(toOffset: UInt64(offset))
            return try file.read(upToCount: count) ?? Data()
        } catch {
            throw HTTPFailure(
                kind: .io, message: "cannot read the file to upload: \(error.localizedDescription)", status: nil,
                retryAfter: nil)
        }
    }
}
