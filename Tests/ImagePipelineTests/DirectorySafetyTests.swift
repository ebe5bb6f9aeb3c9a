import CBeneath
import Crypto
import Foundation
import ImagePipeline
import ImagePipelineTesting
import Synchronization
import Testing

@testable import PipelineKit

/// A directory source and a directory sink against what a stranger can put in a folder:
/// names that are not UTF-8, folders that cannot be read, a sink's folder swapped for a
/// symbolic link to the originals while a run writes into it. The built binary, end to end.
@Suite("Directory sources and sinks, hostile folders", .serialized)
struct DirectorySafetyTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-dirsafe") }

    /// `count` copies of one 16×16 JPEG, `folder/p0001.jpg` and on.
    func smallJPEGs(_ count: Int, in folder: String) throws {
        let fixture = work.url("fixture.jpg")
        if !FileManager.default.fileExists(atPath: fixture) { try ImageFixtures.jpeg(at: fixture, width: 16, height: 16) }
        try work.folder(folder)
        for index in 1...count {
            try FileManager.default.copyItem(atPath: fixture, toPath: work.url(String(format: "\(folder)/p%04d.jpg", index)))
        }
    }

    /// Writes `pipe.json` reading `in/` and writing `out/`, outputs named `name`.
    func pipeline(name: String? = nil) throws {
        let named = name.map { #", "name": "\#($0)""# } ?? ""
        try work.write(
            """
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
        while case let got = read(fd, &block, block.count), got > 0 { data.append(contentsOf: block[0..<got]) }
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
        let folder: [UInt8] = Array("in/".utf8) + [0xE9, 0x74, 0xE9]  // in/été in Latin-1
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
        #expect(
            keys == [#"\xE9t\xE9/one.jpg"#, #"\xE9t\xE9/two.jpg"#, #"\xE9t\xE9/x\xFF\xFE.jpg"#, #"caf\xE9.jpg"#, "ok.jpg"],
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
        #expect(
            report.failures.map(\.key) == ["gone.jpg"] && report.failures.first?.message.contains("gone.jpg") == true,
            "failures: \(report.failures)")

        // Readable again: a resume lists what it left out.
        #expect(chmod(work.url("in/locked"), 0o755) == 0)
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 1, "the link still leads nowhere: \(resumed.stderr)")
        report = try status()
        #expect((report.total, report.done, report.failed, report.feedComplete) == (7, 6, 1, true))
        #expect(
            work.files(under: "out").filter { !$0.hasPrefix(".") }
                == ["a.jpg", "b.jpg", "locked/c.jpg", "locked/d.jpg", "locked/e.jpg", "z.jpg"])
    }

    // MARK: - Point 3: outputs never leave the sink

    /// While a run writes `sub/<name>.jpg` into `out/`, a thread swaps `out/sub` with a
    /// symbolic link to the source folder, atomically (`renameat2(RENAME_EXCHANGE)`), over
    /// and over. The sink checked each folder once and `rename` followed whatever was
    /// there later: most originals were written over (1,366–1,444 of 1,500), exit 0. Now
    /// no original changes and nothing appears in the source folder; every item is done
    /// (its output in the real `sub`, under whichever name it had) or failed naming the link.
    @Test func aSinkFolderSwappedForALinkToTheSourceNeverWritesThere() throws {
        try pipeline(name: "sub/{stem}.jpg")
        let count = 300
        try smallJPEGs(count, in: "in")
        let originals = try Dictionary(
            uniqueKeysWithValues: FileManager.default.contentsOfDirectory(atPath: work.url("in")).map {
                ($0, SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: work.url("in/" + $0)))).description)
            })
        try work.folder("out/sub")
        try FileManager.default.createSymbolicLink(atPath: work.url("out/swap"), withDestinationPath: work.url("in"))
        let out = open(work.url("out"), O_RDONLY | O_DIRECTORY)
        try #require(out >= 0)
        defer { close(out) }

        let swapping = Swapping()
        let swapper = Thread {
            while !swapping.stopped {
                if ip_rename_exchange(out, "sub", out, "swap") == 0 { swapping.swapped() }
            }
        }
        swapper.start()
        let result = try ImgpipeBinary.run(["run", "pipe.json"], in: work.path)
        swapping.stop()
        while !swapper.isFinished { usleep(1000) }
        // `sub` the real folder again, `swap` the link.
        var info = stat()
        if lstat(work.url("out/sub"), &info) == 0, info.st_mode & S_IFMT == S_IFLNK {
            #expect(ip_rename_exchange(out, "sub", out, "swap") == 0)
        }

        #expect(swapping.swaps > 100, "the folder was swapped \(swapping.swaps) times")
        #expect([0, 1].contains(result.status), "stderr: \(result.stderr)")
        let now = try FileManager.default.contentsOfDirectory(atPath: work.url("in"))
        #expect(
            Set(now) == Set(originals.keys),
            "files appeared in the source folder: \(Set(now).subtracting(originals.keys).sorted())")
        let changed = try originals.filter { name, hash in
            SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: work.url("in/" + name)))).description != hash
        }
        #expect(changed.isEmpty, "\(changed.count) of \(count) originals were written over")

        let report = try status()
        #expect(report.done + report.failed == count)
        for failure in report.failures {
            #expect(
                failure.message.contains("symbolic link") || failure.message.contains("leads into the source folder"),
                "\(failure.key): \(failure.message)")
        }
        let written = work.files(under: "out").filter { !$0.hasPrefix(".") && $0 != "swap" }
        #expect(written.count == report.done, "\(report.done) done, outputs: \(written.count)")
        #expect(written.allSatisfy { $0.hasPrefix("sub/") }, "outputs: \(written.filter { !$0.hasPrefix("sub/") })")
    }

    /// A file named `caf\xE9.jpg` in letters beside a Latin-1 `café.jpg`: the escape gave
    /// both the same key, and one was passed over as a duplicate. A backslash is escaped too.
    @Test func anEscapedNameNeverMeetsALiteralOne() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/ok.jpg"), width: 32, height: 24)
        try FileManager.default.copyItem(atPath: work.url("in/ok.jpg"), toPath: work.url(#"in/caf\xE9.jpg"#))
        let latin1 = Array("in/caf".utf8) + [0xE9] + Array(".jpg".utf8)
        try copy(work.url("in/ok.jpg"), to: latin1)
        defer { unlink(bytePath(latin1)) }
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(!result.stderr.contains("duplicate"), "stderr: \(result.stderr)")
        let report = try status()
        #expect((report.total, report.done) == (3, 3))
        let keys = try RunStore(path: work.url(".imgpipe/pipe.sqlite")).items(runId: report.run).map(\.key).sorted()
        #expect(keys == [#"caf\x5CxE9.jpg"#, #"caf\xE9.jpg"#, "ok.jpg"], "keys: \(keys)")
    }

    /// The sink's own folder swapped for a link to a folder elsewhere while the run writes:
    /// the root was opened by its path, links followed, on every write (303 of 400 outputs
    /// went elsewhere). Nothing reaches the other folder; what was not written fails, named.
    @Test func theSinksOwnFolderSwappedForALinkSendsNothingElsewhere() throws {
        try pipeline()
        let count = 200
        try smallJPEGs(count, in: "in")
        try work.folder("out")
        try work.folder("elsewhere")
        try FileManager.default.createSymbolicLink(atPath: work.url("outlink"), withDestinationPath: work.url("elsewhere"))
        let top = open(work.path, O_RDONLY | O_DIRECTORY)
        try #require(top >= 0)
        defer { close(top) }
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let deadline = Date().addingTimeInterval(60)
        while running.process.isRunning, Date() < deadline, work.files(under: "out").filter({ !$0.hasPrefix(".") }).count < 10 {
            usleep(2000)
        }
        #expect(ip_rename_exchange(top, "out", top, "outlink") == 0)
        let result = running.wait()
        #expect([0, 1].contains(result.status), "stderr: \(result.stderr)")
        let strays = work.files(under: "elsewhere")
        #expect(strays.isEmpty, "\(strays.count) file(s) written to the folder the link leads to")
        let report = try status()
        #expect(report.done + report.failed == count)
        for failure in report.failures {
            #expect(failure.message.contains("symbolic link"), "\(failure.key): \(failure.message)")
        }
    }

    /// An incremental run's prune while a folder of the sink is swapped for a link to a
    /// folder outside: files there of the pruned names used to be deleted (a path checked,
    /// then unlinked). Prune reaches each file beneath the sink by descriptor.
    @Test func pruneNeverRemovesAFileOutsideTheSink() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 8, "height": 8}],
             "output": {"format": "jpeg", "name": "sub/{stem}.jpg"}, "sink": {"type": "directory", "path": "out", "prune": true}}
            """, to: "pipe.json")
        let count = 300
        try smallJPEGs(count, in: "in")
        #expect(try ImgpipeBinary.run(["run", "pipe.json"], in: work.path).status == 0)
        // Half the sources go: the next incremental run prunes their outputs.
        for index in stride(from: 1, through: count, by: 2) {
            try FileManager.default.removeItem(atPath: work.url(String(format: "in/p%04d.jpg", index)))
        }
        try smallJPEGs(count, in: "victim")
        try FileManager.default.createSymbolicLink(atPath: work.url("out/swap"), withDestinationPath: work.url("victim"))
        let out = open(work.url("out"), O_RDONLY | O_DIRECTORY)
        try #require(out >= 0)
        defer { close(out) }
        let swapping = Swapping()
        let swapper = Thread {
            while !swapping.stopped {
                if ip_rename_exchange(out, "sub", out, "swap") == 0 { swapping.swapped() }
            }
        }
        swapper.start()
        let result = try ImgpipeBinary.run(["run", "pipe.json", "--incremental"], in: work.path)
        swapping.stop()
        while !swapper.isFinished { usleep(1000) }
        #expect(swapping.swaps > 100, "the folder was swapped \(swapping.swaps) times")
        #expect([0, 1].contains(result.status), "stderr: \(result.stderr)")
        let left = try FileManager.default.contentsOfDirectory(atPath: work.url("victim"))
        #expect(left.count == count, "\(count - left.count) file(s) outside the sink were removed")
    }
}

/// The swapping thread's count, and the test's word to stop.
private final class Swapping: Sendable {
    private let state = Mutex((stopped: false, swaps: 0))
    var stopped: Bool { state.withLock { $0.stopped } }
    var swaps: Int { state.withLock { $0.swaps } }
    func stop() { state.withLock { $0.stopped = true } }
    func swapped() { state.withLock { $0.swaps += 1 } }
}
