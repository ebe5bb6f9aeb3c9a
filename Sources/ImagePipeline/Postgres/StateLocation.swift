import Foundation

/// Where a run's state lives: `--state` (or `IMGPIPE_STATE`) is a PostgreSQL URL
/// (`postgres://` or `postgresql://`, the shared-state backend) or anything else, a SQLite
/// file's path as before.
public enum StateLocation: Sendable, Equatable {
    case sqlite(path: String)
    /// The URL as given, password included: pass it to libpq, print `displayed`.
    case postgres(url: String)

    public init(_ text: String) {
        let lower = text.lowercased()
        self = lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://") ? .postgres(url: text) : .sqlite(path: text)
    }

    /// Safe to print, log or store: a PostgreSQL URL's password (in the user part or a
    /// `password=` parameter) replaced by `***`.
    public var displayed: String {
        switch self {
        case let .sqlite(path): return path
        case let .postgres(url): return Self.masked(url)
        }
    }

    /// `text` with `url`'s password (as it appears in the URL) replaced by `***`, for an
    /// error message that might quote it.
    public static func masking(in text: String, url: String) -> String {
        text.replacingOccurrences(of: url, with: masked(url)).replacingOccurrences(of: password(in: url) ?? "\u{0}", with: "***")
    }

    /// The password in the user part of `url`, percent-decoded too (nil: none, or too short
    /// to mask without masking ordinary words).
    static func password(in url: String) -> String? {
        guard let scheme = url.range(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        let authority = rest[..<(rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex)]
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else { return nil }
        let password = String(authority[authority.index(after: colon) ..< at])
        return password.count >= 4 ? password : nil
    }

    static func masked(_ url: String) -> String {
        var text = url
        // user:password@ in the authority (the password may hold any character but '@'
        // is percent-encoded in a valid URL; the last '@' before the path ends it).
        if let scheme = text.range(of: "://") {
            let rest = text[scheme.upperBound...]
            let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
            let authority = rest[..<authorityEnd]
            if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
                text.replaceSubrange(text.index(after: colon) ..< at, with: "***")
            }
        }
        // password=… among the query parameters.
        if let query = text.firstIndex(of: "?") {
            let parameters = text[text.index(after: query)...].split(separator: "&", omittingEmptySubsequences: false)
                .map { part -> String in
                    part.lowercased().hasPrefix("password=") ? "password=***" : String(part)
                }
            text = String(text[...query]) + parameters.joined(separator: "&")
        }
        return text
    }
}
