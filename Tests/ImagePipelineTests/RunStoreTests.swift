import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

@Suite("Run store")
struct RunStoreTests {
    let directory: TemporaryDirectory
    let store: RunStore

    init() throws {
        directory = try TemporaryDirectory()
        store = try RunStore(path: directory.url("state/test.sqlite"))
    }

    func newRun(sinks: [String] = ["out"]) throws -> RunRecord {
        try store.createRun(
            pipelinePath: "/p.json", pipelineName: "p", document: "{}",
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
        _ = try store.apply(
            [
                item("a", 1), item("b", 2),
                .processed(
                    key: "b", outputs: [StagedOutput(path: stagedFile, name: "b", sha256: "", bytes: 1, width: 1, height: 1)]),
                .failed(key: "a", failure: ItemFailure(.download, "gone"), attempts: 3),
                .deliveryFailed(key: "b", sink: "out", failure: ItemFailure(.upload, "503"), attempts: 3),
            ],
            runId: run.id)
        #expect(try store.requeueFailed(runId: run.id) == 2)
        #expect(try store.item(runId: run.id, key: "a")?.status == .pending)
        #expect(try store.item(runId: run.id, key: "b")?.status == .processed, "its output is still staged")
        #expect(try store.pendingDeliveries(runId: run.id, key: "b").map(\.sink) == ["out"])
    }
}
