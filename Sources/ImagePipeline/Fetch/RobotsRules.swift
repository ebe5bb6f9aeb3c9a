import Foundation

/// The rules of one robots.txt for one crawler, as RFC 9309 reads them: the groups whose
/// `User-agent` lines name the crawler's product token (case-insensitive), else the `*`
/// groups, else nothing (everything allowed). Of the `Allow` and `Disallow` rules that
/// match a path, the longest wins, `Allow` on a tie; `*` matches any run of characters and
/// a final `$` anchors the end. `Sitemap` and unknown lines are ignored.
public struct RobotsRules: Sendable, Equatable {
    public struct Rule: Sendable, Equatable {
        public let allow: Bool
        public let pattern: String

        /// As it would be written in the file.
        public var line: String { (allow ? "Allow: " : "Disallow: ") + pattern }
    }

    public let rules: [Rule]

    /// Everything allowed (no robots.txt, or one with nothing for this crawler).
    public static let allowAll = RobotsRules(rules: [])

    init(rules: [Rule]) { self.rules = rules }

    /// Parses `text` for the crawler named `agent`.
    public init(parsing text: String, agent: String) {
        let agent = agent.lowercased()
        var named: [Rule] = []
        var anyone: [Rule] = []
        var sawNamed = false
        // The agents of the group being read; a rule after agent lines closes the list.
        var agents: [String] = []
        var inRules = false
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            switch key {
            case "user-agent":
                if inRules { agents = []; inRules = false }
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

    /// The rule that decides `path` (path and query of the URL), or nil when none matches
    /// (allowed).
    public func decidingRule(for path: String) -> Rule? {
        let target = Array((path.isEmpty ? "/" : path).utf8)
        var best: Rule?
        for rule in rules where Self.matches(Array(rule.pattern.utf8), target) {
            guard let current = best else { best = rule; continue }
            let (length, currentLength) = (rule.pattern.utf8.count, current.pattern.utf8.count)
            if length > currentLength || (length == currentLength && rule.allow && !current.allow) { best = rule }
        }
        return best
    }

    public func allows(_ path: String) -> Bool { decidingRule(for: path)?.allow ?? true }

    /// Whether `pattern` matches the start of `path` (all of it with a final `$`).
    static func matches(_ pattern: [UInt8], _ path: [UInt8]) -> Bool {
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
                for position in first ... path.count { next[position] = true }
                any = true
            } else {
                for position in 0 ..< path.count where reachable[position] && path[position] == byte {
                    next[position + 1] = true
                    any = true
                }
            }
            if !any { return false }
            reachable = next
        }
        return anchored ? reachable[path.count] : true
    }
}
