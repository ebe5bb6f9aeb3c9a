import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Synchronization
import Testing

@testable import PipelineKit

/// Remote sources end to end: the built binary against a real HTTP server on loopback.
@Suite("Remote feeds", .serialized)
struct RemoteFeedTests {
    let work: TemporaryDirectory
    let jpeg: Data

    init() throws {
        work = try TemporaryDirectory("imgpipe-remote")
        let path = work.url("fixture.jpg")
        try ImageFixtures.jpeg(at: path, width: 64, height: 48)
        jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
    }

    /// A server of `/images/<name>.jpg` (with an ETag, answering 304 to it) plus `extra`.
    func server(_ extra: @escaping @Sendable (TestHTTPServer.Request) -> TestHTTPServer.Response? = { _ in nil }) throws
        -> TestHTTPServer
    {
        let jpeg = self.jpeg
        return try TestHTTPServer { request in
            if let response = extra(request) { return response }
            if request.path.hasPrefix("/images/") {
                if request.headers["if-none-match"] == "\"v1\"" { return .status(304) }
                return .bytes(jpeg, headers: [("ETag", "\"v1\"")])
            }
            return .status(404)
        }
    }

    func feedJSON(_ base: String, count: Int, from: Int = 1) -> String {
        "["
            + (from..<from + count).map {
                #"{"url": "\#(base)/images/photo-\#($0).jpg", "created": "Mar 14, 2018 6:50:24 PM", "updated": "Mar 15, 2018 9:00:00 AM"}"#
            }.joined(separator: ",") + "]"
    }

    @discardableResult
    func pipeline(
        source: String, limits: String = #"{"timeout": 5}"#, retry: String = #"{"attempts": 3, "backoff": 0.05}"#,
        name: String = "pipe.json"
    ) throws -> String {
        try work.write(
            """
            {"version": 1, "source": \(source),
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sink": {"type": "directory", "path": "out"}, "limits": \(limits), "retry": \(retry)}
            """, to: name)
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    func status(_ pipeline: String = "pipe.json") throws -> StatusReport {
        try imgpipe("status", pipeline, "--json").decoded(StatusReport.self)
    }

    func failures() throws -> [String: FailureRecord] {
        Dictionary(uniqueKeysWithValues: try status().failures.map { ($0.key, $0) })
    }

    // MARK: json-feed and the cache tiers

    /// A resumed run whose skipped item gives its name to an item past the first page of
    /// unfinished items: the item is taken up once, by the skip, not again by the page
    /// (a reviewer saw it downloaded twice and the run left unfinished for good).
    @Test func anItemTakenUpAgainOnResumeIsProcessedOnce() throws {
        let gifPath = work.url("a-source.gif")
        try ImageFixtures.write(try ImageFixtures.photo(width: 40, height: 40), to: gifPath)
        let gif = try Data(contentsOf: URL(fileURLWithPath: gifPath))
        let resuming = LockedBox(false)
        let jpeg = self.jpeg
        let server = try self.server { request in
            guard request.path.hasPrefix("/images/") else { return nil }
            var response = request.path.hasSuffix(".gif") ? TestHTTPServer.Response.bytes(gif, type: "image/gif") : nil
            if !resuming.withLock({ $0 }) {
                // The first session's downloads never end: it is killed with them in flight.
                var held = response ?? .status(404)
                held.stall = 30
                return held
            }
            if request.path.hasPrefix("/images/m") || request.path.hasPrefix("/images/a-"), response == nil {
                response = .bytes(jpeg)
                response?.stall = 0.5
            }
            return response
        }
        // `a-<hash>.jpg` holds the name a.jpg would get when "a.jpg" is taken
        // (`NameTemplate.uniqueStem`), so that a.jpg fails for the name.
        let own = "a-" + sha256Hex(server.baseURL + "/images/a.jpg").prefix(8) + ".jpg"
        let names = ["a.gif"] + (0..<8).map { "m\($0).jpg" } + [own, "a.jpg"]
        try work.write(names.map { "\(server.baseURL)/images/\($0)" }.joined(separator: "\n"), to: "list.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "list.txt"}, "accept": {"formats": ["jpeg"]},
             "filters": [{"op": "fit", "width": 16, "height": 16}], "sink": {"type": "directory", "path": "out"},
             "limits": {"downloads": 2, "uploads": 1, "workers": 1, "timeout": 60}}
            """, to: "pipe.json")
        // Room for every item at once (-j 8): all are listed, and a.jpg fails at its insert
        // (a.gif, listed first, holds "a.jpg"); killed then. The resume has room for 5, so
        // a.jpg comes after the first page of unfinished items.
        let first = try ImgpipeBinary.launch(["run", "pipe.json", "-j", "8"], in: work.path)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, first.process.isRunning,
            (try? DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite")).read {
                try String.fetchOne($0, sql: "SELECT status FROM item WHERE key LIKE '%a.jpg'")
            }) != "failed"
        {
            usleep(20_000)
        }
        kill(first.process.processIdentifier, SIGKILL)
        _ = first.watch(deadline: 10)
        resuming.withLock { $0 = true }
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(resumed.stderr.contains("a.jpg: taken up again"), "stderr: \(resumed.stderr)")
        // Never asked for by the first session: it failed at its insert.
        let fetches = server.requests(to: "/images/a.jpg").count
        #expect(fetches == 1, "a.jpg was asked for \(fetches) times")
        let report = try status()
        #expect(
            report.state == "finished" && report.done == 10 && report.skipped == 1 && report.pending == 0 && report.failed == 0,
            "\(report.state): \(report.done) done, \(report.skipped) skipped, \(report.pending) pending, \(report.failed) failed")
    }

    /// An item that failed again for its name after its page started it is started again
    /// when the skip that frees the name comes later (a reviewer's `resume --retry-failed`
    /// left it pending: its start was claimed once for the session, never given back).
    @Test func anItemThatFailsAgainForItsNameIsTakenUpWhenTheNameIsFreed() throws {
        let gifPath = work.url("a-source.gif")
        try ImageFixtures.write(try ImageFixtures.photo(width: 40, height: 40), to: gifPath)
        let gif = try Data(contentsOf: URL(fileURLWithPath: gifPath))
        let asked = LockedBox(0)
        let server = try self.server { request in
            guard request.path == "/images/a.gif" else { return nil }
            // Refused the first time (the item fails), slow after: a.jpg fails again first.
            if asked.withLock({
                $0 += 1
                return $0
            }) == 1 {
                return .status(503)
            }
            var response = TestHTTPServer.Response.bytes(gif, type: "image/gif")
            response.stall = 1.5
            return response
        }
        // `a-<hash>.jpg` holds the name a.jpg would get when "a.jpg" is taken, so that a.jpg
        // fails for the name (`NameTemplate.uniqueStem`).
        let own = "a-" + sha256Hex(server.baseURL + "/images/a.jpg").prefix(8) + ".jpg"
        try work.write(["a.gif", own, "a.jpg"].map { "\(server.baseURL)/images/\($0)" }.joined(separator: "\n"), to: "list.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "list.txt"}, "accept": {"formats": ["jpeg"]},
             "filters": [{"op": "fit", "width": 16, "height": 16}], "sink": {"type": "directory", "path": "out"},
             "retry": {"attempts": 1}, "limits": {"timeout": 10}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 1)
        let retried = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(retried.status == 0, "stdout: \(retried.stdout) stderr: \(retried.stderr)")
        #expect(retried.stderr.contains("a.jpg: taken up again"), "stderr: \(retried.stderr)")
        #expect(work.files(under: "out") == ["images/\(own)", "images/a.jpg"])
        let report = try status()
        #expect(report.done == 2 && report.skipped == 1 && report.pending == 0, "\(report.done) done, \(report.pending) pending")
    }

    /// A URL without a host (`http://`) fails at once, final: no retry can give it one (it
    /// was retried as a network error).
    @Test func aURLWithoutAHostFailsWithoutRetries() throws {
        let client = HTTPClient(timeout: 2)
        for text in ["http://", "http:///a.jpg"] {
            let url = try #require(URL(string: text))
            let error = #expect(throws: HTTPFailure.self) {
                try client.performWithRetries(HTTPRequest(url: url), attempts: 3, backoff: 0.01)
            }
            #expect(error?.kind == .scheme && error?.retryable == false, "\(text): \(String(describing: error))")
            #expect(error?.message.contains("without a host") == true, "\(text): \(String(describing: error))")
        }
    }

    @Test func jsonFeedRunThenCachedRerunThenOfflineRerun() throws {
        let body = feedJSON("BASE", count: 12)
        let server = try server { request in
            request.path == "/feed.json"
                ? .json(body.replacingOccurrences(of: "BASE", with: "http://\(request.headers["host"]!)")) : nil
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": {"path": "cache"}}"#)

        let cold = try imgpipe("run", "pipe.json")
        #expect(cold.status == 0, "stderr: \(cold.stderr)")
        #expect(work.files(under: "out") == (1...12).map { "images/photo-\($0).jpg" }.sorted())
        #expect(server.requests(to: "/feed.json").count == 1)
        #expect(server.requests.filter { $0.path.hasPrefix("/images/") }.count == 12)
        #expect(try status().tiers == ["remote": 12])
        #expect(server.requests.allSatisfy { $0.headers["user-agent"]?.hasPrefix("imgpipe/") == true })
        let decoded = try ImageFixtures.decode(work.url("out/images/photo-1.jpg"))
        #expect((decoded.width, decoded.height) == (32, 24))

        // A second run downloads nothing: feed page and images come from the cache.
        let before = server.requests.count
        let cached = try imgpipe("run", "pipe.json")
        #expect(cached.status == 0, "stderr: \(cached.stderr)")
        #expect(server.requests.count == before, "the cached rerun made requests")
        #expect(try status().tiers == ["cache": 12])

        // The server is gone: the cached feed and images still run.
        server.stop()
        let offline = try imgpipe("run", "pipe.json")
        #expect(offline.status == 0, "stderr: \(offline.stderr)")
        #expect(try status().done == 12)
    }

    /// 300 items on a host that accepts connections and never answers: after a few
    /// timeouts in a row the host is tripped and its other items are set aside at once
    /// ("host unreachable"), not tried one by one (300 × 3 attempts × 2 s / 16 ≈ 2 min);
    /// `resume` tries them again.
    @Test func aDeadHostsItemsAreSetAsideAtOnce() throws {
        let silent = try RefusingPort(acceptingSilently: true)
        try writeURLList(silent.baseURL, (1...300).map { "/images/\($0).jpg" })
        try pipeline(
            source: #"{"type": "url-list", "path": "urls.txt", "cache": false}"#,
            limits: #"{"timeout": 2, "downloads": 16}"#, retry: #"{"attempts": 3, "backoff": 0.05}"#)
        let run = try ImgpipeBinary.runMeasured(["run", "pipe.json"], in: work.path, timeout: 120)
        #expect(!run.timedOut && run.result.status == 1, "stderr: \(run.result.stderr)")
        let failed = try failures()
        #expect(failed.count == 300 && failed.values.allSatisfy { $0.reason == "download" })
        let setAside = failed.values.filter { $0.message.hasPrefix("host unreachable: \(silent.baseURL)") }
        #expect(setAside.count >= 280, "only \(setAside.count) of 300 were set aside; the rest waited out their timeouts")
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(
            resumed.stderr.contains("retrying \(setAside.count) item(s) of run #1 whose host was unreachable"),
            "stderr: \(resumed.stderr)")
    }

    /// A caption may draw each item's feed metadata: `{meta.title}` differs per item, a
    /// missing field leaves its line out, and the state file keeps it for a resume.
    @Test func captionsDrawEachItemsFeedMetadata() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let base = "http://\(request.headers["host"]!)"
            return .json(
                #"[{"url": "\#(base)/images/a.jpg", "title": "MMMM MMMM"}, "#
                    + #"{"url": "\#(base)/images/b.jpg", "title": "WWW"}, {"url": "\#(base)/images/c.jpg"}]"#)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", "cache": false},
             "filters": [{"op": "fit", "width": 200, "height": 150, "enlarge": true},
                         {"op": "caption", "top": "{meta.title}", "bottom": "{meta.missing}"}],
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "meme.json")
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", "cache": false},
             "filters": [{"op": "fit", "width": 200, "height": 150, "enlarge": true}],
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "plain"}}
            """, to: "plain.json")
        #expect(try imgpipe("run", "meme.json").status == 0)
        #expect(try imgpipe("run", "plain.json").status == 0)
        let plain = try ImageFixtures.decode(work.url("plain/images/a.png"))
        let a = try ImageFixtures.decode(work.url("out/images/a.png"))
        let b = try ImageFixtures.decode(work.url("out/images/b.png"))
        let c = try ImageFixtures.decode(work.url("out/images/c.png"))
        let band = 0..<plain.height / 4
        #expect(a.maxDifference(from: plain, rows: band) > 100, "the title was not drawn")
        #expect(a.maxDifference(from: b, rows: band) > 100, "two titles drew the same pixels")
        #expect(c.maxDifference(from: plain, rows: 0..<plain.height) == 0, "an item without a title changed")
        #expect(
            a.maxDifference(from: plain, rows: plain.height * 3 / 4..<plain.height) == 0,
            "a missing field drew something")
        // The state file keeps the metadata, which a resumed item is drawn from.
        let store = try RunStore(path: work.url(".imgpipe/meme.sqlite"))
        let items = try store.items(runId: try #require(try store.latestRun()).id)
        #expect(items.first { $0.key.hasSuffix("/a.jpg") }?.metadata?.contains("MMMM MMMM") == true)
    }

