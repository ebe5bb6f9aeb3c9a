import Foundation
import PipelineKit

/// Whether a failed item may pass when tried again as it is, and if not, what would make it
/// pass: the advice `status` gives and the table of docs/failures.md holds.
public struct FailureAdvice: Sendable, Equatable {
    /// `mayPass`: the cause can go away by itself (the network, a server error, a timeout, a
    /// host that did not answer, a full disk); `permanent`: the same input fails the same
    /// way (not an image, over a limit, a 404, a name clash) until something is changed.
    public enum Outlook: String, Sendable, Codable {
        case mayPass = "may-pass"
        case permanent
    }

    public let outlook: Outlook
    /// A class of cause shared by items that take the same fix (`not-found`, `not-image`,
    /// `max-pixels`, `name-clash`, …), for grouping them.
    public let cause: String
    /// What to change for a permanent failure; nil for one that may pass.
    public let fix: String?

    init(_ outlook: Outlook, _ cause: String, fix: String? = nil) {
        self.outlook = outlook
        self.cause = cause
        self.fix = fix
    }

    /// The advice for one failure, from its reason, message and HTTP status.
    public static func of(reason: String, message: String, httpStatus: Int?) -> FailureAdvice {
        switch FailureReason(rawValue: reason) {
        case .download:
            if message.hasPrefix(HostHealth.hostUnreachable) { return FailureAdvice(.mayPass, "host-unreachable") }
            if let status = httpStatus { return http(status) }
            if message.hasPrefix("not a URL") || message.hasPrefix("a URL item in a local source")
                || message.hasPrefix("only http and https URLs are fetched") || message.hasPrefix("a URL without a host")
                || message.hasPrefix("not an object of the source's bucket") || message.contains("is not a regular file")
            {
                return FailureAdvice(.permanent, "bad-address", fix: "correct the item's address in the feed")
            }
            if message.contains("No such file or directory") {
                return FailureAdvice(.permanent, "not-found", fix: "remove the item from the feed or put the file back")
            }
            return FailureAdvice(.mayPass, "network")
        case .decode:
            if message.hasPrefix("not an image: the server sent") {
                return FailureAdvice(.permanent, "not-image", fix: "remove the item or correct its URL: it serves no image")
            }
            return FailureAdvice(.permanent, "not-image", fix: "remove or replace the file: it is not an image imgpipe reads")
        case .limit:
            if message.contains("limits.maxPixels") {
                return FailureAdvice(.permanent, "max-pixels", fix: "raise `limits.maxPixels`")
            }
            if message.contains("the output is"), message.contains("over maxBytes") {
                // An output's byte budget (`QualitySearch`), not the input's limit.
                return FailureAdvice(
                    .permanent, "output-budget", fix: "raise the output's `maxBytes` or lower its `minQuality`")
            }
            if message.contains("maxBytes") {
                return FailureAdvice(.permanent, "max-bytes", fix: "raise `limits.maxBytes`")
            }
            return FailureAdvice(.permanent, "limit", fix: "raise the limit the message names")
        case .encode:
            if message.contains("already used by item") || message.contains("are both named") {
                return FailureAdvice(
                    .permanent, "name-clash", fix: "change `output.name` so that each item's outputs have names of their own")
            }
            return FailureAdvice(.permanent, "encode", fix: "change the output's format or settings")
        case .process:
            if message.contains("pixel helper") { return FailureAdvice(.mayPass, "helper-crash") }
            return FailureAdvice(.permanent, "filter", fix: "change the filters or remove the item")
        case .upload:
            if let status = httpStatus, (400...499).contains(status), status != 408, status != 429 {
                return FailureAdvice(
                    .permanent, "sink-refused", fix: "check the sink's URL and credentials (it answered HTTP \(status))")
            }
            if message.contains("is no longer in the pipeline") {
                return FailureAdvice(.permanent, "sink-removed", fix: "put the sink or output back, or start a new run")
            }
            return FailureAdvice(.mayPass, "sink")
        case .io:
            return FailureAdvice(.mayPass, "io")
        case .hashMismatch:
            return FailureAdvice(
                .permanent, "hash-mismatch",
                fix: "the server sends other bytes than the table's SHA-256 says: correct the table's hash or URL")
        case .blockedAddress:
            return FailureAdvice(
                .permanent, "blocked-address",
                fix: "remove the item from the feed, or, when the address is one of yours, let it through with "
                    + "`network.allow`")
        case nil:
            return FailureAdvice(.mayPass, reason)
        }
    }

    /// A download answered with `status`: 404 and 410 stay; a server error, 408 and 429 may pass.
    static func http(_ status: Int) -> FailureAdvice {
        switch status {
        case 404, 410:
            return FailureAdvice(.permanent, "not-found", fix: "remove the item from the feed or correct its URL")
        case 408, 429, 500...599:
            return FailureAdvice(.mayPass, "server")
        case 401, 403:
            return FailureAdvice(.permanent, "forbidden", fix: "the server refuses it (HTTP \(status)): check access")
        default:
            return FailureAdvice(.permanent, "http-\(status)", fix: "the server answered HTTP \(status): correct the URL")
        }
    }

    /// The pixels of the first `W×H` in `message` (the image or step over `maxPixels`), for
    /// the value to raise the limit to.
    public static func pixels(in message: String) -> Int? {
        let characters = Array(message)
        var index = 0
        while index < characters.count {
            guard characters[index].isNumber else {
                index += 1
                continue
            }
            var end = index
            while end < characters.count, characters[end].isASCII, characters[end].isNumber { end += 1 }
            if end < characters.count, characters[end] == "×" {
                var after = end + 1
                while after < characters.count, characters[after].isASCII, characters[after].isNumber { after += 1 }
                if after > end + 1, let width = Int(String(characters[index..<end])),
                    let height = Int(String(characters[(end + 1)..<after]))
                {
                    let (product, overflow) = width.multipliedReportingOverflow(by: height)
                    return overflow ? nil : product
                }
            }
            index = max(end, index + 1)
        }
        return nil
    }

    /// The bytes of the first `is N bytes` in `message` (a file over `maxBytes`).
    public static func bytes(in message: String) -> Int? {
        guard let range = message.range(of: #"\d+ bytes"#, options: .regularExpression) else { return nil }
        return Int(message[range].prefix { $0.isNumber })
    }
}
