import Foundation
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// `dry-run` of a pipeline's own source: a sample spread across a folder or a remote
/// feed's first items, downloaded through the pipeline's cache, and the errors of a
/// local-only pipeline without samples. The built binary against a loopback server.
@Suite("Dry-run of a feed", .serialized)
struct DryRunFeedTests {
    let work: TemporaryDirectory
    init() throws { work = try TemporaryDirectory("imgpipe-dryrun-feed") }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    /// A json-feed of `count` images at `/images/photo-<n>.jpg`; those in `missing` are 404.
    func feedServer(count: Int, missing: Set<Int> = []) throws -> TestHTTPServer {
        let photo = work.url("photo.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 120, height: 80), to: photo)
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: photo))
        return try TestHTTPServer { request in
            let base = "http://\(request.headers["host"] ?? "")"
            if request.path == "/feed.json" {
                return .json(
                    "["
                        + (1...count).map { #"{"url": "\#(base)/images/photo-\#($0).jpg", "title": "no. \#($0)"}"# }
                        .joined(separator: ",") + "]")
            }
            if request.path.hasPrefix("/images/photo-"),
                let number = Int(request.path.dropFirst("/images/photo-".count).dropLast(".jpg".count)),
                (1...count).contains(number)
            {
                return missing.contains(number) ? .status(404) : .bytes(jpeg)
            }
            return .status(404)
        }
    }

