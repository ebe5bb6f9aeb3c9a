import Foundation

/// The rules of one robots.txt for one crawler, as RFC 9309 reads them: the groups whose
/// `User-agent` lines name the crawler's product token (case-insensitive), else the `*`
/// groups, else nothing (everything allowed). Of the `Allow` and `Disallow` rules that
/// match a path, the longest wins, `Allow` on a tie; `*` matches any run of characters and
/// a final `$` anchors the end. `Sitemap` and unknown lines are ignored, and so is a
/// byte-order mark before the first line.
///
/// Rules and paths are compared in one form (RFC 9309, section 2.2.2): a percent-encoded
/// unreserved character decoded (`%7E` is `~`, `%70` is `p`), other percent-encodings with
/// upper-case hex digits, and bytes outside printable ASCII percent-encoded. A path also
/// loses its `.` and `..` segments (`requestPath`), as the request that is sent does.
public struct RobotsRules: Sendable, Equatable {
    public struct Rule: Sendable, Equatable {
        public let allow: Bool
        /// As written in the file.
        public let pattern: String
        /// `pattern` in the form rules and paths are compared in.
        let matched: [UInt8]

        package init(allow: Bool, pattern: String) {
            self.allow = allow
            self.pattern = pattern
            matched = RobotsRules.comparable(pattern)
        }

        /// As it would be written in the file.
        public var line: String { (allow ? "Allow: " : "Disallow: ") + pattern }
    }

    public let rules: [Rule]

    /// Everything allowed (no robots.txt, or one with nothing for this crawler).
    public static let allowAll = RobotsRules(rules: [])

    package init(rules: [Rule]) { self.rules = rules }

    /// Parses `text` for the crawler named `agent`.
    public init(parsing text: String, agent: String) {
        let agent = agent.lowercased()
        var named: [Rule] = []
        var anyone: [Rule] = []
        var sawNamed = false
        // The agents of the group being read; a rule after agent lines closes the list.
        var agents: [String] = []
        var inRules = false
        let text = text.hasPrefix("\u{FEFF}") ? String(text.dropFirst()) : text
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            switch key {
            case "user-agent":
                if inRules {
                    agents = []
                    inRules = false
                }
                agents.append(value.lowercased())
                if value.lowercased() == agent { sawNamed = true }
            case "allow", "disallow":
                inRules = true
                // An empty `Disallow:` allows everything: it adds no rule.
                guard !value.isEmpty else { continue }
                let rule = Rule(allow: key == "allow", pattern: value)
                if agents.contains(agent) { named.append(rule) }
                if agents.contains("*") { anyone.append(rule) }
            default:
                continue
            }
        }
        rules = sawNamed ? named : anyone
    }

    /// The rule that decides `path` (path and query of the URL, as `requestPath` gives
    /// it), or nil when none matches (allowed).
    public func decidingRule(for path: String) -> Rule? {
        let target = Self.comparable(path.isEmpty ? "/" : path)
        var best: Rule?
        for rule in rules where Self.matches(rule.matched, target) {
            guard let current = best else {
                best = rule
                continue
            }
            let (length, currentLength) = (rule.matched.count, current.matched.count)
            if length > currentLength || (length == currentLength && rule.allow && !current.allow) { best = rule }
        }
        return best
    }

    public func allows(_ path: String) -> Bool { decidingRule(for: path)?.allow ?? true }

    /// Whether `pattern` matches the start of `path` (all of it with a final `$`).
    package static func matches(_ pattern: [UInt8], _ path: [UInt8]) -> Bool {
        let star = UInt8(ascii: "*")
        let anchored = pattern.last == UInt8(ascii: "$")
        let body = anchored ? Array(pattern.dropLast()) : pattern
        // Which positions of `path` can be reached after each pattern byte: linear in
        // pattern × path, so a hostile pattern of many `*` cannot take exponential time.
        var reachable = [Bool](repeating: false, count: path.count + 1)
        reachable[0] = true
        for byte in body {
            var next = [Bool](repeating: false, count: path.count + 1)
            var any = false
            if byte == star {
                // Every position from the first reachable one on.
                guard let first = reachable.firstIndex(of: true) else { return false }
                for position in first...path.count { next[position] = true }
                any = true
            } else {
                for position in 0..<path.count where reachable[position] && path[position] == byte {
                    next[position + 1] = true
                    any = true
                }
            }
            if !any { return false }
            reachable = next
        }
        return anchored ? reachable[path.count] : true
    }

    /// `text` in the form rules and paths are compared in: `%XX` of an unreserved
    /// character (letters, digits, `-._~`) decoded, other `%XX` with upper-case hex
    /// digits, and bytes outside printable ASCII (and a `%` that starts no escape)
    /// percent-encoded.
    static func comparable(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if let decoded = PercentEscapes.byte(at: index, in: bytes) {
                if PercentEscapes.isUnreserved(decoded) { out.append(decoded) } else { out += PercentEscapes.escape(decoded) }
                index += 3
                continue
            }
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") || byte <= 0x20 || byte >= 0x7F {
                out += PercentEscapes.escape(byte)
            } else {
                out.append(byte)
            }
            index += 1
        }
        return out
    }

    /// A URL's path and query (`percentEncodedPath`, `?` and the query) as the request
    /// that is sent names it: the path's `.` and `..` segments removed (RFC 3986, section
    /// 5.2.4), as libcurl does before sending (and a server for `%2E%2E`), so that
    /// `/img/x/../private/a.jpg` is matched as `/img/private/a.jpg`.
    public static func requestPath(_ pathAndQuery: String) -> String {
        let query = pathAndQuery.firstIndex(of: "?")
        let path = String(pathAndQuery[..<(query ?? pathAndQuery.endIndex)])
        // Dot segments spelled with `%2E` are dot segments too.
        let decoded = String(decoding: comparable(path), as: UTF8.self)
        var output: [Substring] = []
        let segments = decoded.split(separator: "/", omittingEmptySubsequences: false)
        for (position, segment) in segments.enumerated() {
            let last = position == segments.count - 1
            switch segment {
            case ".":
                if last { output.append("") }
            case "..":
                if output.count > 1 { output.removeLast() }
                if last { output.append("") }
            default:
                output.append(segment)
            }
        }
        var result = output.joined(separator: "/")
        if !result.hasPrefix("/") { result = "/" + result }
        return result + (query.map { String(pathAndQuery[$0...]) } ?? "")
    }
}
