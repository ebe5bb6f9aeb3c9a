import Foundation
import GRDB
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// Several outputs per item (`"outputs"`), with the built binary: geometry and formats on
/// decoded files, sinks that take some outputs, status and export, `kill -9` then resume.
@Suite("Several outputs", .serialized)
struct OutputsTests {
    let work: TemporaryDirectory
    /// Input sizes (landscape, portrait, small).
    static let sizes = [(1200, 800), (600, 900), (250, 200), (1000, 1000)]

    init() throws {
        work = try TemporaryDirectory("imgpipe-outputs")
        for (index, size) in Self.sizes.enumerated() {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: size.0, height: size.1, seed: index + 1),
                to: work.url("in/photo-\(index + 1).jpg"))
        }
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    static let threeOutputs = """
        "outputs": [
          {"id": "w320", "filters": [{"op": "fit", "width": 320, "height": 320}], "format": "avif", "quality": 50},
          {"id": "w640", "filters": [{"op": "fit", "width": 640, "height": 640}], "format": "webp", "quality": 80},
          {"id": "thumb", "filters": [{"op": "fill", "width": 100, "height": 80}, {"op": "grayscale"}], "format": "png",
           "name": "thumbs/{stem}-{width}x{height}.{ext}"}
        ]
        """

    func image(_ relative: String) throws -> VipsImage {
        try VipsImage.open(path: work.url(relative))
    }

    func magic(_ relative: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: work.url(relative))).prefix(12))
    }

    @Test func threeOutputsHaveTheirGeometryFormatsAndSinks() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, \(Self.threeOutputs),
             "sinks": [{"type": "directory", "path": "out"}, {"type": "directory", "path": "thumbs", "outputs": ["thumb"]}]}
            """, to: "pipe.json")
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("4 done, 0 skipped, 0 failed of 4"), "\(result.stdout)")

        for (index, size) in Self.sizes.enumerated() {
            let stem = "photo-\(index + 1)"
            let small = try image("out/\(stem)-w320.avif")
            let expectedSmall = BoxGeometry.fit(width: size.0, height: size.1, box: (320, 320), enlarge: false)
            #expect((small.width, small.height) == expectedSmall, "\(stem) w320")
            #expect(try magic("out/\(stem)-w320.avif")[4..<12] == Array("ftypavif".utf8)[...], "AVIF")
            let large = try image("out/\(stem)-w640.webp")
            let expectedLarge = BoxGeometry.fit(width: size.0, height: size.1, box: (640, 640), enlarge: false)
            #expect((large.width, large.height) == expectedLarge, "\(stem) w640")
            #expect(try magic("out/\(stem)-w640.webp")[8..<12] == Array("WEBP".utf8)[...], "WebP")
            let thumb = try image("out/thumbs/\(stem)-100x80.png")
            #expect((thumb.width, thumb.height, thumb.bands) == (100, 80, 1), "\(stem) thumb: filled and grey")
            #expect(try magic("out/thumbs/\(stem)-100x80.png")[1..<4] == Array("PNG".utf8)[...])
            // The second sink takes the thumbnails only, byte for byte the same.
            #expect(
                try Data(contentsOf: URL(fileURLWithPath: work.url("thumbs/thumbs/\(stem)-100x80.png")))
                    == Data(contentsOf: URL(fileURLWithPath: work.url("out/thumbs/\(stem)-100x80.png"))))
        }
        #expect(work.files(under: "thumbs").allSatisfy { $0.hasPrefix("thumbs/") && $0.hasSuffix(".png") })
        #expect(work.files(under: "thumbs").count == 4)
        #expect(work.files(under: "out").count == 12)

        let report = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(report.outputs["w320"] == OutputCounts(format: "avif", deliveries: DeliveryCounts(done: 4)))
        #expect(report.outputs["w640"] == OutputCounts(format: "webp", deliveries: DeliveryCounts(done: 4)))
        #expect(report.outputs["thumb"] == OutputCounts(format: "png", deliveries: DeliveryCounts(done: 8)))
        #expect(report.sinks["directory-0"] == DeliveryCounts(done: 12))
        #expect(report.sinks["directory-1"] == DeliveryCounts(done: 4))
        let text = try imgpipe("status", "pipe.json").stdout
        #expect(text.contains("output thumb (png): 8 done, 0 failed, 0 pending deliveries"), "\(text)")

        // Export: every output's name, size and hash are those of the file on disk.
        let records = try imgpipe("export", "pipe.json").jsonLines()
        #expect(records.count == 4)
        for record in records {
            let outputs = try #require(record["outputs"] as? [String: [String: Any]])
            #expect(Set(outputs.keys) == ["w320", "w640", "thumb"])
            for (id, output) in outputs {
                let name = try #require(output["name"] as? String)
                let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url("out/" + name)))
                #expect(output["sha256"] as? String == sha256Hex(bytes), "\(id) \(name)")
                #expect(output["bytes"] as? Int == bytes.count)
                let decoded = try VipsImage.open(data: bytes)
                #expect(output["width"] as? Int == decoded.width && output["height"] as? Int == decoded.height)
            }
            let deliveries = try #require(record["deliveries"] as? [String: [String: [String: Any]]])
            #expect(Set(deliveries["directory-0"]?.keys ?? [:].keys) == ["w320", "w640", "thumb"])
            #expect(Set(deliveries["directory-1"]?.keys ?? [:].keys) == ["thumb"])
        }
        // CSV: columns per output, and per sink and output.
        let csv = try imgpipe("export", "pipe.json", "--format", "csv").stdout.split(separator: "\n")
        #expect(csv.count == 5)
        let header = csv[0].split(separator: ",").map(String.init)
        #expect(header.contains("output.w320.sha256") && header.contains("output.thumb.width"))
        #expect(header.contains("delivery.directory-1.thumb.status") && header.contains("delivery.directory-0.w640.remoteURL"))
        #expect(!header.contains("output.name"))
    }

    /// `{key}` and `{stem}.{ext}` give a JPEG input's two outputs one name: not knowable
    /// from the file, so each item fails with the name (it used to stop the run with
    /// SQLite's UNIQUE constraint, found by review).
    @Test func twoOutputsOfOneItemWithOneNameFailTheItemNotTheRun() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "outputs": [{"id": "a", "name": "{key}"}, {"id": "b", "name": "{stem}.{ext}"}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        #expect(try imgpipe("validate", "pipe.json").status == 0)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1, "items failed; the run finished: \(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("0 done, 0 skipped, 4 failed of 4"), "\(result.stdout)")
        let report = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(
            report.failures.count == 4
                && report.failures.map(\.message).allSatisfy { $0.hasPrefix("two outputs of the item are both named \"photo-") })
        #expect(work.files(under: "out").isEmpty)
    }

    @Test func aSharedLoadGivesWhatEachOutputWouldGiveOnItsOwn() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, \(Self.threeOutputs),
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 640, "height": 640}], "output": {"format": "webp", "quality": 80},
             "sink": {"type": "directory", "path": "single"}}
            """, to: "single.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        #expect(try imgpipe("run", "single.json").status == 0)
        for index in Self.sizes.indices {
            let several = try image("out/photo-\(index + 1)-w640.webp")
            let alone = try image("single/photo-\(index + 1).webp")
            #expect((several.width, several.height) == (alone.width, alone.height))
            let similarity = try several.structuralSimilarity(to: alone)
            #expect(similarity > 0.97, "photo-\(index + 1): SSIM \(similarity)")
        }
    }

    /// One path per decision (issue 34): the switches of settled experiments (an unfused
    /// `fit`, libvips threads, outputs encoded in turn, libvips' resamples, another commit
    /// gap, liborc off) are gone, so setting them changes no byte of any output.
    @Test func theSwitchesOfSettledExperimentsChooseNoOtherPath() throws {
        for (name, folder) in [("pipe.json", "out"), ("switched.json", "switched")] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "outputs": [{"id": "w640", "filters": [{"op": "fit", "width": 640, "height": 640}]},
                             {"id": "w320", "filters": [{"op": "fit", "width": 320, "height": 320}]}],
                 "sink": {"type": "directory", "path": "\(folder)"}}
                """, to: name)
        }
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let switched = try ImgpipeBinary.run(
            ["run", "switched.json"], in: work.path,
            environment: [
                "IMGPIPE_FUSE": "0", "IMGPIPE_VIPS_THREADS": "2", "IMGPIPE_ENCODE_AHEAD": "0",
                "IMGPIPE_OWN_RESAMPLE": "0", "IMGPIPE_COMMIT_GAP_MS": "0", "IMGPIPE_VIPS_VECTOR": "0",
            ])
        #expect(switched.status == 0, "\(switched.stderr)")
        let made = work.files(under: "out")
        #expect(made.count == Self.sizes.count * 2 && made == work.files(under: "switched"))
        for file in made {
            #expect(
                FileManager.default.contents(atPath: work.url("out/" + file))
                    == FileManager.default.contents(atPath: work.url("switched/" + file)), "\(file) differs")
        }
    }

    @Test func killNineWithSeveralOutputsAndSinksThenResumeDeliversEachPairOnce() throws {
        let server = try UploadServer(mode: .slow(0.2))
        for index in 5...16 {
            try ImageFixtures.jpeg(at: work.url("in/more-\(index).jpg"), width: 160, height: 120)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "outputs": [{"id": "small", "filters": [{"op": "fit", "width": 40, "height": 40}]},
                         {"id": "large", "filters": [{"op": "fit", "width": 80, "height": 80}], "format": "png"}],
             "sinks": [{"type": "directory", "path": "out"},
                       {"type": "http", "url": "\(server.baseURL)/put/{output}/{stem}"}],
             "limits": {"uploads": 3, "timeout": 10}, "retry": {"attempts": 3, "backoff": 0.05}}
            """, to: "pipe.json")
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let deadline = Date().addingTimeInterval(60)
        func puts() -> Int { server.server.requests.filter { $0.method == "PUT" }.count }
        while Date() < deadline, !(server.uploads.count >= 6 && puts() > server.uploads.count) { usleep(2000) }
        running.signal(SIGKILL)
        _ = running.wait()
        Thread.sleep(forTimeInterval: 0.3)
        let before = server.uploads.count
        #expect(before >= 6 && before < 32, "killed after \(before) uploads")

        // What the state file recorded as uploaded when imgpipe was killed.
        let queue = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite"))
        let recorded = try queue.read {
            try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM delivery WHERE sink = 'http-1' AND status = 'done'") ?? 0
        }
        server.mode = .normal
        let putsBefore = puts()
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "\(resumed.stdout) \(resumed.stderr)")
        let paths = server.uploads.map(\.path)
        #expect(paths.count == 32, "16 items × 2 outputs, each stored once (got \(paths.count))")
        #expect(Set(paths).count == 32)
        #expect(Set(paths.map { $0.split(separator: "/")[1] }) == ["small", "large"])
        #expect(paths.filter { $0.hasPrefix("/put/small/") }.count == 16)
        #expect(work.files(under: "out").count == 32)
        let rows = try queue.read { try Row.fetchAll($0, sql: "SELECT output, sink, status FROM delivery") }
        #expect(rows.count == 64 && rows.allSatisfy { $0["status"] as String == "done" })
        let keys = server.uploads.compactMap(\.key)
        #expect(Set(keys).count == 32, "one idempotency key per item and output")
        // Resume sends each upload the state file had not recorded, once: the ones stored
        // but not recorded at the kill again (the server knows their keys), none twice.
        #expect(puts() - putsBefore == 32 - recorded, "\(puts() - putsBefore) PUTs on resume, \(recorded) recorded at the kill")
    }
}

