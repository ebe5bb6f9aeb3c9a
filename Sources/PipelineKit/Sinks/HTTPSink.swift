import Foundation

/// `http`: one request per item and output to a URL made from a template (`{key}`,
/// `{stem}`, `{name}`, `{ext}`, `{hash}`, `{output}`, each percent-encoded, `/` kept): `PUT` with the file as the body, or `POST` as
/// `multipart/form-data` with the file under `fileField`. 2xx is success.
public struct HTTPSink: OutputSink {
    public let name: String
    let urlTemplate: String
    package let method: String
    let fileField: String
    package let headers: [String: String]
    package let client: HTTPClient
    package let retry: RetryPolicy

    /// The template with its fields filled in, each value percent-encoded for a path. A
    /// name's `/` stays a path separator (`{stem}` of `shop/101/main.jpg` is
    /// `…/shop/101/main`), its parts made safe as a directory sink's are (`SafePath`: no
    /// `..`, which the client would resolve, nor control characters).
    static func render(_ template: String, _ delivery: Delivery) -> String {
        let allowed = CharacterSet.urlPathAllowed.subtracting(CharacterSet(charactersIn: "?#"))
        func encode(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text }
        func path(_ text: String) -> String { encode(SafePath.relative(text)) }
        return
            template
            .replacingOccurrences(of: "{key}", with: path(delivery.nameKey))
            .replacingOccurrences(of: "{stem}", with: path(delivery.nameStem))
            .replacingOccurrences(of: "{name}", with: path(NameTemplate.lastComponent(of: delivery.nameStem)))
            .replacingOccurrences(of: "{ext}", with: delivery.format.fileExtension)
            .replacingOccurrences(of: "{hash}", with: String(delivery.sha256.prefix(16)))
            .replacingOccurrences(of: "{output}", with: encode(delivery.output).replacingOccurrences(of: "/", with: "%2F"))
    }

    public func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt {
        guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
            throw DeliveryFailure(ItemFailure(.upload, "cannot read the staged output"), attempts: attempt)
        }
        guard let url = URL(webAddress: Self.render(urlTemplate, delivery)), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https"
        else {
            throw DeliveryFailure(ItemFailure(.upload, "the sink's url is not an http(s) URL"), attempts: attempt)
        }
        var request = HTTPRequest(
            url: url, method: method, headers: headers, maxBytes: UploadSink.maxAnswerBytes,
            maxBytesName: "the answer's limit")
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
        do throws(HTTPFailure) {
            let result = try client.perform(request)
            try result.throwIfRetryableStatus()
            guard (200...299).contains(result.status) else {
                throw HTTPFailure(
                    kind: .status, message: "HTTP \(result.status) from \(url.host ?? "server")",
                    status: result.status, retryAfter: nil)
            }
            let remote = UploadSink.url(in: result.body, relativeTo: url)?.absoluteString ?? url.absoluteString
            return .delivered(DeliveryReceipt(remoteURL: remote, httpStatus: result.status, attempts: attempt))
        } catch {
            return try error.deliveryAttempt(attempt, retry: retry)
        }
    }
}