    /// A lone surrogate in one item's title used to stop the whole feed; a NUL in one
    /// field emptied every `{meta.…}` of its item. Now only that field is lost.
    @Test func oneOddFieldOfAFeedItemLosesOnlyThatField() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let base = "http://\(request.headers["host"]!)"
            return .json(
                #"[{"url": "\#(base)/images/a.jpg", "title": "\ud800", "n": "N1"}, "#
                    + #"{"url": "\#(base)/images/b.jpg", "title": "x\u0000y", "n": "N2"}]"#)
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(try status().done == 2)
        let metadata = try imgpipe("export", "pipe.json").jsonLines().map { record in
            try #require(record["metadata"] as? [String: Any])
        }
        #expect(metadata.map { $0["n"] as? String } == ["N1", "N2"])
    }

    @Test func revalidateAsksTheServerAndUsesTheCacheOn304() throws {
        let body = feedJSON("BASE", count: 3)
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            if request.headers["if-none-match"] == "\"feed1\"" { return .status(304) }
            var response = TestHTTPServer.Response.json(
                body.replacingOccurrences(of: "BASE", with: "http://\(request.headers["host"]!)"))
            response.headers.append(("ETag", "\"feed1\""))
            return response
        }
        try pipeline(
            source:
                #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": {"path": "cache", "revalidate": true}}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let conditional = server.requests.filter { $0.headers["if-none-match"] != nil }
        #expect(conditional.count == 4, "feed page and 3 images revalidated")
        #expect(try status().tiers == ["cache": 3])
    }

