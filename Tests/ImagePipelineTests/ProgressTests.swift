import Foundation
@testable import ImagePipeline
import ImagePipelineTesting
import Testing

/// Progress lines: what each feed counts ahead, the total the run state makes of it, and
/// what the built binary prints, piped and on a terminal.
@Suite("Progress", .serialized)
struct ProgressTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-progress") }

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
        try FileManager.default.createSymbolicLink(atPath: work.url("src/link.jpg"), withDestinationPath: work.url("elsewhere/e.jpg"))
        try FileManager.default.createSymbolicLink(atPath: work.url("src/linked"), withDestinationPath: work.url("elsewhere"))
        try FileManager.default.createSymbolicLink(atPath: work.url("src/dangling.jpg"), withDestinationPath: work.url("nowhere.jpg"))
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
            #expect(listed == (recursive ? ["B.JPEG", "a.jpg", "deep/er/c.jpg", "link.jpg"] : ["B.JPEG", "a.jpg", "link.jpg"]))
            #expect(counts == [.counted(listed.count)])
        }
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
            try feed.list(expecting: { counts.append($0) }) { _ in listed += 1; return true }
            #expect(listed == expected, "\(name)")
            #expect(counts == [.counted(expected)], "\(name)")
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
        #expect(try counts(JSONFeed(url: "http://h/feed", urlField: "url", keyField: nil, pages: Pages(body: json))) == [.counted(2)])

        let nasa = #"{"collection": {"items": [], "metadata": {"total_hits": 1234}}}"#
        #expect(try counts(NASAImagesFeed(query: "moon", endpoint: "http://h", mediaType: "image", maxItems: nil,
                                          pages: Pages(body: nasa))) == [.reported(1234, maxItems: nil)])
        #expect(try counts(NASAImagesFeed(query: "moon", endpoint: "http://h", mediaType: "image", maxItems: 50,
                                          pages: Pages(body: nasa))) == [.reported(50, maxItems: nil)])

        let flickr = #"{"photos": {"page": 1, "pages": 1, "total": "987", "photo": []}, "stat": "ok"}"#
        #expect(try counts(FlickrSearchFeed(text: "x", apiKey: "k", endpoint: "http://h/rest/", perPage: 10, maxItems: nil,
                                            size: "url_l", pages: Pages(body: flickr))) == [.reported(987, maxItems: nil)])
        let untold = #"{"photos": {"page": 1, "pages": 1, "photo": []}, "stat": "ok"}"#
        #expect(try counts(FlickrSearchFeed(text: "x", apiKey: "k", endpoint: "http://h/rest/", perPage: 10, maxItems: nil,
                                            size: "url_l", pages: Pages(body: untold))).isEmpty)
    }
}
