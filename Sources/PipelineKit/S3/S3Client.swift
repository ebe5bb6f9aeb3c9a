import Crypto
import Foundation

/// One bucket of an S3-compatible service (AWS, MinIO, Ceph, R2, …), spoken to over
/// `HTTPClient` with every request signed by `SigV4Signer` at the moment it is sent (so
/// nothing signed is kept: cache keys and records name objects as `s3://bucket/key`).
///
/// Addressing: virtual-hosted (`https://bucket.s3.region.amazonaws.com/key`) for AWS;
/// path-style (`endpoint/bucket/key`) when `pathStyle`, which is the default with an
/// `endpoint` (MinIO, moto and Ceph serve it without wildcard DNS) and for bucket names with
/// a dot (a virtual host with a dot does not match AWS's TLS certificate).
///
/// Errors are `HTTPFailure`s whose message names the operation, the object and S3's own
/// `<Code>` and `<Message>`; 408, 429 and 5xx (`SlowDown`, `InternalError`) may pass, other
/// statuses (`SignatureDoesNotMatch`, `InvalidAccessKeyId`, `AccessDenied`, `NoSuchBucket`)
/// are final. No message contains a credential.
public struct S3Client: Sendable {
    public let bucket: String
    public let region: String
    /// Scheme, host and port (and a path prefix, rarely) of the service.
    public let endpoint: URL
    public let pathStyle: Bool
    let signer: SigV4Signer
    package let http: HTTPClient

    public init(
        bucket: String, region: String, endpoint: URL?, pathStyle: Bool?, credentials: S3Credentials,
        http: HTTPClient
    ) {
        self.bucket = bucket
        self.region = region
        self.endpoint = endpoint ?? URL(string: "https://s3.\(region).amazonaws.com")!
        self.pathStyle = pathStyle ?? (endpoint != nil || bucket.contains("."))
        signer = SigV4Signer(credentials: credentials, region: region)
        self.http = http
    }

    /// `s3://bucket/key`: how an object is named in records, cache keys and messages.
    public func address(of key: String) -> String { "s3://\(bucket)/\(key)" }

    /// The key of an `s3://bucket/key` address of this bucket; nil for anything else.
    public func key(of address: String) -> String? {
        let head = self.address(of: "")
        guard address.hasPrefix(head) else { return nil }
        return String(address.dropFirst(head.count))
    }

    // MARK: - requests

    /// The URL of `key` (nil: the bucket itself) with `query` (names and values encoded
    /// as SigV4 encodes them, so the canonical query is what is sent).
    package func url(key: String?, query: [(String, String)] = []) -> URL {
        var components = URLComponents()
        components.scheme = endpoint.scheme
        components.port = endpoint.port
        let base = endpoint.path.hasSuffix("/") ? String(endpoint.path.dropLast()) : endpoint.path
        let encodedKey =
            key.map {
                "/"
                    + $0.split(separator: "/", omittingEmptySubsequences: false)
                    .map { SigV4Signer.encode(String($0)) }.joined(separator: "/")
            } ?? "/"
        if pathStyle {
            components.host = endpoint.host
            components.percentEncodedPath = base + "/" + SigV4Signer.encode(bucket) + (key == nil ? "" : encodedKey)
        } else {
            components.host = "\(bucket).\(endpoint.host ?? "")"
            components.percentEncodedPath = base + encodedKey
        }
        if !query.isEmpty {
            // A name without a value is sent bare (`?uploads`); SigV4 signs it as `uploads=`.
            components.percentEncodedQuery = query.map { name, value in
                value.isEmpty ? SigV4Signer.encode(name) : "\(SigV4Signer.encode(name))=\(SigV4Signer.encode(value))"
            }.joined(separator: "&")
        }
        return components.url!
    }

