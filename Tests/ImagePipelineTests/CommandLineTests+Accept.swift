import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// `accept` rules and the new pipeline keys, through the built binary.
extension CommandLineTests {
    /// A pipeline of `source` (fit 32×32 into `out/`) with more top-level keys in `extra`.
    @discardableResult
    func acceptPipeline(source: String, extra: String = "", limits: String = #"{"timeout": 5}"#) throws -> String {
        try work.write(
            """
            {"version": 1, "source": \(source),
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sinks": [{"type": "directory", "path": "out"}], "limits": \(limits)\(extra)}
            """, to: "pipe.json")
    }

    @Test func acceptRulesSkipFromTheHeader() throws {
        let folder = try work.folder("in")
        try ImageFixtures.jpeg(at: folder + "/good.jpg", width: 400, height: 300)
        try ImageFixtures.jpeg(at: folder + "/small.jpg", width: 60, height: 40)
        try ImageFixtures.jpeg(at: folder + "/pano.jpg", width: 900, height: 200)
        // Stored 300×90 but shown 90×300: too narrow once turned.
        try ImageFixtures.jpeg(at: folder + "/turned.jpg", width: 300, height: 90, orientation: 6)
        try ImageFixtures.write(try ImageFixtures.photo(width: 300, height: 300), to: folder + "/anim.gif")
        try acceptPipeline(
            source: #"{"type": "directory", "path": "in"}"#,
            extra: #", "accept": {"minWidth": 100, "minHeight": 50, "maxAspect": 3, "formats": ["jpg", "png"]}"#)

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(work.files(under: "out") == ["good.jpg"])
        let skipped = Dictionary(uniqueKeysWithValues: try status().skips.map { ($0.key, $0) })
        #expect(
            skipped["small.jpg"].map { ($0.reason, $0.message) } ?? ("", "") == (
                "too-small", "60×40 is under accept.minWidth 100"
            ))
        #expect(skipped["turned.jpg"]?.message == "90×300 is under accept.minWidth 100")
        #expect(
            skipped["pano.jpg"].map { ($0.reason, $0.message) } ?? ("", "") == (
                "aspect", "900×200 is 4.50:1, over accept.maxAspect 3"
            ))
        #expect(
            skipped["anim.gif"].map { ($0.reason, $0.message) } ?? ("", "") == (
                "format", "gif is not in accept.formats (jpeg, png)"
            ))
        #expect(try status().skipsByReason == ["too-small": 2, "aspect": 1, "format": 1])

        try acceptPipeline(source: #"{"type": "directory", "path": "in"}"#, extra: #", "accept": {"minBytes": 100000}"#)
        _ = try imgpipe("run", "pipe.json", "--new")
        #expect(
            try status().skips.first { $0.key == "small.jpg" }?.message.hasSuffix("bytes is under accept.minBytes 100000") == true
        )
    }

    /// `in/<stem>.gif` (300×300, listed before the JPEG) and `in/<stem>.jpg` (400×200), whose
    /// outputs have one name, and a pipeline that accepts JPEG only: the GIF is skipped.
    ///
    /// With `slowFirst`, a 3000×3000 PNG `in/0-slow.png` is listed before them, PNG is accepted
    /// too, and one item at a time is processed (a local file is read by the pixel stage), in
    /// the order listed: the GIF's skip then waits for the PNG's decode (a tenth of a second or
    /// more), long after `<stem>.jpg` is listed and has failed for the name, so the JPEG is
    /// always *taken up again*. Without it the skip may come before the JPEG is listed, which
    /// then simply gets the free name.
    func gifAndJPEGOfOneName(_ stem: String, slowFirst: Bool = false) throws {
        let folder = try work.folder("in")
        try ImageFixtures.write(try ImageFixtures.photo(width: 300, height: 300), to: folder + "/\(stem).gif")
        try ImageFixtures.jpeg(at: folder + "/\(stem).jpg", width: 400, height: 200)
        guard slowFirst else {
            try acceptPipeline(source: #"{"type": "directory", "path": "in"}"#, extra: #", "accept": {"formats": ["jpeg"]}"#)
            return
        }
        let large = try ImageFixtures.photo(width: 300, height: 300).resized(horizontal: 10, vertical: 10)
        try ImageFixtures.write(large, to: folder + "/0-slow.png[compression=1]")
        try acceptPipeline(
            source: #"{"type": "directory", "path": "in"}"#, extra: #", "accept": {"formats": ["jpeg", "png"]}"#,
            limits: #"{"timeout": 5, "workers": 1}"#)
    }

    /// `a.gif` (listed first) and `a.jpg` both want `a.jpg`: the JPEG gets a name of its
    /// own at once (`NameTemplate.uniqueStem`), and keeps it when the GIF is then skipped.
    @Test func aSkippedItemsNameNeverCostsAnotherItsOutput() throws {
        try gifAndJPEGOfOneName("a", slowFirst: true)

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let unique = "a-" + sha256Hex("a.jpg").prefix(8) + ".jpg"
        #expect(work.files(under: "out") == ["0-slow.jpg", unique])
        let made = try ImageFixtures.decode(work.url("out/\(unique)"))
        #expect((made.width, made.height) == (32, 16), "the JPEG's own pixels, not the GIF's")
        let report = try status()
        #expect(report.failures.isEmpty && report.done == 2)
        #expect(report.skips.map(\.key) == ["a.gif"])
    }

    /// A JSON feed of a GIF and a JPEG whose output name is one file (`same.jpg`), keyed
    /// with line feeds. The GIF's picture is sent only once the state file records that the
    /// JPEG failed for the name; the GIF is then skipped and gives the name up, and the JPEG
    /// is taken up again and made: the notice names it with its line feeds escaped, so a key
    /// cannot forge a line of imgpipe's own.
    @Test func aSkippedItemLeavesANameNoStemChangesToTheItemThatFailedForIt() throws {
        try ImageFixtures.write(try ImageFixtures.photo(width: 300, height: 300), to: work.url("files/a.gif"))
        try ImageFixtures.jpeg(at: work.url("files/a.jpg"), width: 400, height: 200)
        let gif = try Data(contentsOf: URL(fileURLWithPath: work.url("files/a.gif")))
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: work.url("files/a.jpg")))
        let state = work.url(".imgpipe/pipe.sqlite")
        let jpegKey = "x\nFORGED: all done.jpg"
        @Sendable func jpegFailed() -> Bool {
            guard FileManager.default.fileExists(atPath: state), let queue = try? DatabaseQueue(path: state) else { return false }
            let status = try? queue.read { db in
                try String.fetchOne(db, sql: "SELECT status FROM item WHERE key = ?", arguments: [jpegKey])
            }
            return status == "failed"
        }
        let base = LockedBox("")
        let server = try TestHTTPServer { request in
            switch request.path {
            case "/feed.json":
                return .json(
                    #"[{"url": "\#(base.withLock { $0 })/a.gif", "id": "x\nFORGED: all done.gif"}, {"url": "\#(base.withLock { $0 })/a.jpg", "id": "x\nFORGED: all done.jpg"}]"#
                )
            case "/a.gif":
                let deadline = Date().addingTimeInterval(60)
                while !jpegFailed(), Date() < deadline { usleep(20_000) }
                return .bytes(gif, type: "image/gif")
            case "/a.jpg": return .bytes(jpeg, type: "image/jpeg")
            default: return .status(404)
            }
        }
        base.withLock { $0 = server.baseURL }
        try acceptPipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/feed.json", "keyField": "id", "cache": false}"#,
            extra: #", "accept": {"formats": ["jpeg"]}, "output": {"format": "jpeg", "name": "same.jpg"}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stderr.contains("x\\u{A}FORGED: all done.jpg: taken up again"), "stderr: \(result.stderr)")
        #expect(!result.stderr.split(separator: "\n").contains { $0.hasPrefix("FORGED") }, "stderr: \(result.stderr)")
        #expect(work.files(under: "out") == ["same.jpg"])
        let made = try ImageFixtures.decode(work.url("out/same.jpg"))
        #expect((made.width, made.height) == (32, 16), "the JPEG's own pixels, not the GIF's")
    }

    /// A state file of an imgpipe that kept a skipped item's names: a resume frees them, so
    /// `--retry-failed` makes the item that failed for one.
    @Test func aResumeFreesTheNamesSkippedItemsOfAnOlderImgpipeKept() throws {
        let folder = try work.folder("in")
        try ImageFixtures.write(try ImageFixtures.photo(width: 300, height: 300), to: folder + "/a.gif")
        try ImageFixtures.jpeg(at: folder + "/a.jpg", width: 400, height: 200)
        try acceptPipeline(
            source: #"{"type": "directory", "path": "in"}"#,
            extra: #", "accept": {"formats": ["jpeg"]}, "output": {"format": "jpeg", "name": "same.jpg"}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        // As the older imgpipe left it: the name still a.gif's, a.jpg failed for it.
        let queue = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite"))
        try queue.write { db in
            try db.execute(sql: "UPDATE output SET name = NULL WHERE itemKey = 'a.jpg'")
            try db.execute(sql: "UPDATE output SET name = 'same.jpg' WHERE itemKey = 'a.gif'")
            try db.execute(
                sql: """
                    UPDATE item SET status = 'failed', reason = 'encode', message = 'output name "same.jpg" is already used by item "a.gif"'
                    WHERE key = 'a.jpg'
                    """)
            try db.execute(sql: "UPDATE delivery SET status = 'pending' WHERE itemKey = 'a.jpg'")
        }
        try FileManager.default.removeItem(atPath: work.url("out/same.jpg"))
        let retried = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(retried.status == 0, "stderr: \(retried.stderr)")
        #expect(work.files(under: "out") == ["same.jpg"])
        #expect(try status().done == 1)
    }

    @Test func newKeysAreDecodedStrictly() throws {
        func fault(_ extra: String, source: String = #"{"type": "directory", "path": "."}"#) -> String {
            do {
                try acceptPipeline(source: source, extra: extra)
                _ = try PipelineSpec.load(path: work.url("pipe.json"))
                return ""
            } catch {
                return String(describing: error)
            }
        }
        #expect(fault(#", "accept": {"minWidht": 10}"#).contains("accept.minWidht"))
        #expect(fault(#", "accept": {"formats": ["bmp"]}"#).contains("accept.formats[0]"))
        #expect(fault(#", "accept": {"maxAspect": 0.5}"#).contains("accept.maxAspect"))
        #expect(fault(#", "userAgent": "two\nlines""#).contains("userAgent"))
        #expect(
            fault(#", "userAgent": "bot-${WORKER}/1.0""#).contains("userAgent: expected the user agent as it is sent (no ${NAME}")
        )
        #expect(fault("", source: #"{"type": "directory", "path": ".", "robots": true}"#).contains("robots"))
        let fallback =
            #"{"type": "url-list", "path": "u.txt", "fallback": {"type": "url-list", "path": "v.txt", "robots": true}}"#
        #expect(fault("", source: fallback).contains("source.fallback.robots"))

        try acceptPipeline(
            source: #"{"type": "url-list", "path": "u.txt", "respectOptOut": false, "robots": true}"#,
            extra: #", "userAgent": "mybot/1.0 (+mailto:ops@example.com)", "accept": {"formats": ["tif", "heif"]}"#)
        let spec = try PipelineSpec.load(path: work.url("pipe.json"))
        #expect(spec.source.remote?.respectOptOut == false && spec.source.remote?.robots == true)
        #expect(spec.userAgent == "mybot/1.0 (+mailto:ops@example.com)")
        #expect(spec.accept.formats == [.tiff, .heif])
        #expect(ImgpipeIdentity.productToken(of: spec.userAgent) == "mybot")
    }
}
