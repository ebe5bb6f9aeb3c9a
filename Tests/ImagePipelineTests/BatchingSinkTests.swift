import Foundation
import GRDB
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The batching sink contract (`Sink.accept`/`commit`), end to end: `imgpipe-batchtest`
/// runs a pipeline whose sink is a `MemoryBatchSink`, which commits each batch of three
/// items as one file and can be paused with a batch open; the test reads the state file
/// meanwhile, then lets the run go on or kills it.
@Suite("Batching sink", .serialized)
struct BatchingSinkTests {
    let work: TemporaryDirectory
    let keys = (1...7).map { "img-\($0).jpg" }

    init() throws {
        work = try TemporaryDirectory("imgpipe-batching")
        for (index, key) in keys.enumerated() {
            try ImageFixtures.jpeg(at: work.url("in/" + key), width: 64 + index, height: 48)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sink": {"type": "directory", "path": "unused", "name": "shards"}}
            """, to: "pipe.json")
    }

    /// `imgpipe-batchtest`, built beside `imgpipe`.
    var program: String {
        URL(fileURLWithPath: ImgpipeBinary.path).deletingLastPathComponent().appendingPathComponent("imgpipe-batchtest")
            .path
    }

    /// Starts a run with batches of three that stops in batch `batch` once it holds `held`
    /// items (by default in the second, the first committed).
    func pausedRun(batch: Int = 2, held: Int = 2) throws -> RunningCommand {
        try ImgpipeBinary.launch(
            executable: program,
            ["run", "pipe.json", "state.sqlite", "shards", "3", "\(batch)", "\(held)", work.url("marker"), work.url("proceed")],
            in: work.path)
    }

    /// The keys of the open batch once the sink has paused, and `done` items recorded (those
    /// of the batches before).
    func waitForPause(of running: RunningCommand, done: Int = 3) throws -> [String] {
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline, running.process.isRunning {
            if let marker = try? String(contentsOfFile: work.url("marker"), encoding: .utf8),
                try rows("SELECT key FROM item WHERE status = 'done'").count == done
            {
                return marker.split(separator: "\n").map(String.init)
            }
            usleep(10_000)
        }
        let ended = running.process.isRunning ? "still running" : "ended: \(running.wait().stderr)"
        Issue.record("the sink did not pause with a batch open and the first one recorded (\(ended))")
        return []
    }

    func rows(_ sql: String) throws -> [Row] {
        guard FileManager.default.fileExists(atPath: work.url("state.sqlite")) else { return [] }
        return try DatabaseQueue(path: work.url("state.sqlite")).read { try Row.fetchAll($0, sql: sql) }
    }

    func status(of key: String) throws -> (item: String, delivery: String) {
        let row = try #require(
            try rows(
                """
                SELECT i.status AS item, d.status AS delivery FROM item i
                JOIN delivery d ON d.runId = i.runId AND d.itemKey = i.key WHERE i.key = '\(key)'
                """
            ).first)
        return (row["item"], row["delivery"])
    }

    /// Every committed batch's keys, by file name, and each output's SHA-256 as committed.
    func committed() throws -> (batches: [String: [String]], hashes: [String: String]) {
        let batches = try MemoryBatchSink.batches(in: work.url("shards"))
        var hashes: [String: String] = [:]
        for item in batches.values.joined() { hashes[item.key] = item.outputs.first?.sha256 }
        return (batches.mapValues { $0.map(\.key) }, hashes)
    }

    @Test func itemsAreRecordedDeliveredOnlyWhenTheirBatchCommits() throws {
        let running = try pausedRun()
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        let open = try waitForPause(of: running)
        #expect(open.count == 2)

        // The first batch is committed and recorded; the open batch's items are processed,
        // not delivered, their staged outputs kept.
        let first = try committed()
        #expect(first.batches.count == 1)
        let done = try Set(rows("SELECT key FROM item WHERE status = 'done'").map { $0["key"] as String })
        #expect(Set(first.batches["batch-0.json"] ?? []) == done)
        for key in open {
            let now = try status(of: key)
            #expect(now.item == "processed" && now.delivery == "pending", "\(key) is \(now) with its batch open")
            let staged = try #require(try rows("SELECT stagedPath FROM output WHERE itemKey = '\(key)'").first)
            #expect(FileManager.default.fileExists(atPath: staged["stagedPath"] as String))
        }

        // Let it go on: the second batch fills and commits, the last (one item) commits at
        // the end of the run, before the run is recorded finished.
        _ = try work.write("", to: "proceed")
        let result = running.wait()
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let end = try committed()
        #expect(end.batches.mapValues(\.count) == ["batch-0.json": 3, "batch-1.json": 3, "batch-2.json": 1])
        #expect(end.batches.values.joined().sorted() == keys.sorted(), "each item in exactly one batch")
        #expect(try rows("SELECT state FROM run").map { $0["state"] as String } == ["finished"])
        let deliveries = try rows("SELECT itemKey, status, remoteURL FROM delivery")
        #expect(deliveries.count == keys.count)
        for row in deliveries {
            let key: String = row["itemKey"]
            let file = try #require(end.batches.first { $0.value.contains(key) }?.key)
            #expect(row["status"] == "done" && row["remoteURL"] == "shards/" + file, "\(row)")
        }
    }

    @Test func aBatchOpenAtAKillIsDeliveredWholeOnResume() throws {
        let running = try pausedRun()
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        let open = try waitForPause(of: running)
        #expect(open.count == 2)
        running.signal(SIGKILL)
        #expect(running.wait().status != 0)

        let before = try committed()
        let doneBefore = try Set(rows("SELECT key FROM item WHERE status = 'done'").map { $0["key"] as String })
        #expect(before.batches.keys.sorted() == ["batch-0.json"])
        #expect(Set(before.batches["batch-0.json"] ?? []) == doneBefore)
        #expect(doneBefore.isDisjoint(with: open))
        // What the open batch held is lost with the process, and still staged for resume.
        var staged: [String: String] = [:]
        for key in open {
            let now = try status(of: key)
            #expect(now.item == "processed" && now.delivery == "pending", "\(key) is \(now) after the kill")
            let row = try #require(try rows("SELECT stagedPath, hash FROM output WHERE itemKey = '\(key)'").first)
            #expect(FileManager.default.fileExists(atPath: row["stagedPath"] as String))
            staged[key] = row["hash"]
        }

        let resumed = try ImgpipeBinary.launch(
            executable: program, ["resume", "pipe.json", "state.sqlite", "shards", "3"], in: work.path
        ).wait()
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        let after = try committed()
        // The first batch untouched, the other four items in two new batches, each once.
        #expect(after.batches["batch-0.json"] == before.batches["batch-0.json"])
        #expect(after.batches.mapValues(\.count) == ["batch-0.json": 3, "batch-1.json": 3, "batch-2.json": 1])
        #expect(after.batches.values.joined().sorted() == keys.sorted(), "each item in exactly one batch")
        // The open batch's items were delivered from the outputs staged before the kill.
        for key in open { #expect(after.hashes[key] == staged[key], "\(key) was made again") }
        let items = try rows("SELECT key, status, attempts FROM item")
        #expect(items.count == keys.count && items.allSatisfy { $0["status"] == "done" })
        #expect(
            items.filter { open.contains($0["key"] as String) }.allSatisfy { $0["attempts"] == 1 },
            "an item of the open batch was processed again")
    }

    /// A staged output of an earlier session that no longer holds the bytes recorded (the
    /// file it was written over kept another output's after a crash of the machine) is
    /// made again on resume, never delivered: here its bytes reversed, the same length.
    @Test func aStagedOutputNotAsRecordedIsMadeAgainOnResume() throws {
        let running = try pausedRun()
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        let open = try waitForPause(of: running)
        running.signal(SIGKILL)
        #expect(running.wait().status != 0)
        var staged: [String: String] = [:]
        for key in open {
            let row = try #require(try rows("SELECT stagedPath, hash FROM output WHERE itemKey = '\(key)'").first)
            staged[key] = row["hash"]
        }
        let altered = try #require(open.sorted().first)
        let path: String = try #require(try rows("SELECT stagedPath FROM output WHERE itemKey = '\(altered)'").first)[
            "stagedPath"]
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        try Data(bytes.reversed()).write(to: URL(fileURLWithPath: path))

        let resumed = try ImgpipeBinary.launch(
            executable: program, ["resume", "pipe.json", "state.sqlite", "shards", "3"], in: work.path
        ).wait()
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        let after = try committed()
        #expect(after.batches.values.joined().sorted() == keys.sorted(), "each item in exactly one batch")
        for key in open { #expect(after.hashes[key] == staged[key], "\(key) delivered other bytes") }
        let items = try rows("SELECT key, status FROM item")
        #expect(items.count == keys.count && items.allSatisfy { $0["status"] == "done" })
    }

    /// A batch that cannot be committed fails each of its items (reason `upload`, the sink's
    /// message), none recorded delivered, their staged outputs kept for `--retry-failed`.
    @Test func aCommitThatFailsFailsEveryItemOfItsBatch() throws {
        let running = try pausedRun(batch: 1, held: 1)
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        #expect(try waitForPause(of: running, done: 0).count == 1)
        // The sink's folder becomes a file: no batch can be written there.
        try FileManager.default.removeItem(atPath: work.url("shards"))
        _ = try work.write("not a folder", to: "shards")
        _ = try work.write("", to: "proceed")
        let result = running.wait()
        #expect(result.status == 1, "stdout: \(result.stdout) stderr: \(result.stderr)")
        let items = try rows(
            "SELECT i.key, i.status, i.reason, i.message, o.stagedPath FROM item i JOIN output o ON o.itemKey = i.key")
        #expect(items.count == keys.count)
        for row in items {
            let message: String = row["message"] ?? ""
            #expect(row["status"] == "failed" && row["reason"] == "upload", "\(row)")
            #expect(message.hasPrefix("sink shards: cannot write a batch in shards: "), "\(message)")
            #expect(FileManager.default.fileExists(atPath: row["stagedPath"] as String))
        }
        #expect(try rows("SELECT status FROM delivery").allSatisfy { $0["status"] == "failed" })
    }

    /// An item held in a batch gives its slot back without ending; its end takes one again.
    @Test func aHeldItemGivesItsSlotBackUntilItsBatchEnds() {
        var state = RunState(capacity: 1, counts: ItemCounts(), feedComplete: false)
        #expect(state.admit() == .start)
        #expect(state.admit() == .wait)
        #expect(state.setAside() == .none)
        #expect(state.admit() == .start, "the held item's slot went to the next")
        #expect(state.finish(failed: false) == .none)
        #expect(state.producerDone() == .allDone, "the session ends with the batch still open")
        state.takeUpSetAside()
        #expect(state.finish(failed: false) == .none)
        #expect(state.counts.done == 2 && state.inFlight == 0 && state.heldInBatches == 0)
    }
}
