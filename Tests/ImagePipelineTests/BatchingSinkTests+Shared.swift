import Foundation
import ImagePipelineTesting
import Logging
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// A batching sink in a worker of a shared run (PostgreSQL), in this process.
extension BatchingSinkTests {
    /// A worker whose items do not fill a batch: its chunks end only when the batch is
    /// committed, and the session used to commit it only once the feed had ended, which
    /// waits for every chunk (its own too): the worker waited forever. The feed now has the
    /// open batches committed while it waits, and the worker ends with all 7 items committed.
    @Test func aSharedWorkerCommitsItsPartFullBatchAndEnds() throws {
        let cluster = try PostgresCluster.start()
        let url = try cluster.makeDatabase()
        defer { cluster.dropDatabase(url) }
        let path = work.url("pipe.json")
        let spec = try PipelineSpec.load(path: path)
        let built = try BuiltPipeline.build(spec, path: path, environment: Environment())
        let sink = MemoryBatchSink(name: "shards", folder: work.url("shards"), batchSize: 10)
        var options = SharedWorker.Options()
        options.chunkSize = 3
        let journal = try WorkerJournal.claim(folder: work.url("workers"), base: "test")
        let worker = try SharedWorker(
            pipeline: built.replacingSinks([sink]), url: url, journalPath: journal.path, reporter: SilentReporter(),
            logger: Logger(label: "batching-shared"), options: options)
        let ended = DispatchSemaphore(value: 0)
        let outcome = LockedBox<Result<StatusReport, any Error>?>(nil)
        Thread.detachNewThread {
            let result = Result { try worker.execute() }
            outcome.withLock { $0 = result }
            ended.signal()
        }
        // A guard, not a timing: the worker ends within a second or two, or never.
        if ended.wait(timeout: .now() + 90) == .timedOut {
            worker.interrupt(now: true)
            _ = ended.wait(timeout: .now() + 30)
            Issue.record("the worker did not end with its items held in a batch that is not full")
        }
        withExtendedLifetime(journal.lock) {}
        let summary = try #require(try outcome.withLock { $0 }?.get())
        #expect(summary.isFinished && summary.done == 7, "\(summary)")
        // Each item in one committed batch (a batch is committed whenever the worker has
        // nothing to claim, so there may be several).
        let committed = try MemoryBatchSink.batches(in: work.url("shards")).values.flatMap { $0.map(\.key) }
        #expect(committed.sorted() == keys.sorted(), "\(committed)")
    }
}
