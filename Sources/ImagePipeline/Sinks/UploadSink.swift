import Foundation

/// `upload`: the two-step upload of the apps imgpipe grew from. `GET endpoint` answers
/// `{"url": U}`, a one-shot URL; `POST U` sends `multipart/form-data` with `fields`,
/// `originalField` = where the item came from, and the file under `fileField`. A 2xx JSON
/// answer's `url` is kept as the item's remote URL. Every request carries the delivery's
/// `Idempotency-Key`; a retry (or a resume) repeats both steps with the same key.
public struct UploadSink: Sink {
    public let name: String
    public let endpoint: URL
    /// Expanded values (may hold secrets: never printed).
    let fields: [(String, String)]
    let fileField: String
    let originalField: String
    let client: HTTPClient
    let retry: RetryPolicy
    let isCancelled: @Sendable () -> Bool

    init(name: String, endpoint: URL, fields: [(String, String)], fileField: String, originalField: String,
         client: HTTPClient, retry: RetryPolicy, isCancelled: @escaping @Sendable () -> Bool = { false }) {
        self.name = name
        self.endpoint = endpoint
        self.fields = fields
        self.fileField = fileField
        self.originalField = originalField
        self.client = client
        self.retry = retry
        self.isCancelled = isCancelled
    }

    public func prepare() throws {}
    public func finish() {}

    public func deliver(_ delivery: Delivery) throws(DeliveryFailure) -> DeliveryReceipt {
        guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
            throw DeliveryFailure(ItemFailure(.upload, "cannot read the staged output"))
        }
        let key = delivery.idempotencyKey(sink: name)
        var attempts = 1
        do {
            return try RetryLoop(attempts: retry.attempts, backoff: retry.backoff, isCancelled: isCancelled)
                .run(attemptsMade: { attempts = $0 }) { attempt throws(HTTPFailure) in
                    let ticket = try client.perform(HTTPRequest(url: endpoint, headers: ["Accept": "application/json", "Idempotency-Key": key]))
                    try ticket.throwIfRetryableStatus()
                    guard (200 ... 299).contains(ticket.status) else {
                        throw HTTPFailure(kind: .status, message: "the upload endpoint answered HTTP \(ticket.status)",
                                          status: ticket.status, retryAfter: nil)
                    }
                    guard let target = Self.url(in: ticket.body, relativeTo: endpoint) else {
                        throw HTTPFailure(kind: .status, message: "the upload endpoint did not answer {\"url\": …}",
                                          status: ticket.status, retryAfter: nil)
                    }
                    var form = Multipart()
                    form.fields = fields + [(originalField, delivery.origin)]
                    form.file = (fileField, (delivery.name as NSString).lastPathComponent, delivery.format.contentType, data)
                    let answer = try client.perform(HTTPRequest(
                        url: target, method: "POST",
                        headers: ["Content-Type": form.contentType, "Idempotency-Key": key, "Accept": "application/json"],
                        body: form.body))
                    try answer.throwIfRetryableStatus()
                    guard (200 ... 299).contains(answer.status) else {
                        throw HTTPFailure(kind: .status, message: "the upload answered HTTP \(answer.status)", status: answer.status,
                                          retryAfter: nil)
                    }
                    return DeliveryReceipt(remoteURL: Self.url(in: answer.body, relativeTo: target)?.absoluteString,
                                           httpStatus: answer.status, attempts: attempt)
                }
        } catch {
            throw DeliveryFailure(ItemFailure(.upload, error.message, httpStatus: error.status), attempts: attempts,
                                  interrupted: error.kind == .cancelled)
        }
    }

    /// The `url` member of a JSON object body, read leniently (`JSONValue+Decodable.swift`):
    /// a server's duplicate key is not a failed upload.
    static func url(in body: Data?, relativeTo base: URL) -> URL? {
        struct Answer: Decodable { let url: JSONValue? }
        guard let body, let text = (try? JSONDecoder().decode(Answer.self, from: body))?.url?.stringValue else { return nil }
        return URL(string: text, relativeTo: base)?.absoluteURL
    }
}

/// `http`: one request per item to a URL made from a template (`{key}`, `{stem}`, `{ext}`,
/// `{hash}`, each percent-encoded): `PUT` with the file as the body, or `POST` as
/// `multipart/form-data` with the file under `fileField`. 2xx is success.
public struct HTTPSink: Sink {
    public let name: String
    let urlTemplate: String
    let method: String
    let fileField: String
    let headers: [String: String]
    let client: HTTPClient
    let retry: RetryPolicy
    let isCancelled: @Sendable () -> Bool

    init(name: String, urlTemplate: String, method: String, fileField: String, headers: [String: String],
         client: HTTPClient, retry: RetryPolicy, isCancelled: @escaping @Sendable () -> Bool = { false }) {
        self.name = name
        self.urlTemplate = urlTemplate
        self.method = method
        self.fileField = fileField
        self.headers = headers
        self.client = client
        self.retry = retry
        self.isCancelled = isCancelled
    }

    public func prepare() throws {}
    public func finish() {}

    /// The template with its fields filled in, each value percent-encoded for a path.
    static func render(_ template: String, _ delivery: Delivery) -> String {
        let allowed = CharacterSet.urlPathAllowed.subtracting(CharacterSet(charactersIn: "/?#"))
        func encode(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text }
        return template
            .replacingOccurrences(of: "{key}", with: encode(delivery.nameKey))
            .replacingOccurrences(of: "{stem}", with: encode(delivery.nameStem))
            .replacingOccurrences(of: "{ext}", with: delivery.format.fileExtension)
            .replacingOccurrences(of: "{hash}", with: String(delivery.sha256.prefix(16)))
    }

    public func deliver(_ delivery: Delivery) throws(DeliveryFailure) -> DeliveryReceipt {
        guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
            throw DeliveryFailure(ItemFailure(.upload, "cannot read the staged output"))
        }
        guard let url = URL(string: Self.render(urlTemplate, delivery)), let scheme = url.scheme?.lowercased(),
              scheme == "http" || scheme == "https" else {
            throw DeliveryFailure(ItemFailure(.upload, "the sink's url is not an http(s) URL"))
        }
        var request = HTTPRequest(url: url, method: method, headers: headers)
        request.headers["Idempotency-Key"] = delivery.idempotencyKey(sink: name)
        if method == "POST" {
            var form = Multipart()
            form.file = (fileField, (delivery.name as NSString).lastPathComponent, delivery.format.contentType, data)
            request.headers["Content-Type"] = form.contentType
            request.body = form.body
        } else {
            request.headers["Content-Type"] = delivery.format.contentType
            request.body = data
        }
        var attempts = 1
        do throws(HTTPFailure) {
            let result = try client.performWithRetries(request, attempts: retry.attempts, backoff: retry.backoff,
                                                       isCancelled: isCancelled, attemptsMade: { attempts = $0 })
            guard (200 ... 299).contains(result.status) else {
                throw HTTPFailure(kind: .status, message: "HTTP \(result.status) from \(url.host ?? "server")",
                                  status: result.status, retryAfter: nil)
            }
            let remote = UploadSink.url(in: result.body, relativeTo: url)?.absoluteString ?? url.absoluteString
            return DeliveryReceipt(remoteURL: remote, httpStatus: result.status, attempts: attempts)
        } catch {
            throw DeliveryFailure(ItemFailure(.upload, error.message, httpStatus: error.status), attempts: attempts,
                                  interrupted: error.kind == .cancelled)
        }
    }
}
