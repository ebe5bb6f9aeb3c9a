import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

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
        ]
        for (index, text) in bad.enumerated() { try work.write(text, to: "bad-\(index).json") }
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
        let examples = Self.examples + ["starter.json"]
        #expect(examples.count >= 5)
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

    @Test func contactSheetRendersEveryImageInChromium() throws {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        let browser = try #require(chromium, "Debian's chromium is needed (make deps installs it)")
        let samples = try work.folder("samples")
        try ImageFixtures.jpeg(at: samples + "/rotated.jpg", width: 300, height: 200, orientation: 6)
        try ImageFixtures.rgbaPNG(at: samples + "/alpha.png", width: 120, height: 90)
        try ImageFixtures.cmykJPEG(at: samples + "/cmyk.jpg", width: 100, height: 100, ink: (0, 255, 255, 0))
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 100), to: samples + "/photo.tif")
        try work.write("""
            {"version": 1, "source": {"type": "directory", "path": "samples"},
             "filters": [{"op": "autorotate"}, {"op": "fit", "width": 100, "height": 100}, {"op": "sepia"}],
             "output": {"format": "tiff"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "sheet.json")
        let run = try imgpipe("dry-run", "sheet.json", "--out", "sheet preview")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let html = try String(contentsOfFile: work.url("sheet preview/index.html"), encoding: .utf8)
        #expect(html.contains("autorotate+fit") && html.contains("sepia") && html.contains("encode"), "time per step")
        #expect(html.contains("300×200") && html.contains("67×100"), "dimensions before and after")

        let process = Process()
        process.executableURL = URL(fileURLWithPath: browser)
        process.arguments = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--user-data-dir=" + work.url("chromium-profile"), "--virtual-time-budget=10000",
                             "--dump-dom", URL(fileURLWithPath: work.url("sheet preview/index.html")).absoluteString]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let dom = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(dom.contains(#"data-rendered="8""#) && dom.contains(#"data-total="8""#),
                "every before and after image must render: \(dom.prefix(400))")
        #expect(!dom.contains(#"data-ok="false""#))
    }
}
