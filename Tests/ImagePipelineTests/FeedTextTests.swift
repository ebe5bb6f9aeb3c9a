import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// A feed's text is data: an entry whose URL holds `${FEED_TOKEN}` (the name of a value
/// the run itself read, here its feed's token) is fetched with that text as it stands,
/// never with the value, on every path that records a location and reads it back: the
/// state file (a retry), a cached feed page (`run --new`) and a shared run's database. The
/// entry names another host (a second loopback address), which must see no secret.
@Suite("Feed text is never expanded", .serialized)
struct FeedTextTests {
    let work: TemporaryDirectory
    let jpeg: Data
    let secret = "tok-\(UUID().uuidString.prefix(12))"

    init() throws {
        work = try TemporaryDirectory("imgpipe-feedtext")
        let path = work.url("fixture.jpg")
        try ImageFixtures.jpeg(at: path, width: 48, height: 32)
        jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
    }

    /// The feed's own server: answers `/feed` only with the right token, with an ETag (so
    /// that a second run may read the page from the cache).
    func feedServer(entries: @escaping @Sendable () -> String) throws -> TestHTTPServer {
        let secret = secret
        return try TestHTTPServer { request in
            guard request.path == "/feed", request.query["token"] == secret else { return .status(403) }
            if request.headers["if-none-match"] == "\"p1\"" { return .status(304) }
            return TestHTTPServer.Response(
                status: 200, headers: [("Content-Type", "application/json"), ("ETag", "\"p1\"")],
                body: Data(entries().utf8))
        }
    }

    /// The host a hostile entry names: fails every image while `failing` is set.
    func otherHost(failing: LockedBox<Bool>) throws -> TestHTTPServer {
        let jpeg = jpeg
        return try TestHTTPServer(host: "127.0.0.2") { _ in
            failing.withLock { $0 } ? .status(500) : .bytes(jpeg)
        }
    }

    /// The entries: the token's reference, a doubled dollar and a lone one, as feed text.
    static func entries(_ base: String) -> String {
        """
        [{"id": "a", "url": "\(base)/a.jpg?k=${FEED_TOKEN}"},
         {"id": "b", "url": "\(base)/b.jpg?k=$${FEED_TOKEN}&c=${FEED_TOKEN:1}"},
         {"id": "c", "url": "\(base)/c.jpg?k=$"}]
        """
    }

    /// What `otherHost` must have been asked for, exactly (percent-decoded).
    static let asked = ["/a.jpg?k=${FEED_TOKEN}", "/b.jpg?k=$${FEED_TOKEN}&c=${FEED_TOKEN:1}", "/c.jpg?k=$"]

