import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

/// A directory source and a directory sink against what a stranger can put in a folder:
/// names that are not UTF-8, folders that cannot be read, a sink's folder swapped for a
/// symbolic link to the originals while a run writes into it. The built binary, end to end.
@Suite("Directory sources and sinks, hostile folders", .serialized)
struct DirectorySafetyTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-dirsafe") }

    /// Writes `pipe.json` reading `in/` and writing `out/`, outputs named `name`.
    func pipeline(name: String? = nil) throws {
        let named = name.map { #", "name": "\#($0)""# } ?? ""
        try work.write("""
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 8, "height": 8}],
             "output": {"format": "jpeg"\(named)}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    func status() throws -> StatusReport {
        let result = try imgpipe("status", "pipe.json", "--json")
        #expect(result.status == 0, "status failed: \(result.stderr)")
        return try result.decoded(StatusReport.self)
    }

    /// `relative` below the work folder as bytes, NUL-terminated, for calls that take any
    /// name (`FileManager` takes only names that are UTF-8).
    func bytePath(_ relative: [UInt8]) -> [CChar] {
        (Array(work.path.utf8) + [UInt8(ascii: "/")] + relative + [0]).map { CChar(bitPattern: $0) }
    }

    /// A copy of the JPEG at `source` as `relative`, a name of any bytes.
    func copy(_ source: String, to relative: [UInt8]) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: source))
        let fd = open(bytePath(relative), O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(fd >= 0, "cannot create \(String(decoding: relative, as: UTF8.self))")
        defer { close(fd) }
        #expect(data.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) } == data.count)
    }

    /// The bytes of a file of any name.
    func contents(_ relative: [UInt8]) -> Data? {
        let fd = open(bytePath(relative), O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data = Data()
        var block = [UInt8](repeating: 0, count: 65536)
        while case let got = read(fd, &block, block.count), got > 0 { data.append(contentsOf: block[0 ..< got]) }
        return data
    }

    // MARK: - Point 2: nothing of a source folder vanishes

    /// Latin-1 names (`caf\xE9.jpg`, a folder `\xE9t\xE9/`) are neither valid UTF-8 nor
    /// listed by `FileManager`: a run listed 1 of 5 images and said "1 done of 1", exit 0.
    /// Each is now an item: its key escaped (`caf\xE9.jpg`), its file read by its exact
    /// bytes, its output written; the count and the items agree.
    @Test func namesThatAreNotUTF8AreProcessedWithEscapedKeys() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/ok.jpg"), width: 32, height: 24)
        let original = work.url("in/ok.jpg")
        let folder: [UInt8] = Array("in/".utf8) + [0xE9, 0x74, 0xE9] // in/été in Latin-1
        #expect(mkdir(bytePath(folder), 0o755) == 0)
        let latin1: [[UInt8]] = [
            Array("in/caf".utf8) + [0xE9] + Array(".jpg".utf8),
            folder + Array("/one.jpg".utf8),
            folder + Array("/two.jpg".utf8),
            folder + Array("/x".utf8) + [0xFF, 0xFE] + Array(".jpg".utf8),
        ]
        for name in latin1 { try copy(original, to: name) }
        // (`TemporaryDirectory` removes what `FileManager` can name.)
        defer {
            for name in latin1 { unlink(bytePath(name)) }
            rmdir(bytePath(folder))
        }
        let before = latin1.map(contents)

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stdout.contains("5 done, 0 skipped, 0 failed of 5"), "stdout: \(result.stdout)")
        let report = try status()
        #expect((report.total, report.done, report.feedComplete) == (5, 5, true))
        let keys = try RunStore(path: work.url(".imgpipe/pipe.sqlite")).items(runId: report.run).map(\.key).sorted()
        #expect(keys == [#"\xE9t\xE9/one.jpg"#, #"\xE9t\xE9/two.jpg"#, #"\xE9t\xE9/x\xFF\xFE.jpg"#, #"caf\xE9.jpg"#, "ok.jpg"],
                "keys: \(keys)")
        // Every output written and decodable; the originals as they were.
        let outputs = work.files(under: "out").filter { !$0.hasPrefix(".") }
        #expect(outputs.count == 5, "outputs: \(outputs)")
        for output in outputs {
            let picture = try ImageFixtures.decode(work.url("out/" + output))
            #expect((picture.width, picture.height) == (8, 6), "\(output)")
        }
        #expect(latin1.map(contents) == before)
    }

    /// A sub-folder the run may not read (mode 000; the run started without root's
    /// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, as tests run as root and root reads any
    /// folder) was passed over: "3 done of 3", exit 0, 3 of 6 images never seen. It is now
    /// named, the run exits 1 with its feed not complete, and `resume` lists it once it can
    /// be read. A link named like an image that leads nowhere fails naming itself.
    @Test func anUnreadableSubFolderIsNamedAndTheRunIsNotWhole() throws {
        try pipeline()
        for name in ["a.jpg", "b.jpg", "locked/c.jpg", "locked/d.jpg", "locked/e.jpg", "z.jpg"] {
            try ImageFixtures.jpeg(at: work.url("in/" + name), width: 32, height: 24)
        }
        try FileManager.default.createSymbolicLink(atPath: work.url("in/gone.jpg"), withDestinationPath: work.url("nowhere.jpg"))
        #expect(chmod(work.url("in/locked"), 0o000) == 0)
        defer { chmod(work.url("in/locked"), 0o755) }

        let run = try ImgpipeBinary.launch(
            executable: "/usr/bin/setpriv",
            ["--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--", ImgpipeBinary.path, "run", "pipe.json"],
            in: work.path
        ).wait()
        #expect(run.status == 1, "stdout: \(run.stdout)\nstderr: \(run.stderr)")
        #expect(run.stderr.contains("1 folder of") && run.stderr.contains("locked (Permission denied)"), "stderr: \(run.stderr)")
        #expect(run.stdout.contains("could not be listed to its end"), "stdout: \(run.stdout)")
        var report = try status()
        #expect((report.total, report.done, report.failed, report.feedComplete) == (4, 3, 1, false))
        #expect(report.failures.map(\.key) == ["gone.jpg"] && report.failures.first?.message.contains("gone.jpg") == true,
                "failures: \(report.failures)")

        // Readable again: a resume lists what it left out.
        #expect(chmod(work.url("in/locked"), 0o755) == 0)
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 1, "the link still leads nowhere: \(resumed.stderr)")
        report = try status()
        #expect((report.total, report.done, report.failed, report.feedComplete) == (7, 6, 1, true))
        #expect(work.files(under: "out").filter { !$0.hasPrefix(".") }
            == ["a.jpg", "b.jpg", "locked/c.jpg", "locked/d.jpg", "locked/e.jpg", "z.jpg"])
    }
}
