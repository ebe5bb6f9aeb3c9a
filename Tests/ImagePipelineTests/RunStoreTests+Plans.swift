import Foundation
import GRDB
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The plans of the state file's hot queries (as `SharedRunTests` checks the shared run's
/// claim): each names the index it must use, so that a later schema change cannot bring
/// back a scan of a run's rows per item. No `ANALYZE`: state files have no statistics.
extension RunStoreTests {
    /// Two runs of `count` items, one output, two sinks, every item done.
    func filledStore(_ count: Int) throws -> [RunRecord] {
        var runs: [RunRecord] = []
        for _ in 0..<2 {
            let run = try newRun(sinks: ["a", "b"])
            var changes: [StoreChange] = []
            for index in 1...count {
                let key = "k\(index)"
                changes.append(item(key, index, name: "\(key).jpg", sinks: ["a", "b"]))
                changes.append(.processed(key: key, outputs: [staged("\(key).jpg")]))
                changes.append(.delivered(key: key, sink: "a", remoteURL: "/out/\(key).jpg", httpStatus: nil, attempts: 1))
                changes.append(.delivered(key: key, sink: "b", remoteURL: "https://x/\(key)", httpStatus: 200, attempts: 1))
            }
            _ = try store.apply(changes, runId: run.id)
            try store.setState(.finished, runId: run.id)
            runs.append(run)
        }
        return runs
    }

