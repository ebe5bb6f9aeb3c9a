import Foundation

/// `upload`: the two-step upload of the apps imgpipe grew from. `GET endpoint` answers
/// `{"url": U}`, a one-shot URL; `POST U` sends `multipart/form-data` with `fields`,
/// `originalField` = where the item came from, and the file under `fileField`. A 2xx JSON
/// answer's `url` is kept as the item's remote URL. Every request carries the delivery's
/// `Idempotency-Key`; a retry (or a resume) repeats both steps with the same key.
///
/// The first answer is the server's word, not the user's: when `fields` hold a `${…}` value,
/// the second step goes only to the endpoint's own host or to a host in `allowHosts`, and
/// never from https down to plain http; anywhere else the delivery fails, naming the host,
/// and the fields are sent nowhere.
public struct UploadSink: OutputSink {
    public let name: String
    public let endpoint: URL
    /// Expanded values (may hold secrets: never printed).
    package let fields: [(String, String)]
    /// True when a field's value came from `${…}`.
    let fieldsHoldSecrets: Bool
    /// Hosts besides the endpoint's that may receive the fields (`*`: any host). Never over
    /// plain http when the endpoint is https, whatever the list says.
    let allowHosts: [String]
    let fileField: String
    let originalField: String
    package let client: HTTPClient
    package let retry: RetryPolicy

    public func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt {
        guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
            throw DeliveryFailure(ItemFailure(.upload, "cannot read the staged output"), attempts: attempt)
        }
        // Both steps, once. A retry repeats both (a one-shot URL is used once).
        let key = delivery.idempotencyKey(sink: name)
        let target: URL
        do throws(HTTPFailure) {
            target = try ticket(key: key)
        } catch {
            return try error.deliveryAttempt(attempt, retry: retry)
        }
        if fieldsHoldSecrets, let problem = Self.refusal(of: target, endpoint: endpoint, allowHosts: allowHosts) {
            throw DeliveryFailure(ItemFailure(.upload, problem), attempts: attempt)
        }
        do throws(HTTPFailure) {
            return .delivered(try upload(data, of: delivery, to: target, key: key, attempt: attempt))
        } catch {
            return try error.deliveryAttempt(attempt, retry: retry)
        }
    }

    /// Why fields that hold secrets may not go to `target`, or nil when they may.
    package static func refusal(of target: URL, endpoint: URL, allowHosts: [String]) -> String? {
        let host = target.host?.lowercased() ?? ""
        let scheme = target.scheme?.lowercased() ?? ""
        let place = "\(scheme)://\(host)\(target.port.map { ":\($0)" } ?? "")"
        let endpointScheme = endpoint.scheme?.lowercased() ?? ""
        if endpointScheme == "https", scheme != "https" {
            return "the upload endpoint pointed the upload at \(place), plain http from an https endpoint: "
                + "the sink's fields hold secrets and were not sent"
        }
        if allowHosts.contains(where: { $0.lowercased() == host }) { return nil }
        func port(_ url: URL) -> Int? {
            url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil)
        }
        let sameHost = host == endpoint.host?.lowercased() && port(target) == port(endpoint)
        if sameHost || allowHosts.contains("*") { return nil }
        return "the upload endpoint pointed the upload at \(place), another host than the endpoint's: "
            + "the sink's fields hold secrets and were not sent (list the host in allowHosts to allow it)"
    }

    /// The first step: the one-shot URL the endpoint gives.
    private func ticket(key: String) throws(HTTPFailure) -> URL {
        let ticket = try client.perform(
            HTTPRequest(
                url: endpoint, headers: ["Accept": "application/json", "Idempotency-Key": key],
                maxBytes: Self.maxAnswerBytes, maxBytesName: "the answer's limit"))
        try ticket.throwIfRetryableStatus()
        guard (200...299).contains(ticket.status) else {
            throw HTTPFailure(
                kind: .status, message: "the upload endpoint answered HTTP \(ticket.status)",
                status: ticket.status, retryAfter: nil)
        }
        guard let target = Self.url(in: ticket.body, relativeTo: endpoint) else {
            throw HTTPFailure(
                kind: .status, message: "the upload endpoint did not answer {\"url\": …}",
                status: ticket.status, retryAfter: nil)
        }
        return target
    }

    /// The second step: the file and the fields, to `target`.
    private func upload(
        _ data: Data, of delivery: Delivery, to target: URL, key: String,
        attempt: Int
    ) throws(HTTPFailure) -> DeliveryReceipt {
        var form = Multipart()
        form.fields = fields + [(originalField, delivery.origin)]
        form.file = (fileField, (delivery.name as NSString).lastPathComponent, delivery.format.contentType, data)
        let answer = try client.perform(
            HTTPRequest(
                url: target, method: "POST",
                headers: ["Content-Type": form.contentType, "Idempotency-Key": key, "Accept": "application/json"],
                body: form.body, maxBytes: Self.maxAnswerBytes, maxBytesName: "the answer's limit"))
        try answer.throwIfRetryableStatus()
        guard (200...299).contains(answer.status) else {
            throw HTTPFailure(
                kind: .status, message: "the upload answered HTTP \(answer.status)", status: answer.status,
                retryAfter: nil)
        }
        return DeliveryReceipt(
            remoteURL: Self.url(in: answer.body, relativeTo: target)?.absoluteString,
            httpStatus: answer.status, attempts: attempt)
    }

    /// A server's answer to an upload is a JSON object: one over 16 MiB is cut (a hostile
    /// server cannot fill memory through it).
    static let maxAnswerBytes = 16 << 20

    /// The `url` member of a JSON object body, read leniently (`JSONValue+Decodable.swift`):
    /// a server's duplicate key is not a failed upload. Only a string is a URL: `{"url": 5}`
    /// has none (it was read as the path `5` beside the endpoint). Characters a URL cannot
    /// hold (a space, `|`, non-ASCII) are percent-encoded and the rest is kept as the server
    /// wrote it: its `%2F` stays `%2F` (Foundation, given such a string, encodes every `%`
    /// again).
    package static func url(in body: Data?, relativeTo base: URL) -> URL? {
        struct Answer: Decodable { let url: JSONValue? }
        guard let body, let text = (try? JSONDecoder().decode(Answer.self, from: body))?.url?.string, !text.isEmpty else {
            return nil
        }
        // An absolute URL as every other (its host kept as written, an IPv6 literal's
        // brackets too); a relative one against the endpoint.
        if URL.afterScheme(text) != nil { return URL(webAddress: text) }
        return URL(string: PercentEscapes.encodingWhatAURLCannotHold(text), relativeTo: base)?.absoluteURL
    }
}
