import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

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
        try work.write(
            """
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
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "sink": {"type": "directory", "path": "out"}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        _ = try imgpipe("run", "pipe.json")
        let status = try imgpipe("status", "pipe.json", "--json")
        let report = try status.decoded(StatusReport.self)
        let message = report.failures.first?.message ?? ""
        #expect(message.contains("HTTP 404") && message.contains(server.baseURL + "/gone/%C3%89t%C3%A9.jpg"), "\(message)")

        let feed = try TestHTTPServer { _ in .json(#"[{"url": "\#(server.baseURL)/gone/x.jpg?token=s3cr3t-value"}]"#) }
        try work.write(
            """
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

    // MARK: - Advice that fits the failure

    /// After a 404, a page that is not an image, an image over `limits.maxPixels`, a name
    /// clash and a server error, `status` advises a retry only for the server error (naming
    /// the reasons to retry) and names the fix for the others, which would fail again as
    /// they are. `resume --retry-failed=download` tries again only the downloads; an
    /// unknown reason is a usage error naming the valid ones.
    @Test func statusAdvisesARetryOnlyForFailuresThatMayPass() throws {
        try ImageFixtures.pngHeaderOnly(at: work.url("big.png"), width: 6000, height: 4000)
        let big = try Data(contentsOf: URL(fileURLWithPath: work.url("big.png")))
        let jpeg = self.jpeg
        let server = try TestHTTPServer { request in
            switch request.path {
            case "/a/photo.jpg", "/b/photo.jpg", "/ok.jpg": .bytes(jpeg)
            case "/big.png": .bytes(big, type: "image/png")
            case "/page.jpg": .json("<html>Not Found</html>")
            case "/busy.jpg": .status(503)
            case let path where path.hasPrefix("/c/photo-"): .bytes(jpeg)
            default: .status(404)
            }
        }
        // `b/photo.jpg` finds `photo.jpg` taken by `a/photo.jpg` and the name of its own
        // (`NameTemplate.uniqueStem`) taken by `c/…`, listed before it: a name clash.
        let own = "/c/photo-" + sha256Hex(server.baseURL + "/b/photo.jpg").prefix(8) + ".jpg"
        let paths = ["/ok.jpg", "/a/photo.jpg", own, "/b/photo.jpg", "/big.png", "/page.jpg", "/busy.jpg", "/gone.jpg"]
        try work.write(paths.map { server.baseURL + $0 }.joined(separator: "\n") + "\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "output": {"format": "jpeg", "name": "{name}.jpg"}, "limits": {"maxPixels": 1000000, "workers": 1},
             "sink": {"type": "directory", "path": "out"}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 1)
        let status = try imgpipe("status", "pipe.json")
        let text = status.stdout
        #expect(status.status == 0 && text.contains("5 failed"), "\(text)")
        #expect(!text.contains("--retry-failed`"), "a retry of every failure was advised: \(text)")
        #expect(
            text.contains(
                "next: 1 failed item(s) may pass on another try (network, server, timeout); try them again with "
                    + "`imgpipe resume pipe.json --retry-failed=download` (it also tries 1 that will fail again)"),
            "\(text)")
        #expect(text.contains("4 failed item(s) will fail again as they are"), "\(text)")
        #expect(
            text.contains("raise `limits.maxPixels` to 24000000, then `imgpipe resume pipe.json --retry-failed=limit`"), "\(text)"
        )
        #expect(text.contains("change `output.name`"), "\(text)")
        #expect(text.contains("remove the item from the feed or correct its URL"), "\(text)")
        #expect(text.contains("remove the item or correct its URL: it serves no image"), "\(text)")

        let unknown = try imgpipe("resume", "pipe.json", "--retry-failed=download,timeout")
        #expect(unknown.status == 2, "\(unknown.stderr)")
        #expect(
            unknown.stderr.contains(
                "unknown failure reason \"timeout\" (valid: download, decode, limit, process, encode, upload, io, blocked-address, hash-mismatch)"
            ),
            "\(unknown.stderr)")
        let asked = server.requests.count
        let retried = try imgpipe("resume", "pipe.json", "--retry-failed=download")
        #expect(retried.status == 1)
        #expect(retried.stderr.contains("retrying 2 failed item(s) of run #1 (download)"), "\(retried.stderr)")
        #expect(server.requests.dropFirst(asked).map(\.path).sorted() == ["/busy.jpg", "/gone.jpg"])
        // A bare --retry-failed still tries every failed item.
        let every = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(every.stderr.contains("retrying 5 failed item(s) of run #1"), "\(every.stderr)")
    }

    // MARK: - 2. Default names never collide

    /// Files of one name in several folders of a host (`…/101/main.jpg`, `…/102/main.jpg`)
    /// keep the URL's path below the host, so each has a name of its own; letters of any
    /// script, spaces and `%` stay as written. `--name` sets the template, `{name}` is the
    /// file name without folders.
    @Test func urlsOfOneFileNameInSeveralFoldersAreNamedApart() throws {
        let paths: Set<String> = [
            "/shop/101/main.jpg", "/shop/102/main.jpg", "/shop/103/main.jpg",
            "/special/%C3%89t%C3%A9%20sale%2050%25.jpg",
        ]
        let server = try server(serving: paths)
        try work.write(
            ["/shop/101/main.jpg", "/shop/102/main.jpg", "/shop/103/main.jpg", "/special/Été%20sale%2050%25.jpg"]
                .map { server.baseURL + $0 }.joined(separator: "\n") + "\n", to: "urls.txt")
        let made = try imgpipe("thumbnail", "urls.txt", "--fit", "32", "--to", "out")
        #expect(made.status == 0, "stderr: \(made.stderr)")
        #expect(
            work.files(under: "out").filter { !$0.contains(".imgpipe") }.sorted()
                == ["shop/101/main.jpg", "shop/102/main.jpg", "shop/103/main.jpg", "special/Été sale 50%.jpg"],
            "\(work.files(under: "out"))")

        let flat = try imgpipe("thumbnail", "urls.txt", "--fit", "32", "--to", "flat", "--name", "{name}-{index}.{ext}")
        #expect(flat.status == 0, "stderr: \(flat.stderr)")
        #expect(
            Set(work.files(under: "flat").filter { !$0.contains(".imgpipe") })
                == ["main-1.jpg", "main-2.jpg", "main-3.jpg", "Été sale 50%-4.jpg"], "\(work.files(under: "flat"))")
        let bad = try imgpipe("thumbnail", "urls.txt", "--name", "{nope}.{ext}")
        #expect(bad.status == 2 && bad.stderr.contains("--name") && bad.stderr.contains("{nope}"), "\(bad.stderr)")
    }

    /// An `http` sink keeps a name's `/` as a path separator (it was sent as `%2F`).
    @Test func anHTTPSinkKeepsTheFoldersOfAName() throws {
        let jpeg = self.jpeg
        let server = try TestHTTPServer { request in
            if request.method == "PUT" { return .status(201) }
            return request.path.hasPrefix("/shop/") ? .bytes(jpeg) : .status(404)
        }
        try work.write(server.baseURL + "/shop/101/main.jpg\n" + server.baseURL + "/shop/102/main.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "sink": {"type": "http", "url": "\(server.baseURL)/put/{stem}.{ext}"}}
            """, to: "put.json")
        let run = try imgpipe("run", "put.json")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        #expect(
            server.requests.filter { $0.method == "PUT" }.map(\.target).sorted()
                == ["/put/shop/101/main.jpg", "/put/shop/102/main.jpg"])
    }

    /// An item named apart (`dup.png` beside `dup.jpg`) keeps its name of its own on a
    /// re-run: it is carried over like any unchanged item, not made again (a reviewer saw
    /// `dup-….jpg` rewritten on every re-run, and `plan` call it "named otherwise").
    @Test func aNameOfItsOwnIsKeptOnReRuns() throws {
        try work.folder("photos")
        try jpeg.write(to: URL(fileURLWithPath: work.url("photos/dup.jpg")))
        try ImageFixtures.rgbaPNG(at: work.url("photos/dup.png"), width: 64, height: 48)
        let first = try imgpipe("thumbnail", "photos", "--fit", "20x20", "--to", "thumbs")
        #expect(first.status == 0, "\(first.stderr)")
        let own = "dup-" + sha256Hex("dup.png").prefix(8) + ".jpg"
        #expect(work.files(under: "thumbs") == [own, "dup.jpg"])
        let before = work.stamps(under: "thumbs")
        let again = try imgpipe("thumbnail", "photos", "--fit", "20x20", "--to", "thumbs")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(work.stamps(under: "thumbs") == before, "a thumbnail was made again")
        let saved = try #require(work.files(under: ".imgpipe").first { $0.hasPrefix("thumbnail-") && $0.hasSuffix(".json") })
        let plan = try imgpipe("plan", ".imgpipe/" + saved)
        #expect(plan.status == 0 && !plan.stdout.contains("named otherwise"), "\(plan.stdout)")

        // A new `dup.gif`, listed before both, does not take the name `dup.jpg` kept: it
        // gets one of its own, and the others' files stay as they were.
        try ImageFixtures.write(try ImageFixtures.photo(width: 30, height: 10), to: work.url("photos/dup.gif"))
        let added = try imgpipe("thumbnail", "photos", "--fit", "20x20", "--to", "thumbs")
        #expect(added.status == 0, "\(added.stderr)")
        let gif = "dup-" + sha256Hex("dup.gif").prefix(8) + ".jpg"
        #expect(work.files(under: "thumbs") == [own, gif, "dup.jpg"].sorted())
        #expect(work.stamps(under: "thumbs").filter { $0.key != gif } == before, "a kept name moved")
        #expect(try ImageFixtures.decode(work.url("thumbs/\(gif)")).height == 7)
    }

    /// An address imgpipe never fetches (`ftp:`) fails for good: `status` names the fix and
    /// advises no retry, and the message names the URL once.
    @Test func anAddressThatIsNotHTTPIsAdvisedAsPermanent() throws {
        try work.write("ftp://127.0.0.1/a.jpg\n", to: "urls.txt")
        let run = try imgpipe("thumbnail", "urls.txt", "--to", "out")
        #expect(run.status == 1, "\(run.stderr)")
        #expect(run.stderr.contains("only http and https URLs are fetched, got ftp://127.0.0.1/a.jpg"), "\(run.stderr)")
        #expect(!run.stderr.contains("asking for"), "\(run.stderr)")
        let saved = try #require(work.files(under: ".imgpipe").first { $0.hasPrefix("thumbnail-") && $0.hasSuffix(".json") })
        let status = try imgpipe("status", ".imgpipe/" + saved)
        #expect(status.stdout.contains("correct the item's address in the feed"), "\(status.stdout)")
        #expect(!status.stdout.contains("may pass on another try"), "\(status.stdout)")
        // A retry of a reason no item failed for says so, rather than to add the flag given.
        let none = try imgpipe("resume", ".imgpipe/" + saved, "--retry-failed=decode")
        #expect(none.stderr.contains("(none failed for decode given to --retry-failed)"), "\(none.stderr)")
    }

    // MARK: - 3. `$$` is a literal dollar

    /// `"$${meta.price}"` is `$` and the item's price: the caption drawn is the one a
    /// literal `"$19.99"` draws. A sink's path with `$$` is written with one `$`.
    @Test func aDoubleDollarIsALiteralDollar() throws {
        let jpeg = self.jpeg
        let server = try TestHTTPServer { request in
            request.path == "/feed"
                ? .json(#"[{"url": "http://\#(request.headers["host"]!)/a.jpg", "price": "19.99"}]"#)
                : .bytes(jpeg)
        }
        func pipeline(_ caption: String, to folder: String) -> String {
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed", "cache": false},
             "filters": [{"op": "fit", "width": 200, "height": 150, "enlarge": true}, {"op": "caption", "top": "\(caption)"}],
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "\(folder)"}}
            """
        }
        try work.write(pipeline("$${meta.price}", to: "price$$tag"), to: "price.json")
        try work.write(pipeline("$19.99", to: "literal"), to: "literal.json")
        let validated = try imgpipe("validate", "price.json")
        #expect(validated.status == 0, "stderr: \(validated.stderr)")
        let priced = try imgpipe("run", "price.json")
        #expect(priced.status == 0, "stderr: \(priced.stderr)")
        #expect(try imgpipe("run", "literal.json").status == 0)
        let drawn = try ImageFixtures.decode(work.url("price$tag/a.png"))
        let literal = try ImageFixtures.decode(work.url("literal/a.png"))
        #expect(drawn.maxDifference(from: literal, rows: 0..<literal.height) == 0, "the caption is not \"$19.99\"")
    }

    // MARK: - 4. --quiet

    /// With `--quiet` only errors, warnings and the exit code speak: a duplicate key
    /// (processed once: nothing is lost) is not told; entries left out are (no item, failure
    /// nor exit code tells of them). Without `--quiet` both are told.
    @Test func quietTellsOnlyWhatIsLost() throws {
        let jpeg = self.jpeg
        let server = try TestHTTPServer { request in
            guard request.path == "/feed" else { return .bytes(jpeg) }
            let base = "http://\(request.headers["host"]!)"
            return .json(
                #"[{"url": "\#(base)/a.jpg"}, {"url": "\#(base)/a.jpg"}, {"title": "no url"}, {"url": "\#(base)/b.jpg"}]"#)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}], "sink": {"type": "directory", "path": "out"}}
            """, to: "feed.json")
        let quiet = try imgpipe("run", "feed.json", "--quiet")
        #expect(quiet.status == 0, "stderr: \(quiet.stderr)")
        #expect(quiet.stdout.isEmpty, "stdout: \(quiet.stdout)")
        let lines = quiet.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines.allSatisfy { $0.contains("left out") }, "stderr: \(quiet.stderr)")

        let told = try imgpipe("run", "feed.json", "--new")
        #expect(told.status == 0 && told.stderr.contains("duplicate key") && told.stderr.contains("left out"), "\(told.stderr)")
    }

    // MARK: - 5. Colours on a terminal, never elsewhere

    /// On a terminal, `failed:`, the summary's failed count and `error:` are painted red;
    /// with `NO_COLOR` set (to anything but empty), in a pipe, or for text from a feed
    /// (here, a file name holding an escape sequence), nothing is.
    @Test(.enabled(if: ImgpipeBinary.canRunOnTerminal, "needs util-linux script"))
    func coloursOnlyOnATerminalAndNeverWithNoColour() throws {
        try work.write("not an image", to: "in/bad\u{1B}[32m.jpg")
        try jpeg.write(to: URL(fileURLWithPath: work.url("in/good.jpg")))
        let red = "\u{1B}[1;31m"
        let painted = try ImgpipeBinary.runOnTerminal(
            ["thumbnail", "in", "--fit", "16x16", "--to", "out"], in: work.path, environment: ["NO_COLOR": ""])
        #expect(painted.status == 1, "\(painted.output)")
        #expect(
            painted.output.contains(red + "failed:\u{1B}[0m bad\\u{1B}[32m.jpg: decode"), "\(painted.output.debugDescription)")
        #expect(painted.output.contains(", \(red)1 failed\u{1B}[0m of 2"), "\(painted.output.debugDescription)")
        #expect(!painted.output.contains("\u{1B}[32m"), "the file name's escape is shown, not sent")
        let error = try ImgpipeBinary.runOnTerminal(["run", "missing.json"], in: work.path, environment: ["NO_COLOR": ""])
        #expect(error.status == 2 && error.output.contains(red + "error:\u{1B}[0m "), "\(error.output.debugDescription)")

        let plain = try ImgpipeBinary.runOnTerminal(
            ["thumbnail", "in", "--fit", "16x16", "--to", "out2"], in: work.path, environment: ["NO_COLOR": "1"])
        #expect(plain.status == 1 && plain.output.contains("failed: bad"), "\(plain.output.debugDescription)")
        #expect(!plain.output.contains("\u{1B}[1;"), "\(plain.output.debugDescription)")
        let piped = try imgpipe("thumbnail", "in", "--fit", "16x16", "--to", "out3")
        #expect(piped.status == 1 && piped.stderr.contains("failed: bad"), "\(piped.stderr)")
        #expect(!(piped.stdout + piped.stderr).contains("\u{1B}"), "\(piped.stderr.debugDescription)")
    }
}