    /// The `detail` lines of `EXPLAIN QUERY PLAN` for `sql`, with `?` bound to nulls.
    func plan(_ sql: String) throws -> [String] {
        try store.database.read { db in
            let nulls = Array(repeating: nil as String?, count: sql.count { $0 == "?" })
            return try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: StatementArguments(nulls))
                .map { $0["detail"] as String }
        }
    }

    /// No line of `lines` walks a table: every table is searched through an index.
    func searchesOnly(_ lines: [String]) -> Bool {
        lines.allSatisfy { !$0.hasPrefix("SCAN ") || $0 == "SCAN CONSTANT ROW" } && !lines.contains { $0.contains("TEMP B-TREE") }
    }

    @Test func exportStreamsItsThreeStatementsOnTheItemOrderAndPrimaryKeys() throws {
        _ = try filledStore(300)
        for only in [false, true] {
            let sql = RunStore.exportSQL(only: only, key: false)
            let items = try plan(sql.items)
            let outputs = try plan(sql.outputs)
            let deliveries = try plan(sql.deliveries)
            let itemLine =
                only ? "SEARCH i USING INDEX item_status (runId=? AND status=?)" : "SEARCH i USING INDEX item_seq (runId=?)"
            #expect(items == [itemLine], "\(items)")
            #expect(outputs.first == itemLine && outputs.count == 2, "\(outputs)")
            #expect(outputs.last?.contains("sqlite_autoindex_output_1 (runId=? AND itemKey=?)") == true, "\(outputs)")
            #expect(deliveries.first == itemLine && deliveries.count == 2, "\(deliveries)")
            #expect(deliveries.last?.contains("sqlite_autoindex_delivery_1 (runId=? AND itemKey=?)") == true, "\(deliveries)")
            #expect(searchesOnly(items + outputs + deliveries))
            #expect(!(items + outputs + deliveries).contains { $0.contains("delivery_status") })
        }
    }

    @Test func deliveredOtherwiseSinceFindsOnePlaceOnTheIndexOfPlaces() throws {
        _ = try filledStore(300)
        let lines = try plan(RunStore.deliveredOtherwiseSinceSQL)
        #expect(
            lines.contains("SEARCH d USING INDEX delivery_place (sink=? AND remoteURL=? AND runId>? AND runId<?)"), "\(lines)")
        #expect(
            lines.contains("SEARCH b USING INDEX delivery_place (sink=? AND remoteURL=? AND runId=? AND status=?)"), "\(lines)")
        #expect(searchesOnly(lines), "\(lines)")
        #expect(!lines.contains { $0.contains("delivery_status") }, "\(lines)")
    }

    @Test func aResumeFreesSkippedItemsNamesThroughTheirPrimaryKeys() throws {
        _ = try filledStore(300)
        let lines = try plan(RunStore.freeSkippedNamesSQL)
        #expect(lines.contains("SEARCH output USING INDEX sqlite_autoindex_output_1 (runId=? AND itemKey=?)"), "\(lines)")
        #expect(lines.contains("SEARCH item USING INDEX item_status (runId=? AND status=?)"), "\(lines)")
        #expect(searchesOnly(lines) && !lines.contains { $0.contains("output_name") }, "\(lines)")
    }

    /// With how each item was listed too (`UpToDate`'s look), the same plan.
    @Test func aComparedItemIsReadThroughItsPrimaryKeys() throws {
        _ = try filledStore(300)
        #expect(RunStore.comparedListingSQL.contains("i.seq, i.location, i.metadata, i.nameKey"))
        for sql in [RunStore.comparedItemsSQL, RunStore.comparedListingSQL] {
            let lines = try plan(sql)
            #expect(lines.contains { $0.contains("USING INDEX sqlite_autoindex_item_1 (runId=? AND key>?)") }, "\(lines)")
            #expect(lines.contains { $0.hasPrefix("SEARCH o USING") && $0.contains("sqlite_autoindex_output_1") }, "\(lines)")
            #expect(
                lines.contains { $0.hasPrefix("SEARCH d USING") && $0.contains("sqlite_autoindex_delivery_1") }, "\(lines)")
            // `SCAN i` walks the window the subquery read (at most its limit of rows), no table.
            #expect(lines.contains("SCAN i") && searchesOnly(lines.filter { $0 != "SCAN i" }), "\(lines)")
        }
    }

    /// A window of items from a key on: exactly the run's items from it, in key order, up to
    /// the last one read (none when the run's end came first).
    @Test func aWindowOfComparedItemsHoldsEveryItemFromItsKeyToItsLast() throws {
        let runs = try filledStore(5)
        let middle = try store.comparedItems(runId: runs[1].id, from: "k2", limit: 2)
        #expect(Set(middle.items.keys.map(\.bytes)) == [Array("k2".utf8), Array("k3".utf8)] && middle.last == Array("k3".utf8))
        let k2 = try #require(middle.item("k2"))
        #expect(k2.status == .done && k2.names == ["default": "k2.jpg"])
        #expect(Set(k2.delivered.map(\.sink)) == ["a", "b"] && k2.delivered.allSatisfy { $0.hash == "ab" && $0.bytes == 10 })
        #expect(Set(k2.delivered.map(\.location)) == ["/out/k2.jpg", "https://x/k2"])
        let end = try store.comparedItems(runId: runs[1].id, from: "k4", limit: 5)
        #expect(Set(end.items.keys.map(\.bytes)) == [Array("k4".utf8), Array("k5".utf8)] && end.last == nil)
        let before = try store.comparedItems(runId: runs[1].id, from: "k0", limit: 1)
        #expect(Set(before.items.keys.map(\.bytes)) == [Array("k1".utf8)] && before.last == Array("k1".utf8))
        #expect(try store.comparedItem(runId: runs[1].id, key: "k0") == nil)
        #expect(try store.comparedItem(runId: runs[1].id, key: "k3")?.names == ["default": "k3.jpg"])
        // Only items taken over from run 99: none.
        let carried = try store.comparedItems(runId: runs[1].id, from: "", limit: 10, carriedFrom: 99)
        #expect(carried.items.isEmpty && carried.last == nil)
    }

    /// Two spellings of one word (é precomposed, and e with a combining accent) are one
    /// `String` to Swift and two keys to the state file: a window keeps them apart.
    @Test func aWindowTellsKeysApartByTheirBytes() throws {
        let run = try newRun(sinks: ["a"])
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        #expect(composed == decomposed && Array(composed.utf8) != Array(decomposed.utf8))
        _ = try store.apply(
            [
                item(decomposed, 1, name: "decomposed.jpg", sinks: ["a"]), item("d", 2, name: "d.jpg", sinks: ["a"]),
                item("e", 3, name: "e.jpg", sinks: ["a"]),
            ], runId: run.id)
        // The run has one spelling: the other is not its item.
        #expect(try store.comparedItem(runId: run.id, key: composed) == nil)
        #expect(try store.comparedItem(runId: run.id, key: decomposed)?.names == ["default": "decomposed.jpg"])
        _ = try store.apply([item(composed, 4, name: "composed.jpg", sinks: ["a"])], runId: run.id)
        let window = try store.comparedItems(runId: run.id, from: "", limit: 3)
        #expect(window.items.count == 3 && window.last == Array("d".utf8), "both spellings, then d; e is after the window")
        #expect(window.item(composed)?.names == ["default": "composed.jpg"])
        #expect(window.item(decomposed)?.names == ["default": "decomposed.jpg"])
    }

    @Test func aTakeOverMovesEachTableThroughTheKeysTaken() throws {
        _ = try filledStore(300)
        try store.database.write { try $0.execute(sql: HandOn.table) }
        let insert = try plan(HandOn.insertItems)
        #expect(insert.contains("SEARCH h USING INDEX sqlite_autoindex_handOn_1 (holder=?)"), "\(insert)")
        #expect(insert.contains("SEARCH i USING INDEX sqlite_autoindex_item_1 (runId=? AND key=?)"), "\(insert)")
        let outputs = try plan(HandOn.moveOutputs)
        #expect(
            outputs.contains("SEARCH output USING COVERING INDEX sqlite_autoindex_output_1 (runId=? AND itemKey=?)"),
            "\(outputs)")
        let deliveries = try plan(HandOn.moveDeliveries)
        #expect(
            deliveries.contains("SEARCH delivery USING COVERING INDEX sqlite_autoindex_delivery_1 (runId=? AND itemKey=?)"),
            "\(deliveries)")
        let delete = try plan(HandOn.deleteItems)
        #expect(delete.contains("SEARCH item USING COVERING INDEX sqlite_autoindex_item_1 (runId=? AND key=?)"), "\(delete)")
        for lines in [insert, outputs, deliveries, delete] {
            #expect(searchesOnly(lines), "\(lines)")
        }
    }

    /// Items taken over whole are moved together at the end of their batch, or before any
    /// other change: a later change of the batch sees them moved, as it would have one by one.
    @Test func aBatchTakesItemsOverAsIfOneByOne() throws {
        let runs = try filledStore(5)
        let run = try newRun(sinks: ["a", "b"])
        func carried(_ key: String, _ seq: Int) -> StoreChange {
            var item = NewItem(
                key: key, seq: seq, location: "/in/\(key)", metadata: nil, outputName: "\(key).jpg", sinks: ["a", "b"])
            item.carried = NewItem.Carried(run: runs[1].id, outputs: [OutputSpec.defaultID], sinks: ["a", "b"])
            return .insert(item)
        }
        let outcomes = try store.apply(
            [
                carried("k1", 1),
                carried("k1", 2),  // the feed repeats a key
                carried("k3", 3),
                item("n3", 4, name: "k3.jpg", sinks: ["a", "b"]),  // a new item wants the name k3 keeps
                carried("k4", 5),
            ], runId: run.id)
        #expect(outcomes.count == 5)
        #expect(outcomes[0] == .completed && outcomes[2] == .completed && outcomes[4] == .completed, "\(outcomes)")
        #expect(outcomes[1] == .existing(seq: 1, status: .done), "\(outcomes)")
        guard case .failed(let failure) = outcomes[3] else {
            Issue.record("the name k3 keeps was given to a new item: \(outcomes[3])")
            return
        }
        #expect(failure.message.contains("k3.jpg"), "\(failure.message)")
        let rows = try store.database.read { db in
            try Row.fetchAll(db, sql: "SELECT runId, key, seq, status, carriedFrom FROM item ORDER BY runId, seq")
                .map {
                    "\($0["runId"] as Int64) \($0["key"] as String) \($0["seq"] as Int) \($0["status"] as String) \($0["carriedFrom"] as Int64? ?? 0)"
                }
        }
        let (first, second) = (runs[0].id, runs[1].id)
        #expect(
            rows.filter { !$0.hasPrefix("\(first) ") } == [
                "\(second) k2 2 done 0", "\(second) k5 5 done 0",
                "\(run.id) k1 1 done \(second)", "\(run.id) k3 3 done \(second)", "\(run.id) n3 4 failed 0",
                "\(run.id) k4 5 done \(second)",
            ], "\(rows)")
        let names = try store.database.read { db in
            try String?.fetchAll(db, sql: "SELECT name FROM output WHERE runId = ? ORDER BY name", arguments: [run.id])
                .compactMap { $0 }
        }
        #expect(names == ["k1.jpg", "k3.jpg", "k4.jpg"])
        #expect(try store.run(id: run.id)?.carried == 3 && store.run(id: second)?.handedOn == 3)
        for id in [first, second, run.id] { try check(id) }
    }

    @Test func countsReadTheRunsCountersNotItsRows() throws {
        _ = try filledStore(300)
        let lines = try plan("SELECT name, status, n FROM tally WHERE runId = ? AND kind = ? AND n != 0")
        #expect(lines == ["SEARCH tally USING PRIMARY KEY (runId=? AND kind=?)"], "\(lines)")
    }

    /// The counters agree with the rows they count after every kind of state change:
    /// inserts (one refused for its name), fetches with a tier, deliveries done and
    /// refused, failures, skips, resets, a requeue and a carried item.
    @Test func theRunsCountersAgreeWithItsRows() throws {
        let runs = try filledStore(5)
        let run = try newRun(sinks: ["a", "b"])
        var carried = NewItem(key: "k2", seq: 2, location: "/in/k2", metadata: nil, outputName: "k2.jpg", sinks: ["a", "b"])
        carried.carried = NewItem.Carried(run: runs[1].id, outputs: [OutputSpec.defaultID], sinks: ["a", "b"])
        _ = try store.apply(
            [
                item("k1", 1, name: "k1.jpg", sinks: ["a", "b"]),
                .insert(carried),
                item("k3", 3, name: "k3.jpg", sinks: ["a", "b"]),
                item("k4", 4, name: "k4.jpg", sinks: ["a", "b"]),
                item("k5", 5, name: "k5.jpg", sinks: ["a", "b"]),
                item("k6", 6, name: "k1.jpg", sinks: ["a", "b"]),
                .fetched(key: "k1", spoolPath: "/s/1", tier: .remote),
                .fetched(key: "k3", spoolPath: "/s/3", tier: .cache),
                .processed(key: "k1", outputs: [staged("k1.jpg")]),
                .processed(key: "k3", outputs: [staged("k3.jpg")]),
                .delivered(key: "k1", sink: "a", remoteURL: "/o/k1.jpg", httpStatus: nil, attempts: 1),
                .delivered(key: "k3", sink: "a", remoteURL: "/o/k3.jpg", httpStatus: nil, attempts: 1),
                .deliveryFailed(key: "k3", sink: "b", failure: ItemFailure(.upload, "503"), attempts: 3),
                .failed(key: "k4", failure: ItemFailure(.decode, "bad"), attempts: 1),
                .skipped(key: "k5", skip: ItemSkip(.format, "gif")),
                .reset(key: "k1", to: .fetched),
            ], runId: run.id)
        try check(run.id)
        #expect(try store.requeueFailed(runId: run.id) == 3)
        try check(run.id)
        #expect(try store.counts(runId: run.id).done == 1, "the carried item")
        for earlier in runs { try check(earlier.id) }
    }

    /// `counts`, `deliveryCounts`, `deliveryCountsByOutput` and `tierCounts` against the
    /// queries over the rows they replaced.
    func check(_ runId: Int64, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let (statuses, sinks, outputs, tiers) = try store.database.read { db in
            let statuses = try Dictionary(
                uniqueKeysWithValues: Row.fetchAll(
                    db,
                    sql: """
                        SELECT status, COUNT(*) AS n FROM item WHERE runId = ? GROUP BY status
                        """, arguments: [runId]
                ).map { ($0["status"] as String, $0["n"] as Int) })
            func deliveries(_ column: String) throws -> [String: DeliveryCounts] {
                var result: [String: DeliveryCounts] = [:]
                for row in try Row.fetchAll(
                    db,
                    sql: """
                        SELECT d.\(column) AS name, d.status, COUNT(*) AS n FROM delivery d
                        JOIN item i ON i.runId = d.runId AND i.key = d.itemKey
                        WHERE d.runId = ? AND NOT (d.status = 'pending' AND i.status IN ('failed', 'skipped'))
                        GROUP BY d.\(column), d.status
                        """, arguments: [runId])
                {
                    var counts = result[row["name"]] ?? DeliveryCounts()
                    switch row["status"] as String {
                    case "done": counts.done = row["n"]
                    case "failed": counts.failed = row["n"]
                    default: counts.pending = row["n"]
                    }
                    result[row["name"]] = counts
                }
                return result
            }
            let tiers = try Dictionary(
                uniqueKeysWithValues: Row.fetchAll(
                    db,
                    sql: """
                        SELECT tier, COUNT(*) AS n FROM item WHERE runId = ? AND tier IS NOT NULL GROUP BY tier
                        """, arguments: [runId]
                ).map { ($0["tier"] as String, $0["n"] as Int) })
            return (statuses, try deliveries("sink"), try deliveries("output"), tiers)
        }
        let counts = try store.counts(runId: runId)
        #expect(counts.total == statuses.values.reduce(0, +), sourceLocation: sourceLocation)
        for status in ItemStatus.allCases {
            let n: Int
            switch status {
            case .pending: n = counts.pending
            case .fetched: n = counts.fetched
            case .processed: n = counts.processed
            case .done: n = counts.done
            case .skipped: n = counts.skipped
            case .failed: n = counts.failed
            }
            #expect(n == statuses[status.rawValue] ?? 0, "\(status)", sourceLocation: sourceLocation)
        }
        #expect(try store.deliveryCounts(runId: runId) == sinks, sourceLocation: sourceLocation)
        #expect(try store.deliveryCountsByOutput(runId: runId) == outputs, sourceLocation: sourceLocation)
        #expect(try store.tierCounts(runId: runId) == tiers, sourceLocation: sourceLocation)
    }
}
