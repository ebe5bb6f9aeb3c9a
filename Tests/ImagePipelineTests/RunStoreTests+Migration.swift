import Foundation
import GRDB
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The state file of the version before `skipped` (migration v3), opened by this one.
extension RunStoreTests {
    /// A state file called `name` made by the version whose last migration is `madeUpTo`,
    /// holding `rows` (SQL of that version's tables).
    func stateFile(_ name: String, madeUpTo migration: String, rows: String) throws -> String {
        let path = directory.url(name)
        let queue = try DatabaseQueue(path: path)
        try RunStore.migrator.migrate(queue, upTo: migration)
        try queue.write { try $0.execute(sql: rows) }
        return path
    }

    @Test func stateFileOfTheVersionBeforeSkipsOpensAndKeepsItsRows() throws {
        let path = try stateFile(
            "old.sqlite", madeUpTo: "v3: run UUIDs",
            rows: """
                INSERT INTO run (pipelinePath, pipelineName, document, fingerprint, sinks, state, workDirectory, startedAt, uuid)
                VALUES ('/p.json', 'p', '{}', '{}', '["out"]', 'interrupted', '/w', 0, 'u-1');
                INSERT INTO item (runId, seq, key, location, status, updatedAt) VALUES (1, 1, 'a', '/a', 'done', 0);
                INSERT INTO item (runId, seq, key, location, status, reason, message, updatedAt)
                    VALUES (1, 2, 'b', '/b', 'failed', 'decode', 'bad', 0);
                INSERT INTO item (runId, seq, key, location, status, updatedAt) VALUES (1, 3, 'c', '/c', 'pending', 0);
                INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'a', 'out', 'done', 0);
                INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'c', 'out', 'pending', 0);
                """)
        let store = try RunStore(path: path)
        let before = try store.counts(runId: 1)
        #expect((before.total, before.done, before.failed, before.pending, before.skipped) == (3, 1, 1, 1, 0))
        #expect(try store.deliveryCounts(runId: 1)["out"] == DeliveryCounts(done: 1, failed: 0, pending: 1))
        #expect(
            try store.apply([.skipped(key: "c", skip: ItemSkip(.format, "gif is not in accept.formats (jpeg)"))], runId: 1) == [
                .applied
            ])
        let after = try store.counts(runId: 1)
        #expect((after.skipped, after.unfinished) == (1, 0))
        #expect(try store.item(runId: 1, key: "c")?.skipReason == .format)
        #expect(try store.deliveryCounts(runId: 1)["out"] == DeliveryCounts(done: 1, failed: 0, pending: 0))
        #expect(store.damage() == nil)
    }
}

/// The state file of the version before several outputs (migration v4), opened by this one:
/// an item's output becomes the output `default`, its deliveries deliveries of that output.
extension RunStoreTests {
    @Test func stateFileOfTheVersionBeforeOutputsKeepsStagedOutputsNamesAndDeliveries() throws {
        let path = try stateFile(
            "v4.sqlite", madeUpTo: "v4: skipped items",
            rows: """
                INSERT INTO run (pipelinePath, pipelineName, document, fingerprint, sinks, state, workDirectory, startedAt, uuid)
                VALUES ('/p.json', 'p', '{}', '{}', '["a", "b"]', 'interrupted', '/w', 0, 'u-1');
                INSERT INTO item (runId, seq, key, location, status, stagedPath, outputName, outputHash, outputBytes,
                                  width, height, updatedAt)
                    VALUES (1, 1, 'x.jpg', '/x.jpg', 'processed', '/w/staged/1.jpg', 'x.jpg', 'abc', 10, 4, 3, 0);
                INSERT INTO item (runId, seq, key, location, status, outputName, updatedAt)
                    VALUES (1, 2, 'y.jpg', '/y.jpg', 'pending', 'y.jpg', 0);
                INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'x.jpg', 'a', 'done', 0);
                INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'x.jpg', 'b', 'pending', 0);
                INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'y.jpg', 'a', 'pending', 0);
                INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'y.jpg', 'b', 'pending', 0);
                """)
        let store = try RunStore(path: path)
        #expect(
            try store.stagedOutputs(runId: 1, key: "x.jpg")
                == [
                    StagedOutput(
                        id: "default", path: "/w/staged/1.jpg", name: "x.jpg", sha256: "abc", bytes: 10, width: 4, height: 3)
                ])
        #expect(try store.pendingDeliveries(runId: 1, key: "x.jpg").map { "\($0.output)/\($0.sink)" } == ["default/b"])
        #expect(
            try store.deliveryCounts(runId: 1) == ["a": DeliveryCounts(done: 1, pending: 1), "b": DeliveryCounts(pending: 2)])
        // Names claimed before the migration are still claimed.
        let taken = try store.apply(
            [
                .insert(
                    NewItem(
                        key: "z.jpg", seq: 3, location: "/z.jpg", metadata: nil,
                        outputName: "y.jpg", sinks: ["a"]))
            ], runId: 1)
        #expect(taken == [.failed(ItemFailure(.encode, "output name \"y.jpg\" is already used by item \"y.jpg\""))])
        // The item finishes as before: the last delivery completes it and forgets the staged file.
        #expect(try store.apply([.delivered(key: "x.jpg", sink: "b", remoteURL: nil, httpStatus: 201)], runId: 1) == [.completed])
        #expect(try store.stagedOutputs(runId: 1, key: "x.jpg").isEmpty)
        var exported: [ExportRecord] = []
        try store.exportRecords(runId: 1) { exported.append($0) }
        let first = try #require(exported.first)
        #expect(first.outputs.map(\.id) == ["default"])
        #expect(first.outputs.first?.output.sha256 == "abc")
        #expect(first.deliveries.map(\.sink) == ["a", "b"])
        #expect(store.damage() == nil)
    }
}
