import Crypto
import Foundation

/// The keys a request is signed with. Held in memory only: never written, never printed
/// (`description` names the key id's last four characters at most).
public struct S3Credentials: Sendable, CustomStringConvertible {
    public let accessKeyId: String
    public let secretAccessKey: String
    /// `AWS_SESSION_TOKEN` of temporary credentials, sent as `x-amz-security-token`.
    public let sessionToken: String?

    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    public var description: String { "access key …\(accessKeyId.suffix(4))" }
}

/// AWS Signature Version 4 with the `Authorization` header (`AWS4-HMAC-SHA256`), as the
/// AWS General Reference describes it: a canonical request (method, URI, sorted query,
/// lower-case sorted headers with trimmed values, signed header names, payload hash), a
/// string to sign (algorithm, time, scope, hash of the canonical request), and an HMAC
/// chain from the secret key down to the day, region, service and `aws4_request`.
///
/// S3 differs from the other services in one point: the path is encoded once (each
/// segment's bytes percent-encoded, `/` kept), where the generic rule encodes the
/// already-encoded path again (`encodesPathTwice`).
public struct SigV4Signer: Sendable {
    public let credentials: S3Credentials
    public let region: String
    public let service: String
    /// False for S3 (the default); true for the other services and the generic test suite.
    public let encodesPathTwice: Bool

    public init(credentials: S3Credentials, region: String, service: String = "s3", encodesPathTwice: Bool = false) {
        self.credentials = credentials
        self.region = region
        self.service = service
        self.encodesPathTwice = encodesPathTwice
    }

    /// What signing one request made: the intermediate texts are kept for tests.
    public struct Signature: Sendable {
        public let canonicalRequest: String
        public let stringToSign: String
        public let authorization: String
        /// Headers to send besides the caller's: `x-amz-date`, the session token, and
        /// `Authorization`.
        public let headers: [String: String]
    }

    /// The SHA-256 of an empty payload, in hex.
    public static let emptyPayloadHash = sha256Hex(Data())

    /// Signs a request. `path` is the path as sent on the request line and `query` the
    /// query as sent (without `?`); `headers` are the headers to sign besides `host`
    /// (taken from `host`) and `x-amz-date` (from `date`); `payloadHash` is the hex SHA-256
    /// of the body, which S3 also wants as `x-amz-content-sha256` (the caller adds it to
    /// `headers`, so that it is signed).
    public func sign(
        method: String, host: String, path: String, query: String, headers: [String: String],
        payloadHash: String, date: Date
    ) -> Signature {
        let time = Self.timestamp(date)
        let day = String(time.prefix(8))
        var signed: [String: String] = [:]
        for (name, value) in headers { signed[name.lowercased()] = Self.trimmed(value) }
        signed["host"] = host
        signed["x-amz-date"] = time
        if let token = credentials.sessionToken { signed["x-amz-security-token"] = token }
        let names = signed.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(signed[$0]!)\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let canonicalRequest = [
            method, canonicalURI(path), Self.canonicalQuery(query), canonicalHeaders, signedHeaders,
            payloadHash,
        ].joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", time, scope, sha256Hex(canonicalRequest)].joined(separator: "\n")
        var key = SymmetricKey(data: Data(("AWS4" + credentials.secretAccessKey).utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        let signature = Data(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key)).hex
        let authorization =
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyId)/\(scope), "
            + "SignedHeaders=\(signedHeaders), Signature=\(signature)"
        var extra = ["x-amz-date": time, "Authorization": authorization]
        if let token = credentials.sessionToken { extra["x-amz-security-token"] = token }
        return Signature(
            canonicalRequest: canonicalRequest, stringToSign: stringToSign, authorization: authorization,
            headers: extra)
    }

    /// `20150830T123600Z`.
    static func timestamp(_ date: Date) -> String {
        let parts = Calendar.utc.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(
            format: "%04d%02d%02dT%02d%02d%02dZ", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0,
            parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }

    /// The path with each segment percent-encoded (unreserved characters and `/` kept).
    /// For S3 a segment is decoded first, so a path already encoded for the request line
    /// is encoded exactly once; the generic rule encodes what it is given.
    func canonicalURI(_ path: String) -> String {
        guard !path.isEmpty else { return "/" }
        return path.split(separator: "/", omittingEmptySubsequences: false).map { segment in
            let raw = encodesPathTwice ? String(segment) : (segment.removingPercentEncoding ?? String(segment))
            return Self.encode(raw)
        }.joined(separator: "/")
    }

    /// Every name and value decoded, then encoded as RFC 3986 unreserved, sorted by name
    /// then value; a name without `=` has an empty value.
    static func canonicalQuery(_ query: String) -> String {
        guard !query.isEmpty else { return "" }
        let pairs = query.split(separator: "&").map { pair -> (String, String) in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            let value = parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? String(parts[1])) : ""
            return (encode(name), encode(value))
        }
        return pairs.sorted { $0.0 == $1.0 ? $0.1 < $1.1 : $0.0 < $1.0 }.map { "\($0)=\($1)" }.joined(separator: "&")
    }

    /// RFC 3986 percent-encoding of the UTF-8 bytes: letters, digits and `-._~` are kept,
    /// every other byte is `%XY` with upper-case hex (S3 object keys and query values).
    public static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .rfc3986Unreserved) ?? text
    }

    /// Leading and trailing spaces removed, runs of spaces made one.
    static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

extension Calendar {
    /// The Gregorian calendar in UTC (signature dates).
    static let utc: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()
}
