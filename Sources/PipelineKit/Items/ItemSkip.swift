/// Why an item was skipped, as recorded in the state file and shown by `status`.
public enum SkipReason: String, Sendable, CaseIterable, Codable {
    /// The server's `X-Robots-Tag` opts the image out (`noai`, `noimageai`, `noml`, `none`,
    /// `noindex`).
    case optOut = "opt-out"
    /// The image's host opted out of others so often (`HostOptOuts`) that it was not asked.
    case hostOptOut = "host-opt-out"
    /// The host's robots.txt disallows the image for imgpipe's User-Agent, or could not be read.
    case robots
    /// Under `accept.minWidth`, `accept.minHeight` or `accept.minBytes`.
    case tooSmall = "too-small"
    /// Longer than `accept.maxAspect` times its short side.
    case aspect
    /// A format `accept.formats` does not list.
    case format
}

/// Why one item was skipped: a terminal verdict like done or failed, but not a fault. The
/// item's output is not made and no sink is asked for it; a resume does not try it again.
public struct ItemSkip: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: SkipReason
    public let message: String

    public init(_ reason: SkipReason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { "\(reason.rawValue): \(message)" }
}
