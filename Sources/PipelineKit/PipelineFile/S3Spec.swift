import Foundation

/// Where an `s3` sink or source is and how it signs in: `bucket`, `prefix`, `region`,
/// `endpoint` (MinIO, Ceph, R2, …), `pathStyle` and the credentials, which are
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` from the environment
/// unless `accessKeyId`, `secretAccessKey`, `sessionToken` name other variables. A
/// credential must be a `${NAME}` reference: the pipeline file is kept in the state file,
/// and a key written out in it would be too.
public struct S3Spec: Sendable, Equatable {
    public var bucket: EnvString
    /// A folder of the bucket; `/` is added when missing (`thumbs` means `thumbs/…`).
    public var prefix: EnvString?
    /// nil: `us-east-1`.
    public var region: String?
    public var endpoint: EnvString?
    /// nil: path-style with an `endpoint` (or a bucket name with a dot), else virtual-hosted.
    public var pathStyle: Bool?
    public var accessKeyId: EnvString?
    public var secretAccessKey: EnvString?
    public var sessionToken: EnvString?
    /// The JSON path of the sink or source (for messages about what it does not spell out).
    public var path: String

    public static let defaultRegion = "us-east-1"

    package init(_ object: SpecObject) throws {
        path = object.path.description
        bucket = try object.required("bucket") { node in
            let value = try EnvString(node)
            if !value.hasReferences, let problem = Self.bucketProblem(value.raw) { throw node.fail(problem) }
            return value
        }
        prefix = try object.optional("prefix") { try EnvString($0) }
        region = try object.optional("region") { node in
            let text = try node.nonEmptyString()
            guard text.allSatisfy({ $0.isASCIILetter || $0.isASCIIDigit || $0 == "-" }) else {
                throw node.expected("a region name such as \"eu-west-1\" (letters, digits and -)")
            }
            return text
        }
        endpoint = try object.optional("endpoint") { try EnvString($0) }
        pathStyle = try object.optional("pathStyle") { try $0.bool() }
        func credential(_ key: String) throws -> EnvString? {
            try object.optional(key) { node in
                let value = try EnvString(node)
                // One `${NAME}` and nothing else.
                guard let parts = try? EnvString.parts(of: value.raw, path: value.path), parts.count == 1,
                    case .variable = parts[0]
                else {
                    throw node.fail(
                        "a credential is written as a reference to an environment variable, such as \"${MY_S3_KEY}\" "
                            + "(the pipeline file is kept in the state file; the key must not be)")
                }
                return value
            }
        }
        accessKeyId = try credential("accessKeyId")
        secretAccessKey = try credential("secretAccessKey")
        sessionToken = try credential("sessionToken")
    }

    /// What is wrong with a bucket name by S3's rules (3 to 63 characters: lower-case
    /// letters, digits, `.` and `-`, starting and ending with a letter or digit, no `..`, not
    /// an IP address); nil when nothing is.
    static func bucketProblem(_ name: String) -> String? {
        let allowed = name.allSatisfy { ("a"..."z").contains($0) || $0.isASCIIDigit || $0 == "." || $0 == "-" }
        let ends = [name.first, name.last].allSatisfy { $0.map { ("a"..."z").contains($0) || $0.isASCIIDigit } ?? false }
        let isAddress = name.split(separator: ".").count == 4 && name.split(separator: ".").allSatisfy { Int($0) != nil }
        guard (3...63).contains(name.count), allowed, ends, !name.contains(".."), !isAddress else {
            return "\(JSONValue.quote(name)) is not a valid bucket name (3 to 63 characters: lower-case letters, digits, "
                + "dots and hyphens, starting and ending with a letter or digit)"
        }
        return nil
    }

    /// The client of this bucket: `${…}` expanded, the bucket name and endpoint checked,
    /// the credentials read. Errors are `SpecError`s naming the JSON path (an unset
    /// credential names its variable, like any `${NAME}`).
    package func client(in environment: Environment, http: HTTPClient) throws -> S3Client {
        let name = try bucket.expanded(in: environment)
        if let problem = Self.bucketProblem(name) { throw SpecError(path: bucket.path, message: environment.redact(problem)) }
        var url: URL?
        if let endpoint {
            url = try endpoint.expandedWebURL(in: environment)
            guard url?.query == nil, url?.user == nil else {
                throw SpecError(
                    path: endpoint.path,
                    message: "expected a service URL such as \"http://127.0.0.1:9000\", without a query or user")
            }
        }
        // Both default variables are named at once when neither is set.
        let defaults = [
            ("AWS_ACCESS_KEY_ID", "accessKeyId", accessKeyId), ("AWS_SECRET_ACCESS_KEY", "secretAccessKey", secretAccessKey),
        ]
        let unset = defaults.filter { $0.2 == nil && environment.value(of: $0.0) == nil }
        if let first = unset.first {
            let names = unset.map(\.0).joined(separator: " and ")
            let keys = unset.map { "\"\($0.1)\"" }.joined(separator: " and ")
            throw SpecError(
                path: path,
                message: "S3 credentials: environment variable\(unset.count > 1 ? "s" : "") \(names) "
                    + "\(unset.count > 1 ? "are" : "is") not set (set \(unset.count > 1 ? "them" : "it"), or name other variables with \(keys))",
                unsetVariable: first.0)
        }
        let keyId = try (accessKeyId ?? EnvString(raw: "${AWS_ACCESS_KEY_ID}", path: path)).expanded(in: environment)
        let secret = try (secretAccessKey ?? EnvString(raw: "${AWS_SECRET_ACCESS_KEY}", path: path)).expanded(in: environment)
        var token: String?
        if let sessionToken {
            token = try sessionToken.expanded(in: environment)
        } else if accessKeyId == nil {
            // Temporary credentials from the environment come with their token.
            token = environment.value(of: "AWS_SESSION_TOKEN")
        }
        return S3Client(
            bucket: name, region: region ?? Self.defaultRegion, endpoint: url, pathStyle: pathStyle,
            credentials: S3Credentials(accessKeyId: keyId, secretAccessKey: secret, sessionToken: token),
            http: http)
    }

    /// The prefix expanded, with a `/` at its end when it has none (empty: the whole bucket).
    package func folder(in environment: Environment) throws -> String {
        let text = try prefix?.expanded(in: environment) ?? ""
        return text.isEmpty || text.hasSuffix("/") ? text : text + "/"
    }
}