    func pipeline(feed: String, cache: String = #"{"path": "cache"}"#) throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(feed)", "cache": \(cache)},
             "filters": [{"op": "fit", "width": 60, "height": 60}],
             "sink": {"type": "directory", "path": "out"}, "limits": {"timeout": 5}, "retry": {"attempts": 2, "backoff": 0.05}}
            """, to: "pipe.json")
    }

    func imageRequests(_ server: TestHTTPServer) -> Int {
        server.requests.filter { $0.path.hasPrefix("/images/") }.count
    }

    @Test func previewsItemsOfARemoteFeedThenReadsThemFromTheCache() throws {
        let server = try feedServer(count: 5)
        defer { server.stop() }
        try pipeline(feed: server.baseURL + "/feed.json")

        // No samples/ folder: the pipeline's own feed is previewed.
        let first = try imgpipe("dry-run", "pipe.json", "--limit", "3", "--out", "first")
        #expect(first.status == 0, "stderr: \(first.stderr)")
        #expect(first.stderr.contains("previewing items of the pipeline's json-feed source"), "\(first.stderr)")
        #expect(first.stdout.contains("previewing 3 of 5 images"), "\(first.stdout)")
        #expect(imageRequests(server) == 3 && server.requests(to: "/feed.json").count == 1)
        // Three of five, spread: the first, the middle and the last.
        let previews = work.files(under: "first")
        for number in [1, 3, 5] {
            #expect(
                previews.contains("images/photo-\(number).jpg") && previews.contains("source/\(number)-photo-\(number).jpg"),
                "\(previews)")
            let preview = try ImageFixtures.decode(work.url("first/images/photo-\(number).jpg"))
            #expect((preview.width, preview.height) == (60, 40))
        }
        #expect(!previews.contains("images/photo-2.jpg") && !previews.contains("images/photo-4.jpg"))
        #expect(first.stdout.contains("120×80") && first.stdout.contains("60×40"))
        #expect(first.stdout.contains("contact sheet: first/index.html"))
        let html = try String(contentsOfFile: work.url("first/index.html"), encoding: .utf8)
        #expect(html.contains(#"data-samples="3" data-failed="0""#))

        // The second dry-run (asked for with --feed) reads page and images from the cache.
        let second = try imgpipe("dry-run", "pipe.json", "--feed", "--limit", "3", "--out", "second")
        #expect(second.status == 0, "stderr: \(second.stderr)")
        #expect(imageRequests(server) == 3, "the cached images were downloaded again")
        #expect(server.requests(to: "/feed.json").count == 1)
        #expect(work.files(under: "second").contains("images/photo-5.jpg"))

        // No state: nothing but the cache was written outside the preview folders.
        #expect(!work.files().contains { $0.hasSuffix(".sqlite") }, "\(work.files())")
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")))
        #expect(!FileManager.default.fileExists(atPath: work.url("out")), "dry-run wrote to a sink")
    }

    @Test func aFeedGivesTwelveSamplesByDefaultAndAFailedDownloadIsARow() throws {
        let server = try feedServer(count: 15, missing: [2])
        defer { server.stop() }
        try pipeline(feed: server.baseURL + "/feed.json", cache: "false")
        let result = try imgpipe("dry-run", "pipe.json", "--feed", "--out", "preview")
        #expect(result.status == 1, "a failed sample exits 1: \(result.stderr)")
        let photos = Set(server.requests.map(\.path).filter { $0.hasPrefix("/images/") })
        #expect(photos.count == 12 && photos.contains("/images/photo-2.jpg") && photos.contains("/images/photo-15.jpg"))
        let row = try #require(result.stdout.split(separator: "\n").first { $0.contains("/photo-2.jpg ") })
        #expect(row.contains("download: HTTP 404"), "\(row)")
        #expect(result.stdout.contains("11 sample(s) previewed in preview, 1 sample(s) failed"))
    }

    /// A long remote feed is not listed whole: the sample is spread over its first 200
    /// items, and only the 12 taken are downloaded.
    @Test func aLongFeedIsSampledAcrossItsFirstItems() throws {
        let server = try feedServer(count: 300)
        defer { server.stop() }
        try pipeline(feed: server.baseURL + "/feed.json", cache: "false")
        let result = try imgpipe("dry-run", "pipe.json", "--feed", "--out", "preview")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let numbers = server.requests.map(\.path).filter { $0.hasPrefix("/images/photo-") }
            .compactMap { Int($0.dropFirst("/images/photo-".count).dropLast(".jpg".count)) }
        #expect(numbers.count == 12 && Set(numbers).count == 12, "\(numbers)")
        #expect(numbers.allSatisfy { $0 <= 200 } && numbers.contains { $0 > 180 } && numbers.contains { $0 < 20 }, "\(numbers)")
        #expect(result.stdout.contains("previewing 12 of the first 200 items listed"), "\(result.stdout)")
        #expect(result.stdout.contains("--limit N takes N, --all every one"))
        // Keys longer than the sample column (URLs) are shortened in their middle, so the
        // columns stay in line.
        let rows = result.stdout.split(separator: "\n").filter { $0.hasPrefix("http://") }
        #expect(rows.count == 12 && rows.allSatisfy { $0.contains("…") && $0.count <= 100 }, "\(result.stdout)")
    }

    @Test func aDirectorySourceGivesASpreadOfItsFiles() throws {
        for name in ["a", "b", "c"] { try ImageFixtures.jpeg(at: work.url("in/\(name).jpg"), width: 80, height: 80) }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 40}], "sink": {"type": "directory", "path": "out"}}
            """, to: "local.json")
        let result = try imgpipe("dry-run", "local.json", "--feed", "--limit", "2", "--out", "preview")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(work.files(under: "preview").filter { !$0.contains("/") } == ["a.jpg", "c.jpg", "index.html"])
    }

    @Test func aLocalPipelineWithoutSamplesNamesTheFolder() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "missing"},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "local.json")
        let result = try imgpipe("dry-run", "local.json")
        #expect(result.status == 2)
        #expect(
            result.stderr.contains(
                "samples folder samples does not exist (give one with --samples, or preview the pipeline's own source with --feed)"
            ),
            "stderr: \(result.stderr)")
        let feed = try imgpipe("dry-run", "local.json", "--feed")
        #expect(feed.status == 2 && feed.stderr.contains("missing does not exist"), "stderr: \(feed.stderr)")
        let both = try imgpipe("dry-run", "local.json", "--feed", "--samples", "x")
        #expect(both.status == 2 && both.stderr.contains("--samples and --feed cannot be used together"))
        let three = try imgpipe("dry-run", "local.json", "local.json", "local.json")
        #expect(three.status == 2 && three.stderr.contains("one pipeline file, or two to compare"))
    }
}
