import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing

@Suite("Run store")
struct RunStoreTests {
    let directory: TemporaryDirectory
    let store: RunStore

    init() throws {
        directory = try TemporaryDirectory()
        store = try RunStore(path: directory.url("state/test.sqlite"))
    }

    func newRun(sinks: [String] = ["out"]) throws -> RunRecord {
        try store.createRun(pipelinePath: "/p.json", pipelineName: "p", document: "{}",
                            fingerprint: ["filters": "[]", "output": "{}"], sinks: sinks, itemLimit: nil,
                            workRoot: directory.url("work"))
    }

    func item(_ key: String, _ seq: Int, name: String? = nil, sinks: [String] = ["out"]) -> StoreChange {
        .insert(NewItem(key: key, seq: seq, location: "/in/\(key)", metadata: nil, outputName: name, sinks: sinks))
    }

    func staged(_ name: String) -> StagedOutput {
        StagedOutput(path: "/work/\(name)", name: name, sha256: "ab", bytes: 10, width: 4, height: 3)
    }

    @Test func databaseIsInWALMode() throws {
        _ = try newRun()
        let queue = try DatabaseQueue(path: store.path)
        let mode = try queue.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
        #expect(mode == "wal")
    }

    @Test func itemGoesThroughTheLifecycle() throws {
        let run = try newRun(sinks: ["a", "b"])
        #expect(try store.apply([item("x.jpg", 1, sinks: ["a", "b"])], runId: run.id) == [.applied])
        #expect(try store.item(runId: run.id, key: "x.jpg")?.status == .pending)

        #expect(try store.apply([.fetched(key: "x.jpg", spoolPath: "/in/x.jpg", tier: .local)], runId: run.id) == [.applied])
        #expect(try store.item(runId: run.id, key: "x.jpg")?.status == .fetched)

        #expect(try store.apply([.processed(key: "x.jpg", outputs: [staged("x.jpg")])], runId: run.id) == [.applied])
        let processed = try #require(try store.item(runId: run.id, key: "x.jpg"))
        #expect(processed.status == .processed)
        #expect(try store.stagedOutputs(runId: run.id, key: "x.jpg").map(\.path) == ["/work/x.jpg"])
        #expect(processed.attempts == 1)
        #expect(try store.pendingDeliveries(runId: run.id, key: "x.jpg").map(\.sink) == ["a", "b"])

        // Done only once every sink has the output.
        #expect(try store.apply([.delivered(key: "x.jpg", sink: "a", remoteURL: "/o/x.jpg", httpStatus: nil)],
                                runId: run.id) == [.applied])
        #expect(try store.item(runId: run.id, key: "x.jpg")?.status == .processed)
        #expect(try store.pendingDeliveries(runId: run.id, key: "x.jpg").map(\.sink) == ["b"])
        #expect(try store.apply([.delivered(key: "x.jpg", sink: "b", remoteURL: nil, httpStatus: 201)],
                                runId: run.id) == [.completed])
        let done = try #require(try store.item(runId: run.id, key: "x.jpg"))
        #expect(done.status == .done)
        #expect(try store.stagedOutputs(runId: run.id, key: "x.jpg").isEmpty, "no staged file is left recorded")
        #expect(try store.deliveryCounts(runId: run.id) == ["a": DeliveryCounts(done: 1), "b": DeliveryCounts(done: 1)])
    }

    @Test func failuresKeepReasonMessageAndAttempts() throws {
        let run = try newRun()
        _ = try store.apply([item("bad.jpg", 1), item("good.jpg", 2)], runId: run.id)
        _ = try store.apply([.failed(key: "bad.jpg", failure: ItemFailure(.decode, "not an image"), attempts: 2)],
                            runId: run.id)
        #expect(try store.failures(runId: run.id) == [
            FailureRecord(key: "bad.jpg", reason: "decode", message: "not an image", attempts: 2, httpStatus: nil),
        ])
        #expect(try store.failureCounts(runId: run.id) == ["decode": 1])
        let counts = try store.counts(runId: run.id)
        #expect((counts.total, counts.failed, counts.pending, counts.unfinished) == (2, 1, 1, 1))
        // A failed item's delivery is not counted as pending for its sink.
        #expect(try store.deliveryCounts(runId: run.id)["out"] == DeliveryCounts(done: 0, failed: 0, pending: 1))
    }

    @Test func aSinkFailureFailsTheItemWithReasonUpload() throws {
        let run = try newRun()
        _ = try store.apply([item("x.jpg", 1), .processed(key: "x.jpg", outputs: [staged("x.jpg")])], runId: run.id)
        let outcome = try store.apply([.deliveryFailed(key: "x.jpg", sink: "out",
                                                       failure: ItemFailure(.upload, "HTTP 403", httpStatus: 403),
                                                       attempts: 1)], runId: run.id)
        #expect(outcome == [.failed(ItemFailure(.upload, "sink out: HTTP 403", httpStatus: 403))])
        #expect(try store.failures(runId: run.id).first?.httpStatus == 403)
        #expect(try store.deliveryCounts(runId: run.id)["out"] == DeliveryCounts(done: 0, failed: 1, pending: 0))
    }

    @Test func anOutputNameBelongsToOneItem() throws {
        let run = try newRun()
        let outcomes = try store.apply([item("a.jpg", 1, name: "a.jpg"), item("a.png", 2, name: "a.jpg")], runId: run.id)
        #expect(outcomes[0] == .applied)
        guard case let .failed(failure) = outcomes[1] else {
            Issue.record("second claim of a.jpg was accepted: \(outcomes)")
            return
        }
        #expect(failure.reason == .encode)
        #expect(failure.message == "output name \"a.jpg\" is already used by item \"a.jpg\"")
        #expect(try store.item(runId: run.id, key: "a.png")?.status == .failed)

        // Names decided after encoding ({hash}) are claimed when processed.
        _ = try store.apply([item("b.jpg", 3), item("c.jpg", 4)], runId: run.id)
        #expect(try store.apply([.processed(key: "b.jpg", outputs: [staged("same.jpg")])], runId: run.id) == [.applied])
        let second = try store.apply([.processed(key: "c.jpg", outputs: [staged("same.jpg")])], runId: run.id)
        #expect(second.first.map { if case .failed = $0 { true } else { false } } == true)
    }

    @Test func insertingAKnownKeyChangesNothing() throws {
        let run = try newRun()
        _ = try store.apply([item("x.jpg", 1)], runId: run.id)
        #expect(try store.apply([item("x.jpg", 7)], runId: run.id) == [.existing(seq: 1, status: .pending)])
        #expect(try store.counts(runId: run.id).total == 1)
    }

    @Test func unfinishedItemsArePagedInFeedOrder() throws {
        let run = try newRun()
        _ = try store.apply((1 ... 10).map { item("k\($0)", $0) }, runId: run.id)
        _ = try store.apply([.failed(key: "k2", failure: ItemFailure(.decode, "x"), attempts: 1)], runId: run.id)
        let first = try store.unfinishedItems(runId: run.id, after: 0, limit: 4)
        #expect(first.map(\.key) == ["k1", "k3", "k4", "k5"])
        let next = try store.unfinishedItems(runId: run.id, after: first.last!.seq, limit: 100)
        #expect(next.map(\.key) == ["k6", "k7", "k8", "k9", "k10"])
        #expect(try store.lastSeq(runId: run.id) == 10)
    }

    @Test func runsMoveThroughTheirStates() throws {
        let first = try newRun()
        #expect(try store.latestRun()?.id == first.id)
        #expect(try store.latestRun()?.isUnfinished == true)
        try store.setState(.finished, runId: first.id, addingElapsed: 2.5)
        let finished = try #require(try store.latestRun())
        #expect(finished.state == .finished && finished.finishedAt != nil && finished.elapsed == 2.5)
        let second = try newRun()
        try store.setState(.abandoned, runId: second.id)
        #expect(try store.latestRun()?.id == first.id, "an abandoned run is not the latest")
        #expect(second.workDirectory.hasSuffix("/work/run-\(second.id)"))
    }

    @Test func requeueingFailedItems() throws {
        let run = try newRun()
        let stagedFile = try directory.write("x", to: "staged.jpg")
        _ = try store.apply([item("a", 1), item("b", 2),
                             .processed(key: "b", outputs: [StagedOutput(path: stagedFile, name: "b", sha256: "", bytes: 1, width: 1, height: 1)]),
                             .failed(key: "a", failure: ItemFailure(.download, "gone"), attempts: 3),
                             .deliveryFailed(key: "b", sink: "out", failure: ItemFailure(.upload, "503"), attempts: 3)],
                            runId: run.id)
        #expect(try store.requeueFailed(runId: run.id) == 2)
        #expect(try store.item(runId: run.id, key: "a")?.status == .pending)
        #expect(try store.item(runId: run.id, key: "b")?.status == .processed, "its output is still staged")
        #expect(try store.pendingDeliveries(runId: run.id, key: "b").map(\.sink) == ["out"])
    }
}
