import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit
@testable import imgpipe

/// Progress lines: what each feed counts ahead, the total the run state makes of it, and
/// what the built binary prints, piped and on a terminal.
@Suite("Progress", .serialized)
struct ProgressTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-progress") }

    /// The `progress:` lines of piped standard error.
    func progressLines(_ result: CommandResult) -> [String] {
        result.stderr.split(separator: "\n").map(String.init).filter { $0.hasPrefix("progress: ") }
    }

    /// `count` photo-like JPEGs in `in/`, big enough that a run of them with one worker
    /// lasts a few progress intervals.
    func images(_ count: Int) throws {
        let photo = try ImageFixtures.photo(width: 1200, height: 900)
        try ImageFixtures.write(photo, to: work.url("in/img-01.jpg"))
        for index in 2...count {
            try FileManager.default.copyItem(
                atPath: work.url("in/img-01.jpg"), toPath: work.url(String(format: "in/img-%02d.jpg", index)))
        }
        // `adjust` first: no shrink-on-load, each image is decoded whole.
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "adjust", "contrast": 1.1}, {"op": "fit", "width": 128, "height": 128}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
    }

    // MARK: - counting ahead

    @Test func aDirectoryCountsWhatItWillListWithoutListingIt() throws {
        try ImageFixtures.jpeg(at: work.url("src/a.jpg"), width: 8, height: 8)
        try ImageFixtures.jpeg(at: work.url("src/B.JPEG"), width: 8, height: 8)
        try ImageFixtures.jpeg(at: work.url("src/deep/er/c.jpg"), width: 8, height: 8)
        try ImageFixtures.jpeg(at: work.url("src/.hidden.jpg"), width: 8, height: 8)
        try ImageFixtures.jpeg(at: work.url("src/.git/d.jpg"), width: 8, height: 8)
        try work.write("not an image", to: "src/notes.txt")
        try ImageFixtures.jpeg(at: work.url("elsewhere/e.jpg"), width: 8, height: 8)
        try ImageFixtures.jpeg(at: work.url("elsewhere/f.jpg"), width: 8, height: 8)
        // A link to a file is followed; a link to a folder is not (it could loop).
        try FileManager.default.createSymbolicLink(
            atPath: work.url("src/link.jpg"), withDestinationPath: work.url("elsewhere/e.jpg"))
        try FileManager.default.createSymbolicLink(atPath: work.url("src/linked"), withDestinationPath: work.url("elsewhere"))
        try FileManager.default.createSymbolicLink(
            atPath: work.url("src/dangling.jpg"), withDestinationPath: work.url("nowhere.jpg"))
        #expect(mkfifo(work.url("src/pipe.jpg"), 0o600) == 0)

        for recursive in [true, false] {
            let feed = DirectoryFeed(root: work.url("src"), recursive: recursive)
            var counts: [FeedCount] = []
            var listed: [String] = []
            try feed.list(expecting: { counts.append($0) }) { item in
                #expect(counts.count == 1, "the count comes before the first item")
                listed.append(item.key)
                return true
            }
            // A link that leads nowhere is listed, to fail naming itself (not passed over).
            #expect(
                listed
                    == (recursive
                        ? ["B.JPEG", "a.jpg", "dangling.jpg", "deep/er/c.jpg", "link.jpg"]
                        : ["B.JPEG", "a.jpg", "dangling.jpg", "link.jpg"]))
            #expect(counts == [.counted(listed.count)])
        }
    }

    /// A directory entry is only as long as its name: one that ends just before a page
    /// without memory (as the last entry of `readdir`'s buffer can) has its name read
    /// without touching that page. Copying the whole 256-byte `d_name` field, as the count
    /// did, crashed a run of work A in the bench (SIGSEGV in `countFiles`); here it would
    /// crash the test.
    @Test func aDirectoryEntryAtTheEndOfItsMemoryIsReadUpToItsName() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let memory = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        defer { munmap(memory, 2 * page) }
        #expect(mprotect(memory + page, page, PROT_NONE) == 0)
        let name = Array("photo.jpg".utf8) + [0]
        let offset = try #require(MemoryLayout<dirent>.offset(of: \dirent.d_name))
        let length = (offset + name.count + 7) / 8 * 8
        let entry = memory + page - length
        memset(entry, 0, length)
        entry.storeBytes(of: UInt16(length), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
        name.withUnsafeBytes { (entry + offset).copyMemory(from: $0.baseAddress!, byteCount: name.count) }
        #expect(length < MemoryLayout<dirent>.size, "the entry is shorter than the struct, as a real one is")
        #expect(DirectoryFeed.name(of: entry.assumingMemoryBound(to: dirent.self)) == "photo.jpg")
    }

    @Test func aURLListCountsItsURLsNotItsCommentsOrBlankLines() throws {
        let lists = [
            ("urls.txt", "# images\n\nhttp://h/a.jpg\n   \n  # indented comment\nhttp://h/b.jpg\n\t\nhttp://h/c.jpg", 3),
            ("urls.csv", "key,url\n\nk1,http://h/a.jpg\nk2,http://h/b.jpg\n", 2),
            ("urls.jsonl", "{\"url\": \"http://h/a.jpg\"}\n\n{\"url\": \"http://h/b.jpg\", \"key\": \"b\"}\n", 2),
        ]
        for (name, text, expected) in lists {
            let feed = URLListFeed(path: try work.write(text, to: name))
            var counts: [FeedCount] = []
            var listed = 0
            try feed.list(expecting: { counts.append($0) }) { _ in
                listed += 1
                return true
            }
            #expect(listed == expected, "\(name)")
            #expect(counts == [.atMost(expected)], "\(name)")
        }
    }

    @Test func aJSONFeedCountsItsPageAndRemoteAPIsReportTheirTotal() throws {
        struct Pages: PageSource {
            let body: String
            func page(_ url: String) throws -> (Data, Tier) { (Data(body.utf8), .remote) }
        }
        func counts(_ feed: any Feed) throws -> [FeedCount] {
            var counts: [FeedCount] = []
            try feed.list(expecting: { counts.append($0) }) { _ in true }
            return counts
        }
        let json = #"[{"url": "http://h/a.jpg"}, {"url": ""}, {"title": "no url"}, 7, {"url": "http://h/b.jpg"}]"#
        #expect(
            try counts(JSONFeed(url: "http://h/feed", urlField: "url", keyField: nil, pages: Pages(body: json))) == [.counted(2)])

        let nasa = #"{"collection": {"items": [], "metadata": {"total_hits": 1234}}}"#
        #expect(
            try counts(
                NASAImagesFeed(
                    query: "moon", endpoint: "http://h", mediaType: "image", maxItems: nil,
                    pages: Pages(body: nasa))) == [.reported(1234, maxItems: nil)])
        #expect(
            try counts(
                NASAImagesFeed(
                    query: "moon", endpoint: "http://h", mediaType: "image", maxItems: 50,
                    pages: Pages(body: nasa))) == [.reported(50, maxItems: nil)])

        let flickr = #"{"photos": {"page": 1, "pages": 1, "total": "987", "photo": []}, "stat": "ok"}"#
        #expect(
            try counts(
                FlickrSearchFeed(
                    text: "x", apiKey: "k", endpoint: "http://h/rest/", perPage: 10, maxItems: nil,
                    size: "url_l", pages: Pages(body: flickr))) == [.reported(987, maxItems: nil)])
        let untold = #"{"photos": {"page": 1, "pages": 1, "photo": []}, "stat": "ok"}"#
        #expect(
            try counts(
                FlickrSearchFeed(
                    text: "x", apiKey: "k", endpoint: "http://h/rest/", perPage: 10, maxItems: nil,
                    size: "url_l", pages: Pages(body: untold))
            ).isEmpty)
    }

    // MARK: - the total, without threads

    /// An item put back to pending while a resume's producer pages unfinished items is
    /// started by one of the two, whichever comes first; once it has ended it may be put back
    /// and started again; a run stopping starts none.
    @Test func anItemPutBackToPendingIsStartedOnce() {
        var state = RunState(capacity: 2, counts: ItemCounts(total: 3, failed: 2), feedComplete: true)
        #expect(state.claimStart(seq: 70) && !state.claimStart(seq: 70), "the page, then the revival: once")
        #expect(!state.revived(seq: 70) && state.counts.failed == 1 && state.wasRevived(seq: 70))
        state.ended(seq: 70)
        #expect(state.revived(seq: 70) && state.inFlight == 1, "failed again, put back again: started again")
        #expect(state.revived(seq: 3) && state.inFlight == 2 && !state.claimStart(seq: 3), "the revival, then the page")
        #expect(!state.wasRevived(seq: 4))
        #expect(state.claimStart(seq: 0) && state.claimStart(seq: 64) && state.claimStart(seq: 130))
        var stopping = RunState(capacity: 2, counts: ItemCounts(total: 1, failed: 1), feedComplete: true)
        _ = stopping.interrupt(now: false, at: Date())
        #expect(!stopping.revived(seq: 1) && stopping.inFlight == 0 && stopping.counts.failed == 0)
    }

    @Test func theTotalIsWhatTheRunHasPlusWhatTheFeedStillPromises() {
        // A new run of a counted feed: exact from the start, capped by --limit.
        var state = RunState(capacity: 4, counts: ItemCounts(), feedComplete: false)
        #expect(state.total == .atLeast(0), "nothing said yet")
        state.expect(.counted(30))
        #expect(state.total == .exact(30))
        state.listed()
        state.listed()
        #expect(state.total == .exact(30))
        var limited = RunState(capacity: 4, counts: ItemCounts(), feedComplete: false, itemLimit: 12)
        limited.expect(.counted(30))
        #expect(limited.total == .exact(12))

        // An API's total is an estimate until the listing is over.
        var remote = RunState(capacity: 4, counts: ItemCounts(), feedComplete: false)
        remote.expect(.reported(1000, maxItems: nil))
        remote.listed()
        #expect(remote.total == .estimate(1000))
        _ = remote.producerDone()
        #expect(remote.total == .exact(1), "listing over: what was listed")

        // A resumed run that had 40 items: the feed promises 100, 40 of which it lists again.
        var counts = ItemCounts()
        counts.total = 40
        var resumed = RunState(capacity: 4, counts: counts, feedComplete: false)
        #expect(resumed.total == .atLeast(40), "before the feed is listed again")
        resumed.expect(.counted(100))
        #expect(resumed.total == .exact(100))
        for _ in 0..<40 { resumed.passedOver() }
        resumed.listed()
        #expect(resumed.total == .exact(100))
        // The feed grew since: what it lists beyond the known items is added.
        var grown = RunState(capacity: 4, counts: counts, feedComplete: false)
        grown.expect(.counted(130))
        #expect(grown.total == .exact(130))
        // A run whose feed was listed to its end knows its total from the start.
        #expect(RunState(capacity: 4, counts: counts, feedComplete: true).total == .exact(40))
    }

    @Test func theLineMarksEstimatesAndUnknownTotalsAndFitsTheTerminal() {
        func line(_ total: RunProgress.Total, done: Int = 25, finished: Int = 25) -> ProgressLine {
            ProgressLine(RunProgress(runId: 1, total: total, done: done, failed: 0, finishedThisSession: finished, elapsed: 5))
        }
        #expect(line(.exact(100)).text == "25/100 done, 0 failed, 5.0 items/s, ETA 15s")
        #expect(line(.estimate(1000)).text == "25/~1000 done, 0 failed, 5.0 items/s, ETA ~3m15s")
        #expect(line(.atLeast(95)).text == "25/95+ done, 0 failed, 5.0 items/s, ETA --")
        #expect(line(.exact(100), done: 0, finished: 0).text.hasSuffix("ETA --"))
        #expect(ProgressLine.duration(7384) == "2h03m")
        for columns in [20, 60, 80, 200] {
            #expect(line(.exact(100)).fitted(columns: columns).count < columns)
        }
        let fitted = line(.exact(100)).fitted(columns: 80)
        #expect(fitted.count == 79 && fitted.hasPrefix("[########.") && fitted.contains(".] 25/100 done"), "a quarter filled")
        #expect(line(.atLeast(95)).fitted(columns: 80).hasPrefix("[....."))
    }

    // MARK: - the binary

    @Test func pipedProgressCarriesTheTotalFromTheFirstLine() throws {
        try images(30)
        let environment = ["IMGPIPE_PROGRESS_INTERVAL": "0"]
        let full = try ImgpipeBinary.run(["run", "pipe.json", "-j", "1"], in: work.path, environment: environment)
        #expect(full.status == 0, "stderr: \(full.stderr)")
        let lines = progressLines(full)
        #expect(!lines.isEmpty, "stderr: \(full.stderr)")
        #expect(lines.allSatisfy { $0.contains("/30 done") && $0.contains("ETA ") }, "\(lines)")
        #expect(!full.stderr.contains("\r") && !full.stderr.contains("\u{1B}"), "no control characters when piped")
        #expect(full.stderr.isEmpty || full.stderr.hasSuffix("\n"), "no partial line before the summary")
        #expect(full.stdout.hasPrefix("run #1: 30 done, 0 skipped, 0 failed of 30"))

        let limited = try ImgpipeBinary.run(
            ["run", "pipe.json", "--new", "--limit", "12", "-j1"], in: work.path,
            environment: environment)
        #expect(limited.status == 0, "stderr: \(limited.stderr)")
        let limitedLines = progressLines(limited)
        #expect(!limitedLines.isEmpty && limitedLines.allSatisfy { $0.contains("/12 done") }, "\(limited.stderr)")
        #expect(limited.stdout.contains("12 done, 0 skipped, 0 failed of 12"))

        let json = try ImgpipeBinary.run(
            ["run", "pipe.json", "--new", "--json", "--limit", "5", "-j", "1"], in: work.path, environment: environment)
        #expect(json.status == 0 && progressLines(json).isEmpty, "--json prints no progress: \(json.stderr)")
    }

    @Test(.enabled(if: ImgpipeBinary.canRunOnTerminal, "needs util-linux script"))
    func onATerminalOneLineIsRedrawnAndClearedBeforeTheSummary() throws {
        try images(30)
        let (status, output) = try ImgpipeBinary.runOnTerminal(["run", "pipe.json", "-j", "1"], in: work.path)
        #expect(status == 0, "\(output)")
        let drawn = output.split(separator: "\r").filter { $0.hasPrefix("[") }
        #expect(!drawn.isEmpty, "no progress line was drawn: \(output.debugDescription)")
        let shape = #/^\[#*\.*\] \d+/30 done, \d+ failed, [0-9.]+ items/s, ETA (--|\d+s|\d+m\d\ds)\x1B\[K$/#
        for line in drawn {
            #expect(line.wholeMatch(of: shape) != nil, "\(line.debugDescription)")
            #expect(line.count < 80 + 3, "fits the default width of 80 columns")
        }
        #expect(
            output.contains("\r\u{1B}[Krun #1: 30 done, 0 skipped, 0 failed of 30"),
            "the line is cleared before the summary: \(output.debugDescription)")
        #expect(!output.contains("\r\nrun #1"), "no progress line left above the summary")
    }

    /// Log events (`--log-level debug`: an "item failed" for each broken file) clear the
    /// live line before they are written, instead of landing on the end of the bar.
    @Test(.enabled(if: ImgpipeBinary.canRunOnTerminal))
    func logLinesOnATerminalNeverLandOnTheBar() throws {
        try images(30)
        for index in stride(from: 5, through: 30, by: 5) {
            try work.write("not an image", to: String(format: "in/img-%02d.jpg", index))
        }
        let (status, output) = try ImgpipeBinary.runOnTerminal(
            ["run", "pipe.json", "-j", "1", "--log-level", "debug"], in: work.path)
        #expect(status == 1, "\(output)")
        let logged = output.components(separatedBy: "\r\n").filter { $0.contains("item failed") }
        #expect(logged.count == 6, "\(output.debugDescription)")
        for line in logged {
            let visible = line.components(separatedBy: "\r").last ?? ""
            #expect(!visible.contains("items/s"), "a log line was written after the bar: \(line.debugDescription)")
        }
    }

    /// A server of 24×24 JPEGs at `/images/…`, each after `delay` seconds, plus `pages`.
    func server(delay: Double = 0, _ pages: @escaping @Sendable (TestHTTPServer.Request, String) -> TestHTTPServer.Response?)
        throws -> TestHTTPServer
    {
        try ImageFixtures.jpeg(at: work.url("fixture.jpg"), width: 24, height: 24)
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: work.url("fixture.jpg")))
        return try TestHTTPServer { request in
            if let response = pages(request, "http://\(request.headers["host"] ?? "")") { return response }
            guard request.path.hasPrefix("/images/") else { return .status(404) }
            var response = TestHTTPServer.Response.bytes(jpeg)
            response.stall = delay
            return response
        }
    }

    func run(source: String) throws -> CommandResult {
        try work.write(
            """
            {"version": 1, "source": \(source), "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "directory", "path": "out"}, "limits": {"timeout": 10, "downloads": 2}}
            """, to: "pipe.json")
        return try ImgpipeBinary.run(["run", "pipe.json"], in: work.path, environment: ["IMGPIPE_PROGRESS_INTERVAL": "0"])
    }

    /// A page that keeps the listing going for a while: progress lines come meanwhile.
    static func slow(_ response: TestHTTPServer.Response) -> TestHTTPServer.Response {
        var slow = response
        slow.stall = 1.5
        return slow
    }

    @Test func nasaTotalHitsIsShownAsAnEstimateWhileListing() throws {
        let server = try server { request, host in
            guard request.path == "/search" else { return nil }
            let page = Int(request.query["page"] ?? "1") ?? 1
            let items = (1...5).map {
                #"{"data": [{"nasa_id": "N\#(page)\#($0)"}], "links": [{"href": "\#(host)/images/N\#(page)\#($0).jpg", "rel": "preview"}]}"#
            }.joined(separator: ",")
            if page == 2 { return Self.slow(.json(#"{"collection": {"items": [\#(items)]}}"#)) }
            return .json(
                #"{"collection": {"items": [\#(items)], "metadata": {"total_hits": 40}, "links": [{"rel": "next", "href": "\#(host)/search?page=2"}]}}"#
            )
        }
        let result = try run(
            source: #"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "cache": false}"#)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let lines = progressLines(result)
        #expect(lines.contains { $0.contains("/~40 done") && $0.contains("ETA ~") }, "\(lines)")
        #expect(result.stdout.contains("10 done, 0 skipped, 0 failed of 10"), "the total is what was listed: \(result.stdout)")
    }

    @Test func flickrTotalIsShownAsAnEstimateWhileListing() throws {
        let server = try server { request, host in
            guard request.path == "/rest/" else { return nil }
            let page = Int(request.query["page"] ?? "1") ?? 1
            let photos = (1...5).map { #"{"id": "\#(page * 100 + $0)", "url_l": "\#(host)/images/\#(page * 100 + $0).jpg"}"# }
            let body =
                #"{"photos": {"page": \#(page), "pages": 2, "total": "30", "photo": [\#(photos.joined(separator: ","))]}, "stat": "ok"}"#
            return page == 2 ? Self.slow(.json(body)) : .json(body)
        }
        let result = try run(
            source:
                #"{"type": "flickr-search", "text": "x", "apiKey": "k", "endpoint": "\#(server.baseURL)/rest/", "perPage": 5, "cache": false}"#
        )
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let lines = progressLines(result)
        #expect(lines.contains { $0.contains("/~30 done") && $0.contains("ETA ~") }, "\(lines)")
        #expect(result.stdout.contains("10 done, 0 skipped, 0 failed of 10"))
    }

    @Test func aURLListWithCommentsGivesTheExactTotal() throws {
        let server = try server(delay: 0.3) { _, _ in nil }
        let urls = (1...6).map { "\(server.baseURL)/images/u\($0).jpg" }
        try work.write(
            "# six images\n\n" + urls[0..<3].joined(separator: "\n") + "\n  \n# more\n" + urls[3...].joined(separator: "\n")
                + "\n",
            to: "urls.txt")
        let result = try run(source: #"{"type": "url-list", "path": "urls.txt", "cache": false}"#)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let lines = progressLines(result)
        #expect(!lines.isEmpty && lines.allSatisfy { $0.contains("/6 done") }, "\(lines)")
    }
}