    func pipeline(_ feed: TestHTTPServer, cache: Bool = false) throws {
        try work.write(
            """
            {"version": 1,
             "source": {"type": "json-feed", "url": "\(feed.baseURL)/feed?token=${FEED_TOKEN}", "keyField": "id",
                        "cache": \(cache)},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "directory", "path": "out"},
             "limits": {"timeout": 5}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
    }

    func imgpipe(_ arguments: [String], state: String? = nil) throws -> CommandResult {
        try ImgpipeBinary.run(
            arguments + (state.map { ["--state", $0] } ?? []), in: work.path,
            environment: ["FEED_TOKEN": secret])
    }

    /// Every request `server` received holds no form of the secret, and each decodes to
    /// one of the entries' own texts.
    func expectNoSecret(in server: TestHTTPServer, _ comment: String) {
        let forms = [secret, secret.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? secret]
        #expect(!server.requests.isEmpty, "\(comment): the other host was never asked")
        for request in server.requests {
            let raw = request.target + " " + request.headers.map { "\($0.key): \($0.value)" }.joined(separator: " ")
            for form in forms { #expect(!raw.contains(form), "\(comment): the other host received the secret: \(raw)") }
            let decoded = request.target.removingPercentEncoding ?? request.target
            #expect(Self.asked.contains(decoded), "\(comment): asked for \(decoded)")
        }
    }

    /// Listed, recorded, failed; retried from the state file: the recorded locations are
    /// read back as the feed wrote them.
    @Test func aRetryFromTheStateFileSendsTheFeedsTextNotTheSecret() throws {
        let failing = LockedBox(true)
        let other = try otherHost(failing: failing)
        let feed = try feedServer { Self.entries(other.baseURL) }
        try pipeline(feed)
        let first = try imgpipe(["run", "pipe.json"])
        #expect(first.status == 1, "stderr: \(first.stderr)")
        failing.withLock { $0 = false }
        let retried = try imgpipe(["resume", "pipe.json", "--retry-failed"])
        #expect(retried.status == 0, "stderr: \(retried.stderr)")
        #expect(work.files(under: "out").count == 3)
        expectNoSecret(in: other, "resume --retry-failed")
        #expect(Set(other.requests.map { $0.target.removingPercentEncoding ?? "" }) == Set(Self.asked))
    }

    /// A feed page read back from the cache by `run --new` is the page the feed sent.
    @Test func aCachedFeedPageIsReadBackAsTheFeedSentIt() throws {
        let failing = LockedBox(true)
        let other = try otherHost(failing: failing)
        let feed = try feedServer { Self.entries(other.baseURL) }
        try pipeline(feed, cache: true)
        #expect(try imgpipe(["run", "pipe.json"]).status == 1)
        failing.withLock { $0 = false }
        let again = try imgpipe(["run", "pipe.json", "--new"])
        #expect(again.status == 0, "stderr: \(again.stderr)")
        // The page came from the cache: not asked for again, or asked for with its ETag.
        #expect(
            feed.requests.count == 1 || feed.requests.last?.headers["if-none-match"] == "\"p1\"",
            "the second run did not use the cached page")
        expectNoSecret(in: other, "run --new over a cached page")
        for file in work.files(under: ".imgpipe") {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url(".imgpipe/" + file)))
            #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(file) holds the secret")
        }
    }
}

extension FeedTextTests {
    /// A feed page that is not UTF-8 and echoes the token was cached as it came (it cannot
    /// be recorded): the secret reached the cache's files. It is not cached.
    @Test func aPageThatIsNotUTF8IsNotCachedWithItsSecret() throws {
        let secret = secret
        let jpeg = jpeg
        let server = try TestHTTPServer { request in
            if request.path == "/feed" {
                var body = Data(#"[{"id": "a", "url": "http://\#(request.headers["host"]!)/a.jpg", "note": "\#(secret) "#.utf8)
                body.append(0xE9)
                body.append(contentsOf: Array(#""}]"#.utf8))
                return TestHTTPServer.Response(status: 200, headers: [("Content-Type", "application/json")], body: body)
            }
            return .bytes(jpeg)
        }
        try pipeline(server, cache: true)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        for file in work.files(under: ".imgpipe") {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url(".imgpipe/" + file)))
            #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(file) holds the secret")
        }
    }

    /// What is shown of a key or a location is the feed's text, not its recorded form
    /// (`k$` was exported and reported as `k$$`, `${X}` as `$${X}`).
    @Test func keysAndLocationsAreShownAsTheFeedWroteThem() throws {
        let failing = LockedBox(true)
        let other = try otherHost(failing: failing)
        let feed = try feedServer {
            #"[{"id": "k$", "url": "\#(other.baseURL)/a.jpg?k=${FEED_TOKEN}"}, {"id": "m$${X}", "url": "\#(other.baseURL)/b.jpg?k=$"}]"#
        }
        try pipeline(feed)
        let run = try imgpipe(["run", "pipe.json"])
        #expect(run.status == 1)
        #expect(run.stderr.contains("failed: k$:") && run.stderr.contains("failed: m$${X}:"), "stderr: \(run.stderr)")
        let status = try imgpipe(["status", "pipe.json", "--json"]).decoded(StatusReport.self)
        #expect(Set(status.failures.map(\.key)) == ["k$", "m$${X}"])
        let export = try imgpipe(["export", "pipe.json", "--format", "jsonl"])
        let records = export.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let pairs = Set(records.map { "\($0["key"] ?? "") \($0["location"] ?? "")" })
        #expect(pairs == ["k$ \(other.baseURL)/a.jpg?k=${FEED_TOKEN}", "m$${X} \(other.baseURL)/b.jpg?k=$"], "\(pairs)")
    }
}

/// The same through a shared run: the lister records each entry in PostgreSQL and every
/// worker, this one included, fetches what it reads back.
@Suite("Feed text is never expanded in a shared run")
final class SharedFeedTextTests: @unchecked Sendable {
    // @unchecked: every stored property is a constant set in init.
    let cluster: PostgresCluster
    let url: String
    let feedText: FeedTextTests

    init() throws {
        cluster = try PostgresCluster.start()
        url = try cluster.makeDatabase()
        feedText = try FeedTextTests()
    }

    deinit { cluster.dropDatabase(url) }

    @Test func aSharedRunFetchesTheFeedsTextNotTheSecret() throws {
        let other = try feedText.otherHost(failing: LockedBox(false))
        let feed = try feedText.feedServer { FeedTextTests.entries(other.baseURL) }
        try feedText.pipeline(feed)
        let result = try feedText.imgpipe(["work", "pipe.json"], state: url)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(feedText.work.files(under: "out").count == 3)
        feedText.expectNoSecret(in: other, "imgpipe work")
    }
}
