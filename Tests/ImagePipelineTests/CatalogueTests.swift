import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// The registry, `imgpipe filters`, `imgpipe schema`, the example pipelines and the
/// dry-run contact sheet agree with each other and with the code.
@Suite("Catalogue, schema and contact sheet", .serialized)
struct CatalogueTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    static var examples: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: repository + "/pipelines")) ?? [])
            .filter { $0.hasSuffix(".json") }.sorted().map { repository + "/pipelines/" + $0 }
    }

    let work: TemporaryDirectory
    init() throws { work = try TemporaryDirectory("imgpipe-catalogue") }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    @Test func filtersJSONListsEveryOpWithItsParameters() throws {
        let result = try imgpipe("filters", "--json")
        #expect(result.status == 0)
        let ops = try #require(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        let names = ops.compactMap { $0["op"] as? String }
        #expect(names == FilterRegistry.standard.definitions.map(\.name))
        #expect(names.count == 27)
        let adjust = try #require(ops.first { $0["op"] as? String == "adjust" })
        let parameters = try #require(adjust["parameters"] as? [[String: Any]])
        let saturation = try #require(parameters.first { $0["name"] as? String == "saturation" })
        #expect(saturation["type"] as? String == "number")
        #expect(saturation["minimum"] as? Double == 0 && saturation["maximum"] as? Double == 4)
        #expect(saturation["default"] as? Double == 1)
        #expect(ops.allSatisfy { ($0["description"] as? String)?.isEmpty == false })

        let table = try imgpipe("filters")
        for name in names { #expect(table.stdout.contains("\(name): "), "\(name) missing from the table") }
    }

    @Test func schemaAcceptsTheExamplesAndRejectsUnknownOpsAndParameters() throws {
        let schema = try imgpipe("schema")
        #expect(schema.status == 0)
        try work.write(schema.stdout, to: "schema.json")
        let bad = [
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "directory", "path": "o"}, "filters": [{"op": "sparkle"}]}"#,
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "directory", "path": "o"}, "filters": [{"op": "fit", "width": 5, "hieght": 5}]}"#,
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "directory", "path": "o"}, "filters": [{"op": "blur", "sigma": 500}]}"#,
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "directory", "path": "o"}, "colour": 1}"#,
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "s3", "bucket": "b-1", "secretAccessKey": "written-out"}}"#,
            #"{"version": 1, "source": {"type": "json-feed", "url": "http://127.0.0.1:9/api", "items": "data/items"}, "sink": {"type": "directory", "path": "o"}}"#,
            #"{"version": 1, "source": {"type": "json-feed", "url": "http://127.0.0.1:9/api", "next": "/links/~2"}, "sink": {"type": "directory", "path": "o"}}"#,
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "http", "url": "http://127.0.0.1:9/{stem}", "pacing": "slow"}}"#,
            #"{"version": 1, "source": {"type": "directory", "path": "x"}, "sink": {"type": "directory", "path": "o", "pacing": "off"}}"#,
        ]
        for (index, text) in bad.enumerated() { try work.write(text, to: "bad-\(index).json") }
        // S3 as a sink (AWS, with everything the sink takes) and as a source (an S3-compatible endpoint).
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "x"},
             "sink": {"type": "s3", "name": "archive", "bucket": "acme-thumbs", "prefix": "thumbs/", "region": "eu-west-1",
                      "key": "{stem}-{hash}.{ext}", "storageClass": "STANDARD_IA", "metadata": {"project": "demo"},
                      "multipartThreshold": 16777216, "partSize": 8388608, "accessKeyId": "${ACME_KEY}",
                      "secretAccessKey": "${ACME_SECRET}", "sessionToken": "${ACME_TOKEN}"}}
            """, to: "s3-aws.json")
        try work.write(
            """
            {"version": 1, "source": {"type": "s3", "bucket": "photos", "prefix": "in", "endpoint": "http://127.0.0.1:9000",
                                      "pathStyle": true, "pageSize": 500, "maxItems": 1000, "cache": false},
             "sink": {"type": "directory", "path": "o"}}
            """, to: "s3-minio.json")
        // A feed shaped like an API (its items and next page found by JSON Pointers), and
        // the user's own servers asked without pacing.
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "http://127.0.0.1:9/api", "items": "/data/a~1b~0c/0",
                                      "next": "/links/next", "pacing": "off"},
             "sinks": [{"type": "http", "url": "http://127.0.0.1:9/up/{stem}", "pacing": "off"},
                       {"type": "upload", "endpoint": "http://127.0.0.1:9/ticket", "pacing": "on"}]}
            """, to: "shaped.json")
        let script = """
            import glob, json, sys
            import jsonschema
            schema = json.load(open("schema.json"))
            jsonschema.Draft202012Validator.check_schema(schema)
            validator = jsonschema.Draft202012Validator(schema)
            for path in sys.argv[1:]:
                errors = list(validator.iter_errors(json.load(open(path))))
                print(("invalid " if errors else "valid ") + path)
            """
        try work.write(script, to: "check.py")
        // `imgpipe init`'s starting file, with its `//` comment keys, is a valid pipeline too.
        #expect(try imgpipe("init", "starter.json").status == 0)
        let examples = Self.examples + ["starter.json", "s3-aws.json", "s3-minio.json", "shaped.json"]
        #expect(Self.examples.count >= 4, "the files of pipelines/")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "check.py"] + examples + bad.indices.map { "bad-\($0).json" }
        process.currentDirectoryURL = URL(fileURLWithPath: work.path)
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "jsonschema check failed: \(output)")
        for example in examples { #expect(output.contains("valid \(example)") && !output.contains("invalid \(example)")) }
        for index in bad.indices { #expect(output.contains("invalid bad-\(index).json")) }
        // The decoder agrees with the schema about the bad files.
        for index in bad.indices { #expect(try imgpipe("validate", "bad-\(index).json").status == 2) }
    }

    @Test(arguments: examples)
    func everyExamplePipelineRunsAsItIs(path: String) throws {
        #expect(try imgpipe("validate", path).status == 0)
        let result = try imgpipe("dry-run", path, "--out", "preview", "--limit", "3")
        #expect(result.status == 0, "stdout: \(result.stdout) stderr: \(result.stderr)")
        #expect(work.files(under: "preview").contains("index.html"))
    }

    /// The page at `path` as headless Chromium leaves it after its scripts ran.
    func chromium(_ path: String) throws -> String {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        let browser = try #require(chromium, "Debian's chromium is needed (make deps installs it)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: browser)
        process.arguments = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--user-data-dir=" + work.url("chromium-profile"), "--virtual-time-budget=10000",
            "--dump-dom", URL(fileURLWithPath: work.url(path)).absoluteString,
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let dom = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return dom
    }

    /// The page at `path` as headless Chromium draws it in a 1400×1000 window, decoded.
    func screenshot(_ path: String) throws -> Pixels {
        let browser = try #require(
            ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) },
            "Debian's chromium is needed (make deps installs it)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: browser)
        process.arguments = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--user-data-dir=" + work.url("chromium-profile"), "--virtual-time-budget=10000",
            "--window-size=1400,1000", "--force-device-scale-factor=1", "--screenshot=" + work.url("screenshot.png"),
            URL(fileURLWithPath: work.url(path)).absoluteString,
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return try ImageFixtures.decode(work.url("screenshot.png"))
    }

    /// The attributes of the `<body>` tag of a page.
    func bodyAttributes(_ dom: String) -> [String: String] {
        guard let open = dom.range(of: "<body"), let close = dom[open.upperBound...].range(of: ">") else { return [:] }
        let tag = String(dom[open.upperBound..<close.lowerBound])
        var attributes: [String: String] = [:]
        for match in tag.matches(of: /([a-z-]+)="([^"]*)"/) { attributes[String(match.1)] = String(match.2) }
        return attributes
    }

    /// Every data line of a printed table starts each column where the header starts it
    /// (or leaves it blank: the later lines of a sample's block).
    func expectAligned(_ lines: [String], columns: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        guard let header = lines.first(where: { $0.hasPrefix("sample ") }) else {
            Issue.record("no table header in \(lines)", sourceLocation: sourceLocation)
            return
        }
        let starts = columns.compactMap { title in
            header.range(of: title).map { header.distance(from: header.startIndex, to: $0.lowerBound) }
        }
        #expect(starts.count == columns.count, "header: \(header)", sourceLocation: sourceLocation)
        let rows = lines.drop { $0 != header }.dropFirst().prefix { !$0.contains("previewed in") }
        #expect(!rows.isEmpty, sourceLocation: sourceLocation)
        for row in rows {
            let characters = Array(row)
            for start in starts.dropFirst() {
                #expect(
                    characters.count > start && characters[start - 1] == " "
                        && (characters[start] != " " || characters[start - 2] == " "),
                    "column at \(start) misaligned in \(row)", sourceLocation: sourceLocation)
            }
        }
    }

    func makeSheetSamples() throws {
        let samples = try work.folder("samples")
        try ImageFixtures.jpeg(at: samples + "/rotated.jpg", width: 300, height: 200, orientation: 6)
        try ImageFixtures.rgbaPNG(at: samples + "/alpha.png", width: 120, height: 90)
        try ImageFixtures.cmykJPEG(at: samples + "/cmyk.jpg", width: 100, height: 100, ink: (0, 255, 255, 0))
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 100), to: samples + "/photo.tif")
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "samples"},
             "filters": [{"op": "autorotate"}, {"op": "fit", "width": 100, "height": 100}, {"op": "sepia"}],
             "output": {"format": "tiff"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "sheet.json")
    }

    /// One pipeline: the summary, before and after at one scale with links, a wipe slider
    /// and 100 % crops per sample, every picture rendered in Chromium; the printed table
    /// (with SSIM) aligned and the contact sheet's path printed.
    @Test func contactSheetRendersEveryImageInChromium() throws {
        try makeSheetSamples()
        let run = try imgpipe("dry-run", "sheet.json", "--out", "sheet preview")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("sample ") == true && lines.first?.contains("ssim") == true, "stdout: \(run.stdout)")
        expectAligned(lines, columns: ["sample", "input", "output", "bytes", "ssim", "ms"])
        let photo = try #require(lines.first { $0.hasPrefix("photo.tif ") })
        #expect(
            photo.contains("200×100") && photo.contains("100×50") && photo.contains(" 0."), "a score for a plain fit: \(photo)")
        #expect(lines.last == "contact sheet: sheet preview/index.html", "stdout: \(run.stdout)")

        let html = try String(contentsOfFile: work.url("sheet preview/index.html"), encoding: .utf8)
        #expect(html.contains("autorotate+fit") && html.contains("sepia") && html.contains("encode"), "time per step")
        #expect(html.contains("200×300") && html.contains("67×100"), "dimensions before (upright) and after")
        #expect(html.contains(#"<section id="summary" data-samples="4" data-failed="0">"#))
        #expect(html.contains("median"), "time per image in the summary")
        // The same scale: the upright 200×300 input is drawn 200×300 (under the 360 px box),
        // its 67×100 output 67×100; a link to the full-size source around the before.
        #expect(html.contains(#"width="200" height="300""#) && html.contains(#"width="67" height="100""#))
        #expect(html.contains(#"<a href="../samples/rotated.jpg">"#))
        #expect(!html.contains("http://") && !html.contains("https://"), "no external resources")

        let dom = try chromium("sheet preview/index.html")
        let body = bodyAttributes(dom)
        // Per sample: before, after, the wipe's two pictures and two 100 % crops.
        #expect(body["data-total"] == "24" && body["data-rendered"] == "24", "every picture must render: \(body)")
        #expect(body["data-sliders"] == "4" && body["data-summary-samples"] == "4", "\(body)")
        #expect(body["class"] == "full")
        #expect(!dom.contains(#"data-ok="false""#))
    }

    /// Two pipelines on the same samples: a block per sample with a line for A and one for
    /// B, each with its bytes and SSIM; B's `fill` to a square changes the geometry, so
    /// non-square samples get no score.
    @Test func twoPipelinesSideBySideInChromium() throws {
        try makeSheetSamples()
        try work.write(
            """
            {"version": 1, "name": "square", "source": {"type": "directory", "path": "samples"},
             "filters": [{"op": "autorotate"}, {"op": "fill", "width": 80, "height": 80}],
             "output": {"format": "jpeg", "quality": 30}, "sink": {"type": "directory", "path": "out"}}
            """, to: "square.json")
        let run = try imgpipe("dry-run", "sheet.json", "square.json", "--out", "compare")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        expectAligned(lines, columns: ["sample", "input", "out", "output", "bytes", "ssim", "ms"])
        let header = try #require(lines.first)
        #expect(lines.allSatisfy { $0.count <= 110 }, "a terminal's width: \(run.stdout)")
        let photoA = try #require(lines.firstIndex { $0.hasPrefix("photo.tif ") })
        func cell(_ title: String, _ line: String) -> String {
            let start = header.distance(from: header.startIndex, to: header.range(of: title)!.lowerBound)
            return String(line.dropFirst(start).prefix { $0 != " " })
        }
        let (a, b) = (lines[photoA], lines[photoA + 1])
        #expect(cell("out", a) == "A" && cell("out", b) == "B" && b.hasPrefix("   "), "\(a)\n\(b)")
        #expect(cell("output", a) == "100×50" && cell("output", b) == "80×80")
        #expect(Double(cell("ssim", a)).map { $0 > 0 && $0 <= 1 } == true, "A is a resampled source: \(a)")
        #expect(cell("ssim", b) == "-", "B crops: no score: \(b)")
        let cmyk = try #require(lines.firstIndex { $0.hasPrefix("cmyk.jpg ") })
        #expect(!lines[cmyk + 1].contains(" - "), "a square sample filled to a square is scored: \(lines[cmyk + 1])")
        #expect(lines.last == "contact sheet: compare/index.html")
        #expect(work.files(under: "compare").contains("a/photo.tif") && work.files(under: "compare").contains("b/photo.jpg"))

        let json = try imgpipe("dry-run", "sheet.json", "square.json", "--out", "compare", "--json")
        let rows = try #require(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
        #expect(rows.count == 4 && rows.allSatisfy { $0["a"] is [String: Any] && $0["b"] is [String: Any] })

        let dom = try chromium("compare/index.html")
        let body = bodyAttributes(dom)
        // Per sample: before, A, B, the wipe's A and B, and three 100 % crops.
        #expect(body["data-total"] == "32" && body["data-rendered"] == "32", "every picture must render: \(body)")
        #expect(body["data-sliders"] == "4" && body["data-summary-samples"] == "4", "\(body)")
        #expect(dom.contains("A: sheet") && dom.contains("B: square"), "a summary line per pipeline")
    }

    /// Many samples make a compact grid; a failed sample is listed in the summary and its
    /// card comes first.
    @Test func manySamplesMakeACompactGridWithFailuresFirst() throws {
        let samples = try work.folder("many")
        for index in 1...13 {
            try ImageFixtures.write(try ImageFixtures.photo(width: 90, height: 60, seed: index), to: samples + "/p\(index).png")
        }
        try work.write("not an image", to: "many/zz-broken.jpg")
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "many"},
             "filters": [{"op": "fit", "width": 45}], "sink": {"type": "directory", "path": "out"}}
            """, to: "many.json")
        let run = try imgpipe("dry-run", "many.json", "--out", "grid", "--all")
        #expect(run.status == 1, "a failed sample exits 1: \(run.stderr)")
        #expect(run.stdout.contains("13 sample(s) previewed in grid, 1 sample(s) failed"), "stdout: \(run.stdout)")
        let html = try String(contentsOfFile: work.url("grid/index.html"), encoding: .utf8)
        #expect(html.contains(#"<body class="compact""#))
        #expect(html.contains(#"data-samples="14" data-failed="1""#))
        let broken = try #require(html.range(of: #"id="sample-zz-broken.jpg""#))
        let first = try #require(html.range(of: #"id="sample-p1.png""#))
        #expect(broken.lowerBound < first.lowerBound, "the failed sample comes first")
        #expect(html.contains(##"<li><a href="#sample-zz-broken.jpg">zz-broken.jpg</a>: decode"##))

        let body = bodyAttributes(try chromium("grid/index.html"))
        #expect(body["data-total"] == "78" && body["data-rendered"] == "78", "13 × 6 pictures: \(body)")
        #expect(body["data-sliders"] == "13" && body["data-summary-samples"] == "14")
    }

    // MARK: panoramas, failures, the before crop (a user's first day, round two)

    /// A 4000×200 panorama was drawn 360×18 (before), 92×5 (its 1024×51 output) and 18×18
    /// (a 200×200 square of it): slivers and specks. Every picture keeps a short side of at
    /// least 48 pixels on screen; measured in the rendered page, the before picture is at
    /// least 48 pixels high.
    @Test func aPanoramaIsNotASliver() throws {
        let green: ImageFixtures.RGB = (30, 200, 40)
        let bytes = (0..<(4000 * 200 * 3)).map { $0 % 3 == 0 ? green.0 : $0 % 3 == 1 ? green.1 : green.2 }
        try ImageFixtures.write(
            try VipsImage.fromPixels(bytes, width: 4000, height: 200, bands: 3).labelled(.srgb), to: work.url("wide/pano.png"))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "wide"},
             "outputs": [{"id": "fit", "filters": [{"op": "fit", "width": 1024, "height": 1024}]},
                         {"id": "square", "filters": [{"op": "fill", "width": 200, "height": 200}]}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "wide.json")
        let run = try imgpipe("dry-run", "wide.json", "--out", "wide preview")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let html = try String(contentsOfFile: work.url("wide preview/index.html"), encoding: .utf8)
        let drawn = html.matches(of: /<img src="[^"]*" width="(\d+)" height="(\d+)"/).map { (Int($0.1)!, Int($0.2)!) }
        #expect(drawn.count == 3, "before and two outputs: \(drawn)")
        #expect(drawn.allSatisfy { min($0.0, $0.1) >= 48 }, "\(drawn)")

        let page = try screenshot("wide preview/index.html")
        func isGreen(_ x: Int, _ y: Int) -> Bool {
            let pixel = page[x, y]
            return pixel[1] > 150 && pixel[0] < 100 && pixel[2] < 100
        }
        let top = try #require(
            (0..<page.height).lazy.compactMap { y in (0..<page.width).first { isGreen($0, y) }.map { (x: $0, y: y) } }.first,
            "no panorama on the page")
        let height = (top.y..<page.height).prefix { isGreen(top.x + 20, $0) }.count
        #expect(height >= 48, "the before picture is \(height) pixels high on screen")
    }

    /// A sample that cannot be decoded fails each of three outputs for the same reason:
    /// the sheet and the table say so once, not three times.
    @Test func aFailureIsShownOncePerSample() throws {
        try ImageFixtures.jpeg(at: work.url("three/good.jpg"), width: 90, height: 60)
        try work.write("not an image", to: "three/broken.jpg")
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "three"},
             "outputs": [{"id": "s", "filters": [{"op": "fit", "width": 20}]}, {"id": "m", "filters": [{"op": "fit", "width": 40}]},
                         {"id": "l", "filters": [{"op": "fit", "width": 60}]}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "three.json")
        let json = try imgpipe("dry-run", "three.json", "--out", "three preview", "--json")
        #expect(json.status == 1, "stderr: \(json.stderr)")
        let rows = try #require(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
        let broken = try #require(rows.first { $0["key"] as? String == "broken.jpg" }?["columns"] as? [String: [String: Any]])
        let messages = Set(broken.values.compactMap { $0["failure"] as? String })
        #expect(broken.count == 3 && messages.count == 1, "\(broken)")
        let message = try #require(messages.first)
        let html = try String(contentsOfFile: work.url("three preview/index.html"), encoding: .utf8)
        let card = try #require(html.range(of: #"id="sample-broken.jpg""#)).upperBound
        let cardEnd = try #require(html[card...].range(of: "</section>")).lowerBound
        let cardText = String(html[card..<cardEnd])
        #expect(cardText.components(separatedBy: message).count - 1 == 1, "in the card: \(cardText)")
        #expect(html.components(separatedBy: message).count - 1 == 2, "once in the summary, once in the card")

        let text = try imgpipe("dry-run", "three.json", "--out", "three preview")
        #expect(text.stdout.components(separatedBy: message).count - 1 == 1, "stdout: \(text.stdout)")
    }

    /// The 100 % crops showed the centre of the input beside the centre of an output cut
    /// from its left (`fill` with `gravity: west`): other parts of the picture. The input
    /// is red in its left third and blue elsewhere (its centre is all blue; halves would
    /// meet in the centre and hide the fault); the output is red. The before crop now shows
    /// the whole input: red and blue.
    @Test func theBeforeCropShowsThePartTheOutputsShow() throws {
        let (red, blue) = (ImageFixtures.red, ImageFixtures.blue)
        let row = (0..<3000).flatMap { x in x < 1000 ? [red.0, red.1, red.2] : [blue.0, blue.1, blue.2] }
        let bytes = Array(repeating: row, count: 1000).flatMap { $0 }
        try ImageFixtures.write(
            try VipsImage.fromPixels(bytes, width: 3000, height: 1000, bands: 3).labelled(.srgb), to: work.url("thirds/t.png"))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "thirds"},
             "filters": [{"op": "fill", "width": 300, "height": 300, "gravity": "west"}], "sink": {"type": "directory", "path": "out"}}
            """, to: "thirds.json")
        let run = try imgpipe("dry-run", "thirds.json", "--out", "thirds preview")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let output = try ImageFixtures.decode(work.url("thirds preview/t.jpg"))
        #expect(output.mean(band: 0) > 180 && output.mean(band: 2) < 80, "the output is the red left")
        let crop = try ImageFixtures.decode(work.url("thirds preview/crop/t.png.png"))
        let columns = (0..<crop.width).map { crop[$0, crop.height / 2] }
        #expect(columns.contains { $0[0] > 180 && $0[2] < 80 }, "the before crop has the red the output shows")
        #expect(columns.contains { $0[2] > 180 && $0[0] < 80 }, "and the blue rest")
        let html = try String(contentsOfFile: work.url("thirds preview/index.html"), encoding: .utf8)
        #expect(html.contains("before, whole"), "the crop is said to be the whole input")
    }
}
