import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The run-store contract (`RunStateStore`) on both of its implementations: the state file
/// (`RunStore`, SQLite) and a worker's part of a shared run (`SharedStateStore`, on a real
/// PostgreSQL server started by the test process). Each test drives the store only through
/// the protocol, as the runner does, and checks the same answers from both; on the shared
/// backend it also checks what reached the shared database.
@Suite("Run store contract, on SQLite and PostgreSQL")
struct RunStateStoreTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case sqlite, postgres
        var testDescription: String { rawValue }
    }

    /// Every key a test of this suite inserts: a shared run must have listed an item (and
    /// this worker claimed its chunk) before the worker records it.
    static let keys = ["x.jpg", "bad.jpg", "good.jpg", "a.jpg", "a.png", "b.jpg", "c.jpg"] + (1...10).map { "k\($0)" }

    /// One store of `backend` with a run begun in it, as `PipelineRunner.execute` begins one.
    final class Fixture: @unchecked Sendable {
        // @unchecked: every stored property is a constant set in init.
        let directory: TemporaryDirectory
        let store: any RunStateStore
        /// Where the items' detail is: the state file itself, or the worker's journal.
        let journal: RunStore
        let runId: Int64
        /// The shared run the worker takes part in, and the worker's ledger of chunks (PostgreSQL only).
        let shared: SharedRun?
        let ledger: ChunkLedger?
        private let cluster: PostgresCluster?
        private let url: String?
        /// This fixture made the database (and drops it).
        private let owner: Bool

        init(_ backend: Backend, sinks: [String] = ["out"], worker: String = "w1", joining url: String? = nil) throws {
            directory = try TemporaryDirectory()
            let path = directory.url("state/test.sqlite")
            owner = url == nil
            switch backend {
            case .sqlite:
                let store = try RunStore(path: path)
                (self.store, journal, shared, cluster, self.url, ledger) = (store, store, nil, nil, nil, nil)
            case .postgres:
                let cluster = try PostgresCluster.start()
                let url = try url ?? cluster.makeDatabase()
                let run = try SharedRun(
                    connection: PostgresConnection(url: url), pipelineName: "p",
                    fingerprint: ["filters": "[]"], chunkSize: 100, worker: worker)
                if let lease = try run.acquireLister() {
                    try run.recordPage(Self.itemsOfTheFeed, cursor: "end", complete: true, lease: lease)
                }
                let ledger = ChunkLedger()
                for chunk in try run.claim(10) { try ledger.add(chunk, items: run.items(of: chunk)) }
                let journal = try RunStore(path: path)
                let store = try SharedStateStore(journal: journal, ledger: ledger, names: run.sibling())
                (self.store, self.journal, shared, self.cluster, self.url, self.ledger) = (
                    store, journal, run, cluster, url, ledger
                )
            }
            let identity = RunIdentity(
                pipelinePath: "/p.json", pipelineName: "p", document: "{}",
                fingerprint: ["filters": "[]", "output": "{}"], sinks: sinks,
                workRoot: directory.url("work"), displayPath: "p.json")
            runId = try store.begin(.fresh(limit: nil, replaceUnfinished: false), identity).run.id
        }

        static var itemsOfTheFeed: [FeedItem] { RunStateStoreTests.keys.map { FeedItem(key: $0, location: "/in/\($0)") } }

        /// The database URL of the shared run (PostgreSQL only).
        var databaseURL: String? { url }

        deinit { if owner, let url, let cluster { cluster.dropDatabase(url) } }

        func apply(_ changes: [StoreChange]) throws -> [ChangeOutcome] { try store.apply(changes, runId: runId) }

        /// The shared run's item rows after the queued ends were written (nil on SQLite).
        func sharedStatuses() throws -> [String: String]? {
            guard let shared, let store = store as? SharedStateStore else { return nil }
            try store.flush(using: shared)
            let rows = try shared.connection.execute(
                "SELECT key, status, reason FROM imgpipe_item WHERE run_id = $1",
                [String(shared.runId)])
            return Dictionary(
                uniqueKeysWithValues: rows.all.map { ($0["key"]!, $0["status"]! + ($0["reason"].map { ":" + $0 } ?? "")) })
        }
    }

    func item(_ key: String, _ seq: Int, name: String? = nil, sinks: [String] = ["out"]) -> StoreChange {
        .insert(NewItem(key: key, seq: seq, location: "/in/\(key)", metadata: nil, outputName: name, sinks: sinks))
    }

    func staged(_ name: String) -> StagedOutput {
        StagedOutput(path: "/work/\(name)", name: name, sha256: "ab", bytes: 10, width: 4, height: 3)
    }

    @Test(arguments: Backend.allCases)
    func itemGoesThroughTheLifecycle(_ backend: Backend) throws {
        let fixture = try Fixture(backend, sinks: ["a", "b"])
        let (store, run) = (fixture.store, fixture.runId)
        #expect(try fixture.apply([item("x.jpg", 1, sinks: ["a", "b"])]) == [.applied])
        #expect(try store.item(runId: run, key: "x.jpg")?.status == .pending)

        #expect(try fixture.apply([.fetched(key: "x.jpg", spoolPath: "/in/x.jpg", tier: .local)]) == [.applied])
        #expect(try store.item(runId: run, key: "x.jpg")?.status == .fetched)

        #expect(try fixture.apply([.processed(key: "x.jpg", outputs: [staged("x.jpg")])]) == [.applied])
        let processed = try #require(try store.item(runId: run, key: "x.jpg"))
        #expect(processed.status == .processed)
        #expect(try store.stagedOutputs(runId: run, key: "x.jpg").map(\.path) == ["/work/x.jpg"])
        #expect(processed.attempts == 1)
        #expect(try store.pendingDeliveries(runId: run, key: "x.jpg").map(\.sink) == ["a", "b"])

        // Done only once every sink has the output.
        #expect(try fixture.apply([.delivered(key: "x.jpg", sink: "a", remoteURL: "/o/x.jpg", httpStatus: nil)]) == [.applied])
        #expect(try store.item(runId: run, key: "x.jpg")?.status == .processed)
        #expect(try store.pendingDeliveries(runId: run, key: "x.jpg").map(\.sink) == ["b"])
        if backend == .postgres { #expect(try fixture.sharedStatuses()?["x.jpg"] == "pending", "not ended yet") }
        #expect(try fixture.apply([.delivered(key: "x.jpg", sink: "b", remoteURL: nil, httpStatus: 201)]) == [.completed])
        let done = try #require(try store.item(runId: run, key: "x.jpg"))
        #expect(done.status == .done)
        #expect(try store.stagedOutputs(runId: run, key: "x.jpg").isEmpty, "no staged file is left recorded")
        #expect(try store.counts(runId: run).done == 1)
        #expect(try fixture.journal.deliveryCounts(runId: run) == ["a": DeliveryCounts(done: 1), "b": DeliveryCounts(done: 1)])
        if backend == .postgres {
            #expect(try fixture.sharedStatuses()?["x.jpg"] == "done")
            let detail = try fixture.shared?.connection.execute("SELECT detail FROM imgpipe_item WHERE key = 'x.jpg'").first?[
                "detail"]
            #expect(detail?.contains("/o/x.jpg") == true, "the deliveries go with the end, for export: \(detail ?? "nil")")
        }
    }

    @Test(arguments: Backend.allCases)
    func failuresKeepReasonMessageAndAttempts(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        let (store, run) = (fixture.store, fixture.runId)
        _ = try fixture.apply([item("bad.jpg", 1), item("good.jpg", 2)])
        #expect(
            try fixture.apply([.failed(key: "bad.jpg", failure: ItemFailure(.decode, "not an image"), attempts: 2)]) == [.applied]
        )
        #expect(
            try fixture.journal.failures(runId: run) == [
                FailureRecord(key: "bad.jpg", reason: "decode", message: "not an image", attempts: 2, httpStatus: nil)
            ])
        #expect(try store.report(runId: run).failuresByReason == ["decode": 1])
        let counts = try store.counts(runId: run)
        #expect((counts.total, counts.failed, counts.pending, counts.unfinished) == (2, 1, 1, 1))
        // A failed item's delivery is not counted as pending for its sink.
        #expect(try fixture.journal.deliveryCounts(runId: run)["out"] == DeliveryCounts(done: 0, failed: 0, pending: 1))
        if backend == .postgres {
            let shared = try #require(try fixture.sharedStatuses())
            #expect(shared["bad.jpg"] == "failed:decode" && shared["good.jpg"] == "pending")
        }
    }

    @Test(arguments: Backend.allCases)
    func aSinkFailureFailsTheItemWithReasonUpload(_ backend: Backend) throws {
        let fixture = try Fixture(backend, sinks: ["out", "mirror"])
        let run = fixture.runId
        _ = try fixture.apply([item("x.jpg", 1, sinks: ["out", "mirror"]), .processed(key: "x.jpg", outputs: [staged("x.jpg")])])
        let outcome = try fixture.apply([
            .deliveryFailed(
                key: "x.jpg", sink: "out",
                failure: ItemFailure(.upload, "HTTP 403", httpStatus: 403), attempts: 1)
        ])
        #expect(outcome == [.failed(ItemFailure(.upload, "sink out: HTTP 403", httpStatus: 403))])
        #expect(try fixture.journal.failures(runId: run).first?.httpStatus == 403)
        #expect(try fixture.journal.deliveryCounts(runId: run)["out"] == DeliveryCounts(done: 0, failed: 1, pending: 0))
        // The second sink refuses too: the item stays failed, and ended once.
        _ = try fixture.apply([
            .deliveryFailed(key: "x.jpg", sink: "mirror", failure: ItemFailure(.upload, "HTTP 500"), attempts: 3)
        ])
        #expect(try fixture.store.item(runId: run, key: "x.jpg")?.status == .failed)
        if backend == .postgres {
            #expect(try fixture.sharedStatuses()?["x.jpg"] == "failed:upload")
            #expect(try fixture.shared?.counts().failed == 1, "one item, one end in the chunk's counters")
        }
    }

    @Test(arguments: Backend.allCases)
    func anOutputNameBelongsToOneItem(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        let outcomes = try fixture.apply([item("a.jpg", 1, name: "a.jpg"), item("a.png", 2, name: "a.jpg")])
        #expect(outcomes[0] == .applied)
        guard case .failed(let failure) = outcomes[1] else {
            Issue.record("second claim of a.jpg was accepted: \(outcomes)")
            return
        }
        #expect(failure.reason == .encode)
        #expect(failure.message == "output name \"a.jpg\" is already used by item \"a.jpg\"")
        #expect(try fixture.store.item(runId: fixture.runId, key: "a.png")?.status == .failed)

        // Names decided after encoding ({hash}) are claimed when processed.
        _ = try fixture.apply([item("b.jpg", 3), item("c.jpg", 4)])
        #expect(try fixture.apply([.processed(key: "b.jpg", outputs: [staged("same.jpg")])]) == [.applied])
        let second = try fixture.apply([.processed(key: "c.jpg", outputs: [staged("same.jpg")])])
        #expect(second.first.map { if case .failed = $0 { true } else { false } } == true)
        #expect(try fixture.store.item(runId: fixture.runId, key: "c.jpg")?.status == .failed)
        if backend == .postgres {
            let shared = try #require(try fixture.sharedStatuses())
            #expect(
                shared["a.png"] == "failed:encode" && shared["c.jpg"] == "failed:encode" && shared["b.jpg"] == "pending",
                "\(shared)")
        }
    }

    @Test(arguments: Backend.allCases)
    func insertingAKnownKeyChangesNothing(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        _ = try fixture.apply([item("x.jpg", 1, name: "x.jpg")])
        #expect(try fixture.apply([item("x.jpg", 7, name: "x.jpg")]) == [.existing(seq: 1, status: .pending)])
        #expect(try fixture.store.counts(runId: fixture.runId).total == 1)
    }

    /// A skipped item makes nothing: in a state file its names go to the first item that
    /// failed for one of them, put back to pending and given the name. A shared run's names
    /// are claimed in the database and stay with the skipped item.
    @Test(arguments: Backend.allCases)
    func aSkippedItemGivesItsNameToTheFirstItemThatFailedForIt(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        let (store, run) = (fixture.store, fixture.runId)
        let inserted = try fixture.apply([
            item("a.gif", 1, name: "a.jpg"), item("a.jpg", 2, name: "a.jpg"),
            item("a.png", 3, name: "a.jpg"), item("b.gif", 4, name: "b.jpg"),
        ])
        #expect(
            inserted.map { if case .failed = $0 { "failed" } else { "\($0)" } } == ["applied", "failed", "failed", "applied"])
        let skip = ItemSkip(.format, "gif is not in accept.formats (jpeg)")
        let outcome = try fixture.apply([.skipped(key: "a.gif", skip: skip), .skipped(key: "b.gif", skip: skip)])
        let status = { (key: String) in try store.item(runId: run, key: key)?.status }
        #expect(try status("a.gif") == .skipped)
        guard backend == .sqlite else {
            #expect(outcome == [.applied, .applied])
            #expect(try status("a.jpg") == .failed && status("a.png") == .failed)
            return
        }
        #expect(outcome == [.revived(["a.jpg"]), .applied], "the first in feed order, once; no one failed for b.jpg")
        #expect(try status("a.jpg") == .pending && status("a.png") == .failed)
        let record = try #require(try store.item(runId: run, key: "a.jpg"))
        #expect(record.reason == nil && record.message == nil)
        let other = try #require(try store.item(runId: run, key: "a.png"))
        #expect(other.message == "output name \"a.jpg\" is already used by item \"a.jpg\"", "names the name's holder now")
        // The name is a.jpg's now: a later claim of it is refused as taken by a.jpg.
        let later = try fixture.apply([item("a.webp", 5, name: "a.jpg")])
        #expect(later == [.failed(ItemFailure(.encode, "output name \"a.jpg\" is already used by item \"a.jpg\""))])
        #expect(try fixture.apply([.processed(key: "a.jpg", outputs: [staged("a.jpg")])]) == [.applied])
    }

    @Test(arguments: Backend.allCases)
    func unfinishedItemsArePagedInFeedOrder(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        let (store, run) = (fixture.store, fixture.runId)
        _ = try fixture.apply((1...10).map { item("k\($0)", $0) })
        _ = try fixture.apply([.failed(key: "k2", failure: ItemFailure(.decode, "x"), attempts: 1)])
        let first = try store.unfinishedItems(runId: run, after: 0, limit: 4)
        #expect(first.map(\.key) == ["k1", "k3", "k4", "k5"])
        let next = try store.unfinishedItems(runId: run, after: first.last!.seq, limit: 100)
        #expect(next.map(\.key) == ["k6", "k7", "k8", "k9", "k10"])
        #expect(try store.lastSeq(runId: run) == 10)
        #expect(try store.lastKey(runId: run) == "k10")
    }

    /// Output names are the run's, not a worker's: a name one worker's item took is refused
    /// to another item on another worker, before anything is written for it.
    @Test func anOutputNameIsTheWholeSharedRunsNotOneWorkers() throws {
        let first = try Fixture(.postgres, worker: "w1")
        let url = try #require(first.databaseURL)
        // The second worker joins the same run; the first holds every chunk, so it claims
        // none, and the items it would record are the first's: only names are compared.
        let second = try Fixture(.postgres, worker: "w2", joining: url)
        #expect(try first.apply([item("a.jpg", 1, name: "photo.jpg")]) == [.applied])
        let outcome = try second.apply([item("a.png", 2, name: "photo.jpg"), item("b.jpg", 3, name: "b.jpg")])
        #expect(outcome.first == .failed(ItemFailure(.encode, "output name \"photo.jpg\" is already used by item \"a.jpg\"")))
        #expect(outcome.last == .applied)
        #expect(try second.store.item(runId: second.runId, key: "a.png")?.status == .failed)
        // The same key claiming its own name again (another worker redoing the item) is no conflict.
        #expect(try second.apply([item("a.jpg", 4, name: "photo.jpg")]) == [.applied])
        let owners = try #require(first.shared).connection.execute("SELECT name, key FROM imgpipe_name ORDER BY name").all
        #expect(owners.map { "\($0["name"]!)=\($0["key"]!)" } == ["b.jpg=b.jpg", "photo.jpg=a.jpg"])
    }

    /// A worker failed an item and wrote the failure; `resume --retry-failed` (another
    /// process) put its finished chunk back to pending; the same worker claims it again. The
    /// item is tried again, not failed again from the worker's journal (an attack saw the
    /// retry undone that way in 6 of 8 tries).
    @Test func aFailureTheRunPutBackIsTriedAgainByTheWorkerThatRecordedIt() throws {
        let fixture = try Fixture(.postgres)
        let store = try #require(fixture.store as? SharedStateStore)
        let shared = try #require(fixture.shared)
        let keys = Self.keys
        let ledger = try #require(fixture.ledger)
        for chunk in ledger.unfinished() { ledger.allGiven(chunk) }
        _ = try fixture.apply(keys.enumerated().map { item($0.element, $0.offset + 1) })
        _ = try fixture.apply(
            [.failed(key: "bad.jpg", failure: ItemFailure(.decode, "truncated"), attempts: 1)]
                + keys.filter { $0 != "bad.jpg" }.map { .skipped(key: $0, skip: ItemSkip(.format, "not wanted")) })
        try store.flush(using: shared)
        #expect(try shared.counts().chunksDone == 1, "every item ended: the chunk is done")

        // resume --retry-failed, in another process: the failed item is pending again.
        _ = try SharedRun(
            connection: PostgresConnection(url: #require(fixture.databaseURL)), pipelineName: "p",
            fingerprint: ["filters": "[]"], worker: "r", joining: .resume(retryFailed: true))
        let chunk = try #require(try shared.claim().first)
        let items = try shared.items(of: chunk)
        #expect(items.map(\.key) == ["bad.jpg"])
        ledger.add(chunk, items: items)

        #expect(!store.knownHere("bad.jpg"), "given to the runner again")
        #expect(try store.item(runId: fixture.runId, key: "bad.jpg")?.status == .pending, "put back in the journal too")
        #expect(store.takeBack(key: "bad.jpg"), "the runner takes it up where it stands")
        #expect(!store.takeBack(key: "bad.jpg"), "once")
    }
}