/// `outputs` in the pipeline file: what is refused, and where.
extension SpecDecodingTests {
    @Test func severalOutputsAreCheckedWhereTheyAreWritten() {
        let source = #""version": 1, "source": {"type": "directory", "path": "in"}"#
        let cases: [(String, String, String)] = [
            (
                #""outputs": [{"id": "a"}, {"format": "png"}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs[1].id", "missing"
            ),
            (
                #""outputs": [{"id": "a"}, {"id": "a", "format": "png"}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs[1].id", "duplicate output id \"a\""
            ),
            (
                #""outputs": [{"id": "Big One"}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs[0].id", "lower-case letters"
            ),
            (
                #""output": {}, "outputs": [{"id": "a"}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs", "not both"
            ),
            (#""outputs": [], "sink": {"type": "directory", "path": "o"}"#, "outputs", "empty"),
            (
                #""outputs": [{"id": "a", "name": "{stem}.jpg"}, {"id": "b", "name": "{stem}.jpg"}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs[1].name", "same file name"
            ),
            (
                #""outputs": [{"id": "a", "name": "{stem}.jpg"}, {"id": "b", "name": "{stem}.{ext}"}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs[1].name", "same file name"
            ),
            (
                #""outputs": [{"id": "small"}, {"id": "large"}], "sink": {"type": "directory", "path": "o", "outputs": ["smal"]}"#,
                "sink.outputs[0]", "did you mean \"small\""
            ),
            (
                #""outputs": [{"id": "a"}, {"id": "b"}], "sink": {"type": "http", "url": "http://h/{stem}"}"#,
                "sink.url", "{output}"
            ),
            (
                #""outputs": [{"id": "a"}, {"id": "b"}], "sink": {"type": "s3", "bucket": "photos", "key": "{stem}.{ext}"}"#,
                "sink.key", "{output}"
            ),
            (
                #""outputs": [{"id": "a", "filters": [{"op": "fit", "width": 0}]}], "sink": {"type": "directory", "path": "o"}"#,
                "outputs[0].filters[0].width", "from 1 to 100000"
            ),
        ]
        for (text, path, fragment) in cases {
            let found = error("{\(source), \(text)}")
            #expect(found?.path == path, "\(text): \(String(describing: found))")
            #expect(found?.message.contains(fragment) == true, "\(text): \(String(describing: found))")
        }
        // Allowed: {ext} tells two formats apart; a sink may take one output by id.
        #expect(
            error(
                #"{\#(source), "outputs": [{"id": "a", "name": "{stem}.{ext}"}, {"id": "b", "format": "png", "name": "{stem}.{ext}"}], "sink": {"type": "http", "url": "http://h/{stem}", "outputs": ["a"]}}"#
            ) == nil)
        // Sizes tell names apart when the outputs are made (fit 320 and fit 640).
        #expect(
            error(
                #"{\#(source), "outputs": [{"id": "a", "name": "{stem}-{width}.jpg"}, {"id": "b", "name": "{stem}-{width}.jpg"}], "sink": {"type": "directory", "path": "o"}}"#
            ) == nil)
    }
}
