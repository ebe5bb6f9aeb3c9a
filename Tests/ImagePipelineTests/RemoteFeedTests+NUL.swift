import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// Entries whose key or URL holds a NUL character, which no store keeps whole.
extension RemoteFeedTests {
    /// A json-feed entry keyed `a\u0000b` was stored as `a` (SQLite's text ends at the NUL),
    /// and the feed's real item `a` was then taken for a duplicate of it and never fetched,
    /// with exit 0. Such an entry (a NUL in the key or in the URL) is left out at listing,
    /// with a notice naming the feed and the entry, like an entry with no URL: `a` is
    /// fetched and done, the state file holds `a` alone, and the exit code is `a`'s.
    @Test func aFeedEntryWithANulInItsKeyOrURLIsLeftOutAndTakesNoOtherItem() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let base = "http://\(request.headers["host"]!)"
            return .json(
                #"[{"id": "a\u0000b", "url": "\#(base)/images/ab.jpg"}, {"id": "a", "url": "\#(base)/images/a.jpg"}, "#
                    + #"{"id": "c", "url": "\#(base)/images/c\u0000.jpg"}]"#)
        }
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "keyField": "id", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(
            result.stderr.contains(
                "the feed at \(server.baseURL)/feed.json: 2 entries left out, "
                    + "with a NUL character in the key or the image URL: [0], [2]"), "\(result.stderr)")
        #expect(!result.stderr.contains("duplicate key"), "\(result.stderr)")
        #expect(work.files(under: "out") == ["images/a.jpg"])
        #expect(server.requests.map(\.path).filter { $0.hasPrefix("/images/") } == ["/images/a.jpg"])
        let report = try status()
        #expect((report.total, report.done) == (1, 1), "\(report)")
        let keys = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite")).read { db in
            try String.fetchAll(db, sql: "SELECT key FROM item")
        }
        #expect(keys == ["a"])
    }

    /// The same of the paged APIs (a NASA id, a Flickr id with a NUL), and of a URL list:
    /// a `.jsonl` line whose key is `a\u0000b` is refused naming the line, as a NUL byte is.
    @Test func pagedItemsAndListLinesWithANulAreLeftOutOrRefused() throws {
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            switch request.path {
            case "/search":
                return .json(
                    #"{"collection": {"items": [{"data": [{"nasa_id": "N\u0000X"}], "links": [{"rel": "preview", "href": "\#(host)/images/nx.jpg"}]}, "#
                        + #"{"data": [{"nasa_id": "N"}], "links": [{"rel": "preview", "href": "\#(host)/images/n.jpg"}]}]}}"#)
            case "/rest/":
                return .json(
                    #"{"stat": "ok", "photos": {"pages": 1, "photo": [{"id": "F", "url_l": "\#(host)/images/f.jpg"}, "#
                        + #"{"id": "F\u0000G", "url_l": "\#(host)/images/fg.jpg"}]}}"#)
            default:
                return nil
            }
        }
        try pipeline(source: #"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "cache": false}"#)
        let nasa = try imgpipe("run", "pipe.json")
        #expect(nasa.status == 0, "stderr: \(nasa.stderr)")
        #expect(nasa.stderr.contains("1 item left out, with a NUL character in the key or the image URL: [0]"), "\(nasa.stderr)")
        try pipeline(
            source:
                #"{"type": "flickr-search", "text": "moon", "apiKey": "k", "endpoint": "\#(server.baseURL)/rest/", "cache": false}"#
        )
        let flickr = try imgpipe("run", "pipe.json", "--new")
        #expect(flickr.status == 0, "stderr: \(flickr.stderr)")
        #expect(
            flickr.stderr.contains("1 photo left out, with a NUL character in the key or the image URL: [1]"), "\(flickr.stderr)")
        #expect(work.files(under: "out") == ["F.jpg", "N.jpg"])
        #expect(!server.requests.contains { $0.path == "/images/nx.jpg" || $0.path == "/images/fg.jpg" })

        try work.write(
            #"""
            {"url": "\#(server.baseURL)/images/a.jpg", "key": "a\u0000b"}
            {"url": "\#(server.baseURL)/images/a.jpg", "key": "a"}

            """#, to: "list.jsonl")
        try pipeline(source: #"{"type": "url-list", "path": "list.jsonl", "cache": false}"#, name: "list.json")
        let list = try imgpipe("run", "list.json")
        // Its first line ends the listing: no item could be listed (exit 2, nothing kept).
        #expect(list.status == 2, "stderr: \(list.stderr)")
        #expect(list.stderr.contains("list.jsonl:1: a NUL character in the URL or the key"), "\(list.stderr)")
        #expect(!server.requests.contains { $0.path == "/images/a.jpg" })
    }
}
