import Foundation
import GRDB
@testable import ImagePipeline
import ImagePipelineTesting
import Testing

/// The state file of the version before `skipped` (migration v3), opened by this one.
extension RunStoreTests {
    @Test func stateFileOfTheVersionBeforeSkipsOpensAndKeepsItsRows() throws {
        let path = directory.url("old.sqlite")
        do {
            let queue = try DatabaseQueue(path: path)
            try RunStore.migrator.migrate(queue, upTo: "v3: run UUIDs")
            try queue.write { db in
                try db.execute(sql: """
                    INSERT INTO run (pipelinePath, pipelineName, document, fingerprint, sinks, state, workDirectory, startedAt, uuid)
                    VALUES ('/p.json', 'p', '{}', '{}', '["out"]', 'interrupted', '/w', 0, 'u-1');
                    INSERT INTO item (runId, seq, key, location, status, updatedAt) VALUES (1, 1, 'a', '/a', 'done', 0);
                    INSERT INTO item (runId, seq, key, location, status, reason, message, updatedAt)
                        VALUES (1, 2, 'b', '/b', 'failed', 'decode', 'bad', 0);
                    INSERT INTO item (runId, seq, key, location, status, updatedAt) VALUES (1, 3, 'c', '/c', 'pending', 0);
                    INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'a', 'out', 'done', 0);
                    INSERT INTO delivery (runId, itemKey, sink, status, updatedAt) VALUES (1, 'c', 'out', 'pending', 0);
                    """)
            }
        }
        let store = try RunStore(path: path)
        let before = try store.counts(runId: 1)
        #expect((before.total, before.done, before.failed, before.pending, before.skipped) == (3, 1, 1, 1, 0))
        #expect(try store.deliveryCounts(runId: 1)["out"] == DeliveryCounts(done: 1, failed: 0, pending: 1))
        #expect(try store.apply([.skipped(key: "c", skip: ItemSkip(.format, "gif is not in accept.formats (jpeg)"))], runId: 1) == [.applied])
        let after = try store.counts(runId: 1)
        #expect((after.skipped, after.unfinished) == (1, 0))
        #expect(try store.item(runId: 1, key: "c")?.skipReason == .format)
        #expect(try store.deliveryCounts(runId: 1)["out"] == DeliveryCounts(done: 1, failed: 0, pending: 0))
        #expect(store.damage() == nil)
    }
}