    @Test func withNothingCachedTheFallbackSourceIsUsed() throws {
        let unreachable = try RefusingPort()
        let address = unreachable.baseURL
        try ImageFixtures.jpeg(at: work.url("bundled/a.jpg"), width: 40, height: 40)
        try ImageFixtures.jpeg(at: work.url("bundled/b.jpg"), width: 40, height: 40)
        try pipeline(
            source: """
                {"type": "json-feed", "url": "\(address)/feed.json", "cache": {"path": "cache"},
                 "fallback": {"type": "directory", "path": "bundled"}}
                """, retry: #"{"attempts": 1}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stderr.contains("fallback"))
        #expect(work.files(under: "out") == ["a.jpg", "b.jpg"])
        #expect(try status().tiers == ["fallback": 2])
    }

    /// A server's duplicate key used to fail the whole page ("duplicate key"), and an item
    /// with 100,000 keys took minutes to parse (quadratic duplicate check): third-party JSON
    /// is read leniently, and the extra fields are still kept as metadata.
    @Test func aFeedItemWithADuplicateKeyOrManyKeysIsListed() throws {
        let extra = (0..<100_000).map { #""f\#($0)": "v\#($0)""# }.joined(separator: ", ")
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            return request.path == "/feed.json"
                ? .json(
                    """
                    [{"url": "\(host)/images/dup.jpg", "title": "first", "title": "second"},
                     {"url": "\(host)/images/wide.jpg", \(extra)}]
                    """) : nil
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(work.files(under: "out") == ["images/dup.jpg", "images/wide.jpg"])
        let metadata = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite")).read { db in
            try [String: String](
                uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT key, metadata FROM item").map {
                    (($0["key"] as String).components(separatedBy: "/").last!, $0["metadata"] as String)
                })
        }
        #expect(metadata["dup.jpg"] == #"{"title":"first"}"#, "Foundation keeps the first of duplicate keys")
        #expect(metadata["wide.jpg"]?.contains(#""f99999":"v99999""#) == true)
    }

