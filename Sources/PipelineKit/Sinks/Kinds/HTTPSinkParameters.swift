/// `"type": "http"`: one request per item and output to a URL template, `PUT` (raw body) or
/// `POST` (multipart).
public struct HTTPSinkParameters: SinkParameters {
    public static let typeName = "http"
    public static let properties: [(key: String, value: JSONValue)] = [
        ("url", PipelineSchema.string), ("method", .object([("enum", PipelineSchema.strings(["PUT", "POST"]))])),
        ("fileField", PipelineSchema.nonEmpty), ("headers", PipelineSchema.ref("strings")),
    ]
    public static let required = ["url"]

    /// The headers of the request that imgpipe sets, by name in lower case, with why.
    static let setHeaders = [
        "idempotency-key": "the run's key for each delivery",
        "content-type": "from the output's format, or the multipart form",
        "content-length": "from the body",
        "transfer-encoding": "from the body",
        "host": "from the url",
        "user-agent": "from the pipeline's userAgent",
        "expect": "no 100-continue round trip",
    ]
    /// The fields the URL template may hold.
    static let urlFields = ["{key}", "{stem}", "{name}", "{ext}", "{hash}", "{output}"]

    public var url: EnvString
    public var method: String
    public var fileField: String
    public var headers: [NamedValue]

    public init(_ object: SpecObject) throws {
        url = try object.required("url") { node in
            let value = try EnvString(node)
            var rest = value.raw.replacingOccurrences(of: "${", with: "")
            for field in Self.urlFields {
                rest = rest.replacingOccurrences(of: field, with: "")
            }
            if let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
                throw node.fail(
                    "unknown field \(rest[open ... close]); expected {key}, {stem}, {name}, {ext}, {hash} or {output}")
            }
            return value
        }
        method = try object.optional("method", default: "PUT") { try $0.choice(["PUT", "POST"]) }
        fileField = try object.optional("fileField", default: "file") { try $0.nonEmptyString() }
        headers = try object.optional("headers", default: []) {
            try $0.namedValues(headers: true, reserved: Self.setHeaders)
        }
    }

    /// Each output of an item is its own request: the URL must tell them apart.
    public func checkSeveralOutputs(entry: SpecNode) throws {
        guard !url.raw.contains("{output}") else { return }
        throw SpecError(
            path: url.path,
            message: "this sink takes several outputs: put {output} in its URL, "
                + "or give the sink \"outputs\": [one id]")
    }

    public func make(_ context: SinkContext) throws -> any Sink {
        let environment = context.environment
        let template = try url.expanded(in: environment)
        guard template.lowercased().hasPrefix("http://") || template.lowercased().hasPrefix("https://") else {
            throw SpecError(
                path: url.path,
                message: "expected an http(s) URL template, got \(JSONValue.quote(environment.redact(template)))")
        }
        var expanded: [String: String] = [:]
        for header in headers {
            let value = try header.value.expanded(in: environment)
            guard value.isOneHeaderLine else {
                throw SpecError(
                    path: header.value.path,
                    message: "a header value is one line: the value read has a CR, LF or NUL")
            }
            expanded[header.name] = value
        }
        return HTTPSink(
            name: context.name, urlTemplate: template, method: method, fileField: fileField, headers: expanded,
            client: context.client(), retry: context.retry)
    }
}
