import Foundation
import ImagePipelineTesting
import Synchronization
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// `dedup` and the fingerprints every record carries, through the built binary: exact and
/// near copies of synthetic scenes and shipped photos are skipped naming the first of their
/// kind, whichever finishes first, across a kill -9; the fingerprints describe the output.
@Suite("Dedup", .serialized)
struct DedupTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-dedup") }

    /// The photos the repository ships (`samples/`).
    static let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../samples").standardized.path

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    /// A scene as a PNG file's bytes.
    static func scenePNG(_ seed: UInt64, width: Int = 400, height: Int = 300) throws -> Data {
        try ImageFixtures.scene(width: width, height: height, seed: seed).encoded(.png(compression: 6, strip: true))
    }

    /// A near copy of `data` (turned upright first, as a run turns it): resized by `scale`, brightened by `lift` (added to each
    /// channel), and encoded as JPEG at `quality`.
    static func nearCopy(of data: Data, scale: Double = 1, lift: Double = 0, quality: Int = 85) throws -> Data {
        var image = try VipsImage.open(data: data).autorotated()
        if scale != 1 { image = try image.resized(horizontal: scale, vertical: scale) }
        if lift != 0 { image = try image.linear([1], [lift], clipToByte: true) }
        return try image.encoded(.jpeg(quality: quality, progressive: false, strip: true))
    }

    /// The fingerprint of an encoded picture, as a run takes its output's.
    static func fingerprint(_ data: Data) throws -> ImageFingerprint {
        let header = try VipsImage.open(data: data)
        return try ImageFingerprint.of(encoded: data, width: header.width, height: header.height)
    }

    /// Records from `imgpipe export`, by the last part of their key (a URL item's key is its
    /// URL), with `duplicateOf` cut the same way.
    func records(_ pipeline: String) throws -> [String: [String: Any]] {
        let exported = try imgpipe("export", pipeline)
        #expect(exported.status == 0, "stderr: \(exported.stderr)")
        func name(_ key: Any?) -> String? { (key as? String).map { String($0.split(separator: "/").last ?? "") } }
        return Dictionary(
            uniqueKeysWithValues: try exported.jsonLines().map { record in
                var record = record
                record["duplicateOf"] = name(record["duplicateOf"])
                return (name(record["key"]) ?? "", record)
            })
    }

    /// Exact and near copies in a folder are skipped, each naming the first of its group in
    /// feed order; only the first ones reach the sink. With `exact` alone, the near copies
    /// are made like any item.
    @Test func copiesAreSkippedNamingTheFirstOfTheirKind() throws {
        let (one, two, three) = (try Self.scenePNG(11), try Self.scenePNG(12), try Self.scenePNG(13))
        try work.write(one, to: "in/a1.png")
        try work.write(two, to: "in/a2.png")
        try work.write(three, to: "in/a3.png")
        try work.write(one, to: "in/b1-same-bytes.png")
        try work.write(try Self.nearCopy(of: two, scale: 0.6, quality: 70), to: "in/b2-smaller.jpg")
        try work.write(try Self.nearCopy(of: three, lift: 10), to: "in/b3-brighter.jpg")
        for (name, dedup) in [("both", #"{"exact": true, "similar": true}"#), ("exact", #"{"exact": true}"#)] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"}, "dedup": \(dedup),
                 "filters": [{"op": "fit", "width": 200, "height": 200}], "output": {"format": "png"},
                 "sink": {"type": "directory", "path": "out-\(name)"}}
                """, to: "\(name).json")
            let run = try imgpipe("run", "\(name).json")
            #expect(run.status == 0, "stderr: \(run.stderr)")
        }

        let both = try records("both.json")
        for key in ["a1.png", "a2.png", "a3.png"] {
            #expect(both[key]?["status"] as? String == "done", "\(key): \(both[key] ?? [:])")
            #expect(both[key]?["duplicateOf"] == nil)
        }
        let expected = [("b1-same-bytes.png", "a1.png"), ("b2-smaller.jpg", "a2.png"), ("b3-brighter.jpg", "a3.png")]
        for (copy, original) in expected {
            let record = try #require(both[copy])
            #expect(record["status"] as? String == "skipped" && record["reason"] as? String == "duplicate", "\(record)")
            #expect(record["duplicateOf"] as? String == original, "\(copy): \(record)")
            let distance = try #require(record["distance"] as? Int)
            #expect(copy == "b1-same-bytes.png" ? distance == 0 : (0...DedupPolicy.defaultDistance).contains(distance))
            #expect((record["message"] as? String)?.contains("\"\(original)\"") == true, "\(record)")
        }
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: work.url("out-both")).sorted() == ["a1.png", "a2.png", "a3.png"])
        let status = try imgpipe("status", "both.json", "--json").decoded(StatusReport.self)
        #expect(status.done == 3 && status.skipped == 3 && status.skipsByReason == ["duplicate": 3])

        // CSV (and so Parquet) has the same fields as columns.
        let csv = try imgpipe("export", "both.json", "--format", "csv").stdout.split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        let columns = try #require(csv.first)
        #expect(Array(columns[8..<14]) == ["sha256", "phash", "thumbhash", "dominant", "duplicateOf", "distance"])
        for line in csv.dropFirst() {
            let record = try #require(both[line[0]], "\(line)")
            #expect(line[8] == record["sha256"] as? String ?? "" && line[9] == record["phash"] as? String ?? "")
            #expect(
                line[12] == record["duplicateOf"] as? String ?? ""
                    && line[13] == (record["distance"] as? Int).map(String.init) ?? "")
        }

        let exact = try records("exact.json")
        #expect(exact["b1-same-bytes.png"]?["duplicateOf"] as? String == "a1.png")
        #expect(exact["b2-smaller.jpg"]?["status"] as? String == "done")
        #expect(exact["b3-brighter.jpg"]?["status"] as? String == "done")
    }

    /// The first item of a group in feed order is the one kept even when a later copy is
    /// downloaded and made first: the first one's server answers only after the copy has
    /// been asked for, and then a while later.
    @Test func theFirstInFeedOrderIsKeptWhenACopyIsReadyFirst() throws {
        let bytes = try Self.nearCopy(of: try Self.scenePNG(21))
        let copyAsked = DispatchSemaphore(value: 0)
        let copyCameFirst = Atomic(false)
        let server = try TestHTTPServer { request in
            switch request.path {
            case "/first.jpg":
                copyCameFirst.store(copyAsked.wait(timeout: .now() + 10) == .success, ordering: .releasing)
                Thread.sleep(forTimeInterval: 1)
                return .bytes(bytes)
            case "/copy.jpg":
                copyAsked.signal()
                return .bytes(bytes)
            default: return .status(404)
            }
        }
        defer { server.stop() }
        try work.write("\(server.baseURL)/first.jpg\n\(server.baseURL)/copy.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false}, "dedup": {"exact": true},
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let copyCameFirstly = copyCameFirst.load(ordering: .acquiring)
        #expect(copyCameFirstly, "the copy was not downloaded while the first was held")
        let records = try records("pipe.json")
        #expect(records["first.jpg"]?["status"] as? String == "done", "\(records)")
        #expect(records["copy.jpg"]?["duplicateOf"] as? String == "first.jpg", "\(records)")
    }

    /// A first Ctrl-C lets the items in flight finish, dedup or not: the items made while
    /// an earlier one is held wait for its verdict and are then recorded, none thrown away,
    /// and `resume` delivers them without making them again.
    @Test func aFirstInterruptLetsTheItemsWaitingForTheirVerdictFinish() throws {
        let bodies = try (0..<6).map { try Self.nearCopy(of: try Self.scenePNG(UInt64(70 + $0))) }
        let release = Atomic(false)
        let firstAsked = DispatchSemaphore(value: 0)
        let server = try TestHTTPServer { request in
            guard let index = Int(request.path.dropFirst(2).prefix(1)), bodies.indices.contains(index) else {
                return .status(404)
            }
            if index == 0 {
                firstAsked.signal()
                while !release.load(ordering: .acquiring) { Thread.sleep(forTimeInterval: 0.02) }
            }
            return .bytes(bodies[index])
        }
        defer {
            release.store(true, ordering: .releasing)
            server.stop()
        }
        try work.write(bodies.indices.map { "\(server.baseURL)/i\($0).jpg" }.joined(separator: "\n") + "\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "dedup": {"exact": true, "similar": true}, "output": {"format": "png"},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        #expect(firstAsked.wait(timeout: .now() + 60) == .success)
        // Every other item downloaded (the server has answered them) and made meanwhile.
        let deadline = Date().addingTimeInterval(60)
        while server.requests.count < bodies.count, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        Thread.sleep(forTimeInterval: 1)
        running.signal(SIGINT)
        Thread.sleep(forTimeInterval: 0.5)
        release.store(true, ordering: .releasing)
        let ended = running.wait()
        let records = try records("pipe.json")
        // Made and judged, none thrown back to be made again: done, or processed (a delivery
        // queued after the interrupt is left for resume, as without dedup).
        let statuses = records.mapValues { $0["status"] as? String ?? "" }
        #expect(
            statuses.count == bodies.count && statuses.values.allSatisfy { ["done", "processed"].contains($0) },
            "\(statuses) \(ended.stderr)")
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        let after = try self.records("pipe.json")
        #expect(after.values.allSatisfy { $0["status"] as? String == "done" && $0["attempts"] as? Int == 1 }, "\(after)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("out")).count == bodies.count)
    }

    /// `run --incremental` compares new items with the items it carries over: a near copy
    /// added to the feed after a first run is a duplicate of the picture that run kept.
    @Test func anIncrementalRunComparesNewItemsWithThoseItCarries() throws {
        let original = try Self.scenePNG(81)
        try work.write(original, to: "in/a.png")
        try work.write(try Self.scenePNG(82), to: "in/b.png")
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "dedup": {"similar": true},
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        try work.write(try Self.nearCopy(of: original, scale: 0.8, lift: 5), to: "in/c-copy.jpg")
        let again = try imgpipe("run", "pipe.json", "--incremental")
        #expect(again.status == 0, "stderr: \(again.stderr)")
        let records = try records("pipe.json")
        #expect(records["a.png"]?["status"] as? String == "done" && records["b.png"]?["status"] as? String == "done")
        #expect(records["c-copy.jpg"]?["duplicateOf"] as? String == "a.png", "\(records["c-copy.jpg"] ?? [:])")
    }

    /// Flat pictures of different colours share a perceptual hash (nothing but noise in its
    /// structure bits): their colour tells them apart, and none is a duplicate.
    @Test func flatPicturesOfDifferentColoursAreNotDuplicates() throws {
        for (name, colour) in [
            ("red", [220.0, 30, 30]), ("green", [30, 200, 40]), ("blue", [20, 40, 210]), ("grey", [128, 128, 128]),
        ] {
            let flat = try ImageFixtures.scene(width: 8, height: 8, seed: 1)
                .embedded(x: 0, y: 0, width: 300, height: 200, background: colour)
            try work.write(try flat.encoded(.png(compression: 6, strip: true)), to: "in/\(name).png")
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "dedup": {"similar": true},
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let records = try records("pipe.json")
        #expect(records.count == 4 && records.values.allSatisfy { $0["status"] as? String == "done" }, "\(records)")
    }

    /// kill -9 while later items wait for an earlier one, then `resume`: each group is kept
    /// once, by its first item, and what was decided before the kill stands.
    @Test func aKillInTheMiddleThenResumeKeepsTheVerdicts() throws {
        // Four groups of three: item i is a copy of group i % 4 (exact for the second of
        // each group, near for the third).
        var bodies: [String: Data] = [:]
        var names: [String] = []
        for index in 0..<12 {
            let group = index % 4
            let original = try Self.nearCopy(of: try Self.scenePNG(UInt64(40 + group)))
            let name = String(format: "i%02d.jpg", index)
            names.append(name)
            bodies["/" + name] = index < 8 ? original : try Self.nearCopy(of: original, scale: 0.7, lift: 6, quality: 75)
        }
        let served = bodies
        let hold = Atomic(true)
        let held = DispatchSemaphore(value: 0)
        let server = try TestHTTPServer { request in
            // Item 6 is held until the test lets it go: the items after it wait for it.
            if request.path == "/i06.jpg" {
                held.signal()
                while hold.load(ordering: .acquiring) { Thread.sleep(forTimeInterval: 0.02) }
            }
            return served[request.path].map { .bytes($0) } ?? .status(404)
        }
        defer {
            hold.store(false, ordering: .releasing)
            server.stop()
        }
        try work.write(names.map { "\(server.baseURL)/\($0)" }.joined(separator: "\n") + "\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "dedup": {"exact": true, "similar": true}, "filters": [{"op": "fit", "width": 160, "height": 160}],
             "output": {"format": "png"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        #expect(held.wait(timeout: .now() + 60) == .success)
        // Items 0…5 end (four kept, two duplicates) while 6 is held.
        let deadline = Date().addingTimeInterval(60)
        var before: [String: [String: Any]] = [:]
        while Date() < deadline {
            before = try records("pipe.json")
            if names.prefix(6).allSatisfy({ ["done", "skipped"].contains(before[$0]?["status"] as? String) }) { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        running.signal(SIGKILL)
        _ = running.wait()
        #expect(before["i04.jpg"]?["duplicateOf"] as? String == "i00.jpg", "\(before)")
        #expect(before["i05.jpg"]?["duplicateOf"] as? String == "i01.jpg", "\(before)")
        // No near copy after the held item was judged before it. (An exact copy of an item
        // kept before it, i07 of i03, may be: that verdict cannot change.)
        for name in names.suffix(4) { #expect(before[name]?["duplicateOf"] == nil, "\(name): \(before[name] ?? [:])") }
        #expect([nil, "i03.jpg"].contains(before["i07.jpg"]?["duplicateOf"] as? String), "\(before["i07.jpg"] ?? [:])")

        hold.store(false, ordering: .releasing)
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        let after = try records("pipe.json")
        for (index, name) in names.enumerated() {
            let record = try #require(after[name])
            if index < 4 {
                #expect(record["status"] as? String == "done", "\(name): \(record)")
            } else {
                #expect(record["duplicateOf"] as? String == names[index % 4], "\(name): \(record)")
            }
        }
        // The verdicts made before the kill were not made again.
        for name in names.prefix(6) { #expect(after[name]?["attempts"] as? Int == before[name]?["attempts"] as? Int) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("out")).count == 4)
    }

    /// Each record's fingerprints describe the output the run made: the dominant colour of
    /// a picture that is mostly one colour, a ThumbHash of at most 40 characters that is the
    /// output's, and perceptual hashes that put a near copy close and another scene far.
    @Test func fingerprintsDescribeTheOutput() throws {
        // 70 % flat #3366cc, 30 % a scene.
        let mostlyBlue = try ImageFixtures.scene(width: 120, height: 200, seed: 5)
            .embedded(x: 280, y: 0, width: 400, height: 200, background: [0x33, 0x66, 0xCC])
        try work.write(try mostlyBlue.encoded(.png(compression: 6, strip: true)), to: "in/a-blue.png")
        let scene = try Self.scenePNG(31)
        try work.write(scene, to: "in/b-scene.png")
        try work.write(try Self.nearCopy(of: scene, scale: 0.5, quality: 60), to: "in/c-copy.jpg")
        try work.write(try Self.scenePNG(32), to: "in/d-other.png")
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 200, "height": 200}], "output": {"format": "png"},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let records = try records("pipe.json")
        let blue = try #require(records["a-blue.png"])
        #expect(blue["dominant"] as? String == "#3366cc", "\(blue)")
        // The ThumbHash keeps the output's average colour (its L, P and Q), read back here
        // from the decoded output.
        let made = try ImageFixtures.decode(work.url("out/a-blue.png"))
        let mean = (0..<3).map { made.mean(band: $0) / 255 }
        let expected = SIMD3((mean[0] + mean[1] + mean[2]) / 3, (mean[0] + mean[1]) / 2 - mean[2], mean[0] - mean[1])
        let kept = try #require(ImageFingerprint.averageColour(ofThumbHash: blue["thumbhash"] as? String ?? ""))
        #expect(
            abs(kept.x - expected.x) < 0.03 && abs(kept.y - expected.y) < 0.05 && abs(kept.z - expected.z) < 0.05,
            "\(kept) \(expected)")
        #expect(blue["sha256"] as? String == sha256Hex(try Data(contentsOf: URL(fileURLWithPath: work.url("in/a-blue.png")))))
        for (key, record) in records {
            let thumbhash = try #require(record["thumbhash"] as? String, "\(key)")
            #expect(thumbhash.count <= 40 && Data(base64Encoded: thumbhash) != nil, "\(key): \(thumbhash)")
            // The output's, not the input's (the copy's input is a JPEG at half the size).
            let made = try Data(contentsOf: URL(fileURLWithPath: work.url("out/" + key.split(separator: ".")[0] + ".png")))
            #expect(try Self.fingerprint(made).thumbhash == thumbhash, "\(key)")
        }
        func hash(_ key: String) throws -> PerceptualHash {
            try #require(PerceptualHash(hex: records[key]?["phash"] as? String ?? ""), "\(key)")
        }
        #expect(try hash("b-scene.png").distance(to: try hash("c-copy.jpg")) <= DedupPolicy.defaultDistance)
        #expect(try hash("b-scene.png").distance(to: try hash("d-other.png")) > DedupPolicy.defaultDistance * 2)
    }

    /// On pictures the run has never seen: of 60 synthetic scenes and the shipped photos,
    /// copies resized, re-encoded and brightened are caught at the default distance (at
    /// least 90 %), and distinct pictures are not taken for each other (at most 1 % of
    /// pairs) — each fingerprint taken as a run takes it, from a 256-pixel JPEG output.
    @Test func theDefaultDistanceCatchesCopiesAndNotDistinctPictures() throws {
        func fingerprint(_ data: Data) throws -> UInt64 {
            let made = try VipsImage.thumbnail(data: data, width: 256, height: 256, size: .down, autorotate: true)
                .toSRGB().encoded(.jpeg(quality: 85, progressive: false, strip: true))
            return try #require(try Self.fingerprint(made).perceptualHash).bits
        }
        let samples = try FileManager.default.contentsOfDirectory(atPath: Self.samples)
            .filter { !$0.hasSuffix(".md") }.sorted()
        var originals = try samples.map { try Data(contentsOf: URL(fileURLWithPath: Self.samples + "/" + $0)) }
        originals += try (0..<60).map { try Self.scenePNG(UInt64(1000 + $0), width: 480, height: 360) }
        var hashes: [UInt64] = []
        var copyDistances: [Int] = []
        for original in originals {
            let hash = try fingerprint(original)
            hashes.append(hash)
            for copy in [
                try Self.nearCopy(of: original, scale: 0.5), try Self.nearCopy(of: original, quality: 40),
                try Self.nearCopy(of: original, lift: 12), try Self.nearCopy(of: original, scale: 0.75, lift: -8, quality: 60),
            ] {
                copyDistances.append((hash ^ (try fingerprint(copy))).nonzeroBitCount)
            }
        }
        var pairDistances: [Int] = []
        for i in hashes.indices {
            for j in hashes.indices where j > i { pairDistances.append((hashes[i] ^ hashes[j]).nonzeroBitCount) }
        }
        let caught = copyDistances.filter { $0 <= DedupPolicy.defaultDistance }.count
        let confused = pairDistances.filter { $0 <= DedupPolicy.defaultDistance }.count
        let (copies, pairs) = (copyDistances.count, pairDistances.count)
        print(
            "dedup: \(caught) of \(copies) copies caught (distances \(copyDistances.sorted().suffix(8))); "
                + "\(confused) of \(pairs) distinct pairs within the distance (closest \(pairDistances.sorted().prefix(8)))")
        #expect(Double(caught) >= 0.9 * Double(copies), "\(caught) of \(copies)")
        #expect(Double(confused) <= 0.01 * Double(pairs), "\(confused) of \(pairs)")
    }

    /// The same bytes from three URLs of one host are that host's placeholder: the third and
    /// later are skipped as `placeholder`, the first two flagged in `export` and `status`;
    /// the same bytes from one URL of another host, and distinct pictures, are made as usual.
    @Test func bytesAHostServesForThreeURLsAreItsPlaceholder() throws {
        let unavailable = try Self.nearCopy(of: try Self.scenePNG(61))
        let pictures = [try Self.nearCopy(of: try Self.scenePNG(62)), try Self.nearCopy(of: try Self.scenePNG(63))]
        let handler: TestHTTPServer.Handler = { request in
            switch request.path {
            case "/p1.jpg": .bytes(pictures[0])
            case "/p2.jpg": .bytes(pictures[1])
            default: .bytes(unavailable)
            }
        }
        // Three origins: 127.0.0.1 and 127.0.0.2, and 127.0.0.1 on another port.
        let first = try TestHTTPServer(handler: handler)
        let second = try TestHTTPServer(host: "127.0.0.2", handler: handler)
        let third = try TestHTTPServer(handler: handler)
        defer {
            first.stop()
            second.stop()
            third.stop()
        }
        func list(_ names: [String]) throws {
            let urls = names.map { name in
                (name.hasPrefix("b") ? second : name.hasPrefix("c") ? third : first).baseURL + "/\(name).jpg"
            }
            try work.write(urls.joined(separator: "\n") + "\n", to: "urls.txt")
        }
        try list(["a1", "p1", "a2", "p2", "a3", "a4", "b1", "a5", "c1"])
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "dedup": {"placeholders": true}, "output": {"format": "png"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let records = try records("pipe.json")
        for name in ["a1", "a2", "p1", "p2", "b1", "c1"] {
            #expect(records[name + ".jpg"]?["status"] as? String == "done", "\(name): \(records[name + ".jpg"] ?? [:])")
        }
        #expect(records["a1.jpg"]?["placeholder"] as? Bool == true && records["a2.jpg"]?["placeholder"] as? Bool == true)
        for name in ["p1", "p2", "b1", "c1"] { #expect(records[name + ".jpg"]?["placeholder"] == nil, "\(name)") }
        for name in ["a3", "a4", "a5"] {
            let record = try #require(records[name + ".jpg"])
            #expect(record["status"] as? String == "skipped" && record["reason"] as? String == "placeholder", "\(record)")
            let message = record["message"] as? String ?? ""
            #expect(message.contains("127.0.0.1") && message.contains("/a1.jpg"), "\(message)")
        }
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.placeholders == 2 && status.skipsByReason == ["placeholder": 3], "\(status)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("out")).count == 6)

        // `run --incremental` with one more URL of the first origin: it counts on from the
        // last run, so nothing skipped there is made now, and the new one is skipped too.
        try list(["a1", "p1", "a2", "p2", "a3", "a4", "b1", "a5", "c1", "a6"])
        let again = try imgpipe("run", "pipe.json", "--incremental")
        #expect(again.status == 0, "stderr: \(again.stderr)")
        let later = try self.records("pipe.json")
        for name in ["a3", "a4", "a5", "a6"] { #expect(later[name + ".jpg"]?["reason"] as? String == "placeholder", "\(name)") }
        #expect(later["a1.jpg"]?["placeholder"] as? Bool == true && later["a2.jpg"]?["placeholder"] as? Bool == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("out")).count == 6)
    }

    /// A sighting written before a kill whose item's own record was not: made again on
    /// resume, the item is judged as it was (the third URL, a placeholder), not counted a
    /// second time nor kept; and an item never seen is counted on.
    @Test func anItemSeenBeforeAKillIsJudgedAsItWas() throws {
        let store = try RunStore(path: work.url("state/judge.sqlite"))
        let run = try store.createRun(
            pipelinePath: "/p.json", pipelineName: "p", document: "{}", fingerprint: ["filters": "[]", "output": "{}"],
            sinks: ["out"], itemLimit: nil, workRoot: work.url("work"))
        let sha = String(repeating: "e", count: 64)
        for (seq, key) in ["k1", "k2", "k3"].enumerated() {
            _ = try store.apply(
                [
                    .insert(
                        NewItem(key: key, seq: seq + 1, location: "/in/\(key)", metadata: nil, outputName: nil, sinks: ["out"])),
                    .sighted(host: "h.example", sha256: sha, key: key, flagging: key == "k3" ? ["k1", "k2"] : []),
                ], runId: run.id)
        }
        let judge = try DedupJudge(policy: DedupPolicy(placeholdersAfter: 3), store: store, runId: run.id)
        let again = try judge.verdict(key: "k3", seq: 3, sha256: sha, fingerprint: nil, host: "h.example")
        #expect(again.skip?.reason == .placeholder && again.sighting == nil, "\(String(describing: again.skip))")
        let first = try judge.verdict(key: "k1", seq: 1, sha256: sha, fingerprint: nil, host: "h.example")
        #expect(first.skip == nil && first.sighting == nil)
        let fourth = try judge.verdict(key: "k4", seq: 4, sha256: sha, fingerprint: nil, host: "h.example")
        #expect(fourth.skip?.reason == .placeholder && fourth.sighting != nil)
        #expect(try store.placeholderCount(runId: run.id) == 2)
    }

    /// A JPEG output's fingerprint is decoded by libjpeg-turbo at a fraction of its size: the
    /// smallest of 1/8, 1/4, 1/2 keeping the asked side, with the pixels libvips gives for
    /// the same picture halved; a truncated, CMYK or non-JPEG input is refused (libvips then
    /// reads it), never decoded half.
    @Test func aJPEGIsDecodedScaledOrRefused() throws {
        let jpeg = try ImageFixtures.scene(width: 400, height: 300, seed: 9)
            .encoded(.jpeg(quality: 90, progressive: false, strip: true))
        let scaled = try #require(Pixels.scaledJPEG(jpeg, atLeast: 128, maxPixels: 1 << 20))
        #expect(scaled.width == 200 && scaled.height == 150 && scaled.bands == 3)
        let whole = try #require(Pixels.scaledJPEG(jpeg, atLeast: 1000, maxPixels: 1 << 20))
        #expect(whole.width == 400 && whole.height == 300)
        let halved = try VipsImage.open(data: jpeg).resized(horizontal: 0.5, vertical: 0.5).pixels()
        var difference = 0
        for (a, b) in zip(scaled.samples, halved.samples) { difference += abs(Int(a) - Int(b)) }
        #expect(Double(difference) / Double(scaled.samples.count) < 4, "mean difference \(difference)")
        #expect(Pixels.scaledJPEG(jpeg.prefix(jpeg.count / 2), atLeast: 128, maxPixels: 1 << 20) == nil)
        #expect(Pixels.scaledJPEG(jpeg, atLeast: 128, maxPixels: 100 * 100) == nil)
        #expect(Pixels.scaledJPEG(try Self.scenePNG(9), atLeast: 128, maxPixels: 1 << 20) == nil)
        try ImageFixtures.cmykJPEG(at: work.url("cmyk.jpg"), width: 300, height: 200, ink: (10, 200, 30, 5))
        let cmyk = try Data(contentsOf: URL(fileURLWithPath: work.url("cmyk.jpg")))
        #expect(Pixels.scaledJPEG(cmyk, atLeast: 64, maxPixels: 1 << 20) == nil)
        // And the fingerprint still reads it, through libvips.
        #expect(try Self.fingerprint(cmyk).phash.count == 16)
    }

    /// `validate` names what is wrong in `dedup`.
    @Test func validateNamesWhatIsWrongInDedup() throws {
        let cases: [(String, String)] = [
            (#"{"similar": {"distance": 40}}"#, "dedup.similar.distance"),
            (#"{"exact": "yes"}"#, "dedup.exact"),
            (#"{"near": true}"#, "dedup.near"),
            (#"{"similar": 3}"#, "dedup.similar"),
            (#"{"placeholders": {"after": 1}}"#, "dedup.placeholders.after"),
            (#"{"placeholders": {"after": 17}}"#, "dedup.placeholders.after"),
        ]
        for (index, (dedup, path)) in cases.enumerated() {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"}, "dedup": \(dedup),
                 "sink": {"type": "directory", "path": "out"}}
                """, to: "bad\(index).json")
            let validated = try imgpipe("validate", "bad\(index).json")
            #expect(validated.status == 2 && validated.stderr.contains(path), "\(dedup): \(validated.stderr)")
        }
        try FileManager.default.createDirectory(atPath: work.url("in"), withIntermediateDirectories: true)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "dedup": {"similar": {"distance": 5}},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "good.json")
        #expect(try imgpipe("validate", "good.json").status == 0)
    }
}
