import Dispatch
import Foundation
import GRDB
import ImagePipelineTesting
import Logging
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// The runner in-process: its state machine without threads, the run/resume policy
/// against a database alone, and whole sessions with a temporary store, a sink that keeps
/// what it is given in memory, and the silent reporter.
@Suite("Runner in-process", .serialized)
struct RunnerTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-runner") }

    // MARK: - RunState, without threads

    @Test func slotsAreTakenUpToCapacityAndTheSessionEndsAfterTheProducer() {
        var state = RunState(capacity: 2, counts: ItemCounts(), feedComplete: false)
        #expect(state.admit() == .start)
        #expect(state.admit() == .start)
        #expect(state.admit() == .wait)
        #expect(state.finish(failed: false) == .none)
        #expect(state.admit() == .start)
        #expect(state.finish(failed: true) == .none)
        #expect(state.producerDone() == .none, "an item is still in flight")
        #expect(state.release() == .allDone)
        #expect(state.counts.done == 1 && state.counts.failed == 1 && state.finishedThisSession == 2)
    }

    @Test func anInterruptDrainsThenAborts() {
        var state = RunState(capacity: 4, counts: ItemCounts(), feedComplete: false)
        let now = Date(timeIntervalSince1970: 1000)
        #expect(state.graceDeadline(10) == nil)
        #expect(state.interrupt(now: false, at: now) == .drain)
        #expect(state.admit() == .stop)
        #expect(state.graceDeadline(10) == now.addingTimeInterval(10))
        #expect(state.interrupt(now: false, at: now.addingTimeInterval(1)) == .none)
        #expect(state.interrupt(now: true, at: now.addingTimeInterval(2)) == .abort)
        #expect(state.graceDeadline(10) == now, "after an abort nothing is waited for")
        #expect(state.interrupt(now: true, at: now.addingTimeInterval(3)) == .none)
    }

    @Test func duplicatesGiveBackTheirSlotAndTheirPlaceInTheLimit() {
        var state = RunState(capacity: 1, counts: ItemCounts(), feedComplete: false)
        #expect(state.hasRoom(limit: 1))
        #expect(state.admit() == .start)
        state.listed()
        #expect(!state.hasRoom(limit: 1))
        #expect(state.duplicate() == .none)
        #expect(state.hasRoom(limit: 1))
        #expect(state.reportDuplicate("a") && !state.reportDuplicate("a"))
    }

    // MARK: - executors and the writer

    @Test func anExecutorRunsEveryJobAndNeverMoreThanItsWidth() {
        let executor = BoundedExecutor(label: "test", width: 3)
        let counters = LockedBox((running: 0, most: 0, done: 0))
        let group = DispatchGroup()
        for _ in 0..<40 {
            group.enter()
            executor.submit {
                counters.withLock {
                    $0.running += 1
                    $0.most = max($0.most, $0.running)
                }
                usleep(2000)
                counters.withLock {
                    $0.running -= 1
                    $0.done += 1
                }
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + 30) == .success)
        executor.shutdown()
        let final = counters.withLock { $0 }
        #expect(final.done == 40 && final.most <= 3 && final.most >= 2)
    }

    /// What a job holds (an item's input, its pictures) goes when the job has run, even
    /// while other jobs still wait behind a busy thread.
    @Test func anExecutorLetsGoOfAJobOnceItHasRun() {
        final class Held: Sendable {}
        let executor = BoundedExecutor(label: "test", width: 1)
        defer { executor.shutdown() }
        let first = DispatchSemaphore(value: 0)
        let third = DispatchSemaphore(value: 0)
        let ran = DispatchSemaphore(value: 0)
        weak var watched: Held?
        // One thread: the first job holds it while the second (holding an object), the
        // third (which holds the thread in turn) and the fourth are queued.
        executor.submit { first.wait() }
        do {
            let held = Held()
            watched = held
            executor.submit {
                withExtendedLifetime(held) {}
                ran.signal()
            }
        }
        executor.submit { third.wait() }
        executor.submit {}
        first.signal()
        #expect(ran.wait(timeout: .now() + 30) == .success)
        // The second job has run; the third holds the thread, the fourth waits.
        var waited = 0
        while watched != nil, waited < 3000 {
            usleep(1000)
            waited += 1
        }
        #expect(watched == nil, "the job that ran still holds what it captured")
        third.signal()
    }

    /// An executor's threads carry their stage's name and index in the kernel ("test.0" …),
    /// as `perf` and `/proc/PID/task/*/comm` show them.
    @Test func anExecutorsThreadsCarryTheirStagesName() {
        let executor = BoundedExecutor(label: "imgpipe.test", width: 4)
        defer { executor.shutdown() }
        let names = LockedBox<Set<String>>([])
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        // Four jobs at once hold the four threads.
        for _ in 0..<4 {
            executor.submit {
                let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?"
                names.withLock { _ = $0.insert(name.trimmingCharacters(in: .whitespacesAndNewlines)) }
                started.signal()
                gate.wait()
            }
        }
        for _ in 0..<4 { #expect(started.wait(timeout: .now() + 30) == .success) }
        for _ in 0..<4 { gate.signal() }
        #expect(names.withLock { $0 } == ["test.0", "test.1", "test.2", "test.3"])
    }

    /// `submitIfIdle` queues a job only when a thread would run it at once.
    @Test func anExecutorTakesAJobIfIdleOnlyWhenAThreadIsFree() {
        let executor = BoundedExecutor(label: "test", width: 1)
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let ran = DispatchSemaphore(value: 0)
        // The thread starts up idle.
        var waited = 0
        while !executor.submitIfIdle({
            started.signal()
            release.wait()
        }), waited < 3000 {
            usleep(1000)
            waited += 1
        }
        #expect(started.wait(timeout: .now() + 30) == .success)
        #expect(!executor.submitIfIdle { ran.signal() }, "its one thread is busy")
        release.signal()
        waited = 0
        while !executor.submitIfIdle({ ran.signal() }), waited < 3000 {
            usleep(1000)
            waited += 1
        }
        #expect(ran.wait(timeout: .now() + 30) == .success)
        executor.shutdown()
        #expect(!executor.submitIfIdle {}, "shut down")
    }

    @Test func theWriterCommitsEveryChangeBeforeItsCompletionRuns() throws {
        let store = try RunStore(path: work.url("state.sqlite"))
        let run = try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity()).run
        let writer = StoreWriter(store: store, runId: run.id) { error in Issue.record("write failed: \(error)") }
        let seen = LockedBox<[Int: ChangeOutcome]>([:])
        DispatchQueue.concurrentPerform(iterations: 300) { index in
            writer.submit(insertion(index)) { outcome in
                // Committed before the completion: another connection already sees the row.
                let visible = (try? store.item(runId: run.id, key: "k\(index)")) != nil
                seen.withLock { $0[index] = visible ? outcome : .failed(ItemFailure(.io, "not visible")) }
            }
        }
        writer.submit(.insert(NewItem(key: "k0", seq: 999, location: "/again.jpg", metadata: nil, outputName: nil, sinks: []))) {
            outcome in
            seen.withLock { $0[-1] = outcome }
        }
        writer.drain()
        let outcomes = seen.withLock { $0 }
        #expect(outcomes.count == 301)
        #expect((0..<300).allSatisfy { outcomes[$0] == .applied })
        #expect(outcomes[-1] == .existing(seq: 1, status: .pending), "a key the run has is not inserted twice")
        #expect(try store.counts(runId: run.id).total == 300)
    }

    /// Item `k<index>` (sequence number index + 1) inserted.
    private func insertion(_ index: Int) -> StoreChange {
        .insert(
            NewItem(key: "k\(index)", seq: index + 1, location: "/\(index).jpg", metadata: nil, outputName: nil, sinks: ["out"]))
    }

    /// A state file with a run begun, and a count of its commits from then on.
    private func storeCountingCommits() throws -> (RunStore, RunRecord, CommitCounter) {
        let store = try RunStore(path: work.url("state.sqlite"))
        let run = try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity()).run
        let commits = CommitCounter()
        store.database.add(transactionObserver: commits, extent: .databaseLifetime)
        return (store, run, commits)
    }

    /// A writer over a state file counting its commits, its first change (`k0`) committed.
    private func writerAfterItsFirstCommit(gap: Double) throws -> (RunStore, RunRecord, CommitCounter, StoreWriter) {
        let (store, run, commits) = try storeCountingCommits()
        let writer = StoreWriter(store: store, runId: run.id, commitGap: gap) { error in Issue.record("write failed: \(error)") }
        let first = DispatchSemaphore(value: 0)
        writer.submit(insertion(0)) { _ in first.signal() }
        #expect(first.wait(timeout: .now() + 30) == .success)
        return (store, run, commits, writer)
    }

    @Test func theWriterGathersTheChangesOfItsCommitGapIntoOneCommit() throws {
        let (store, run, commits, writer) = try writerAfterItsFirstCommit(gap: 2)
        // The first commit has just ended: the next one starts 2 s after it, with all of these.
        let applied = LockedBox(0)
        for index in 1...100 {
            writer.submit(insertion(index)) { outcome in
                if outcome == .applied, (try? store.item(runId: run.id, key: "k\(index)")) != nil { applied.withLock { $0 += 1 } }
            }
        }
        writer.drain()
        #expect(commits.count == 2, "one commit for the first change, one for the hundred after it")
        #expect(applied.withLock { $0 } == 100)
        #expect(try store.counts(runId: run.id).total == 101)
    }

    /// A group (a committed batch's deliveries) goes into one commit whole, even one larger
    /// than the writer's batch of changes: a kill leaves all of it written, or none.
    @Test func theWriterNeverSplitsAGroupOfChanges() throws {
        let (store, run, commits, writer) = try writerAfterItsFirstCommit(gap: 0)
        let outcomes = LockedBox<[ChangeOutcome]>([])
        writer.submit((1...1500).map(insertion)) { group in
            let visible = (try? store.counts(runId: run.id).total) ?? 0
            outcomes.withLock { $0 = visible == 1501 ? group : [] }
        }
        writer.drain()
        #expect(commits.count == 2, "the group of 1500 went in one commit")
        #expect(outcomes.withLock { $0 }.count == 1500 && outcomes.withLock { $0 }.allSatisfy { $0 == .applied })
    }

    @Test func theWriterCommitsAtOnceWhileItMayNotLingerAndHoldsChangesWhileItMay() throws {
        let (store, run, commits) = try storeCountingCommits()
        let lingering = LockedBox(false)
        let writer = StoreWriter(store: store, runId: run.id, commitGap: 600, linger: { lingering.withLock { $0 } }) { error in
            Issue.record("write failed: \(error)")
        }
        // A gap of ten minutes, and no change waits for it while `linger` is false: one commit
        // after another.
        for index in 0..<10 {
            let done = DispatchSemaphore(value: 0)
            writer.submit(insertion(index)) { _ in done.signal() }
            #expect(done.wait(timeout: .now() + 10) == .success, "change \(index) committed without waiting for the gap")
        }
        #expect(commits.count == 10)
        // While it may linger, changes wait for the gap; once it may not, they go in one commit.
        lingering.withLock { $0 = true }
        let applied = LockedBox(0)
        for index in 10..<60 { writer.submit(insertion(index)) { _ in applied.withLock { $0 += 1 } } }
        usleep(100_000)
        #expect(applied.withLock { $0 } == 0 && commits.count == 10, "held while lingering")
        lingering.withLock { $0 = false }
        writer.drain()
        #expect(applied.withLock { $0 } == 50)
        #expect(commits.count == 11)
        #expect(try store.counts(runId: run.id).total == 60)
    }

    /// Inserts of items `run --incremental` carries over wait for company though the writer
    /// may not linger: the listing reads the state between two of them, so each commit found
    /// one queued and a re-run that changed nothing wrote 47 pages per item.
    @Test func theWriterHoldsCarriedInsertsForCompanyWhateverLingerSays() throws {
        let (store, run, commits) = try storeCountingCommits()
        let writer = StoreWriter(store: store, runId: run.id, commitGap: 600, linger: { false }) { error in
            Issue.record("write failed: \(error)")
        }
        let first = DispatchSemaphore(value: 0)
        writer.submit(insertion(0)) { _ in first.signal() }
        #expect(first.wait(timeout: .now() + 30) == .success)
        let applied = LockedBox(0)
        for index in 1...50 {
            guard case .insert(var item) = insertion(index) else { continue }
            item.carried = NewItem.Carried(run: run.id + 1, outputs: [OutputSpec.defaultID], sinks: ["out"])
            writer.submit(.insert(item)) { _ in applied.withLock { $0 += 1 } }
        }
        usleep(100_000)
        #expect(applied.withLock { $0 } == 0 && commits.count == 1, "carried inserts held for the gap")
        // Any other change goes at once, and takes them with it.
        writer.submit(insertion(51)) { _ in applied.withLock { $0 += 1 } }
        writer.drain()
        #expect(applied.withLock { $0 } == 51 && commits.count == 2)
        #expect(try store.counts(runId: run.id).total == 52)
    }

    // MARK: - run and resume policy, against a database alone

    func identity(filters: String = "fit") -> RunIdentity {
        RunIdentity(
            pipelinePath: "/p.json", pipelineName: "p", document: "{}",
            fingerprint: ["filters": #"[{"op":"\#(filters)"}]"#, "output": #"{"format":"jpeg"}"#],
            sinks: ["out"], workRoot: work.url("work"), displayPath: "p.json")
    }

    @Test func runRefusesAnUnfinishedRunAndNewAbandonsIt() throws {
        let store = try RunStore(path: work.url("state.sqlite"))
        let first = try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity())
        #expect(!first.resuming && first.run.state == .running)
        #expect(throws: RunError.self) { try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity()) }
        let second = try store.begin(.fresh(limit: 5, replaceUnfinished: true), identity())
        #expect(second.run.id != first.run.id && second.run.uuid != first.run.uuid && second.run.itemLimit == 5)
        #expect(try store.run(id: first.run.id)?.state == .abandoned)
    }

    @Test func resumeRefusesChangedOutputsAndRequeuesFailedItemsWhenAsked() throws {
        let store = try RunStore(path: work.url("state.sqlite"))
        #expect(throws: RunError.self) { try store.begin(.resume(retryFailed: false), identity()) }
        let run = try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity()).run
        _ = try store.apply(
            [
                .insert(NewItem(key: "a", seq: 1, location: "/a.jpg", metadata: nil, outputName: nil, sinks: ["out"])),
                .failed(key: "a", failure: ItemFailure(.decode, "bad"), attempts: 1), .feedComplete,
            ], runId: run.id)
        try store.setState(.finished, runId: run.id)
        do {
            _ = try store.begin(.resume(retryFailed: false), identity(filters: "fill"))
            Issue.record("a changed pipeline was resumed")
        } catch let RunError.pipelineChanged(fields, _, details) {
            #expect(fields == ["filters"])
            #expect(details == [#"filters[0].op: "fit" → "fill""#])
        }
        let finished = try store.begin(.resume(retryFailed: false), identity())
        #expect(finished.run.state == .finished)
        #expect(finished.notices.first?.contains("already finished: 0 done, 1 failed") == true)
        let retried = try store.begin(.resume(retryFailed: true), identity())
        #expect(retried.run.state == .running && retried.notices == ["retrying 1 failed item(s) of run #\(run.id)"])
        #expect(try store.counts(runId: run.id).pending == 1)
    }

    @Test func aRowThatDoesNotDecodeIsAnErrorNotADefault() throws {
        let store = try RunStore(path: work.url("state.sqlite"))
        let run = try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity()).run
        #expect(run.fingerprint == ["filters": #"[{"op":"fit"}]"#, "output": #"{"format":"jpeg"}"#] && run.sinks == ["out"])
        #expect(abs(run.startedAt.timeIntervalSinceNow) < 60)
        let queue = try DatabaseQueue(path: work.url("state.sqlite"))
        try queue.write { try $0.execute(sql: "UPDATE run SET state = 'bogus'") }
        #expect(throws: (any Error).self) { try store.latestRun() }
        try queue.write { try $0.execute(sql: "UPDATE run SET state = 'running', fingerprint = 'not json'") }
        #expect(throws: (any Error).self) { try store.latestRun() }
        try queue.write { try $0.execute(sql: "UPDATE run SET fingerprint = '{}'") }
        _ = try store.apply(
            [.insert(NewItem(key: "a", seq: 1, location: "/a.jpg", metadata: nil, outputName: nil, sinks: []))],
            runId: run.id)
        try queue.write { try $0.execute(sql: "UPDATE item SET tier = 'moon'") }
        do {
            _ = try store.items(runId: run.id)
            Issue.record("an unknown tier was read")
        } catch {
            #expect(String(describing: error).contains("column tier holds \"moon\""))
        }
    }

    // MARK: - whole sessions

    /// A sink that keeps the bytes it is given; it refuses (and asks for retries) as told.
    final class MemorySink: OutputSink {
        let name: String
        let retriesBeforeSuccess: Int
        let refused: Set<String>
        let received = LockedBox<[String: Data]>([:])
        let attempts = LockedBox<[String: Int]>([:])

        init(name: String = "memory", retriesBeforeSuccess: Int = 0, refused: Set<String> = []) {
            self.name = name
            self.retriesBeforeSuccess = retriesBeforeSuccess
            self.refused = refused
        }

        func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt {
            attempts.withLock { $0[delivery.key] = attempt }
            if refused.contains(delivery.key) { throw DeliveryFailure(ItemFailure(.upload, "refused"), attempts: attempt) }
            if attempt <= retriesBeforeSuccess { return .retry(after: 0.01, ItemFailure(.upload, "busy")) }
            let data = FileManager.default.contents(atPath: delivery.stagedPath) ?? Data()
            received.withLock { $0[delivery.key] = data }
            return .delivered(DeliveryReceipt(remoteURL: "memory:\(delivery.name)", attempts: attempt))
        }
    }

    func built(_ sinks: [any Sink], retry: String = #"{"attempts": 3, "backoff": 0.01}"#) throws -> BuiltPipeline {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}], "sink": {"type": "directory", "path": "unused", "name": "memory"},
             "retry": \(retry)}
            """, to: "pipe.json")
        let spec = try PipelineSpec.load(path: work.url("pipe.json"))
        let pipeline = try BuiltPipeline.build(spec, path: work.url("pipe.json"), environment: Environment([:]))
        return BuiltPipeline(
            spec: spec, path: pipeline.path, feed: pipeline.feed, fetcher: nil, sinks: sinks,
            processor: pipeline.processor, environment: pipeline.environment,
            cancellation: pipeline.cancellation)
    }

    func runner(_ pipeline: BuiltPipeline, store: RunStore) -> PipelineRunner {
        PipelineRunner(
            pipeline: pipeline, store: store, reporter: SilentReporter(),
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    @Test func aSessionDeliversEveryItemAndRetriesOnATimer() throws {
        for index in 1...5 {
            try ImageFixtures.jpeg(at: work.url("in/\(index).jpg"), width: 64, height: 48)
        }
        let sink = MemorySink(retriesBeforeSuccess: 2)
        let store = try RunStore(path: work.url("state.sqlite"))
        let summary = try runner(try built([sink]), store: store).execute(.fresh(limit: nil, replaceUnfinished: false))
        #expect(summary.done == 5 && summary.failed == 0 && summary.pending == 0 && summary.session?.interrupted == false)
        let received = sink.received.withLock { $0 }
        #expect(received.keys.sorted() == (1...5).map { "\($0).jpg" })
        for data in received.values {
            let image = try VipsImage.open(data: data)
            #expect((image.width, image.height) == (32, 24))
        }
        #expect(sink.attempts.withLock { $0 }.values.allSatisfy { $0 == 3 })
        let rows = try DatabaseQueue(path: work.url("state.sqlite")).read {
            try Row.fetchAll($0, sql: "SELECT status, attempts, remoteURL FROM delivery")
        }
        #expect(rows.count == 5 && rows.allSatisfy { $0["status"] == "done" && $0["attempts"] == 3 })
        #expect(
            !FileManager.default.fileExists(
                atPath: store.path.replacingOccurrences(of: ".sqlite", with: ".work") + "/run-1"),
            "the work folder stays after a run with no failure")
    }

    @Test func aRefusingSinkFailsItsItemAndAnInterruptedSessionResumes() throws {
        for index in 1...4 {
            try ImageFixtures.jpeg(at: work.url("in/\(index).jpg"), width: 64, height: 48)
        }
        let store = try RunStore(path: work.url("state.sqlite"))
        let refusing = MemorySink(refused: ["2.jpg"])
        let first = try runner(try built([refusing]), store: store).execute(.fresh(limit: nil, replaceUnfinished: false))
        #expect(first.done == 3 && first.failed == 1 && first.failuresByReason == ["upload": 1])

        // Interrupted before it starts: nothing is admitted, the run stays resumable.
        let pipeline = try built([MemorySink()])
        let stopped = runner(pipeline, store: store)
        stopped.interrupt()
        let interrupted = try stopped.execute(.resume(retryFailed: true))
        #expect(interrupted.session?.interrupted == true && interrupted.pending == 1)
        let resumed = try runner(try built([MemorySink()]), store: store).execute(.resume(retryFailed: false))
        #expect(resumed.done == 4 && resumed.failed == 0 && resumed.session?.ended == 1)
    }
}

/// The dead-host breaker on its own, with a clock passed in.
@Suite("Host health")
struct HostHealthTests {
    @Test func tripsAfterTheThresholdProbesAfterThePauseAndClosesOnAnAnswer() {
        let health = HostHealth(threshold: 3, pause: 30)
        let start = Date(timeIntervalSince1970: 1000)
        let host = "http://dead.example:80"
        for _ in 1...2 { health.failed(host, "timed out", now: start) }
        #expect(health.admit(host, now: start) == .go, "two failures do not trip a threshold of three")
        health.failed(host, "timed out", now: start)
        guard case .refuse(let message) = health.admit(host, now: start.addingTimeInterval(1)) else {
            Issue.record("three failures in a row did not trip the host")
            return
        }
        #expect(message.hasPrefix("host unreachable: \(host) failed 3 times in a row"))
        #expect(health.admit("http://other.example:80", now: start) == .go, "another host is not tripped")
        // After the pause, one probe goes; the others are still refused while it is out.
        #expect(health.admit(host, now: start.addingTimeInterval(31)) == .go)
        #expect(health.admit(host, now: start.addingTimeInterval(31)) != .go)
        // The probe fails: tripped again for another pause.
        health.failed(host, "refused", now: start.addingTimeInterval(32))
        #expect(health.admit(host, now: start.addingTimeInterval(40)) != .go)
        #expect(health.admit(host, now: start.addingTimeInterval(63)) == .go)
        // The probe is answered: the host is healthy.
        health.answered(host)
        #expect(health.admit(host, now: start.addingTimeInterval(63)) == .go)
        #expect(health.admit(host, now: start.addingTimeInterval(63)) == .go)
    }
}

/// Counts the commits of a database that change something.
private final class CommitCounter: TransactionObserver, Sendable {
    private let commits = LockedBox(0)
    var count: Int { commits.withLock { $0 } }
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) { commits.withLock { $0 += 1 } }
    func databaseDidRollback(_ db: Database) {}
}
