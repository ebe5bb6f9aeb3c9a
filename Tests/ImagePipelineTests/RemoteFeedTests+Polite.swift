import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// Skipped items of remote sources: `X-Robots-Tag` opt-outs, robots.txt and the configured
/// User-Agent, with the built binary against the loopback server of `RemoteFeedTests`.
extension RemoteFeedTests {
    func skips() throws -> [String: SkipRecord] {
        Dictionary(uniqueKeysWithValues: try status().skips.map { ($0.key, $0) })
    }

    /// A server of images under any path ending in `.jpg`; `tags` gives a path's
    /// `X-Robots-Tag` lines; PUTs under `/upload/` are taken with 201.
    func taggedServer(
        tags: [String: [String]] = [:],
        _ extra: @escaping @Sendable (TestHTTPServer.Request) -> TestHTTPServer.Response? = { _ in nil }
    )
        throws -> TestHTTPServer
    {
        let jpeg = self.jpeg
        return try TestHTTPServer { request in
            if let response = extra(request) { return response }
            if request.method == "PUT", request.path.hasPrefix("/upload/") { return .status(201) }
            if request.path.hasSuffix(".jpg") {
                return .bytes(jpeg, headers: (tags[request.path] ?? []).map { ("X-Robots-Tag", $0) })
            }
            return .status(404)
        }
    }

    func imageRequests(_ server: TestHTTPServer) -> [String] {
        server.requests.filter { $0.method == "GET" && $0.path.hasSuffix(".jpg") }.map(\.path)
    }

    @discardableResult
    func politePipeline(
        source: String, extra: String = "", sinks: String = #"{"type": "directory", "path": "out"}"#,
        limits: String = #"{"timeout": 5}"#
    ) throws -> String {
        try work.write(
            """
            {"version": 1, "source": \(source),
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sinks": [\(sinks)], "limits": \(limits), "retry": {"attempts": 2, "backoff": 0.05}\(extra)}
            """, to: "pipe.json")
    }

    func writeURLList(_ base: String, _ paths: [String]) throws {
        try work.write(paths.map { base + $0 }.joined(separator: "\n") + "\n", to: "urls.txt")
    }

    // MARK: X-Robots-Tag

    @Test func optOutHeaderSkipsTheImageAndNothingIsDelivered() throws {
        let server = try taggedServer(tags: ["/img/a.jpg": ["noai"], "/img/b.jpg": ["otherbot: noindex"]])
        try writeURLList(server.baseURL, ["/img/a.jpg", "/img/b.jpg", "/img/c.jpg", "/img/d.jpg"])
        try politePipeline(
            source: #"{"type": "url-list", "path": "urls.txt", "cache": {"path": "cache"}}"#,
            extra: #", "userAgent": "uploader-test/1.0""#,
            sinks: #"{"type": "directory", "path": "out"}, {"type": "http", "url": "\#(server.baseURL)/upload/{stem}"}"#)

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "nothing failed: \(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("3 done, 1 skipped, 0 failed of 4"), "\(result.stdout)")
        #expect(result.stdout.contains("skipped: opt-out 1"))
        #expect(work.files(under: "out") == ["img/b.jpg", "img/c.jpg", "img/d.jpg"])
        let uploads = server.requests.filter { $0.method == "PUT" }.map(\.path).sorted()
        #expect(uploads == ["/upload/img/b", "/upload/img/c", "/upload/img/d"])
        #expect(server.requests.allSatisfy { $0.headers["user-agent"] == "uploader-test/1.0" }, "images and uploads alike")
        let report = try status()
        #expect((report.done, report.skipped, report.failed, report.pending) == (3, 1, 0, 0))
        #expect(report.skipsByReason == ["opt-out": 1])
        let skip = try #require(report.skips.first)
        #expect(skip.key.hasSuffix("/img/a.jpg"))
        #expect((skip.reason, skip.message) == ("opt-out", "X-Robots-Tag: noai"))
        // Deliveries of the skipped item are not waiting for anything.
        #expect(
            report.sinks.count == 2 && report.sinks.values.allSatisfy { $0 == DeliveryCounts(done: 3, failed: 0, pending: 0) })
        #expect(try imgpipe("status", "pipe.json").stdout.contains("skips by reason: opt-out 1"))

        // A rerun with the cache: the three images come from it; the opted-out one, whose
        // body was never downloaded, is asked for again (headers only) and skipped again.
        let rerun = try imgpipe("run", "pipe.json", "--new")
        #expect(rerun.status == 0, "stderr: \(rerun.stderr)")
        #expect(try status().skipsByReason == ["opt-out": 1])
        #expect(imageRequests(server).sorted() == ["/img/a.jpg", "/img/a.jpg", "/img/b.jpg", "/img/c.jpg", "/img/d.jpg"])
    }