    /// `request` with its URL's signature headers added: `x-amz-content-sha256` (the
    /// payload's SHA-256, never `UNSIGNED-PAYLOAD`), `x-amz-date`, the session token and
    /// `Authorization`. Signed now, for one sending.
    public func signed(_ request: HTTPRequest) -> HTTPRequest {
        var request = request
        // Signed as the key is: sent so (`HTTPRequest.pathAsIs`).
        request.pathAsIs = true
        let payloadHash = request.body.map { sha256Hex($0) } ?? SigV4Signer.emptyPayloadHash
        request.headers["x-amz-content-sha256"] = payloadHash
        let url = request.url
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        let host = (url.host ?? "") + (url.port.map { ":\($0)" } ?? "")
        // Only the headers S3 reads are signed; curl adds its own (Accept, Content-Length).
        let signedHeaders = request.headers.filter { name, _ in
            let lower = name.lowercased()
            return lower.hasPrefix("x-amz-") || lower == "content-type" || lower == "content-md5"
        }
        let signature = signer.sign(
            method: request.method, host: host, path: components?.percentEncodedPath ?? "/",
            query: components?.percentEncodedQuery ?? "", headers: signedHeaders,
            payloadHash: payloadHash, date: Date())
        for (name, value) in signature.headers { request.headers[name] = value }
        return request
    }

    /// A signed GET of `key` to `destination` (the fetcher's download of an item).
    public func getRequest(key: String, headers: [String: String], destination: String, maxBytes: Int) -> HTTPRequest {
        signed(HTTPRequest(url: url(key: key), headers: headers, destination: destination, maxBytes: maxBytes))
    }

    /// Sends one signed request; a 2xx answer is returned, anything else thrown as a
    /// failure naming `operation`, `what` and S3's error code and message. Answers are read
    /// up to `UploadSink.maxAnswerBytes` (a listing page of 1000 keys is about 300 KB).
    package func send(
        _ operation: String, _ what: String, method: String, key: String?, query: [(String, String)] = [],
        headers: [String: String] = [:], body: Data? = nil
    ) throws(HTTPFailure) -> HTTPResult {
        let request = signed(
            HTTPRequest(
                url: url(key: key, query: query), method: method, headers: headers, body: body,
                maxBytes: UploadSink.maxAnswerBytes, maxBytesName: "the answer's limit"))
        let result: HTTPResult
        do throws(HTTPFailure) {
            result = try http.perform(request)
        } catch {
            throw HTTPFailure(
                kind: error.kind, message: "S3 \(operation) \(what): \(error.message)", status: error.status,
                retryAfter: error.retryAfter)
        }
        guard (200...299).contains(result.status) else {
            throw Self.failure(
                operation, what, status: result.status, error: result.body.flatMap(S3XML.parse),
                retryAfter: result.headers["retry-after"].flatMap(HTTPClient.retryAfterSeconds))
        }
        return result
    }

    /// `S3 PutObject s3://b/k: SignatureDoesNotMatch (HTTP 403): The request signature …`.
    static func failure(
        _ operation: String, _ what: String, status: Int, error: S3XML?,
        retryAfter: Double?
    ) -> HTTPFailure {
        var detail = "HTTP \(status)"
        if let code = error?.value("Code"), !code.isEmpty { detail = "\(code) (HTTP \(status))" }
        if let message = error?.value("Message"), !message.isEmpty { detail += ": " + message }
        switch error?.value("Code") {
        case "SignatureDoesNotMatch": detail += " (check the secret access key)"
        case "InvalidAccessKeyId": detail += " (check the access key id)"
        case "RequestTimeTooSkewed": detail += " (check this machine's clock)"
        default: break
        }
        return HTTPFailure(kind: .status, message: "S3 \(operation) \(what): \(detail)", status: status, retryAfter: retryAfter)
    }

    // MARK: - operations

    /// `PutObject` with `Content-MD5` (S3 refuses a body that does not match it) and the
    /// object's headers; the ETag answered must be the body's MD5.
    func putObject(key: String, data: Data, headers: [String: String]) throws(HTTPFailure) {
        var headers = headers
        let md5 = Data(Insecure.MD5.hash(data: data))
        headers["Content-MD5"] = md5.base64EncodedString()
        let result = try send("PutObject", address(of: key), method: "PUT", key: key, headers: headers, body: data)
        try Self.check(etag: Self.unquoted(result.etag), expected: md5.hex, result: result, what: "PutObject \(address(of: key))")
    }

