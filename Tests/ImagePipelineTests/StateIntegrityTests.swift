import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// The state file and the folders a run writes, attacked while a run goes on: the same
/// state file reached by another path, a state file deleted, a read-only sink, a full
/// disk, a sink folder removed, a FIFO where a file should be.
@Suite("State and folders under attack", .serialized)
struct StateIntegrityTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-integrity") }

    func images(_ count: Int, width: Int = 200, height: Int = 150) throws {
        try ImageFixtures.jpegs(count, in: work.url("in"), width: width, height: height)
    }

    func pipeline(
        source: String = #"{"type": "directory", "path": "in"}"#,
        filters: String = #"[{"op": "fit", "width": 64, "height": 64}]"#,
        output: String = #"{"format": "jpeg"}"#, sink: String = "out", extra: String = ""
    ) throws {
        try work.write(
            """
            {"version": 1, "source": \(source), "filters": \(filters), "output": \(output),
             "sink": {"type": "directory", "path": "\(sink)"}\(extra)}
            """, to: "pipe.json")
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    /// A run kept busy for several seconds: 12 images, each answered after 0.5 s, one at a time.
    func slowRun(_ server: TestHTTPServer, state: String) throws -> RunningCommand {
        try work.write((1...12).map { "\(server.baseURL)/images/\($0).jpg" }.joined(separator: "\n"), to: "urls.txt")
        try pipeline(source: #"{"type": "url-list", "path": "urls.txt"}"#, extra: #", "limits": {"downloads": 1}"#)
        return try ImgpipeBinary.launch(["run", "pipe.json", "--state", state], in: work.path)
    }

    func slowServer() throws -> TestHTTPServer {
        let path = work.url("fixture.jpg")
        try ImageFixtures.jpeg(at: path, width: 64, height: 48)
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
        return try TestHTTPServer { _ in
            var response = TestHTTPServer.Response.bytes(jpeg)
            response.stall = 0.5
            return response
        }
    }

    /// Waits until the state file has a run (the process holds its lock by then).
    func waitForRun(in state: String) {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let queue = try? DatabaseQueue(path: work.url(state)),
                let count = try? queue.read({ try Int.fetchOne($0, sql: "SELECT count(*) FROM item") }), count > 0
            {
                return
            }
            usleep(50_000)
        }
    }

    @Test func theSameStateFileThroughAnotherPathIsRefused() throws {
        let server = try slowServer()
        try work.folder("states")
        let first = try slowRun(server, state: "states/run.sqlite")
        waitForRun(in: "states/run.sqlite")
        try FileManager.default.createSymbolicLink(
            atPath: work.url("link.sqlite"), withDestinationPath: work.url("states/run.sqlite"))
        for other in ["link.sqlite", "./states/run.sqlite", "states/../states/run.sqlite"] {
            let second = try imgpipe("resume", "pipe.json", "--state", other)
            #expect(second.status == 2, "\(other): \(second.stderr)")
            #expect(second.stderr.contains("in use by another imgpipe process"), "\(other): \(second.stderr)")
        }
        first.signal(SIGINT)
        let ended = try #require(first.watch(deadline: 60).result)
        #expect(ended.status == 130 || ended.status == 0, "stderr: \(ended.stderr)")
        #expect(try imgpipe("resume", "pipe.json", "--state", "link.sqlite").status == 0)
    }

    @Test func aStateFileDeletedMidRunDoesNotEndInAllDone() throws {
        let server = try slowServer()
        let running = try slowRun(server, state: "run.sqlite")
        waitForRun(in: "run.sqlite")
        try FileManager.default.removeItem(atPath: work.url("run.sqlite"))
        let result = try #require(running.watch(deadline: 60).result)
        #expect(result.status == 1, "stdout: \(result.stdout) stderr: \(result.stderr)")
        #expect(result.stderr.contains("run.sqlite was deleted while the run was going"), "stderr: \(result.stderr)")
    }

    /// Cut short after SQLite first copied its log into it, the state file grows back at the
    /// next copy (with holes where pages were): its size at the end says nothing. A reviewer
    /// emptied it 3 s into a run of 150 images and got "all done", and a corrupt file; another
    /// wrote zeros into it in place (`dd conv=notrunc`), as long as before, and got the same.
    @Test(arguments: ["cut", "overwritten"])
    func aStateFileChangedMidRunDoesNotEndInAllDone(_ how: String) throws {
        try images(400, width: 32, height: 24)
        try pipeline(filters: #"[{"op": "fit", "width": 16, "height": 16}]"#, extra: #", "limits": {"workers": 1}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--state", "run.sqlite"], in: work.path)
        // The first checkpoint makes the file longer than its first page; changed then.
        let state = work.url("run.sqlite")
        let deadline = Date().addingTimeInterval(60)
        func size() -> Int { ((try? FileManager.default.attributesOfItem(atPath: state))?[.size] as? Int) ?? 0 }
        while size() <= 8192, running.process.isRunning, Date() < deadline { usleep(1000) }
        let before = size()
        if how == "cut" {
            #expect(truncate(state, 4096) == 0)
        } else {
            let handle = try #require(FileHandle(forWritingAtPath: state))
            try handle.seek(toOffset: 4096)
            try handle.write(contentsOf: Data(count: 4096))
            try handle.close()
        }
        let result = try #require(running.watch(deadline: 120).result)
        #expect(before > 8192, "the run ended before its first checkpoint")
        // Zeros written while imgpipe itself writes can be written over again by SQLite from
        // its log: then the file is whole, and the run may say so. Otherwise it must not.
        if how == "overwritten", result.status == 0 {
            let queue = try DatabaseQueue(path: state)
            #expect(try queue.read { try String.fetchAll($0, sql: "PRAGMA quick_check") } == ["ok"], "all done, but damaged")
            #expect(try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM item WHERE status = 'done'") } == 400)
            return
        }
        #expect(result.status == 1, "stdout: \(result.stdout) stderr: \(result.stderr)")
        #expect(
            result.stderr.contains("run.sqlite was changed by another program while the run was going")
                || result.stderr.contains("run.sqlite was damaged while the run was going"), "stderr: \(result.stderr)")
        #expect(!result.stdout.contains("all done") && !result.stderr.contains("all done"))
    }

    /// A resume takes up every unfinished item whatever the clocks say: a state file last
    /// written by a clock an hour ahead (an NTP step back, another machine) left items
    /// pending for good, and the resume still exited 0.
    @Test func aResumeTakesUpItemsWrittenByAClockAhead() throws {
        let server = try slowServer()
        let first = try slowRun(server, state: "run.sqlite")
        waitForRun(in: "run.sqlite")
        first.signal(SIGKILL)
        _ = first.watch(deadline: 10)
        let queue = try DatabaseQueue(path: work.url("run.sqlite"))
        let ahead = try queue.write { db -> Int in
            try db.execute(sql: "UPDATE item SET updatedAt = updatedAt + 3600 WHERE status != 'done'")
            return db.changesCount
        }
        #expect(ahead > 0)
        let resumed = try imgpipe("resume", "pipe.json", "--state", "run.sqlite")
        #expect(resumed.status == 0, "stdout: \(resumed.stdout) stderr: \(resumed.stderr)")
        let done = try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM item WHERE status = 'done'") }
        #expect(done == 12)
    }

    @Test func aReadOnlySinkLeavesNoRunningRunBehind() throws {
        try images(3)
        try work.folder("ro")
        let mount = try TmpfsMount(at: work.url("ro"), size: "1m", readOnly: true)
        defer { mount.unmount() }
        try pipeline(sink: "ro/out")
        let refused = try imgpipe("run", "pipe.json")
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("ro/out"), "stderr: \(refused.stderr)")
        let queue = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite"))
        let running = try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM run WHERE state = 'running'") }
        #expect(running == 0, "a run was left running")
        try pipeline(sink: "out")
        let next = try imgpipe("run", "pipe.json")
        #expect(next.status == 0, "stderr: \(next.stderr)")
        #expect(work.files(under: "out").count == 3)
    }

    /// Outputs staged on a full disk fail `io` after their retries, and `resume
    /// --retry-failed` delivers them once there is room.
    @Test func aFullDiskWhileStagingIsAnIOFailureThatIsRetried() throws {
        for index in 1...2 {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 900, height: 700, seed: index), to: work.url("in/photo-\(index).jpg"))
        }
        try work.folder("small")
        let mount = try TmpfsMount(at: work.url("small"), size: "64k")
        defer { mount.unmount() }
        // The run's work folder (beside the state file) lives on the small disk.
        try work.folder(".imgpipe")
        try FileManager.default.createSymbolicLink(atPath: work.url(".imgpipe/pipe.work"), withDestinationPath: work.url("small"))
        try pipeline(
            filters: #"[{"op": "fit", "width": 900, "height": 700}]"#, output: #"{"format": "png"}"#,
            extra: #", "retry": {"attempts": 2, "backoff": 0.05}"#)
        let full = try imgpipe("run", "pipe.json")
        #expect(full.status == 1, "stderr: \(full.stderr)")
        let status = try imgpipe("status", "pipe.json", "--json")
        let report = try JSONDecoder().decode(StatusReport.self, from: Data(status.stdout.utf8))
        #expect(report.failed == 2)
        #expect(
            report.failures.allSatisfy { $0.reason == "io" && $0.attempts == 2 && $0.message.contains("No space left") },
            "got: \(report.failures)")
        try mount.resize("64m")
        let resumed = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out").count == 2)
    }

    /// Spool files waiting for reuse keep up to a MiB of blocks each (`SpoolFiles`): on a
    /// disk nearly full, an output that does not fit beside them is staged once they are
    /// given back, as it was when they kept none. Three ended items of 1.15 MB leave 3 MiB
    /// kept; the last item (2 MB in, 2 MB out, sent after a pause so that the others have
    /// ended) fits on the 6 MiB disk only without them.
    @Test func spoolFilesKeptForReuseMakeRoomForAnOutputOnAFullDisk() throws {
        func noisePNG(_ width: Int, _ height: Int, seed: UInt32) throws -> Data {
            var state = seed | 1
            let bytes = (0..<width * height * 3).map { _ -> UInt8 in
                state ^= state << 13
                state ^= state >> 17
                state ^= state << 5
                return UInt8(truncatingIfNeeded: state)
            }
            try ImageFixtures.write(
                try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb),
                to: work.url("noise-\(seed).png"))
            return try Data(contentsOf: URL(fileURLWithPath: work.url("noise-\(seed).png")))
        }
        let bodies = [
            try noisePNG(640, 600, seed: 1), try noisePNG(640, 600, seed: 2), try noisePNG(640, 600, seed: 3),
            try noisePNG(820, 820, seed: 4),
        ]
        #expect(bodies[..<3].allSatisfy { $0.count > 1 << 20 })
        let server = try TestHTTPServer { request in
            guard let index = Int(request.path.dropFirst("/n".count).prefix { $0.isNumber }), (1...4).contains(index) else {
                return .status(404)
            }
            return TestHTTPServer.Response(
                headers: [("Content-Type", "image/png")], body: bodies[index - 1],
                stall: index == 4 ? 1.5 : 0)
        }
        defer { server.stop() }
        try work.write((1...4).map { "\(server.baseURL)/n\($0).png" }.joined(separator: "\n"), to: "urls.txt")
        try work.folder("small")
        let mount = try TmpfsMount(at: work.url("small"), size: "6m")
        defer { mount.unmount() }
        try work.folder(".imgpipe")
        try FileManager.default.createSymbolicLink(atPath: work.url(".imgpipe/pipe.work"), withDestinationPath: work.url("small"))
        try pipeline(
            source: #"{"type": "url-list", "path": "urls.txt", "cache": false}"#,
            filters: #"[{"op": "fit", "width": 2000, "height": 2000}]"#, output: #"{"format": "png"}"#,
            extra: #", "limits": {"downloads": 1, "workers": 1}, "retry": {"attempts": 2, "backoff": 0.05}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stdout: \(result.stdout) stderr: \(result.stderr)")
        let out = work.files(under: "out").sorted()
        #expect(out == ["n1.png", "n2.png", "n3.png", "n4.png"])
        for (index, name) in out.enumerated() {
            let made = try ImageFixtures.decode(work.url("out/" + name))
            let sent = try ImageFixtures.decode(work.url("noise-\(index + 1).png"))
            #expect(made.width == sent.width && made.height == sent.height && made.samples == sent.samples, "\(name)")
        }
    }

    @Test func aSinkFolderRemovedMidRunIsMadeAgain() throws {
        try images(150, width: 400, height: 300)
        try pipeline(extra: #", "limits": {"workers": 1}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, running.process.isRunning, work.files(under: "out").isEmpty { usleep(5000) }
        // The run writes into the folder while it is removed: a removal can meet a file made
        // meanwhile and fail (as `rm -rf` would); it is tried again, as a user would.
        var removed = false
        for _ in 0..<50 where !removed {
            removed = (try? FileManager.default.removeItem(atPath: work.url("out"))) != nil
            if !removed { usleep(10000) }
        }
        #expect(removed, "the sink folder could not be removed")
        let result = try #require(running.watch(deadline: 120).result)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(!work.files(under: "out").isEmpty, "nothing was written after the folder was removed")
    }

    @Test func aFIFOWhereAFileShouldBeNeverHoldsTheRun() throws {
        try images(2)
        #expect(mkfifo(work.url("in/pipe.jpg"), 0o644) == 0)
        #expect(mkfifo(work.url("mark.png"), 0o644) == 0)
        try pipeline(filters: #"[{"op": "watermark", "image": "mark.png"}]"#)
        let refused = try #require(try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path).watch(deadline: 60).result)
        #expect(refused.status == 2)
        #expect(
            refused.stderr.contains("filters[0].image") && refused.stderr.contains("not a readable regular file"),
            "stderr: \(refused.stderr)")
        try pipeline()
        // A FIFO in the source folder is not an image file: it is not listed.
        let result = try #require(
            try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path).watch(deadline: 60).result,
            "the run hung on a FIFO in the source folder")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let status = try imgpipe("status", "pipe.json", "--json")
        let report = try JSONDecoder().decode(StatusReport.self, from: Data(status.stdout.utf8))
        #expect(report.total == 2 && report.done == 2)
    }
}

/// A tmpfs mounted for one test (the tests run as root, as CI does).
private struct TmpfsMount {
    let path: String

    init(at path: String, size: String, readOnly: Bool = false) throws {
        self.path = path
        let options = "size=\(size)" + (readOnly ? ",ro" : "")
        guard Self.command(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path]) == 0 else {
            throw MountError(description: "cannot mount a tmpfs on \(path) (the test needs root)")
        }
    }

    func resize(_ size: String) throws {
        guard Self.command(["mount", "-o", "remount,size=\(size)", path]) == 0 else {
            throw MountError(description: "cannot resize the tmpfs on \(path)")
        }
    }

    func unmount() { _ = Self.command(["umount", "-l", path]) }

    static func command(_ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        do { try process.run() } catch { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }

    struct MountError: Error, CustomStringConvertible { let description: String }
}