    @Test func pagesThatAreNotJSONOrNotAnArrayAreListingErrors() throws {
        let server = try server { request in
            switch request.path {
            case "/broken.json": .json(#"[{"url": "#)
            case "/object.json": .json(#"{"url": "x"}"#)
            default: nil
            }
        }
        for (page, message) in [("broken.json", "is not valid JSON"), ("object.json", "is not a JSON array of objects")] {
            try pipeline(
                source: #"{"type": "json-feed", "url": "\#(server.baseURL)/\#(page)", "cache": false}"#,
                retry: #"{"attempts": 1}"#)
            let result = try imgpipe("run", "pipe.json", "--new")
            #expect(result.status == 2, "\(page): \(result.stdout)")
            #expect((result.stdout + result.stderr).contains(message), "\(page): \(result.stdout) \(result.stderr)")
        }
    }

    /// Entries with no usable URL used to vanish without a word (exit 0), and `"url": 123`
    /// was fetched as the URL "123". Now each is left out with one notice naming the feed
    /// and the entries' indices; a URL must be a JSON string.
    @Test func feedEntriesWithNoUsableURLAreLeftOutWithANotice() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let base = "http://\(request.headers["host"]!)"
            let head =
                #"[{"url": "\#(base)/images/a.jpg"}, {"title": "none"}, {"url": null}, {"url": ""}, "string", "#
                + #"null, [1], {"url": 123}, {"url": "\#(base)/images/"#
            var body = Data(head.utf8)
            body.append(0xFF)
            body.append(contentsOf: Array(#".jpg"}, {"url": "\#(base)/images/b.jpg"}]"#.utf8))
            return .bytes(body, headers: [("Content-Type", "application/json")])
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(work.files(under: "out") == ["images/a.jpg", "images/b.jpg"])
        #expect(
            result.stderr.contains(
                #"the feed at \#(server.baseURL)/feed.json: 8 entries left out, with no "url" string: "#
                    + "[1], [2], [3], [4], [5], [6], [7], [8]"), "\(result.stderr)")
        #expect(!server.requests.contains { $0.path.hasSuffix("123") })
    }

    /// The same of a paged API: a NASA item with no `nasa_id` or no preview link, and a
    /// Flickr photo with no id or image, is left out with a notice naming the page.
    @Test func pagedItemsWithNoKeyOrImageAreLeftOutWithANotice() throws {
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            switch request.path {
            case "/search":
                return .json(
                    #"{"collection": {"items": [{"data": [{"nasa_id": "N1"}], "links": [{"rel": "preview", "href": "\#(host)/images/n1.jpg"}]}, "#
                        + #"{"data": [{"nasa_id": "N2"}], "links": [{"rel": "preview", "href": 5}]}, {"data": [{"title": "no id"}]}]}}"#
                )
            case "/rest/":
                return .json(
                    #"{"stat": "ok", "photos": {"pages": 1, "photo": [{"id": "F1", "url_l": "\#(host)/images/f1.jpg"}, {"id": "F2"}]}}"#
                )
            default:
                return nil
            }
        }
        try pipeline(source: #"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "cache": false}"#)
        let nasa = try imgpipe("run", "pipe.json")
        #expect(nasa.status == 0, "stderr: \(nasa.stderr)")
        #expect(nasa.stderr.contains("2 items left out, with no nasa_id or no preview link: [1], [2]"), "\(nasa.stderr)")
        try pipeline(
            source:
                #"{"type": "flickr-search", "text": "moon", "apiKey": "k", "endpoint": "\#(server.baseURL)/rest/", "cache": false}"#
        )
        let flickr = try imgpipe("run", "pipe.json", "--new")
        #expect(flickr.status == 0, "stderr: \(flickr.stderr)")
        #expect(flickr.stderr.contains("1 photo left out, with no id or no image URL: [1]"), "\(flickr.stderr)")
        #expect(work.files(under: "out") == ["F1.jpg", "N1.jpg"])
    }

    // MARK: paged sources
    // MARK: paged sources

    @Test func nasaImagesFollowsNextLinksAndStopsAtMaxItems() throws {
        let server = try server { request in
            guard request.path == "/search" else { return nil }
            let page = Int(request.query["page"] ?? "1") ?? 1
            let host = "http://\(request.headers["host"]!)"
            let items = (1...10).map { n -> String in
                let id = "PIA\(page)\(String(format: "%02d", n))"
                return
                    #"{"data": [{"nasa_id": "\#(id)", "title": "Moon \#(id)", "date_created": "2018-03-14T00:00:00Z", "keywords": ["moon"]}], "links": [{"href": "\#(host)/images/\#(id)~thumb.jpg", "rel": "preview"}]}"#
            }
            let next =
                page < 3
                ? #", "links": [{"rel": "next", "href": "\#(host)/search?q=moon&media_type=image&page=\#(page + 1)"}]"# : ""
            return .json(#"{"collection": {"items": [\#(items.joined(separator: ","))]\#(next)}}"#)
        }
        try pipeline(source: #"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "maxItems": 15}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(server.requests(to: "/search").count == 2, "maxItems stops listing")
        #expect(server.requests(to: "/search").first?.query == ["q": "moon", "media_type": "image"])
        let files = work.files(under: "out")
        #expect(files.count == 15)
        #expect(files.contains("PIA101.jpg") && files.contains("PIA205.jpg"), "{stem} is the nasa_id")
    }

    @Test func flickrSearchPagesUntilPagesAndKeepsTheKeyOutOfTheStateFile() throws {
        let secret = "k3y-\(UUID().uuidString.prefix(8))"
        let server = try server { request in
            guard request.path == "/rest/" else { return nil }
            guard request.query["api_key"] == secret, request.query["method"] == "flickr.photos.search",
                request.query["nojsoncallback"] == "1", request.query["extras"] == "url_l"
            else {
                return .json(#"{"stat": "fail", "message": "Invalid API Key"}"#)
            }
            let page = Int(request.query["page"] ?? "1") ?? 1
            let host = "http://\(request.headers["host"]!)"
            let photos = (1...4).map { n in
                #"{"id": "\#(page * 100 + n)", "secret": "s", "server": "7", "title": "t", "url_l": "\#(host)/images/\#(page * 100 + n)_s_b.jpg"}"#
            }
            return .json(
                #"{"photos": {"page": \#(page), "pages": 3, "perpage": 4, "photo": [\#(photos.joined(separator: ","))]}, "stat": "ok"}"#
            )
        }
        try pipeline(
            source:
                #"{"type": "flickr-search", "text": "sunset", "apiKey": "${FLICKR_TEST_KEY}", "endpoint": "\#(server.baseURL)/rest/", "perPage": 4}"#
        )
        let result = try ImgpipeBinary.run(["run", "pipe.json"], in: work.path, environment: ["FLICKR_TEST_KEY": secret])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(server.requests(to: "/rest/").count == 3)
        #expect(work.files(under: "out").count == 12)
        #expect(work.files(under: "out").contains("101.jpg"))
        for file in [".imgpipe/pipe.sqlite", ".imgpipe/pipe.sqlite-wal"]
        where FileManager.default.fileExists(atPath: work.url(file)) {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url(file)))
            #expect(bytes.range(of: Data(secret.utf8)) == nil, "the API key reached \(file)")
        }
        #expect(!(result.stdout + result.stderr).contains(secret))

        // Cache entries are keyed by the unexpanded URL (`api_key=${FLICKR_TEST_KEY}`): with
        // the cache emptied, the server is asked and refuses the wrong key.
        try FileManager.default.removeItem(atPath: work.url(".imgpipe/cache"))
        let refused = try ImgpipeBinary.run(
            ["run", "pipe.json", "--new"], in: work.path, environment: ["FLICKR_TEST_KEY": "wrong-key"])
        #expect(refused.status != 0)
        #expect(!refused.stderr.contains("wrong-key"))
    }

    /// A server that drips one byte every quarter second and one that floods an endless body:
    /// the first fails at the whole-transfer deadline (4 × `limits.timeout`), the second at
    /// `limits.maxBytes` with memory flat, and the good item beside them is done.
    @Test func hostileServersCannotHoldAnItemNorFillMemory() throws {
        let server = try server { request in
            switch request.path {
            case "/slow/drip.jpg": .streamed(.drip(interval: 0.25, seconds: 120))
            case "/slow/flood.jpg": .streamed(.flood(bytes: 16 << 30))
            default: nil
            }
        }
        try work.write(
            [
                "\(server.baseURL)/slow/drip.jpg", "\(server.baseURL)/slow/flood.jpg",
                "\(server.baseURL)/images/good.jpg",
            ].joined(separator: "\n"), to: "urls.txt")
        try pipeline(
            source: #"{"type": "url-list", "path": "urls.txt"}"#,
            limits: #"{"timeout": 1, "maxBytes": 1048576}"#, retry: #"{"attempts": 1}"#)
        let watched = try ImgpipeBinary.runMeasured(["run", "pipe.json"], in: work.path, timeout: 90)
        #expect(!watched.timedOut, "the run was still going after 90 s")
        let result = watched.result
        #expect(result.status == 1, "stderr: \(result.stderr)")
        let failed = try failures()
        let drip = failed["\(server.baseURL)/slow/drip.jpg"]
        #expect(drip?.reason == "download")
        #expect(drip?.message.contains("longer than 4 s") == true, "got: \(String(describing: drip))")
        let flood = failed["\(server.baseURL)/slow/flood.jpg"]
        #expect(flood?.reason == "limit", "got: \(String(describing: flood))")
        // The download lands in the run's own process (its pixel helpers hold only pixels).
        #expect(
            watched.ownPeakRSS > 1 << 20 && watched.ownPeakRSS < 200 << 20,
            "peak RSS \(watched.ownPeakRSS >> 20) MB while a server flooded a 1 MiB-limited item")
        #expect(work.files(under: "out") == ["images/good.jpg"])
    }

    /// Against a slow origin, downloads and uploads run at their configured width from the
    /// first item (a stage on a Dispatch queue grew by a thread a second): the server sees
    /// `limits.downloads` requests at once, then `limits.uploads`.
    @Test func slowOriginsSeeTheConfiguredWidthAtOnce() throws {
        // `atFirst`: how many were in flight together when the first answer went out.
        let gauge = LockedBox((now: 0, most: 0, mostPuts: 0, puts: 0, atFirst: 0, atFirstPut: 0))
        let jpeg = self.jpeg
        let server = try TestHTTPServer { request in
            let put = request.method == "PUT"
            gauge.withLock {
                if put {
                    $0.puts += 1
                    $0.mostPuts = max($0.mostPuts, $0.puts)
                } else {
                    $0.now += 1
                    $0.most = max($0.most, $0.now)
                }
            }
            // The first answers wait until the stage's whole width has been in flight at once
            // (or 5 s pass): how many arrive together does not depend on this machine's speed.
            let width = put ? 8 : 16
            let until = Date().addingTimeInterval(5)
            while Date() < until, gauge.withLock({ put ? $0.mostPuts : $0.most }) < width { usleep(5000) }
            gauge.withLock {
                if put {
                    if $0.atFirstPut == 0 { $0.atFirstPut = $0.mostPuts }
                    $0.puts -= 1
                } else {
                    if $0.atFirst == 0 { $0.atFirst = $0.most }
                    $0.now -= 1
                }
            }
            return put ? .json("{}", status: 201) : .bytes(jpeg)
        }
        try writeURLList(server.baseURL, (1...48).map { "/images/\($0).jpg" })
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "http", "url": "\(server.baseURL)/put/{stem}.jpg", "method": "PUT"},
             "limits": {"downloads": 16, "uploads": 8, "timeout": 10}}
            """, to: "pipe.json")
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let seen = gauge.withLock { $0 }
        #expect(seen.most == 16, "at most \(seen.most) downloads at once, limits.downloads is 16")
        #expect(seen.mostPuts == 8, "at most \(seen.mostPuts) uploads at once, limits.uploads is 8")
        // A stage that grows a thread at a time reaches its width only after answers came.
        #expect(
            (seen.atFirst, seen.atFirstPut) == (16, 8), "in flight before the first answer: \(seen.atFirst), \(seen.atFirstPut)")
    }

    /// The cache is bounded by default, and `imgpipe cache` shows and clears it.
    @Test func theCacheIsBoundedShownAndCleared() throws {
        let server = try server { request in
            request.path == "/feed.json" ? .json(self.feedJSON("http://\(request.headers["host"]!)", count: 3)) : nil
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json"}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let shown = try imgpipe("cache", "pipe.json")
        #expect(
            shown.status == 0 && shown.stdout.contains("cache .imgpipe/cache: 4 entries")
                && shown.stdout.contains("of at most 1024.0 MB"), "stdout: \(shown.stdout)")
        let cleared = try imgpipe("cache", "--clear")
        #expect(cleared.stdout.contains("cleared .imgpipe/cache: 4 entries"), "stdout: \(cleared.stdout)")
        #expect(try imgpipe("cache").stdout.contains("0 entries"))
        let before = server.requests.count
        #expect(try imgpipe("run", "pipe.json", "--new").status == 0)
        #expect(server.requests.count == before + 4, "a cleared cache was still used")
    }

    /// A download cut by a kill leaves its partial file in the cache folder: the first
    /// process to open the cache an hour later deletes it (a younger one may be another
    /// imgpipe's download in progress), and `cache --clear` deletes it at once.
    @Test func aKilledDownloadsPartialFileGoesAnHourLaterOrWithClear() throws {
        let server = try server { request in
            request.path == "/feed.json" ? .json(self.feedJSON("http://\(request.headers["host"]!)", count: 2)) : nil
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json"}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let old = work.url(".imgpipe/cache/.download-old.tmp")
        let young = work.url(".imgpipe/cache/.download-young.tmp")
        try Data(count: 5000).write(to: URL(fileURLWithPath: old))
        try Data(count: 5000).write(to: URL(fileURLWithPath: young))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-3700)], ofItemAtPath: old)
        let shown = try imgpipe("cache", "pipe.json")
        #expect(shown.status == 0 && shown.stdout.contains("3 entries"), "stdout: \(shown.stdout)")
        #expect(!FileManager.default.fileExists(atPath: old), "a partial file over an hour old is deleted")
        #expect(FileManager.default.fileExists(atPath: young), "a younger one is kept")
        #expect(try imgpipe("cache", "--clear").status == 0)
        #expect(!FileManager.default.fileExists(atPath: young))
    }

    /// Logging is off by default, and `--verbose` or `IMGPIPE_LOG` turns on the events an
    /// operator needs, with their item, stage, attempt and host, on standard error.
    @Test func retriesAndFeedPagesAreLoggedWhenAsked() throws {
        let failedOnce = LockedBox<Set<String>>([])
        let server = try server { request in
            if request.path == "/feed.json" { return .json(self.feedJSON("http://\(request.headers["host"]!)", count: 2)) }
            if request.path == "/images/photo-1.jpg", failedOnce.withLock({ $0.insert(request.path).inserted }) {
                return .status(503)
            }
            return nil
        }
        try pipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#,
            retry: #"{"attempts": 3, "backoff": 0.05}"#)
        let quiet = try imgpipe("run", "pipe.json")
        #expect(quiet.status == 0 && !quiet.stderr.contains("will be retried") && !quiet.stderr.contains("feed page"))
        failedOnce.withLock { $0.removeAll() }
        let verbose = try imgpipe("run", "pipe.json", "--new", "--verbose")
        #expect(verbose.status == 0)
        let retry = verbose.stderr.split(separator: "\n").first { $0.contains("download will be retried") }.map(String.init) ?? ""
        #expect(
            retry.contains("item=\(server.baseURL)/images/photo-1.jpg") && retry.contains("stage=fetch")
                && retry.contains("attempt=1") && retry.contains("host=127.0.0.1"), "stderr: \(verbose.stderr)")
        #expect(verbose.stderr.contains("feed page") && !verbose.stdout.contains("feed page"))
        failedOnce.withLock { $0.removeAll() }
        let fromEnvironment = try ImgpipeBinary.run(
            ["run", "pipe.json", "--new"], in: work.path, environment: ["IMGPIPE_LOG": "info"])
        #expect(fromEnvironment.stderr.contains("download will be retried"))
    }

    /// An API key that needs percent-encoding, in a Flickr source with the cache on, whose
    /// server echoes it in image links (`?sig=…`) and in an upload answer: no file imgpipe
    /// writes (state file, cache bodies' metadata, outputs) holds it in any encoding.
    @Test func aSecretReachesNoFileInAnyEncoding() throws {
        let secret = "k3y %/é-\(UUID().uuidString.prefix(8))"
        let encoded = try #require(secret.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        let queryEncoded = try #require(secret.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed))
        let forms = Set([
            secret, encoded, encoded.lowercased(), queryEncoded, queryEncoded.replacingOccurrences(of: "%20", with: "+"),
        ])
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            if request.path == "/rest/" {
                guard request.query["api_key"] == secret else { return .json(#"{"stat": "fail", "message": "Invalid API Key"}"#) }
                let photos = (1...3).map { n in
                    #"{"id": "\#(n)", "title": "t", "url_l": "\#(host)/images/\#(n).jpg?sig=\#(queryEncoded)"}"#
                }
                return .json(#"{"photos": {"page": 1, "pages": 1, "photo": [\#(photos.joined(separator: ","))]}, "stat": "ok"}"#)
            }
            if request.path.hasPrefix("/put/") {
                return .json(#"{"url": "\#(host)\#(request.path)?token=\#(encoded)"}"#, status: 201)
            }
            return nil
        }
        try work.write(
            """
            {"version": 1,
             "source": {"type": "flickr-search", "text": "sunset", "apiKey": "${FLICKR_TEST_KEY}",
                        "endpoint": "\(server.baseURL)/rest/", "cache": true},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sinks": [{"type": "directory", "path": "out"},
                       {"type": "http", "url": "\(server.baseURL)/put/{key}.jpg", "method": "PUT"}],
             "retry": {"attempts": 1}}
            """, to: "pipe.json")
        let result = try ImgpipeBinary.run(["run", "pipe.json"], in: work.path, environment: ["FLICKR_TEST_KEY": secret])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(server.requests(to: "/rest/").count == 1)
        #expect(work.files(under: "out").count == 3)
        #expect(work.files(under: ".imgpipe/cache").contains { $0.hasSuffix(".json") }, "the cache was not used")
        for file in work.files() where file != "pipe.json" {
            let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: work.url(file))), as: UTF8.self)
            for form in forms {
                let holds = text.contains(form)
                #expect(!holds, "\(file) holds the secret as \(form)")
            }
        }
        for form in forms { #expect(!(result.stdout + result.stderr).contains(form)) }
        // The cache still serves a second run (its keys do not depend on the value).
        #expect(
            try ImgpipeBinary.run(
                ["run", "pipe.json", "--new"], in: work.path,
                environment: ["FLICKR_TEST_KEY": secret]
            ).status == 0)
        #expect(server.requests(to: "/rest/").count == 1, "the cached page was not found again")
    }

    /// An API whose `next` link always points at a new page while every page repeats items
    /// already listed used to be paged forever (1343 requests a minute). Paging stops after
    /// 5 pages in a row that list no new item, with a notice; the listing counts as complete.
    @Test func pagingStopsAfterFivePagesInARowWithNoNewItem() throws {
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            let page = Int(request.query["page"] ?? "1") ?? 1
            // A bound of the test's own, so that paging without one ends (with an error).
            guard page <= 50 else { return .status(404) }
            switch request.path {
            case "/search":
                return .json(
                    #"{"collection": {"items": [{"data": [{"nasa_id": "SAME"}], "links": [{"rel": "preview", "href": "\#(host)/images/same.jpg"}]}], "#
                        + #""links": [{"rel": "next", "href": "\#(host)/search?q=moon&page=\#(page + 1)"}]}}"#)
            case "/rest/":
                return .json(
                    #"{"stat": "ok", "photos": {"pages": 1000000, "photo": [{"id": "SAME", "url_l": "\#(host)/images/same.jpg"}]}}"#
                )
            default:
                return nil
            }
        }
        for (source, path) in [
            (#"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "cache": false}"#, "/search"),
            (
                #"{"type": "flickr-search", "text": "moon", "apiKey": "k", "endpoint": "\#(server.baseURL)/rest/", "cache": false}"#,
                "/rest/"
            ),
        ] {
            try pipeline(source: source)
            let result = try imgpipe("run", "pipe.json", "--new")
            #expect(result.status == 0, "\(path): \(result.stderr)")
            #expect(server.requests(to: path).count == 6, "\(path): the first page and 5 with nothing new")
            #expect(result.stderr.contains("5 pages in a row listed no new item; stopped paging"), "\(path): \(result.stderr)")
            let report = try status()
            #expect(report.feedComplete && report.done == 1, "\(path)")
        }
    }

    /// A new id left out for want of a preview is progress along the pages all the same:
    /// six such pages do not stop paging before the seventh's good item (a reviewer's did).
    @Test func pagesOfNewItemsWithoutPreviewsDoNotStopPaging() throws {
        let server = try server { request in
            guard request.path == "/search" else { return nil }
            let host = "http://\(request.headers["host"]!)"
            let page = Int(request.query["page"] ?? "1") ?? 1
            let links =
                page < 7 ? #""links": [{"rel": "next", "href": "\#(host)/search?q=moon&page=\#(page + 1)"}]"# : #""links": []"#
            let preview = page == 7 ? #", "links": [{"rel": "preview", "href": "\#(host)/images/last.jpg"}]"# : ""
            return .json(#"{"collection": {"items": [{"data": [{"nasa_id": "ID\#(page)"}]\#(preview)}], \#(links)}}"#)
        }
        try pipeline(source: #"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(server.requests(to: "/search").count == 7 && !result.stderr.contains("stopped paging"), "\(result.stderr)")
        #expect(try status().done == 1)
    }

    /// …but not for ever: 100 pages in a row that list nothing stop the paging (a reviewer's
    /// Flickr of a million pages of new ids without images was paged on and on).
    @Test func pagesThatNeverListAnythingStopAfterAHundred() throws {
        let server = try server { request in
            guard request.path == "/rest/" else { return nil }
            let page = Int(request.query["page"] ?? "1") ?? 1
            // A bound of the test's own, so that paging without one ends (with an error).
            guard page <= 300 else { return .status(404) }
            return .json(#"{"stat": "ok", "photos": {"pages": 1000000, "photo": [{"id": "P\#(page)"}]}}"#)
        }
        try pipeline(
            source:
                #"{"type": "flickr-search", "text": "moon", "apiKey": "k", "endpoint": "\#(server.baseURL)/rest/", "cache": false}"#
        )
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(server.requests(to: "/rest/").count == 100, "\(server.requests(to: "/rest/").count) pages asked for")
        #expect(
            result.stderr.contains("100 pages in a row listed nothing (their ids had no image); stopped paging"),
            "stderr: \(result.stderr.suffix(500))")
    }

    /// A JSON feed whose every entry lacks an image URL is most likely read with the wrong
    /// `urlField`: the listing fails naming it, instead of an empty run that looks done. A
    /// feed of which no item could be listed is the pipeline's fault: exit 2 with the fix,
    /// and no unfinished run is kept to block the next `run`.
    @Test func aJSONFeedWithNoImageURLAtAllIsAListingError() throws {
        let field = LockedBox("image")
        let server = try server { request in
            let name = field.withLock { $0 }
            return request.path == "/feed.json" ? .json(#"[{"\#(name)": "a.jpg"}, {"\#(name)": "b.jpg"}]"#) : nil
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 2, "stderr: \(result.stderr)")
        #expect(
            (result.stdout + result.stderr).contains(#"has 2 entries and none with a "url" string (is urlField right?)"#),
            "\(result.stdout) \(result.stderr)")
        #expect(
            result.stderr.contains(
                "error: no item could be listed, so there is nothing to resume: check the pipeline's source "
                    + "(json-feed: its path or URL, and that its server answers), then run it again with `imgpipe run pipe.json`"),
            "\(result.stderr)")
        let shown = try imgpipe("status", "pipe.json")
        #expect(shown.status == 2 && shown.stderr.contains("run #1 was abandoned"), "\(shown.stderr)")
        // Fixed, the same command runs: no unfinished run stands in its way.
        field.withLock { $0 = "url" }
        let again = try imgpipe("run", "pipe.json")
        #expect(!again.stderr.contains("unfinished run"), "\(again.stderr)")
        #expect(again.stdout.contains("run #2:"), "\(again.stdout)")
    }

    @Test func flickrBuildsTheImageURLWhenTheSizeIsMissing() throws {
        struct Pages: PageSource {
            func page(_ url: String) throws -> (Data, Tier) {
                (
                    Data(
                        #"{"photos": {"page": 1, "pages": 1, "photo": [{"id": "42", "secret": "abc", "server": "7"}]}, "stat": "ok"}"#
                            .utf8), .remote
                )
            }
        }
        var items: [FeedItem] = []
        try FlickrSearchFeed(
            text: "x", apiKey: "k", endpoint: "http://127.0.0.1:9/rest/", perPage: 10, maxItems: nil,
            size: "url_l", pages: Pages()
        ).list {
            items.append($0)
            return true
        }
        #expect(items.map(\.location) == ["https://live.staticflickr.com/7/42_abc_b.jpg"])
        #expect(items.first?.nameStem == "42")
    }

    @Test func urlListsInEveryFormat() throws {
        let server = try server()
        let base = server.baseURL
        try work.write("# holiday\n\(base)/images/a.jpg\n\n\(base)/images/b.jpg?size=large\n", to: "list.txt")
        try work.write("key,url\nfirst,\(base)/images/c.jpg\n\"second, quoted\",\(base)/images/d.jpg\n", to: "list.csv")
        let jsonl = "{\"url\": \"\(base)/images/e.jpg\", \"key\": \"e-key\"}\n{\"url\": \"\(base)/images/f.jpg\"}\n"
        try Data(jsonl.utf8).write(to: URL(fileURLWithPath: work.url("list.jsonl")))
        let gzip = Process()
        gzip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        gzip.arguments = ["gzip", "-f", work.url("list.jsonl")]
        try gzip.run()
        gzip.waitUntilExit()
        for (list, expected) in [
            ("list.txt", ["images/a.jpg", "images/b-HASH.jpg"]), ("list.csv", ["images/c.jpg", "images/d.jpg"]),
            ("list.jsonl.gz", ["images/e.jpg", "images/f.jpg"]),
        ] {
            try? FileManager.default.removeItem(atPath: work.url("out"))
            try pipeline(source: #"{"type": "url-list", "path": "\#(list)", "cache": false}"#, name: "p.json")
            let result = try imgpipe("run", "p.json", "--new")
            #expect(result.status == 0, "\(list): \(result.stderr)")
            // A URL with a query has a hash of itself in its name (the port changes it).
            #expect(
                work.files(under: "out").map {
                    $0.replacingOccurrences(of: #"-[0-9a-f]{8}\."#, with: "-HASH.", options: .regularExpression)
                }
                    == expected, "\(list)")
        }
        let keys = try RunStore(path: work.url(".imgpipe/p.sqlite")).items(runId: 3).map(\.key)
        #expect(keys == ["e-key", "\(base)/images/f.jpg"])
    }

    /// A line over 65,535 bytes used to be split into two items (its last part fetched as
    /// another URL; in `.jsonl`, "not a JSON object"). Now a long line is one item, and one
    /// over the reader's limit stops the listing naming the line.
    @Test func aLongURLListLineIsOneItemAndATooLongOneIsRefusedNamingTheLine() throws {
        let server = try server()
        let base = server.baseURL
        let prefix = "\(base)/images/long.jpg?pad="
        let long = prefix + String(repeating: "x", count: 65535 - prefix.utf8.count) + "\(base)/images/chain.jpg"
        let tooLong = "\(base)/images/huge.jpg?pad=" + String(repeating: "y", count: 1 << 20)
        for (name, line) in [("list.txt", { (url: String) in url }), ("list.jsonl", { (url: String) in #"{"url": "\#(url)"}"# })]
        {
            try work.write(
                [line("\(base)/images/a.jpg"), line(long), line(tooLong), line("\(base)/images/z.jpg")]
                    .joined(separator: "\n") + "\n", to: name)
            try pipeline(source: #"{"type": "url-list", "path": "\#(name)", "cache": false}"#)
            let before = server.requests.count
            let result = try imgpipe("run", "pipe.json", "--new")
            #expect(result.status == 1, "\(name): \(result.stdout) \(result.stderr)")
            let said = result.stdout + result.stderr
            #expect(said.contains("\(name):3: line longer than 1048576 bytes"), "\(name): \(said)")
            let paths = server.requests.dropFirst(before).map(\.path)
            #expect(paths.sorted() == ["/images/a.jpg", "/images/long.jpg"], "\(name): \(paths)")
            #expect(
                server.requests.dropFirst(before).first { $0.path == "/images/long.jpg" }?.query["pad"]?.hasSuffix("chain.jpg")
                    == true,
                "\(name): the long line was fetched whole")
        }
    }

    /// A UTF-8 byte order mark at the start of a list (as Windows editors save one) used to
    /// stay in the first line: "not a URL" in a text list, no "url" column in a CSV header.
    @Test func aByteOrderMarkAtTheStartOfAURLListIsDropped() throws {
        let server = try server()
        let base = server.baseURL
        let bom = Data([0xEF, 0xBB, 0xBF])
        try (bom + Data("\(base)/images/a.jpg\n\(base)/images/b.jpg\n".utf8)).write(to: URL(fileURLWithPath: work.url("bom.txt")))
        try (bom + Data("url,key\n\(base)/images/c.jpg,c\n".utf8)).write(to: URL(fileURLWithPath: work.url("bom.csv")))
        for (list, expected) in [("bom.txt", ["images/a.jpg", "images/b.jpg"]), ("bom.csv", ["images/c.jpg"])] {
            try? FileManager.default.removeItem(atPath: work.url("out"))
            try pipeline(source: #"{"type": "url-list", "path": "\#(list)", "cache": false}"#)
            let result = try imgpipe("run", "pipe.json", "--new")
            #expect(result.status == 0, "\(list): \(result.stdout) \(result.stderr)")
            #expect(work.files(under: "out") == expected, "\(list)")
            #expect(try status().total == expected.count, "\(list): counted as listed")
        }
    }

    /// A CSV row with an empty `url` column, and a `.jsonl` line whose `url` is missing or
    /// not a string (`123` was fetched as the URL "123"), used to be passed over without a
    /// word. Now they are bad lines like any other: the listing stops, naming the line.
    @Test func aURLListLineWithNoURLIsRefusedNamingTheLine() throws {
        let server = try server()
        let base = server.baseURL
        try work.write("url,key\n\(base)/images/a.jpg,k1\n,k4\n\(base)/images/b.jpg,k2\n", to: "list.csv")
        try work.write(
            "{\"url\": \"\(base)/images/a.jpg\"}\n{\"url\": 123}\n{\"url\": \"\(base)/images/b.jpg\"}\n", to: "list.jsonl")
        for (list, said) in [
            ("list.csv", #"list.csv:3: no URL in the "url" column"#), ("list.jsonl", #"list.jsonl:2: no "url" string"#),
        ] {
            try pipeline(source: #"{"type": "url-list", "path": "\#(list)", "cache": false}"#)
            let before = server.requests.count
            let result = try imgpipe("run", "pipe.json", "--new")
            #expect(result.status == 1, "\(list): \(result.stdout) \(result.stderr)")
            #expect((result.stdout + result.stderr).contains(said), "\(list): \(result.stdout) \(result.stderr)")
            #expect(server.requests.dropFirst(before).map(\.path) == ["/images/a.jpg"], "\(list)")
        }
    }

    /// A byte that is not UTF-8 used to become U+FFFD, and a NUL byte cut the line (the
    /// URL before it was fetched): either way another URL. Now the line is refused.
    @Test(arguments: [(UInt8(0xFF), "invalid UTF-8"), (UInt8(0), "a NUL byte in the line")])
    func aURLListLineWithInvalidUTF8OrANulByteIsRefusedNamingTheLine(byte: UInt8, said: String) throws {
        let server = try server()
        let list =
            Data("\(server.baseURL)/images/a.jpg\n\(server.baseURL)/images/b".utf8) + [byte]
            + Data(".jpg\n\(server.baseURL)/images/c.jpg\n".utf8)
        try list.write(to: URL(fileURLWithPath: work.url("list.txt")))
        try pipeline(source: #"{"type": "url-list", "path": "list.txt", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1)
        #expect((result.stdout + result.stderr).contains("list.txt:2: \(said)"), "\(result.stdout) \(result.stderr)")
        #expect(server.requests.map(\.path) == ["/images/a.jpg"])
    }

    // MARK: failure policies

    @Test func eachFailureEndsAsThePolicySays() throws {
        let counter = Counter()
        let jpeg = self.jpeg
        let server = try server { request in
            let n = counter.next(request.path)
            switch request.path {
            case "/images/flaky.jpg":
                return n == 1 ? .status(503, headers: [("Retry-After", "1")]) : .bytes(jpeg)
            case "/images/down.jpg": return .status(503)
            case "/images/missing.jpg": return .status(404)
            case "/images/truncated.jpg":
                return TestHTTPServer.Response(
                    headers: [("Content-Type", "image/jpeg")], body: jpeg.prefix(jpeg.count / 2),
                    declaredLength: jpeg.count)
            case "/images/stalled.jpg":
                return TestHTTPServer.Response(headers: [("Content-Type", "image/jpeg")], body: jpeg, stall: 4)
            case "/images/huge.jpg": return .bytes(Data(count: 300_000) + jpeg)
            case "/images/error-page.jpg":
                return TestHTTPServer.Response(
                    headers: [("Content-Type", "image/jpeg")], body: Data("<!DOCTYPE html><html>Oops</html>".utf8))
            case "/images/redirect.jpg": return .status(302, headers: [("Location", "/images/redirect.jpg")])
            default: return nil
            }
        }
        let names = ["good", "flaky", "down", "missing", "truncated", "stalled", "huge", "error-page", "redirect"]
        try work.write(names.map { "\(server.baseURL)/images/\($0).jpg" }.joined(separator: "\n"), to: "list.txt")
        try pipeline(
            source: #"{"type": "url-list", "path": "list.txt", "cache": false}"#,
            limits: #"{"timeout": 1, "maxBytes": 200000}"#, retry: #"{"attempts": 3, "backoff": 0.05}"#)
        let started = Date()
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1)
        let url = { (name: String) in "\(server.baseURL)/images/\(name).jpg" }
        let failed = try failures()
        #expect(Set(failed.keys) == Set(["down", "missing", "truncated", "stalled", "huge", "error-page", "redirect"].map(url)))
        #expect(work.files(under: "out") == ["images/flaky.jpg", "images/good.jpg"])

        #expect(counter.count("/images/flaky.jpg") == 2, "503 then retried after Retry-After")
        #expect(Date().timeIntervalSince(started) >= 1, "Retry-After: 1 was honoured")
        #expect(counter.count("/images/down.jpg") == 3 && failed[url("down")]?.attempts == 3)
        #expect(failed[url("down")]?.reason == "download")
        #expect(counter.count("/images/missing.jpg") == 1, "404 is final")
        #expect(failed[url("missing")]?.message.contains("404") == true)
        #expect(counter.count("/images/truncated.jpg") == 3)
        let truncated = failed[url("truncated")]?.message ?? ""
        #expect(truncated.contains("truncated") || truncated.contains("connection lost"), "got: \(truncated)")
        #expect(failed[url("stalled")]?.message.contains("timed out") == true)
        #expect(failed[url("huge")]?.reason == "limit")
        #expect(counter.count("/images/huge.jpg") == 1, "an oversized body is not retried")
        #expect(failed[url("error-page")]?.reason == "decode")
        #expect(counter.count("/images/error-page.jpg") == 1)
        #expect(counter.count("/images/redirect.jpg") == 6, "the first request and 5 redirects")
    }

    @Test func aRemoteFeedCannotPointAtLocalFiles() throws {
        try ImageFixtures.jpeg(at: work.url("private/secret.jpg"), width: 40, height: 40)
        try ImageFixtures.jpeg(at: work.url("private/other.jpg"), width: 40, height: 40)
        let local = work.url("private/secret.jpg")
        let other = work.url("private/other.jpg")
        let server = try server { request in
            request.path == "/feed.json" ? .json(#"[{"url": "\#(local)"}, {"url": "file://\#(other)"}]"#) : nil
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1)
        #expect(
            !FileManager.default.fileExists(atPath: work.url("out")) || work.files(under: "out").isEmpty,
            "a local file was read through a remote feed")
        let failed = try failures()
        #expect(failed.count == 2)
        #expect(failed.values.allSatisfy { $0.reason == "download" })
    }

    /// A gzipped URL list cut short is an error naming the line where it stops, not a
    /// shorter list read as if it were whole (the items before it are done).
    @Test func aGzippedListCutShortSaysWhereAndExitsOne() throws {
        let server = try server()
        let lines = (1...2000).map { "\(server.baseURL)/images/n\($0).jpg" }.joined(separator: "\n") + "\n"
        let whole = work.url("whole.txt")
        try work.write(lines, to: "whole.txt")
        let gzip = Process()
        gzip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        gzip.arguments = ["gzip", "-k", "-f", whole]
        try gzip.run()
        gzip.waitUntilExit()
        let compressed = try Data(contentsOf: URL(fileURLWithPath: whole + ".gz"))
        try compressed.prefix(compressed.count / 2).write(to: URL(fileURLWithPath: work.url("cut.txt.gz")))
        try pipeline(source: #"{"type": "url-list", "path": "cut.txt.gz", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let said = result.stdout + result.stderr
        #expect(said.contains("cut.txt.gz:") && said.contains("the gzip file is cut short or damaged"), "\(said)")
        let listed = work.files(under: "out").count
        #expect(listed > 0 && listed < 2000, "the items before the cut were done: \(listed)")
    }

    @Test func limitIsNotUsedUpByARepeatedKey() throws {
        let server = try server()
        let base = server.baseURL
        try work.write(["a", "a", "b", "c"].map { "\(base)/images/\($0).jpg" }.joined(separator: "\n"), to: "list.txt")
        try pipeline(source: #"{"type": "url-list", "path": "list.txt", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json", "--limit", "2")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(work.files(under: "out") == ["images/a.jpg", "images/b.jpg"])
    }

    @Test func aFeedThatCannotBeListedExitsOneAndRefreshKeepsTheRunFinished() throws {
        let body = feedJSON("BASE", count: 2)
        let server = try server { request in
            request.path == "/feed.json"
                ? .json(body.replacingOccurrences(of: "BASE", with: "http://\(request.headers["host"]!)")) : nil
        }
        try pipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#,
            retry: #"{"attempts": 1}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        server.stop()
        let refresh = try imgpipe("resume", "pipe.json", "--refresh-feed")
        #expect(refresh.status == 1, "a listing error is a failure, not an interruption: \(refresh.stdout)")
        #expect(refresh.stdout.contains("could not be listed"))
        let again = try imgpipe("resume", "pipe.json")
        #expect(again.status == 0)
        #expect(again.stderr.contains("already finished"), "the refresh left the run finished: \(again.stderr)")
    }

    @Test func duplicateKeysAreReportedOnceAndProcessedOnce() throws {
        let server = try server()
        let line = "\(server.baseURL)/images/same.jpg"
        try work.write([line, line, "\(server.baseURL)/images/other.jpg", line].joined(separator: "\n"), to: "list.txt")
        try pipeline(source: #"{"type": "url-list", "path": "list.txt", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0)
        #expect(result.stderr.components(separatedBy: "duplicate key").count == 2, "reported once: \(result.stderr)")
        #expect(server.requests(to: "/images/same.jpg").count == 1)
        #expect(try status().total == 2)
    }

    @Test func refreshFeedAddsOnlyNewItems() throws {
        let size = Counter()
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let body =
                "["
                + (1...size.count("feed")).map {
                    #"{"url": "http://\#(request.headers["host"]!)/images/n\#($0).jpg"}"#
                }.joined(separator: ",") + "]"
            return .json(body)
        }
        size.set("feed", 3)
        try pipeline(
            source:
                #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": {"path": "cache", "revalidate": true}}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        size.set("feed", 5)
        let refreshed = try imgpipe("resume", "pipe.json", "--refresh-feed")
        #expect(refreshed.status == 0, "stderr: \(refreshed.stderr)")
        #expect(try status().total == 5)
        #expect(work.files(under: "out").count == 5)
        for n in 1...5 { #expect(server.requests(to: "/images/n\(n).jpg").count == 1, "n\(n) fetched once") }
    }

    @Test func pagingStreamsItemsWhileLaterPagesAreListed() throws {
        let server = try server { request in
            guard request.path == "/search" else { return nil }
            let page = Int(request.query["page"] ?? "1") ?? 1
            let host = "http://\(request.headers["host"]!)"
            let items = (1...5).map { n in
                #"{"data": [{"nasa_id": "p\#(page)-\#(n)"}], "links": [{"href": "\#(host)/images/p\#(page)-\#(n).jpg", "rel": "preview"}]}"#
            }
            let next = page == 1 ? #", "links": [{"rel": "next", "href": "\#(host)/search?page=2"}]"# : ""
            var response = TestHTTPServer.Response.json(#"{"collection": {"items": [\#(items.joined(separator: ","))]\#(next)}}"#)
            if page == 2 { response.stall = 2 }
            return response
        }
        try pipeline(source: #"{"type": "nasa-images", "query": "x", "endpoint": "\#(server.baseURL)", "cache": false}"#)
        let started = Date()
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(Date().timeIntervalSince(started) >= 2)
        let pageTwo = try #require(server.requests.first { $0.path == "/search" && $0.query["page"] == "2" })
        let firstPageImages = server.requests.filter { $0.path.hasPrefix("/images/p1-") }
        #expect(firstPageImages.count == 5)
        // Page 2 stalled for 2 s: every page-1 image was requested while it was still pending.
        #expect(firstPageImages.allSatisfy { $0.receivedAt < pageTwo.receivedAt.addingTimeInterval(1.5) })
        #expect(work.files(under: "out").count == 10)
    }

    @Test func interruptedRemoteRunResumesWithoutDownloadingAnythingTwice() throws {
        let jpeg = self.jpeg
        let server = try server { request in
            guard request.path.hasPrefix("/slow/") else { return nil }
            Thread.sleep(forTimeInterval: 0.05)
            return .bytes(jpeg)
        }
        try work.write((1...60).map { "\(server.baseURL)/slow/\($0).jpg" }.joined(separator: "\n"), to: "list.txt")
        try pipeline(
            source: #"{"type": "url-list", "path": "list.txt", "cache": false}"#, limits: #"{"downloads": 4, "workers": 1}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, server.requests.count < 15 { usleep(10000) }
        running.signal(SIGINT)
        #expect(running.wait().status == 130)
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out").count == 60)
        let perImage = Dictionary(grouping: server.requests, by: \.path)
        #expect(perImage.count == 60)
        #expect(perImage.values.allSatisfy { $0.count == 1 }, "an image was downloaded twice")
    }
}

/// Thread-safe counters keyed by name, for server handlers.
final class Counter: Sendable {
    private let values = Mutex<[String: Int]>([:])

    func next(_ name: String) -> Int {
        values.withLock { values in
            values[name, default: 0] += 1
            return values[name]!
        }
    }
    func count(_ name: String) -> Int { values.withLock { $0[name] ?? 0 } }
    func set(_ name: String, _ value: Int) { values.withLock { $0[name] = value } }
}
