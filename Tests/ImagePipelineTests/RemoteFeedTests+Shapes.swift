import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// `json-feed` shaped like real APIs: the entries inside an object (`items`, a JSON Pointer)
/// and pages linked by a URL in each page (`next`), with the built binary against a loopback
/// server.
extension RemoteFeedTests {
    /// Two entries of `/images/<prefix>-<n>.jpg`, as JSON array elements.
    static func entries(_ host: String, _ prefix: String) -> String {
        (1...2).map { #"{"url": "\#(host)/images/\#(prefix)-\#($0).jpg", "id": "\#(prefix)\#($0)"}"# }.joined(separator: ", ")
    }

    @Test func aWrappedFeedIsReadWhereItsItemsPointerPoints() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let host = "http://\(request.headers["host"]!)"
            return .json(#"{"meta": {"count": 2}, "data": {"items": [\#(Self.entries(host, "w"))]}}"#)
        }
        try pipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "items": "/data/items", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(work.files(under: "out") == ["images/w-1.jpg", "images/w-2.jpg"])

        // Without the pointer, the object is refused, and the message says what to write.
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "cache": false}"#)
        let plain = try imgpipe("run", "pipe.json", "--new")
        #expect(plain.status == 2, "no item could be listed: the pipeline's fault")
        #expect(
            plain.stderr.contains("is not a JSON array of objects") && plain.stderr.contains(#"name it with "items""#),
            "\(plain.stderr)")
    }

    @Test func anEscapedPointerReachesNamesWithSlashAndTilde() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            let host = "http://\(request.headers["host"]!)"
            // `/a~1b/m~0n/0` is the first element of the member "m~n" of the member "a/b";
            // "a" with "b" in it, and "m~n" read as "m/n", are decoys.
            return .json(
                #"{"a": {"b": {"m~n": [[]]}}, "a/b": {"m/n": [[]], "m~n": [[\#(Self.entries(host, "e"))]]}}"#)
        }
        try pipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "items": "/a~1b/m~0n/0", "cache": false}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(work.files(under: "out") == ["images/e-1.jpg", "images/e-2.jpg"])
    }

    @Test func pagesAreFollowedAlongTheirNextURL() throws {
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            switch request.target {
            // A relative URL, resolved against the page's own.
            case "/api/photos": return .json(#"{"data": [\#(Self.entries(host, "p1"))], "links": {"next": "photos?page=2"}}"#)
            case "/api/photos?page=2":
                return .json(#"{"data": [\#(Self.entries(host, "p2"))], "links": {"next": "\#(host)/api/photos?page=3"}}"#)
            case "/api/photos?page=3": return .json(#"{"data": [], "links": {"next": null}}"#)
            default: return nil
            }
        }
        try pipeline(
            source:
                #"{"type": "json-feed", "url": "\#(server.baseURL)/api/photos", "items": "/data", "next": "/links/next", "cache": false}"#
        )
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(
            work.files(under: "out") == ["images/p1-1.jpg", "images/p1-2.jpg", "images/p2-1.jpg", "images/p2-2.jpg"])
        let pages = server.requests.map(\.target).filter { $0.hasPrefix("/api/") }
        #expect(pages == ["/api/photos", "/api/photos?page=2", "/api/photos?page=3"], "each page once: \(pages)")
    }

    /// A listing resumed at a cursor (a shared run's lister) starts at the cursor's page and
    /// passes over its items up to the cursor's key; each item says the page it came from.
    @Test func aPagedFeedResumesAtTheCursorsPage() throws {
        struct Pages: PageSource {
            let asked = LockedBox<[String]>([])
            func page(_ url: String) throws -> (Data, Tier) {
                asked.withLock { $0.append(url) }
                let number = Int(url.split(separator: "=").last ?? "") ?? 0
                let entries = (1...3).map { #"{"url": "http://h/\#(number)-\#($0).jpg"}"# }.joined(separator: ",")
                let next = number < 3 ? #""http://h/feed?page=\#(number + 1)""# : "null"
                return (Data(#"{"items": [\#(entries)], "next": \#(next)}"#.utf8), .remote)
            }
        }
        let pages = Pages()
        let pointer = { (text: String) in try JSONPointer.parse(text).get() }
        let feed = JSONFeed(
            url: "http://h/feed?page=1", urlField: "url", keyField: nil, items: try pointer("/items"),
            next: try pointer("/next"), pages: pages)
        var listed: [(key: String, page: String?)] = []
        try feed.list(after: FeedCursor(key: "http://h/2-2.jpg", listed: 5, page: "http://h/feed?page=2"), expecting: { _ in }) {
            listed.append(($0.key, $0.resumePage))
            return true
        }
        #expect(pages.asked.withLock { $0 } == ["http://h/feed?page=2", "http://h/feed?page=3"])
        #expect(listed.map(\.key) == ["http://h/2-3.jpg", "http://h/3-1.jpg", "http://h/3-2.jpg", "http://h/3-3.jpg"])
        #expect(listed.map(\.page) == ["http://h/feed?page=2"] + Array(repeating: "http://h/feed?page=3", count: 3))
    }

    @Test func nextURLsThatGoRoundInALoopEndWithAClearError() throws {
        let server = try server { request in
            let host = "http://\(request.headers["host"]!)"
            switch request.target {
            case "/a.json": return .json(#"{"items": [\#(Self.entries(host, "a"))], "next": "/b.json"}"#)
            case "/b.json": return .json(#"{"items": [\#(Self.entries(host, "b"))], "next": "/a.json"}"#)
            default: return nil
            }
        }
        try pipeline(
            source:
                #"{"type": "json-feed", "url": "\#(server.baseURL)/a.json", "items": "/items", "next": "/next", "cache": false}"#,
            retry: #"{"attempts": 1}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1, "\(result.stdout) \(result.stderr)")
        #expect(
            result.stdout.contains(
                "the feed at \(server.baseURL)/b.json gives as its next page (at \"/next\", source.next) "
                    + "\(server.baseURL)/a.json, which is page 1 of this listing: the pages go round in a loop"),
            "\(result.stdout)")
        #expect(work.files(under: "out").count == 4, "the items of both pages were run")
        #expect(server.requests(to: "/a.json").count == 1)
    }

    @Test func aPointerThatIsNoJSONPointerIsRefusedByValidate() throws {
        for (source, path, message) in [
            (#""items": "data/items""#, "source.items", #""data/items" is not a JSON Pointer"#),
            (#""items": "/data/items", "next": "/links/~2next""#, "source.next", #""~2" is no escape"#),
            (#""next": "/links/next~""#, "source.next", #"a "~" at the end of a token"#),
            (#""items": 3"#, "source.items", "expected a JSON Pointer"),
        ] {
            try pipeline(source: #"{"type": "json-feed", "url": "http://127.0.0.1:9/feed.json", \#(source)}"#)
            let result = try imgpipe("validate", "pipe.json")
            #expect(result.status == 2, "\(source): \(result.stdout)")
            #expect(result.stderr.contains("\(path): ") && result.stderr.contains(message), "\(source): \(result.stderr)")
        }
    }

    @Test func aPointerThatReachesNoArrayIsAListingErrorNamingItAndThePage() throws {
        let server = try server { request in
            guard request.path == "/feed.json" else { return nil }
            return .json(#"{"data": {"items": {"count": 0}}, "links": {"next": 7}}"#)
        }
        for (shape, message) in [
            (#""items": "/data/items""#, #"has an object at "/data/items" (source.items), not an array of entries"#),
            (#""items": "/data/photos""#, #"has nothing at "/data/photos" (source.items)"#),
            (#""items": "/data/items/0""#, #"has nothing at "/data/items/0" (source.items)"#),
        ] {
            try pipeline(
                source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", \#(shape), "cache": false}"#,
                retry: #"{"attempts": 1}"#)
            let result = try imgpipe("run", "pipe.json", "--new")
            // A feed that cannot be read, as a page that is no array: a listing error, of
            // which no item was listed (exit 2: fix the pipeline).
            #expect(result.status == 2, "\(shape): \(result.stdout) \(result.stderr)")
            #expect(result.stderr.contains("the feed at \(server.baseURL)/feed.json \(message)"), "\(shape): \(result.stderr)")
        }
    }
}
