import Foundation

/// robots.txt for a remote source with `"robots": true`: each host's file (per scheme,
/// host and port) is fetched once per run, through the source's HTTP client and so with
/// the pipeline's User-Agent, and kept in memory for the rest of the run.
///
/// - a 2xx answer is parsed (`RobotsRules`) for the User-Agent's product token;
/// - a 4xx answer (404 and the others, 429 aside) means there is no robots.txt: everything
///   is allowed, as RFC 9309 says;
/// - a 429, a 5xx or a host that cannot be reached (after the pipeline's retries) makes
///   the file unreadable, and every item of that host is skipped: not knowing the rules is
///   not permission.
// @unchecked because `files` and `loading` are guarded by `condition` (a host's other items
// wait on it while one thread fetches its robots.txt: `Mutex` has no wait).
public final class RobotsPolicy: @unchecked Sendable {
    /// What one host's robots.txt came to.
    enum File: Sendable {
        case rules(RobotsRules)
        case unreadable(String)
        /// The run stopped while it was being fetched: no verdict, and not kept.
        case interrupted
    }

    /// What robots.txt says of one URL.
    public enum Verdict: Sendable, Equatable {
        case allowed
        case refused(ItemSkip)
        /// The run is stopping and the file could not be read: the item is left as it is.
        case undecided
    }

    package let client: HTTPClient
    let agent: String
    package let attempts: Int
    package let backoff: Double
    /// Bytes of robots.txt read at most (RFC 9309 asks crawlers to read at least 500 KiB).
    package static let maxBytes = 512 * 1024
    private let condition = NSCondition()
    private var files: [String: File] = [:]
    private var loading: Set<String> = []

    public init(client: HTTPClient, attempts: Int, backoff: Double) {
        self.client = client
        agent = ImgpipeIdentity.productToken(of: client.userAgent)
        self.attempts = attempts
        self.backoff = backoff
    }

    /// Whether `url` may be fetched. Blocks while another thread fetches the same host's
    /// robots.txt (once per host and run, on a download thread).
    public func verdict(for url: URL) -> Verdict {
        guard let origin = Self.origin(of: url) else { return .allowed }
        switch file(for: origin) {
        case .interrupted:
            return .undecided
        case .unreadable(let why):
            return .refused(
                ItemSkip(.robots, "\(origin)/robots.txt could not be read (\(why)), so nothing of that host is fetched"))
        case .rules(let rules):
            let path = Self.pathAndQuery(of: url)
            guard let rule = rules.decidingRule(for: path), !rule.allow else { return .allowed }
            return .refused(ItemSkip(.robots, "\(origin)/robots.txt disallows \(path) for \(agent) (\(rule.line))"))
        }
    }

    private func file(for origin: String) -> File {
        condition.lock()
        while loading.contains(origin) { condition.wait() }
        if let known = files[origin] {
            condition.unlock()
            return known
        }
        loading.insert(origin)
        condition.unlock()
        let fetched = fetch(origin)
        condition.lock()
        if case .interrupted = fetched {} else { files[origin] = fetched }
        loading.remove(origin)
        condition.broadcast()
        condition.unlock()
        return fetched
    }

    private func fetch(_ origin: String) -> File {
        guard let url = URL(string: origin + "/robots.txt") else { return .unreadable("not a URL") }
        let cancellation = client.cancellation
        do {
            let result = try client.performWithRetries(
                HTTPRequest(url: url, maxBytes: Self.maxBytes, maxBytesName: "the robots.txt size limit"),
                attempts: attempts, backoff: backoff, isCancelled: { cancellation?.isCancelled ?? false })
            switch result.status {
            case 200...299:
                let text = String(decoding: result.body ?? Data(), as: UTF8.self)
                return .rules(RobotsRules(parsing: text, agent: agent))
            case 400...499:
                return .rules(.allowAll)
            default:
                return .unreadable("HTTP \(result.status)")
            }
        } catch {
            if error.kind == .cancelled || cancellation?.isCancelled == true { return .interrupted }
            // The host's address is one the pipeline refuses: its images are too, and each
            // fails as `blocked-address` (a skip for robots would hide it).
            if error.kind == .blocked { return .rules(.allowAll) }
            return .unreadable(error.message)
        }
    }

    /// `scheme://host[:port]`, the scope of one robots.txt (and the host pacing and
    /// `HostHealth` count): the port only when it is not the scheme's own, so that
    /// `http://h/`, `http://h:80/` and `HTTP://h:0080/` are one host.
    package static func origin(of url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
        let shown = host.contains(":") ? "[\(host)]" : host
        let defaultPort = ["http": 80, "https": 443][scheme]
        return "\(scheme)://\(shown)" + (url.port.flatMap { $0 == defaultPort ? nil : ":\($0)" } ?? "")
    }

    /// The part of a URL robots.txt rules are matched against: its path and query as the
    /// request names them (`RobotsRules.requestPath`: no `.` or `..` segments).
    static func pathAndQuery(of url: URL) -> String {
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var path = components?.percentEncodedPath ?? url.path
        if path.isEmpty { path = "/" }
        if let query = components?.percentEncodedQuery { path += "?" + query }
        return RobotsRules.requestPath(path)
    }
}