    /// A host that opts out image after image (3 answers, `optOutHostAfter`'s default) is
    /// not asked for its others: they are skipped as `host-opt-out`, naming the host, with no
    /// request. Another host is not held to it, and `noml` opts an image out as `noai` does.
    @Test func aHostThatOptsOutAgainAndAgainIsNotAskedForItsOtherImages() throws {
        let tags = Dictionary(uniqueKeysWithValues: (1...6).map { ("/img/\($0).jpg", ["noai"]) })
        let server = try taggedServer(tags: tags)
        let other = try TestHTTPServer(host: "127.0.0.2") { [jpeg] request in
            .bytes(jpeg, headers: request.path == "/ml.jpg" ? [("X-Robots-Tag", "noml")] : [])
        }
        try work.write(
            ((1...6).map { "\(server.baseURL)/img/\($0).jpg" } + ["\(other.baseURL)/ml.jpg", "\(other.baseURL)/fine.jpg"])
                .joined(separator: "\n") + "\n", to: "urls.txt")
        // One download at a time: the answers come in feed order.
        try politePipeline(
            source: #"{"type": "url-list", "path": "urls.txt", "cache": false}"#, limits: #"{"timeout": 5, "downloads": 1}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(imageRequests(server) == ["/img/1.jpg", "/img/2.jpg", "/img/3.jpg"])
        let report = try status()
        #expect(report.skipsByReason == ["opt-out": 4, "host-opt-out": 3], "\(report.skips)")
        #expect(report.done == 1)
        let held = report.skips.filter { $0.reason == "host-opt-out" }
        #expect(held.allSatisfy { $0.message.contains("\(server.baseURL) opted 3 of its images out") }, "\(held)")
        #expect(report.skips.contains { $0.key.hasSuffix("/ml.jpg") && $0.message == "X-Robots-Tag: noml" })

        // 0 turns it off: every image is asked for.
        try politePipeline(
            source: #"{"type": "url-list", "path": "urls.txt", "cache": false, "optOutHostAfter": 0}"#,
            limits: #"{"timeout": 5, "downloads": 1}"#)
        #expect(try imgpipe("run", "pipe.json", "--new").status == 0)
        #expect(imageRequests(server).count == 3 + 6)
    }

    @Test func theBodyOfAnOptedOutImageIsNotDownloaded() throws {
        // 1 GiB as fast as the client reads: downloading it would fail on limits.maxBytes.
        let server = try taggedServer { request in
            guard request.path == "/huge.jpg" else { return nil }
            var response = TestHTTPServer.Response.streamed(.flood(bytes: 1 << 30))
            response.headers.append(("X-Robots-Tag", "imgpipe: noimageai"))
            return response
        }
        try writeURLList(server.baseURL, ["/huge.jpg"])
        try politePipeline(source: #"{"type": "url-list", "path": "urls.txt", "cache": {"path": "cache"}}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        // Skipped, not failed on limits.maxBytes (50 MiB): the body was never read.
        #expect(try status().skips.map(\.message) == ["X-Robots-Tag: imgpipe: noimageai"])
        #expect(try status().failed == 0)
    }

    @Test func dryRunOfTheFeedShowsAnOptedOutSampleWithItsReason() throws {
        let server = try taggedServer(tags: ["/img/a.jpg": ["noai"]])
        try writeURLList(server.baseURL, ["/img/a.jpg", "/img/b.jpg"])
        try politePipeline(source: #"{"type": "url-list", "path": "urls.txt", "cache": false}"#)
        let result = try imgpipe("dry-run", "pipe.json", "--feed", "--out", "preview")
        let row = try #require(result.stdout.split(separator: "\n").first { $0.contains("/img/a.jpg") })
        #expect(row.contains("skipped: opt-out: X-Robots-Tag: noai"), "\(row)")
        #expect(result.stdout.contains("1 sample(s) previewed"), "\(result.stdout)")
    }

    @Test func respectOptOutFalseProcessesEverythingAndTheCacheKeepsTheHeader() throws {
        let server = try taggedServer(tags: ["/img/a.jpg": ["noai"], "/img/b.jpg": ["otherbot: noindex"]])
        try writeURLList(server.baseURL, ["/img/a.jpg", "/img/b.jpg", "/img/c.jpg", "/img/d.jpg"])
        try politePipeline(
            source: #"{"type": "url-list", "path": "urls.txt", "cache": {"path": "cache"}, "respectOptOut": false}"#)
        let all = try imgpipe("run", "pipe.json")
        #expect(all.status == 0, "stderr: \(all.stderr)")
        #expect((try status().done, try status().skipped) == (4, 0))
        #expect(work.files(under: "out").count == 4)
        #expect(imageRequests(server).count == 4)

        // Respecting opt-outs again: the cached copy carries the header it was served
        // with, so the item is skipped without asking the server.
        try politePipeline(source: #"{"type": "url-list", "path": "urls.txt", "cache": {"path": "cache"}}"#)
        let cached = try imgpipe("run", "pipe.json", "--new")
        #expect(cached.status == 0, "stderr: \(cached.stderr)")
        let report = try status()
        #expect((report.done, report.skipped) == (3, 1))
        #expect(report.skips.first?.message == "X-Robots-Tag: noai")
        #expect(imageRequests(server).count == 4, "everything came from the cache")
    }

    @Test func robotsTagLinesAreReadPerCrawler() {
        #expect(RobotsTag.optOut(in: ["noai"], agent: "imgpipe")?.directive == "noai")
        #expect(RobotsTag.optOut(in: ["NoImageAI"], agent: "imgpipe")?.directive == "noimageai")
        #expect(RobotsTag.optOut(in: ["noarchive, none"], agent: "imgpipe")?.directive == "none")
        #expect(RobotsTag.optOut(in: ["otherbot: noindex"], agent: "imgpipe") == nil)
        #expect(RobotsTag.optOut(in: ["otherbot: noindex, nofollow"], agent: "imgpipe") == nil)
        #expect(RobotsTag.optOut(in: ["otherbot: noindex", "noai"], agent: "imgpipe")?.line == "noai")
        #expect(RobotsTag.optOut(in: ["ImgPipe: noindex"], agent: "imgpipe")?.directive == "noindex")
        #expect(RobotsTag.optOut(in: ["otherbot: nofollow, imgpipe: noai"], agent: "imgpipe")?.directive == "noai")
        #expect(RobotsTag.optOut(in: ["unavailable_after: 25 Jun 2030 15:00:00 PST, nofollow"], agent: "imgpipe") == nil)
        #expect(RobotsTag.optOut(in: ["max-image-preview: large"], agent: "imgpipe") == nil)
    }

    // MARK: robots.txt and the User-Agent

    static let robots = """
        # Everyone else: nothing at all.
        User-agent: *
        Disallow: /

        User-agent: googlebot
        Allow: /

        User-agent: polite-test
        Disallow: /private/
        Allow: /private/ok.jpg
        """

    @Test func robotsTxtIsReadOnceAndDisallowedImagesAreNeverRequested() throws {
        let agent = "polite-test/2.0 (+mailto:ops@example.com)"
        let server = try taggedServer { request in
            switch request.path {
            case "/robots.txt": .init(status: 200, headers: [("Content-Type", "text/plain")], body: Data(Self.robots.utf8))
            case "/feed.json":
                .json(
                    "["
                        + ["/public/a.jpg", "/private/b.jpg", "/private/ok.jpg", "/private/deep/c.jpg", "/public/missing.png"]
                        .map { #"{"url": "http://\#(request.headers["host"]!)\#($0)"}"# }.joined(separator: ",") + "]")
            default: nil
            }
        }
        try politePipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false, "robots": true}"#,
            extra: #", "userAgent": "\#(agent)""#)

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1, "the missing image failed: \(result.stdout) \(result.stderr)")
        let report = try status()
        #expect((report.done, report.skipped, report.failed) == (2, 2, 1))
        let skipped = try skips()
        #expect(skipped.count == 2)
        #expect(
            skipped.values.map(\.message).sorted().map {
                $0.contains("disallows /private/b.jpg") || $0.contains("disallows /private/deep/c.jpg")
            }
                == [true, true])
        for skip in skipped.values {
            #expect(skip.reason == "robots")
            #expect(skip.message.contains("/robots.txt disallows /private/"), "\(skip.message)")
            #expect(skip.message.contains("(Disallow: /private/)"), "\(skip.message)")
        }
        #expect(server.requests(to: "/robots.txt").count == 1)
        #expect(Set(imageRequests(server)) == ["/public/a.jpg", "/private/ok.jpg"])
        #expect(work.files(under: "out") == ["private/ok.jpg", "public/a.jpg"])
        // Every request, feed, robots.txt and images alike, carries the configured agent.
        #expect(server.requests.count == 5)
        #expect(server.requests.allSatisfy { $0.headers["user-agent"] == agent })

        // Skipped is terminal: --retry-failed asks again for the failed item only.
        let before = imageRequests(server).count
        let retried = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(retried.status == 1, "still missing: \(retried.stderr)")
        #expect(server.requests(to: "/public/missing.png").count == 2, "a 404 is final: once per session")
        #expect(imageRequests(server).count == before, "no skipped (or done) image was asked for again")
        #expect(try status().skipped == 2)
    }

    /// A URL that reaches a disallowed path only once `..` or `%70` is read, or through a
    /// redirect within the host, is skipped before that path is requested. A redirect is
    /// checked where libcurl goes: its first `Location`, resolved as libcurl resolves it
    /// (`http:/host/…` is that host); one libcurl cannot follow fails as before, not as robots.
    @Test func robotsTxtCannotBeWalkedAroundBySpellingOrRedirects() throws {
        let server = try taggedServer { request in
            let host = request.headers["host"] ?? ""
            switch request.path {
            case "/robots.txt":
                return .init(
                    status: 200, headers: [("Content-Type", "text/plain")],
                    body: Data("User-agent: *\nDisallow: /img/private/\n".utf8))
            case "/img/redir/e.jpg": return .status(302, headers: [("Location", "/img/x/../private/e.jpg")])
            case "/img/redir/f.jpg": return .status(302, headers: [("Location", "/img/f.jpg")])
            case "/img/redir/g.jpg": return .status(302, headers: [("Location", "http:/\(host)/img/private/g.jpg")])
            case "/img/redir/h.jpg":
                return .status(302, headers: [("Location", "/img/h.jpg"), ("Location", "/img/private/h.jpg")])
            case "/img/redir/i.jpg": return .status(302, headers: [("Location", "")])
            // libcurl skips an empty Location, and a line with a space before its colon.
            case "/img/redir/j.jpg": return .status(302, headers: [("Location", ""), ("Location", "/img/private/j.jpg")])
            case "/img/redir/k.jpg":
                return .status(302, headers: [("Location ", "/img/k.jpg"), ("Location", "/img/private/k.jpg")])
            // A header line that starts `HTTP/` is not a status line; a Location ends at its first CR.
            case "/img/redir/m.jpg": return .status(302, headers: [("HTTP/x", "y"), ("Location", "/img/private/m.jpg")])
            case "/img/redir/n.jpg": return .status(302, headers: [("Location", "/img/private/n.jpg\rjunk")])
            // A line that starts with CR ends the headers for libcurl, whatever follows on it.
            case "/img/redir/o.jpg": return .status(302, headers: [("Location", "/img/private/o.jpg\r\n\rjunk: x")])
            default: return nil
            }
        }
        try writeURLList(
            server.baseURL,
            [
                "/img/x/../private/a.jpg", "/img/./private/b.jpg", "/img/%70rivate/c.jpg",
                "/img/x/%2e%2e/private/d.jpg", "/img/redir/e.jpg", "/img/redir/f.jpg", "/img/ok.jpg",
                "/img/redir/g.jpg", "/img/redir/h.jpg", "/img/redir/i.jpg", "/img/redir/j.jpg",
                "/img/redir/k.jpg", "/img/redir/m.jpg", "/img/redir/n.jpg", "/img/redir/o.jpg",
            ])
        try politePipeline(source: #"{"type": "url-list", "path": "urls.txt", "cache": false, "robots": true}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1, "i.jpg failed: \(result.stdout) \(result.stderr)")
        let report = try status()
        #expect((report.done, report.skipped, report.failed) == (3, 11, 1))
        #expect(
            report.skips.allSatisfy { $0.reason == "robots" && $0.message.contains("disallows /img/private/") },
            "\(report.skips.map(\.message))")
        let redirected = try #require(report.skips.first { $0.key.hasSuffix("/img/redir/e.jpg") })
        #expect(redirected.message.hasPrefix("redirected to /img/private/e.jpg: "), "\(redirected.message)")
        let failure = try #require(report.failures.first)
        #expect(failure.key.hasSuffix("/img/redir/i.jpg") && failure.reason == "download", "\(failure)")
        #expect(
            Set(imageRequests(server)) == [
                "/img/redir/e.jpg", "/img/redir/f.jpg", "/img/f.jpg", "/img/ok.jpg",
                "/img/redir/g.jpg", "/img/redir/h.jpg", "/img/h.jpg", "/img/redir/i.jpg",
                "/img/redir/j.jpg", "/img/redir/k.jpg", "/img/redir/m.jpg", "/img/redir/n.jpg",
                "/img/redir/o.jpg",
            ],
            "nothing under /img/private/ nor its spellings was asked for")
        #expect(work.files(under: "out") == ["img/ok.jpg", "img/redir/f.jpg", "img/redir/h.jpg"])
    }

    @Test func unreadableRobotsTxtSkipsTheHostAndA404AllowsAll() throws {
        let failing = try taggedServer { request in request.path == "/robots.txt" ? .status(503) : nil }
        try writeURLList(failing.baseURL, ["/a.jpg", "/b.jpg"])
        try politePipeline(source: #"{"type": "url-list", "path": "urls.txt", "cache": false, "robots": true}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "skipped is not failed: \(result.stderr)")
        let report = try status()
        #expect((report.done, report.skipped) == (0, 2))
        #expect(
            report.skips.count == 2
                && report.skips.allSatisfy { $0.reason == "robots" && $0.message.contains("could not be read (HTTP 503") })
        #expect(failing.requests(to: "/robots.txt").count == 2, "two attempts (retry.attempts), once per run")
        #expect(imageRequests(failing).isEmpty)

        let absent = try taggedServer()
        try writeURLList(absent.baseURL, ["/a.jpg", "/b.jpg"])
        let allowed = try imgpipe("run", "pipe.json", "--new")
        #expect(allowed.status == 0, "stderr: \(allowed.stderr)")
        #expect(try status().done == 2)
        #expect(absent.requests(to: "/robots.txt").count == 1)
        #expect(absent.requests.allSatisfy { $0.headers["user-agent"] == ImgpipeIdentity.defaultUserAgent })
    }

    @Test func robotsRulesFollowRFC9309() {
        let rules = RobotsRules(parsing: Self.robots, agent: "Polite-Test")
        #expect(!rules.allows("/private/x.jpg"))
        #expect(rules.allows("/private/ok.jpg"))
        #expect(rules.allows("/public/a.jpg"))
        #expect(rules.allows("/"))
        let everyone = RobotsRules(parsing: Self.robots, agent: "otherbot")
        #expect(!everyone.allows("/public/a.jpg"))

        let wild = RobotsRules(
            parsing: """
                User-agent: *
                Disallow: /*.gif$
                Disallow: /tmp
                Allow: /tmp/keep
                Disallow:
                """, agent: "imgpipe")
        #expect(!wild.allows("/a/b/c.gif"))
        #expect(wild.allows("/a/b/c.gif?size=2"), "$ anchors the end")
        #expect(!wild.allows("/tmpfile"))
        #expect(wild.allows("/tmp/keep/this"), "the longer rule wins")
        #expect(RobotsRules(parsing: "User-agent: *\nAllow: /p\nDisallow: /p", agent: "x").allows("/p"), "Allow wins a tie")
        #expect(RobotsRules(parsing: "", agent: "x").allows("/anything"))
        // Compared as RFC 9309 says: %XX of unreserved characters decoded, the other
        // escapes' hex in either case, bytes past ASCII encoded; a leading BOM ignored.
        let encoded = RobotsRules(
            parsing: "\u{FEFF}User-agent: *\nDisallow: /%7Efoo/\nDisallow: /bar/\nDisallow: /a%2fb\nDisallow: /café",
            agent: "x")
        #expect(!encoded.allows("/~foo/a.jpg") && !encoded.allows("/%7efoo/a.jpg"))
        #expect(!encoded.allows("/b%61r/a.jpg"))
        #expect(!encoded.allows("/a%2Fb") && encoded.allows("/a/b"), "an encoded slash is not a slash")
        #expect(!encoded.allows("/caf%C3%A9/x.jpg"))
        // A path loses its dot segments, as the request does (%2E too).
        #expect(RobotsRules.requestPath("/img/x/../private/a.jpg?q=/../x") == "/img/private/a.jpg?q=/../x")
        #expect(RobotsRules.requestPath("/img/./private/%2e%2E/private/a.jpg") == "/img/private/a.jpg")
        #expect(
            RobotsRules.requestPath("/../a") == "/a" && RobotsRules.requestPath("/a/..") == "/"
                && RobotsRules.requestPath("/a/.") == "/a/")
        // One host, however its default port is spelled.
        let origins = ["http://h/x", "http://h:80/x", "HTTP://H:0080/x"].map { RobotsPolicy.origin(of: URL(string: $0)!) }
        #expect(Set(origins) == ["http://h"])
        #expect(RobotsPolicy.origin(of: URL(string: "https://h:443/x")!) == "https://h")
        #expect(RobotsPolicy.origin(of: URL(string: "http://h:8080/x")!) == "http://h:8080")
        // Many stars do not make matching exponential.
        let stars = "/" + String(repeating: "*a", count: 200) + "$"
        #expect(
            RobotsRules(parsing: "User-agent: *\nDisallow: \(stars)", agent: "x")
                .allows("/" + String(repeating: "a", count: 5000) + "b"))
    }
}