    /// Starts a multipart upload; its upload id.
    func createMultipartUpload(key: String, headers: [String: String]) throws(HTTPFailure) -> String {
        let result = try send(
            "CreateMultipartUpload", address(of: key), method: "POST", key: key,
            query: [("uploads", "")], headers: headers)
        guard let id = result.body.flatMap(S3XML.parse)?.value("UploadId"), !id.isEmpty else {
            throw HTTPFailure(
                kind: .status, message: "S3 CreateMultipartUpload \(address(of: key)): no UploadId in the answer",
                status: result.status, retryAfter: nil)
        }
        return id
    }

    /// An uploaded part: its ETag (which S3 sends back in the completion) and the MD5 it
    /// was checked against.
    struct Part: Sendable {
        let etag: String
        let md5: Data
    }

    /// One part (numbered from 1) with its `Content-MD5`; its ETag is checked against the MD5.
    func uploadPart(key: String, uploadId: String, number: Int, data: Data) throws(HTTPFailure) -> Part {
        let md5 = Data(Insecure.MD5.hash(data: data))
        let what = "\(address(of: key)) part \(number)"
        let result = try send(
            "UploadPart", what, method: "PUT", key: key,
            query: [("partNumber", String(number)), ("uploadId", uploadId)],
            headers: ["Content-MD5": md5.base64EncodedString()], body: data)
        let etag = Self.unquoted(result.etag)
        try Self.check(etag: etag, expected: md5.hex, result: result, what: "UploadPart \(what)")
        return Part(etag: etag, md5: md5)
    }

