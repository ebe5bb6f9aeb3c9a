import Foundation
import PipelineKit

/// Where a run's state lives: `--state` (or `IMGPIPE_STATE`) is a PostgreSQL URL
/// (`postgres://` or `postgresql://`, the shared-state backend) or anything else, a SQLite
/// file's path as before.
public enum StateLocation: Sendable, Equatable {
    case sqlite(path: String)
    /// The URL as given, password included: pass it to libpq, print `displayed`.
    case postgres(url: String)

    /// A `postgres://` or `postgresql://` URL, or a libpq key=value string (`host=… dbname=…`,
    /// recognised by a word `host`, `hostaddr`, `port`, `dbname`, `user`, `password`,
    /// `passfile`, `sslpassword`, `sslmode`, `service` or `connect_timeout` followed by `=`,
    /// spaces allowed around it), is PostgreSQL; anything else is a file path.
    public init(_ text: String) {
        let lower = text.lowercased()
        // libpq takes spaces around '=': `host = db` is as much a key=value string as `host=db`.
        let isKeyValue =
            lower.range(
                of: #"(^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslpassword|sslmode|service|connect_timeout)\s*="#,
                options: .regularExpression) != nil
        self =
            lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://") || isKeyValue
            ? .postgres(url: text) : .sqlite(path: text)
    }

    /// Safe to print, log or store: a PostgreSQL URL's password (in the user part or a
    /// `password=` parameter) replaced by `***`.
    public var displayed: String {
        switch self {
        case .sqlite(let path): return path
        case .postgres(let url): return Self.masked(url)
        }
    }

    /// Where the state is, with no password at all (not even masked): a PostgreSQL URL
    /// without the `:password` of its user part and without `password=` or `sslpassword=`
    /// (in its query, or as words of a key=value string). What is kept on disk to say
    /// where a shared run is.
    public var withoutPassword: String {
        guard case .postgres(let url) = self else { return displayed }
        var text = url
        if let password = Self.userPassword(in: text) {
            text.removeSubrange(text.index(before: password.lowerBound)..<password.upperBound)
        }
        let isPassword = { (part: Substring) in
            let lower = part.lowercased()
            return lower.hasPrefix("password=") || lower.hasPrefix("sslpassword=")
        }
        if !text.contains("://") {
            for range in Self.keyValuePasswords(in: text).reversed() {
                // The whole word: back from the value to the start of its key.
                let key = text[..<range.lowerBound].range(of: #"(?i)(ssl)?password\s*=\s*$"#, options: .regularExpression)
                text.removeSubrange((key?.lowerBound ?? range.lowerBound)..<range.upperBound)
            }
            return text.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
        }
        if let query = text.firstIndex(of: "?") {
            let kept = text[text.index(after: query)...].split(separator: "&").filter { !isPassword($0) }
            text = String(text[..<query]) + (kept.isEmpty ? "" : "?" + kept.joined(separator: "&"))
        }
        return text
    }

    /// `text` with `url`'s password (as it appears in the URL) replaced by `***`, for an
    /// error message that might quote it.
    /// (A password shorter than 4 characters is masked in the URL but not elsewhere in the
    /// text: masking every "abc" of a message would garble it.)
    public static func masking(in text: String, url: String) -> String {
        var out = text.replacingOccurrences(of: url, with: masked(url))
        for password in passwords(in: url) {
            out = out.replacingOccurrences(of: password, with: "***")
            if let decoded = password.removingPercentEncoding, decoded != password {
                out = out.replacingOccurrences(of: decoded, with: "***")
            }
        }
        return out
    }

    /// The passwords `url` holds (in its user part, in a `password=` parameter or word),
    /// as written; those of 4 characters or more.
    static func passwords(in url: String) -> [String] {
        var found: [String] = []
        if let password = userPassword(in: url) { found.append(String(url[password])) }
        if url.contains("://") {
            for part in url.split(whereSeparator: { $0 == "&" || $0 == "?" }) where part.lowercased().hasPrefix("password=") {
                found.append(String(part.dropFirst("password=".count)))
            }
        } else {
            for range in keyValuePasswords(in: url) {
                let value = String(url[range])
                found.append(value)
                // A quoted value is also quoted back without its quotes.
                if value.count > 2, value.hasPrefix("'"), value.hasSuffix("'") {
                    found.append(String(value.dropFirst().dropLast()))
                }
            }
        }
        return found.filter { $0.count >= 4 }
    }

    /// Where the values of `password` are in a libpq key=value string: `password=x`,
    /// `password = x` and `password='a b'` (quoted, with `\'` and `\\` inside) alike.
    static func keyValuePasswords(in text: String) -> [Range<String.Index>] {
        guard let pattern = try? NSRegularExpression(pattern: #"(?i)(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)"#)
        else { return [] }
        return pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text)
        }
    }

    /// Why `url` cannot be given to libpq: a `user:password@` whose password holds a `/`,
    /// `?` or `@` as it is. libpq ends the user part at the first '@' or '/' and reads the
    /// rest as a host, port, database or option, quoting pieces of the password in its
    /// messages (`invalid integer value "…" for connection option "port"`), which no masking
    /// can know. Seen as two '@' before the path, an '@' in the database name, or an '@'
    /// before the '=' of a parameter: only the rest of such a password puts one there (an
    /// '@' meant there is written %40). Nil for anything else.
    static func unencodedPassword(in url: String) -> String? {
        guard let scheme = url.range(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        guard rest.contains("@") else { return nil }
        let problem =
            "the database URL's password holds a character a URL must percent-encode there ('/' as %2F, "
            + "'?' as %3F, '#' as %23, '@' as %40, here or in the database name): libpq would read part of it as the "
            + "host, the database or an option"
        // libpq's user part ends at the first '@' before the path: a second one there means
        // the user or password holds one.
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        if let at = authority.firstIndex(of: "@"), authority[authority.index(after: at)...].contains("@") { return problem }
        // An '@' in the path (the database name): the rest of a password that held a '/'.
        let tail = rest[slash...]
        let question = tail.firstIndex(of: "?") ?? tail.endIndex
        if tail[..<question].contains("@") { return problem }
        // An '@' in a query parameter before any '=': the rest of a password that held a '?'.
        if question < tail.endIndex {
            for parameter in tail[tail.index(after: question)...].split(separator: "&") {
                guard let at = parameter.firstIndex(of: "@") else { continue }
                guard let equals = parameter.firstIndex(of: "="), equals < at else { return problem }
            }
        }
        return nil
    }

    /// Where the password of `url`'s `user:password@` is (it may hold any character but '@',
    /// which is percent-encoded in a valid URL: the last '@' before the path ends it).
    static func userPassword(in url: String) -> Range<String.Index>? {
        guard let scheme = url.range(of: "://") else { return nil }
        let rest = url[scheme.upperBound...]
        let authority = rest[..<(rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex)]
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else { return nil }
        return authority.index(after: colon)..<at
    }

    static func masked(_ url: String) -> String {
        var text = url
        if let password = userPassword(in: text) { text.replaceSubrange(password, with: "***") }
        // password=… in a key=value string (spaces around '=', a quoted value).
        if !text.contains("://") {
            for range in keyValuePasswords(in: text).reversed() { text.replaceSubrange(range, with: "***") }
            return text
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
