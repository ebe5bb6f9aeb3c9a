import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

/// What a new user met on their first day ("user's first day" issue), each end to end on
/// the built binary: the bytes a loopback server received, the files written, the exit
/// codes and messages.
@Suite("First day", .serialized)
struct FirstDayTests {
    let work: TemporaryDirectory
    let jpeg: Data

    init() throws {
        work = try TemporaryDirectory("imgpipe-firstday")
        let path = work.url("fixture.jpg")
        try ImageFixtures.jpeg(at: path, width: 64, height: 48)
        jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
    }

    func imgpipe(_ arguments: String..., environment: [String: String] = [:]) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path, environment: environment)
    }

    /// A server that answers `paths` with the fixture JPEG and anything else with 404.
    func server(serving paths: Set<String>) throws -> TestHTTPServer {
        let jpeg = self.jpeg
        return try TestHTTPServer { request in paths.contains(request.path) ? .bytes(jpeg) : .status(404) }
    }

    // MARK: - 1. URLs are sent as written

    /// A URL's escapes are kept and only what a URI cannot hold (non-ASCII letters, a
    /// space) is encoded: the request line has `%20` and `%25` as the feed wrote them, not
    /// `%2520`. The same through a JSON feed, a URL list and the one-liner.
    @Test func aURLIsSentWithItsEscapesAsWritten() throws {
        let sent = "/special/%C3%89t%C3%A9%20sale%2050%25.jpg"
        let spaced = "/special/two%20words.jpg"
        let server = try server(serving: [sent, spaced])
        let written = server.baseURL + "/special/Été%20sale%2050%25.jpg"
        let withSpace = server.baseURL + "/special/two words.jpg"

        try work.write(written + "\n" + withSpace + "\n", to: "urls.txt")
        let oneLiner = try imgpipe("thumbnail", "urls.txt", "--fit", "32", "--to", "thumbs")
        #expect(oneLiner.status == 0, "stderr: \(oneLiner.stderr)")
        #expect(server.requests.map(\.target).sorted() == [sent, spaced].sorted())

        let feed = try TestHTTPServer { request in
            .json(#"[{"url": "\#(written)"}, {"url": "\#(withSpace)"}]"#)
        }
        try work.write("""
            {"version": 1, "source": {"type": "json-feed", "url": "\(feed.baseURL)/feed", "cache": false},
             "filters": [{"op": "fit", "width": 32, "height": 32}], "sink": {"type": "directory", "path": "out"}}
            """, to: "feed.json")
        let run = try imgpipe("run", "feed.json")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        #expect(server.requests.map(\.target).sorted() == [sent, sent, spaced, spaced])
    }

    /// A failed download names the URL asked for (not only its host), secrets masked as
    /// everywhere else.
    @Test func aFailedDownloadNamesTheURL() throws {
        let server = try server(serving: [])
        try work.write(server.baseURL + "/gone/Été.jpg\n", to: "urls.txt")
        try work.write("""
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "sink": {"type": "directory", "path": "out"}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        _ = try imgpipe("run", "pipe.json")
        let status = try imgpipe("status", "pipe.json", "--json")
        let report = try status.decoded(StatusReport.self)
        let message = report.failures.first?.message ?? ""
        #expect(message.contains("HTTP 404") && message.contains(server.baseURL + "/gone/%C3%89t%C3%A9.jpg"), "\(message)")

        let feed = try TestHTTPServer { _ in .json(#"[{"url": "\#(server.baseURL)/gone/x.jpg?token=s3cr3t-value"}]"#) }
        try work.write("""
            {"version": 1, "source": {"type": "json-feed", "url": "\(feed.baseURL)/feed?key=${IMG_TOKEN}", "cache": false},
             "sink": {"type": "directory", "path": "out2"}, "retry": {"attempts": 1}}
            """, to: "secret.json")
        let run = try imgpipe("run", "secret.json", environment: ["IMG_TOKEN": "s3cr3t-value"])
        #expect(run.status == 1)
        let failed = try imgpipe("status", "secret.json", "--json", environment: ["IMG_TOKEN": "s3cr3t-value"])
        let text = run.stdout + run.stderr + failed.stdout
        #expect(text.contains("/gone/x.jpg?token="), "\(text)")
        #expect(!text.contains("s3cr3t-value"), "a secret was shown: \(text)")
    }
}