    /// Joins the parts, in order. The object's ETag must be the MD5 of the parts' MD5s
    /// followed by `-` and the number of parts. S3 may answer 200 with an error document
    /// here (the completion failed after the headers went out): that is a failure too.
    func completeMultipartUpload(
        key: String, uploadId: String, parts: [Part], headers: [String: String] = [:]
    ) throws(HTTPFailure) {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for (index, part) in parts.enumerated() {
            xml += "<Part><PartNumber>\(index + 1)</PartNumber><ETag>\"\(part.etag.xmlEscaped)\"</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let what = address(of: key)
        let result = try send(
            "CompleteMultipartUpload", what, method: "POST", key: key,
            query: [("uploadId", uploadId)], headers: headers.merging(["Content-Type": "application/xml"]) { $1 },
            body: Data(xml.utf8))
        let answer = result.body.flatMap(S3XML.parse)
        if let answer, answer.name == "Error" {
            throw Self.failure("CompleteMultipartUpload", what, status: 500, error: answer, retryAfter: nil)
        }
        let etag = Self.unquoted(answer?.value("ETag") ?? result.etag)
        let expected = Data(Insecure.MD5.hash(data: parts.reduce(Data()) { $0 + $1.md5 })).hex + "-\(parts.count)"
        try Self.check(etag: etag, expected: expected, result: result, what: "CompleteMultipartUpload \(what)")
    }

    /// The headers of `key` (`HeadObject`: names in lower case, `x-amz-meta-…` included);
    /// nil when there is no such object.
    func headObject(key: String) throws(HTTPFailure) -> [String: String]? {
        do throws(HTTPFailure) {
            return try send("HeadObject", address(of: key), method: "HEAD", key: key).headers
        } catch  where error.status == 404 {
            return nil
        }
    }

    /// `key`'s bytes written into the file `destination`, `maxBytes` at most.
    func getObject(key: String, to destination: String, maxBytes: Int) throws(HTTPFailure) {
        let result = try http.perform(getRequest(key: key, headers: [:], destination: destination, maxBytes: maxBytes))
        guard (200...299).contains(result.status) else {
            throw Self.failure(
                "GetObject", address(of: key), status: result.status, error: result.body.flatMap(S3XML.parse), retryAfter: nil)
        }
    }

    /// Abandons a multipart upload and frees its parts; one already gone (`NoSuchUpload`,
    /// 404) counts as abandoned.
    func abortMultipartUpload(key: String, uploadId: String) throws(HTTPFailure) {
        do throws(HTTPFailure) {
            _ = try send("AbortMultipartUpload", address(of: key), method: "DELETE", key: key, query: [("uploadId", uploadId)])
        } catch  where error.status == 404 {
            return
        }
    }

    /// A multipart upload in progress.
    public struct Upload: Sendable, Equatable {
        public let key: String
        public let uploadId: String
    }

    /// The multipart uploads in progress under `prefix`, every page of them.
    public func listMultipartUploads(prefix: String) throws(HTTPFailure) -> [Upload] {
        var uploads: [Upload] = []
        var markers: (key: String, id: String)?
        repeat {
            var query = [("uploads", ""), ("prefix", prefix)]
            if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.id)] }
            let result = try send("ListMultipartUploads", address(of: prefix), method: "GET", key: nil, query: query)
            guard let root = result.body.flatMap(S3XML.parse) else { break }
            for upload in root.all("Upload") {
                if let key = upload.value("Key"), let id = upload.value("UploadId") {
                    uploads.append(Upload(key: key, uploadId: id))
                }
            }
            guard root.value("IsTruncated") == "true", let key = root.value("NextKeyMarker"),
                let id = root.value("NextUploadIdMarker"), markers.map({ $0 != (key, id) }) ?? true
            else { break }
            markers = (key, id)
        } while true
        return uploads
    }

    /// One object of a listing.
    public struct Object: Sendable, Equatable {
        public let key: String
        public let size: Int
        public let etag: String
        public let lastModified: String
    }

    /// One page of a listing.
    public struct Page: Sendable {
        public let objects: [Object]
        /// The token of the next page; nil on the last.
        public let next: String?
    }

    /// One `ListObjectsV2` page of the keys under `prefix`: from the start, after
    /// `startAfter`, or at `continuation` (the previous page's token), `maxKeys` at most.
    public func listObjects(prefix: String, continuation: String?, startAfter: String?, maxKeys: Int) throws(HTTPFailure) -> Page
    {
        // Keys come back URL-encoded: a key with a control character is not XML S3 can write.
        var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys)), ("encoding-type", "url")]
        if let continuation { query.append(("continuation-token", continuation)) }
        if let startAfter { query.append(("start-after", startAfter)) }
        let result = try send("ListObjectsV2", address(of: prefix), method: "GET", key: nil, query: query)
        guard let root = result.body.flatMap(S3XML.parse), root.name == "ListBucketResult" else {
            throw HTTPFailure(
                kind: .status, message: "S3 ListObjectsV2 \(address(of: prefix)): the answer is not a listing",
                status: result.status, retryAfter: nil)
        }
        let encoded = root.value("EncodingType") == "url"
        let objects = root.all("Contents").compactMap { item -> Object? in
            // A key that does not decode (a server that left a bare `%`) is kept as written:
            // an item that fails where it can be seen, not one dropped without a word.
            guard let written = item.value("Key") else { return nil }
            let key = encoded ? Self.urlDecoded(written) ?? written : written
            return Object(
                key: key, size: Int(item.value("Size") ?? "") ?? 0, etag: Self.unquoted(item.value("ETag")),
                lastModified: item.value("LastModified") ?? "")
        }
        let next = root.value("IsTruncated") == "true" ? root.value("NextContinuationToken") : nil
        return Page(objects: objects, next: next?.isEmpty == false ? next : nil)
    }

    // MARK: - helpers

    /// A key as `encoding-type=url` writes it: `%XX` escapes, and `+` for a space (as an
    /// HTML form; a `+` of the key is `%2B`). Nil when it does not decode to UTF-8.
    static func urlDecoded(_ text: String) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }

    static func unquoted(_ etag: String?) -> String {
        (etag ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
    }

    /// An ETag that is not what was sent is a corrupted transfer (retried). Objects
    /// encrypted with KMS have ETags that are not MD5s: those are not compared (S3 has
    /// checked `Content-MD5` already).
    package static func check(etag: String, expected: String, result: HTTPResult, what: String) throws(HTTPFailure) {
        guard result.headers["x-amz-server-side-encryption"] != "aws:kms", !etag.isEmpty, etag != expected else { return }
        throw HTTPFailure(
            kind: .truncated, message: "S3 \(what): the ETag answered (\(etag)) is not the MD5 of what was sent (\(expected))",
            status: result.status, retryAfter: nil)
    }
}
