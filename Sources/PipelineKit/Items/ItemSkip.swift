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
    /// The same bytes as an earlier item the run kept, or a picture within `dedup.similar`'s
    /// distance of one (`DedupPolicy`): `ItemSkip.duplicateOf` names that item.
    case duplicate
    /// Bytes the item's host served for `dedup.placeholders` or more different URLs of the
    /// run (a "photo unavailable" picture): the item it was first seen with is in the message.
    case placeholder
}

/// Why one item was skipped: a terminal verdict like done or failed, but not a fault. The
/// item's output is not made and no sink is asked for it; a resume does not try it again.
public struct ItemSkip: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: SkipReason
    public var message: String
    /// A duplicate's: the key of the item it repeats, and the Hamming distance between the
    /// two perceptual hashes (0 for the same bytes).
    public var duplicateOf: String?
    public var distance: Int?

    public init(_ reason: SkipReason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    /// An item whose bytes `host` has served for `count` different URLs of the run, first
    /// for item `first`.
    public static func placeholder(host: String, count: Int, first: String) -> ItemSkip {
        ItemSkip(
            .placeholder,
            "\(host) served the same bytes for \(count) different URLs, first for item \(JSONValue.quote(Environment.shown(first))): "
                + "a placeholder, not a picture of its own")
    }

    /// An item made, and held in a sink's open batch, before its bytes were found to be
    /// `host`'s placeholder (`count` URLs, the first `first`): taken out, not delivered.
    public static func withdrawnPlaceholder(host: String, count: Int, first: String) -> ItemSkip {
        ItemSkip(
            .placeholder,
            "\(host) served the same bytes for \(count) different URLs, first for item \(JSONValue.quote(Environment.shown(first))): "
                + "a placeholder, found after this item was made; taken out of the open batch, not delivered")
    }

    /// An item that repeats `kept`: `exact`, its bytes are the same; else its picture lies
    /// `distance` bits from `kept`'s.
    public static func duplicate(of kept: String, distance: Int, exact: Bool) -> ItemSkip {
        let how = exact ? "has the same bytes as" : "looks like (perceptual hash distance \(distance))"
        var skip = ItemSkip(.duplicate, "\(how) item \(JSONValue.quote(Environment.shown(kept)))")
        skip.duplicateOf = kept
        skip.distance = distance
        return skip
    }

    public var description: String { "\(reason.rawValue): \(message)" }
}
