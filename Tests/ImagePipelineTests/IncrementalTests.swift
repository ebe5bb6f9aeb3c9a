import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// `imgpipe plan` and `run --incremental` with the built binary, on real files: after
/// editing one output's quality, replacing two sources, touching one, adding and deleting
/// files, only the expected files change (their inode and mtime say so), a pruning sink
/// loses the deleted item's files and the other sink keeps them, and export agrees with the
/// disk.
@Suite("Change-aware re-runs")
struct IncrementalTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-incremental") }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    func photo(_ name: String, seed: Int, width: Int = 240, height: Int = 180) throws {
        try ImageFixtures.write(try ImageFixtures.photo(width: width, height: height, seed: seed), to: work.url("in/\(name).jpg"))
    }

    func pipeline(quality: Int) throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 120, "height": 120}],
             "outputs": [{"id": "web", "format": "jpeg", "quality": \(quality), "name": "{stem}-web.jpg"},
                         {"id": "thumb", "format": "png", "filters": [{"op": "fit", "width": 40, "height": 40}],
                          "name": "{stem}-thumb.png"}],
             "sinks": [{"type": "directory", "name": "site", "path": "out", "prune": true},
                       {"type": "directory", "name": "archive", "path": "archive"}]}
            """, to: "pipe.json")
    }

    /// Inode, modification time and bytes of each file of a folder, by name.
    func snapshot(_ folder: String) -> [String: (inode: UInt64, modified: Double, data: Data)] {
        var files: [String: (UInt64, Double, Data)] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: work.url(folder))) ?? [] where !name.hasPrefix(".") {
            let path = work.url("\(folder)/\(name)")
            var info = stat()
            guard stat(path, &info) == 0, let data = FileManager.default.contents(atPath: path) else { continue }
            files[name] = (UInt64(info.st_ino), Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9, data)
        }
        return files
    }

    func plan() throws -> [String: Any] {
        let result = try imgpipe("plan", "pipe.json", "--json")
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    /// Export's records: `items` of them, all done, and each output's SHA-256 and size those
    /// of its file in every one of `folders`.
    func exportAgreesWithDisk(items: Int, folders: [String], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let records = try imgpipe("export", "pipe.json").jsonLines()
        #expect(records.count == items, sourceLocation: sourceLocation)
        for record in records {
            let outputs = try #require(record["outputs"] as? [String: [String: Any]], sourceLocation: sourceLocation)
            for (id, output) in outputs {
                let name = try #require(output["name"] as? String, sourceLocation: sourceLocation)
                for folder in folders {
                    let data = try Data(contentsOf: URL(fileURLWithPath: work.url("\(folder)/\(name)")))
                    #expect(
                        output["sha256"] as? String == sha256Hex(data) && output["bytes"] as? Int == data.count,
                        "\(folder)/\(name) (\(id)) is not what export says", sourceLocation: sourceLocation)
                }
            }
            #expect(record["status"] as? String == "done", sourceLocation: sourceLocation)
        }
    }

    func redo(_ plan: [String: Any], _ output: String) -> Int? {
        ((plan["outputs"] as? [String: Any])?[output] as? [String: Any])?["redo"] as? Int
    }

    @Test func onlyWhatChangedIsMadeAgainAndAPruningSinkDropsWhatIsGone() throws {
        for index in 1...6 { try photo("p\(index)", seed: index) }
        try pipeline(quality: 85)
        // Before any run: everything is new, and planning writes nothing.
        let first = try plan()
        #expect(first["new"] as? Int == 6 && first["baseline"] == nil && redo(first, "web") == 6)
        #expect(
            !FileManager.default.fileExists(atPath: work.url("out"))
                && !FileManager.default.fileExists(atPath: work.url(".imgpipe/pipe.sqlite")))
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let before = snapshot("out")
        #expect(before.count == 12)
        let quiet = try plan()
        #expect(
            quiet["unchanged"] as? Int == 6 && quiet["new"] as? Int == 0 && redo(quiet, "web") == 0 && redo(quiet, "thumb") == 0,
            "\(quiet)")

        // One output's quality, two sources replaced, one touched, one added, one deleted.
        try pipeline(quality: 60)
        try photo("p2", seed: 20)
        try photo("p3", seed: 30)
        let touched = work.url("in/p1.jpg")
        #expect(utimes(touched, nil) == 0)
        try photo("p7", seed: 7)
        try FileManager.default.removeItem(atPath: work.url("in/p6.jpg"))
        let planned = try plan()
        #expect(
            planned["new"] as? Int == 1 && planned["changed"] as? Int == 2 && planned["unchanged"] as? Int == 3
                && planned["gone"] as? Int == 1, "\(planned)")
        #expect(redo(planned, "web") == 6 && redo(planned, "thumb") == 3, "\(planned)")
        let reasons = ((planned["outputs"] as? [String: Any])?["web"] as? [String: Any])?["reasons"] as? [String] ?? []
        #expect(reasons.first == "its filters or encoding changed", "\(reasons)")
        #expect((planned["estimatedSeconds"] as? Double ?? -1) >= 0)
        #expect(snapshot("out").mapValues(\.inode) == before.mapValues(\.inode), "planning touched nothing")

        let run = try imgpipe("run", "pipe.json", "--incremental")
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(run.stderr.contains("sink site: removed 2 file(s)"), "\(run.stderr)")
        let after = snapshot("out")
        // Unchanged sources keep their thumbnails as they were: same inode, same mtime.
        for name in ["p1", "p4", "p5"] {
            let file = "\(name)-thumb.png"
            #expect(after[file]?.inode == before[file]?.inode && after[file]?.modified == before[file]?.modified, "\(file)")
        }
        // Every web output was made again at the new quality; the replaced sources' thumbnails too.
        for name in ["p1", "p2", "p3", "p4", "p5"] {
            #expect(after["\(name)-web.jpg"]?.inode != before["\(name)-web.jpg"]?.inode, "\(name)-web.jpg")
            #expect(after["\(name)-web.jpg"]?.data != before["\(name)-web.jpg"]?.data, "\(name)-web.jpg was encoded anew")
        }
        for name in ["p2", "p3"] {
            #expect(
                after["\(name)-thumb.png"]?.data != before["\(name)-thumb.png"]?.data, "\(name)-thumb.png shows the new source")
            #expect(try VipsImage.open(path: work.url("out/\(name)-thumb.png")).width == 40)
        }
        #expect(after["p7-web.jpg"] != nil && after["p7-thumb.png"] != nil)
        #expect(after["p6-web.jpg"] == nil && after["p6-thumb.png"] == nil, "the pruning sink dropped the deleted item's files")
        #expect(after.count == 12)
        #expect(FileManager.default.fileExists(atPath: work.url("archive/p6-web.jpg")), "a sink without prune deletes nothing")

        // Export of the new run agrees with the disk, carried outputs included.
        try exportAgreesWithDisk(items: 6, folders: ["out"])

        // Nothing changed since: the next plan has nothing to do, and a run changes no file.
        let settled = try plan()
        #expect(
            settled["unchanged"] as? Int == 6 && redo(settled, "web") == 0 && redo(settled, "thumb") == 0
                && settled["gone"] as? Int == 0, "\(settled)")
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(snapshot("out").mapValues(\.inode) == after.mapValues(\.inode))

        // A run of the first two items lists two: the other four are not gone from the feed,
        // and their files stay (pruning removed 8 of the 12).
        try photo("p1", seed: 99)
        let limited = try imgpipe("run", "pipe.json", "--incremental", "--limit", "2")
        #expect(limited.status == 0, "\(limited.stderr)")
        #expect(limited.stderr.contains("nothing pruned: this run did not list the whole feed (--limit 2)"), "\(limited.stderr)")
        #expect(Set(snapshot("out").keys) == Set(after.keys))

        // A source folder that lists nothing (not mounted) prunes nothing either.
        try FileManager.default.moveItem(atPath: work.url("in"), toPath: work.url("in-away"))
        try work.folder("in")
        let empty = try imgpipe("run", "pipe.json", "--incremental")
        #expect(empty.stderr.contains("nothing pruned: the feed listed no item at all"), "\(empty.stdout) \(empty.stderr)")
        #expect(Set(snapshot("out").keys) == Set(after.keys))
        // Nor is such a run, or one of `--limit` items, what the next one compares with.
        try FileManager.default.removeItem(atPath: work.url("in"))
        try FileManager.default.moveItem(atPath: work.url("in-away"), toPath: work.url("in"))
        let back = try plan()
        #expect(back["new"] as? Int == 0 && back["unchanged"] as? Int == 5 && back["changed"] as? Int == 1, "\(back)")
    }

    /// A re-run that changes nothing takes the earlier run's rows over instead of copying
    /// them (issue 40: the state doubled with each one): the file keeps its rows, and its
    /// pages but for each run's own record, the newest run holds every item, and export and status say what they said. A
    /// run of `--limit` items that took some over is no loss to the runs after it: `plan`
    /// and the next re-run find those items where they went, and make none of them again.
    @Test func aRerunThatChangesNothingAddsNothingToTheStateFile() throws {
        for index in 1...24 { try photo(String(format: "p%02d", index), seed: index, width: 64, height: 48) }
        try pipeline(quality: 85)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let state = work.url(".imgpipe/pipe.sqlite")
        func rows() throws -> [Int] {
            try DatabaseQueue(path: state).read { db in
                try ["item", "output", "delivery"].map { try Int.fetchOne(db, sql: "SELECT count(*) FROM \($0)") ?? -1 }
                    + [Int.fetchOne(db, sql: "PRAGMA page_count") ?? -1]
            }
        }
        let first = try rows()
        #expect(Array(first.prefix(3)) == [24, 48, 96])
        let files = snapshot("out")
        // Nothing changed: no run is made (`UpToDate`). A source touched (its bytes the same)
        // and a new one make a run, which takes the others over whole and adds their rows
        // to nothing: the new item's rows and the run's own record.
        for _ in 1...2 {
            let rerun = try imgpipe("run", "pipe.json", "--incremental")
            #expect(rerun.status == 0 && rerun.stderr.contains("up to date"), "\(rerun.stderr)")
        }
        let same = try rows()
        #expect(Array(same.prefix(3)) == Array(first.prefix(3)) && same[3] - first[3] <= 1, "\(same), before \(first)")
        try photo("p25", seed: 25, width: 64, height: 48)
        let added = try imgpipe("run", "pipe.json", "--incremental")
        #expect(added.status == 0 && !added.stderr.contains("up to date"), "\(added.stderr)")
        let again = try rows()
        #expect(
            Array(again.prefix(3)) == [25, 50, 100] && again[3] - first[3] <= 3,
            "rows and pages after a re-run that carried 24 items: \(again), before \(first)")
        try FileManager.default.removeItem(atPath: work.url("in/p25.jpg"))
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(snapshot("out").mapValues(\.inode) == files.mapValues(\.inode))
        try exportAgreesWithDisk(items: 24, folders: ["out", "archive"])
        func status(_ arguments: String...) throws -> [String: Any] {
            let result = try ImgpipeBinary.run(["status", "pipe.json", "--json"] + arguments, in: work.path)
            return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        }
        let latest = try status()
        #expect(latest["run"] as? Int == 3 && latest["done"] as? Int == 24, "\(latest)")
        let handedOn = try status("--run", "1")
        #expect(handedOn["done"] as? Int == 0, "run 1 holds no item now: \(handedOn)")
        let withP25 = try status("--run", "2")
        #expect(withP25["done"] as? Int == 1, "run 2 keeps p25, gone from run 3: \(withP25)")

        // Ten items taken over by a run of `--limit 10`, which is not compared with.
        #expect(try imgpipe("run", "pipe.json", "--incremental", "--limit", "10").status == 0)
        let planned = try plan()
        #expect(
            planned["unchanged"] as? Int == 24 && planned["new"] as? Int == 0 && planned["gone"] as? Int == 0
                && redo(planned, "web") == 0, "\(planned)")
        try FileManager.default.removeItem(atPath: work.url("in/p24.jpg"))
        let gone = try plan()
        #expect(gone["unchanged"] as? Int == 23 && gone["gone"] as? Int == 1, "\(gone)")
        let whole = try imgpipe("run", "pipe.json", "--incremental", "--json")
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(snapshot("archive").mapValues(\.inode).filter { $0.key.hasPrefix("p24") }.count == 2)
        #expect(
            snapshot("out").mapValues(\.inode) == files.mapValues(\.inode).filter { !$0.key.hasPrefix("p24") },
            "nothing made again; p24's files pruned")
        try exportAgreesWithDisk(items: 23, folders: ["out", "archive"])
        let rowsNow = try rows()
        #expect(Array(rowsNow.prefix(3)) == [25, 50, 100], "p24's and p25's rows stay with the run each was last in: \(rowsNow)")
        // Every run's counters followed its items and deliveries as they moved.
        let disagreements = try DatabaseQueue(path: state).read { db in
            try Int.fetchOne(
                db,
                sql: """
                    SELECT count(*) FROM (SELECT runId, 'item' AS kind, '' AS name, status, count(*) AS n FROM item
                                          GROUP BY runId, status
                                          UNION ALL SELECT runId, 'sink', sink, status, count(*) FROM delivery
                                          GROUP BY runId, sink, status
                                          UNION ALL SELECT runId, 'output', output, status, count(*) FROM delivery
                                          GROUP BY runId, output, status
                                          UNION ALL SELECT runId, 'tier', tier, '', count(*) FROM item
                                          WHERE tier IS NOT NULL GROUP BY runId, tier) r
                    FULL OUTER JOIN (SELECT * FROM tally WHERE kind IN ('item', 'sink', 'output', 'tier') AND n != 0) t
                        USING (runId, kind, name, status)
                    WHERE r.n IS NOT t.n
                    """)
        }
        #expect(disagreements == 0)
    }

    /// What a review of the take-over found: a run whose items were all taken over (by a run
    /// of `--limit`) is still the one compared with, and the time per item `plan` estimates
    /// counts them; a name an item taken over holds stays reserved for it, though the run
    /// compared with no longer has its rows; and an item named from a stem of its own (its
    /// name was another's) is taken over too.
    @Test func itemsTakenOverKeepTheirRunsNamesAndEstimates() throws {
        try photo("p", seed: 1, width: 64, height: 48)
        try photo("q", seed: 2, width: 64, height: 48)
        try ImageFixtures.write(try ImageFixtures.photo(width: 64, height: 48, seed: 3), to: work.url("in/q.png"))
        try pipeline(quality: 85)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let files = snapshot("out")
        #expect(files.count == 6, "q.png named from a stem of its own: \(files.keys.sorted())")
        // Every item taken over by a run of `--limit 100`.
        #expect(try imgpipe("run", "pipe.json", "--incremental", "--limit", "100").status == 0)
        // The run emptied says where its items went, and still counts them in its speed.
        let runs = try imgpipe("status", "pipe.json", "--runs")
        #expect(
            runs.stdout.contains("run #1: finished") && runs.stdout.contains("of 0, 3 handed on to a later run"), "\(runs.stdout)"
        )
        let first = try imgpipe("status", "pipe.json", "--run", "1")
        #expect(first.stdout.contains("handed on: 3 item(s) kept whole by a later `run --incremental`"), "\(first.stdout)")
        let report = try #require(
            try JSONSerialization.jsonObject(with: Data(imgpipe("status", "pipe.json", "--run", "1", "--json").stdout.utf8))
                as? [String: Any])
        #expect(report["handedOn"] as? Int == 3 && (report["itemsPerSecond"] as? Double ?? 0) > 0, "\(report)")
        try photo("q", seed: 5, width: 64, height: 48)
        let planned = try plan()
        #expect(
            planned["baseline"] as? Int == 1 && planned["unchanged"] as? Int == 2 && planned["changed"] as? Int == 1
                && planned["new"] as? Int == 0 && (planned["estimatedSeconds"] as? Double ?? 0) > 0, "\(planned)")
        // A new item listed before p.jpg, of the same stem: p-web.jpg is still p.jpg's.
        try ImageFixtures.write(try ImageFixtures.photo(width: 64, height: 48, seed: 4), to: work.url("in/p.jpeg"))
        let rerun = try imgpipe("run", "pipe.json", "--incremental")
        #expect(rerun.status == 0, "\(rerun.stderr)")
        let after = snapshot("out")
        #expect(after.count == 8)
        for (name, file) in files where !["q-web.jpg", "q-thumb.png"].contains(name) {
            #expect(after[name]?.inode == file.inode, "\(name) kept as it was")
        }
        try exportAgreesWithDisk(items: 4, folders: ["out", "archive"])
        let left = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite")).read { db in
            try String.fetchAll(db, sql: "SELECT key FROM item WHERE runId != 3")
        }
        #expect(left == ["q.jpg"], "every item but the changed one taken over each time, q.png's too")
    }

    /// The detector reads the compared run ahead in key order while keys come in rising
    /// order: a folder listed by name crosses that order (`a/…` is listed before `a-b…`,
    /// whose bytes come first), and items changed, added and deleted fall inside and
    /// between the windows. Each is still told apart.
    @Test func itemsListedAcrossTheStateFilesKeyOrderAreComparedRight() throws {
        for index in 1...12 {
            try photo(String(format: "a/x%02d", index), seed: index, width: 64, height: 48)
            try photo(String(format: "a-b%02d", index), seed: 100 + index, width: 64, height: 48)
        }
        try pipeline(quality: 85)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        for name in ["a/x03", "a/x11", "a-b02", "a-b12"] { try photo(name, seed: 500 + name.count, width: 64, height: 48) }
        for name in ["a/x06", "a-b07"] { try FileManager.default.removeItem(atPath: work.url("in/\(name).jpg")) }
        for name in ["a/x06b", "a-b00", "a0"] { try photo(name, seed: 900 + name.count, width: 64, height: 48) }
        let planned = try plan()
        #expect(
            planned["unchanged"] as? Int == 18 && planned["changed"] as? Int == 4 && planned["new"] as? Int == 3
                && planned["gone"] as? Int == 2, "\(planned)")
        let rerun = try imgpipe("run", "pipe.json", "--incremental")
        #expect(rerun.status == 0, "\(rerun.stderr)")
        try exportAgreesWithDisk(items: 25, folders: ["out", "archive"])
        #expect(try plan()["unchanged"] as? Int == 25)
    }

    /// A state file of the imgpipe before (no `carriedFrom`): `plan`, which writes nothing,
    /// says how to bring it up to date instead of saying its runs record no sources.
    @Test func planNamesTheUpgradeOfAStateFileOfTheImgpipeBefore() throws {
        for index in 1...3 { try photo("p\(index)", seed: index, width: 64, height: 48) }
        try pipeline(quality: 85)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite")).write { db in
            try db.execute(
                sql: """
                    DELETE FROM grdb_migrations WHERE identifier LIKE 'v9:%';
                    DROP TRIGGER tally_item_delete; DROP TRIGGER tally_delivery_moved;
                    ALTER TABLE item DROP COLUMN carriedFrom; ALTER TABLE run DROP COLUMN handedOn;
                    """)
        }
        let refused = try imgpipe("plan", "pipe.json")
        #expect(refused.status != 0 && refused.stderr.contains("reading it once with `imgpipe status`"), "\(refused.stderr)")
        #expect(try imgpipe("status", "pipe.json").status == 0)
        let planned = try plan()
        #expect(planned["unchanged"] as? Int == 3, "\(planned)")
    }

    /// What the first attack on `--incremental` found, each kept from coming back: a sink
    /// sent elsewhere gets everything (and pruning never reaches a file it did not write);
    /// `{index}` names follow the feed; a change of `accept` judges every item again; an
    /// incremental run killed and resumed stays incremental and prunes at its end; a file
    /// kept for a failed item is pruned once a later run no longer makes it.
    @Test func sinksNamesAcceptAndResumeAreTakenIntoAccount() throws {
        for index in 1...5 { try photo("p\(index)", seed: index) }
        func write(_ sink: String, name: String = "{stem}-web.jpg", accept: String = "") throws {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"}, \(accept)
                 "filters": [{"op": "fit", "width": 80, "height": 80}],
                 "outputs": [{"id": "web", "format": "jpeg", "quality": 80, "name": "\(name)"}],
                 "sinks": [{"type": "directory", "path": "\(sink)", "prune": true}], "limits": {"workers": 1}}
                """, to: "pipe.json")
        }
        try write("out")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        // The sink's folder changes, and a file of the user's waits there under a name the
        // previous run made: everything is delivered to the new folder, the user's file stays.
        try FileManager.default.removeItem(atPath: work.url("in/p5.jpg"))
        try work.write("the user's own", to: "elsewhere/p5-web.jpg")
        try write("elsewhere")
        let moved = try plan()
        #expect(
            redo(moved, "web") == 4
                && (((moved["outputs"] as? [String: Any])?["web"] as? [String: Any])?["reasons"] as? [String])?
                    .contains("sink \"directory-0\" changed") == true,
            "\(moved)")
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(Set(snapshot("elsewhere").keys) == ["p1-web.jpg", "p2-web.jpg", "p3-web.jpg", "p4-web.jpg", "p5-web.jpg"])
        #expect(try String(contentsOfFile: work.url("elsewhere/p5-web.jpg"), encoding: .utf8) == "the user's own")

        // `{index}`: the items after a removed one are named otherwise, and made again.
        try write("elsewhere", name: "{index}.jpg")
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        try FileManager.default.removeItem(atPath: work.url("in/p1.jpg"))
        let renumbered = try plan()
        #expect(redo(renumbered, "web") == 3, "\(renumbered)")
        let renamed = try imgpipe("run", "pipe.json", "--incremental")
        #expect(renamed.status == 0, "\(renamed.stdout)\(renamed.stderr)")
        let numbered = Set(snapshot("elsewhere").keys.filter { $0.count <= 5 })
        #expect(numbered == ["1.jpg", "2.jpg", "3.jpg"], "the fourth number went with the item gone: \(numbered)")
        let records = try imgpipe("export", "pipe.json").jsonLines()
        let names = records.compactMap { (($0["outputs"] as? [String: Any])?["web"] as? [String: Any])?["name"] as? String }
        #expect(names.sorted() == ["1.jpg", "2.jpg", "3.jpg"], "\(names)")

        // `accept` changed: every item is judged again (here all skipped, their files pruned).
        try write("elsewhere", name: "{index}.jpg", accept: #""accept": {"minWidth": 5000},"#)
        let screened = try plan()
        #expect(redo(screened, "web") == 3, "\(screened)")
        let skipped = try imgpipe("run", "pipe.json", "--incremental", "--json")
        let report = try skipped.decoded(StatusReport.self)
        #expect(skipped.status == 0 && report.skipped == 3 && report.session?.skipped == 3, "\(skipped.stdout)")
    }

    /// `"sink": {…}` rewritten as `"sinks": [{…}]` is the same sink: nothing is delivered
    /// again (a reviewer's plan said `sink "directory-0" changed` and the run rewrote every file).
    @Test func aSinkWrittenAsTheOnlyEntryOfSinksIsUnchanged() throws {
        for index in 1...2 { try photo("p\(index)", seed: index) }
        func write(_ sinks: String) throws {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "filters": [{"op": "fit", "width": 80, "height": 80}], \(sinks)}
                """, to: "pipe.json")
        }
        try write(#""sink": {"type": "directory", "path": "out"}"#)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let before = snapshot("out")
        try write(#""sinks": [{"type": "directory", "path": "out"}]"#)
        let planned = try plan()
        #expect(redo(planned, "default") == 0, "\(planned)")
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(snapshot("out").mapValues(\.inode) == before.mapValues(\.inode))
    }

    @Test func anIncrementalRunKilledAndResumedStaysIncremental() throws {
        // Large enough that the run is still going when it is killed.
        for index in 1...60 { try photo(String(format: "p%02d", index), seed: index, width: 1600, height: 1200) }
        try pipeline(quality: 85)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let before = snapshot("out")
        for index in 1...10 { try FileManager.default.removeItem(atPath: work.url(String(format: "in/p%02d.jpg", index))) }
        try pipeline(quality: 60)
        // Killed once some web outputs have been made again.
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--incremental"], in: work.path)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline,
            snapshot("out").filter({ $0.key.hasSuffix("-web.jpg") && $0.value.inode != before[$0.key]?.inode }).count < 5
        {
            usleep(20_000)
        }
        running.signal(SIGKILL)
        _ = running.wait()
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(resumed.stderr.contains("removed 20 file(s)"), "the resumed run pruned at its end: \(resumed.stderr)")
        let after = snapshot("out")
        #expect(after.count == 100)
        for (name, file) in after where name.hasSuffix("-thumb.png") {
            #expect(file.inode == before[name]?.inode, "\(name) was kept through the kill and the resume")
        }
    }

    /// An incremental run killed and then given up (`run --incremental --new`, as `plan`
    /// advises) had written over files the finished run before it keeps: they are made
    /// again, where export vouched for the older run's bytes over the killed run's files.
    /// A kept file removed or cut short by hand is made again too.
    @Test func filesWrittenOverOrRemovedSinceTheComparedRunAreMadeAgain() throws {
        for index in 1...40 { try photo(String(format: "p%02d", index), seed: index, width: 1600, height: 1200) }
        try pipeline(quality: 85)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let before = snapshot("out").merging(snapshot("archive").map { ("archive/" + $0.key, $0.value) }) { $1 }
        func writtenOver() -> Set<String> {
            let now = snapshot("out").merging(snapshot("archive").map { ("archive/" + $0.key, $0.value) }) { $1 }
            return Set(
                now.filter { $0.key.hasSuffix("-web.jpg") && $0.value.inode != before[$0.key]?.inode }
                    .map { String($0.key.split(separator: "/").last!.dropLast("-web.jpg".count)) })
        }
        try pipeline(quality: 40)
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--incremental"], in: work.path)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, writtenOver().count < 5 { usleep(20_000) }
        try #require(running.process.isRunning, "the run ended before it could be killed")
        running.signal(SIGKILL)
        _ = running.wait()
        let overwritten = writtenOver()
        try #require(overwritten.count >= 5 && overwritten.count < 40, "\(overwritten.count) written over")

        try pipeline(quality: 85)
        try FileManager.default.removeItem(atPath: work.url("out/p39-thumb.png"))
        try work.write("cut", to: "archive/p40-thumb.png")
        let planned = try plan()
        #expect(redo(planned, "web") == overwritten.count && redo(planned, "thumb") == 2, "\(planned)")
        let rerun = try imgpipe("run", "pipe.json", "--incremental", "--new")
        #expect(rerun.status == 0, "\(rerun.stderr)")
        try exportAgreesWithDisk(items: 40, folders: ["out", "archive"])
        // What was not touched is kept as it was (p39's and p40's thumbnails were made again,
        // and given to both sinks).
        let after = snapshot("out")
        for (name, file) in after where name.hasSuffix("-thumb.png") && !["p39-thumb.png", "p40-thumb.png"].contains(name) {
            #expect(file.inode == before[name]?.inode, "\(name) was kept")
        }
    }

    /// The order of `outputs` is not where anything goes, and a new output is made and
    /// delivered without the others: both made every sink that takes every output "changed",
    /// and every file was written again.
    @Test func outputsReorderedOrAddedKeepTheOthersFiles() throws {
        for index in 1...3 { try photo("p\(index)", seed: index) }
        let web = #"{"id": "web", "format": "jpeg", "quality": 80, "name": "{stem}-web.jpg"}"#
        let thumb =
            #"{"id": "thumb", "format": "png", "filters": [{"op": "fit", "width": 40, "height": 40}], "name": "{stem}-thumb.png"}"#
        let tiny =
            #"{"id": "tiny", "format": "png", "filters": [{"op": "fit", "width": 10, "height": 10}], "name": "{stem}-tiny.png"}"#
        func write(_ outputs: String...) throws {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "filters": [{"op": "fit", "width": 120, "height": 120}], "outputs": [\(outputs.joined(separator: ", "))],
                 "sinks": [{"type": "directory", "path": "out", "prune": true}]}
                """, to: "pipe.json")
        }
        try write(web, thumb)
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let before = snapshot("out")
        try write(thumb, web)
        let reordered = try plan()
        #expect(redo(reordered, "web") == 0 && redo(reordered, "thumb") == 0, "\(reordered)")
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(snapshot("out").mapValues(\.inode) == before.mapValues(\.inode))

        // The sink's default name written out and its outputs listed, in another order: the same sink.
        try work.write(
            try String(contentsOfFile: work.url("pipe.json"), encoding: .utf8).replacingOccurrences(
                of: #""path": "out", "prune": true"#,
                with: #""path": "out", "prune": true, "name": "directory-0", "outputs": ["web", "thumb"]"#),
            to: "pipe.json")
        let named = try plan()
        #expect(redo(named, "web") == 0 && redo(named, "thumb") == 0, "\(named)")

        try write(thumb, web, tiny)
        let added = try plan()
        #expect(redo(added, "web") == 0 && redo(added, "thumb") == 0 && redo(added, "tiny") == 3, "\(added)")
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        let after = snapshot("out")
        #expect(after.count == 9)
        for (name, file) in before { #expect(after[name]?.inode == file.inode, "\(name) was kept") }
    }

    /// A sink that takes every item at one URL keeps what it was given when one item is
    /// added (a later delivery to the same place by this very run made every item "written
    /// over"); a token in its URL's query that changes is not another place; another value
    /// of a `${…}` in a filter is another output; and a run of `--limit` items is not what
    /// the next run compares with (its unlisted items would all look new).
    @Test func oneURLForEveryItemATokenAFilterValueAndALimitedRun() throws {
        for index in 1...3 { try photo("p\(index)", seed: index) }
        let server = try TestHTTPServer { request in request.method == "POST" ? .status(201) : .status(404) }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 80, "height": 80}, {"op": "caption", "top": "${LABEL}"}],
             "output": {"format": "jpeg", "name": "{stem}.jpg"},
             "sinks": [{"type": "directory", "path": "out", "prune": true},
                       {"type": "http", "url": "\(server.baseURL)/${DIR}/ingest?sig=${SIG}", "method": "POST"}]}
            """, to: "pipe.json")
        // Values of one or two characters too (too short to be masked).
        func run(_ arguments: String..., label: String = "A", sig: String = "1", dir: String = "v1") throws -> CommandResult {
            try ImgpipeBinary.run(Array(arguments), in: work.path, environment: ["LABEL": label, "SIG": sig, "DIR": dir])
        }
        func planned(label: String = "A", sig: String = "1", dir: String = "v1") throws -> [String: Any] {
            let result = try run("plan", "pipe.json", "--json", label: label, sig: sig, dir: dir)
            return try #require(
                try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stderr)")
        }
        func posts() -> Int { server.requests.count { $0.method == "POST" } }
        #expect(try run("run", "pipe.json").status == 0)
        #expect(posts() == 3)
        try photo("p4", seed: 4)
        #expect(redo(try planned(), "default") == 1)
        #expect(try run("run", "pipe.json", "--incremental").status == 0)
        #expect(posts() == 4, "only the new item was posted")
        #expect(redo(try planned(), "default") == 0, "the run's own deliveries to the one URL wrote nothing over")

        #expect(redo(try planned(sig: "2"), "default") == 0, "another token is not another place")
        #expect(redo(try planned(dir: "v2"), "default") == 4, "another folder of the URL is another place")
        let before = snapshot("out")
        #expect(redo(try planned(label: "B"), "default") == 4, "another caption is another output")
        #expect(try run("run", "pipe.json", "--incremental", label: "B").status == 0)
        #expect(snapshot("out").allSatisfy { $0.value.data != before[$0.key]?.data }, "every file shows the new caption")

        let limited = try run("run", "pipe.json", "--incremental", "--limit", "2", label: "B")
        #expect(limited.status == 0, "\(limited.stderr)")
        let after = snapshot("out")
        let next = try planned(label: "B")
        #expect(
            redo(next, "default") == 0 && next["new"] as? Int == 0, "compared with the last run that listed everything: \(next)")
        #expect(try run("run", "pipe.json", "--incremental", label: "B").status == 0)
        #expect(snapshot("out").mapValues(\.inode) == after.mapValues(\.inode))
    }

    /// What a pipeline file as written does not show: a watermark image given other bytes
    /// under the same name makes the outputs that use it again (and only those), and a sink
    /// whose `${OUTDIR}` has another value is another place that gets every output; both
    /// were "nothing to do", and the new folder stayed empty.
    @Test func aChangedWatermarkImageAndASinkMovedByItsVariableAreSeen() throws {
        for index in 1...3 { try photo("p\(index)", seed: index) }
        try ImageFixtures.write(try ImageFixtures.photo(width: 30, height: 20, seed: 7), to: work.url("logo.png"))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 120, "height": 120}],
             "outputs": [{"id": "web", "format": "jpeg", "name": "{stem}-web.jpg",
                          "filters": [{"op": "watermark", "image": "logo.png", "opacity": 1}]},
                         {"id": "thumb", "format": "png", "filters": [{"op": "fit", "width": 40, "height": 40}],
                          "name": "{stem}-thumb.png"}],
             "sinks": [{"type": "directory", "path": "${OUTDIR}"}]}
            """, to: "pipe.json")
        func run(_ arguments: String..., into folder: String) throws -> CommandResult {
            try ImgpipeBinary.run(Array(arguments), in: work.path, environment: ["OUTDIR": folder])
        }
        #expect(try run("run", "pipe.json", into: "outA").status == 0)
        let before = snapshot("outA")

        try ImageFixtures.write(try ImageFixtures.photo(width: 30, height: 20, seed: 8), to: work.url("logo.png"))
        let planned = try #require(
            try JSONSerialization.jsonObject(with: Data(run("plan", "pipe.json", "--json", into: "outA").stdout.utf8))
                as? [String: Any])
        #expect(redo(planned, "web") == 3 && redo(planned, "thumb") == 0, "\(planned)")
        #expect("\(planned)".contains("a watermark image or a ${…} value of its filters changed"), "\(planned)")
        #expect(try run("run", "pipe.json", "--incremental", into: "outA").status == 0)
        let after = snapshot("outA")
        for index in 1...3 {
            #expect(after["p\(index)-web.jpg"]?.data != before["p\(index)-web.jpg"]?.data, "p\(index)-web.jpg shows the new logo")
            #expect(after["p\(index)-thumb.png"]?.inode == before["p\(index)-thumb.png"]?.inode, "p\(index)-thumb.png was kept")
        }

        // The same folder through a link, or spelled `./outA/`, is not another place.
        try FileManager.default.createSymbolicLink(atPath: work.url("linkA"), withDestinationPath: work.url("outA"))
        for spelling in ["linkA", "./outA/"] {
            let same = try #require(
                try JSONSerialization.jsonObject(with: Data(run("plan", "pipe.json", "--json", into: spelling).stdout.utf8))
                    as? [String: Any])
            #expect(redo(same, "web") == 0 && redo(same, "thumb") == 0, "\(spelling): \(same)")
        }
        let moved = try #require(
            try JSONSerialization.jsonObject(with: Data(run("plan", "pipe.json", "--json", into: "outB").stdout.utf8))
                as? [String: Any])
        #expect(redo(moved, "web") == 3 && redo(moved, "thumb") == 3, "\(moved)")
        #expect(try run("run", "pipe.json", "--incremental", into: "outB").status == 0)
        #expect(snapshot("outB").mapValues(\.data) == snapshot("outA").mapValues(\.data), "the new folder has every output")
    }

    /// The resume of an interrupted incremental run compares remote images as they are now,
    /// as the run did: through a conditional request, not the cache's copy (the pipeline's
    /// cache does not revalidate by itself).
    @Test func theResumeOfAnIncrementalRunAsksTheServerAgain() throws {
        let images = LockedBox<[String: (version: Int, data: Data)]>([:])
        for index in 1...8 {
            let path = work.url("src/n\(index).jpg")
            try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: index), to: path)
            images.withLock { $0["n\(index)"] = (1, try! Data(contentsOf: URL(fileURLWithPath: path))) }
        }
        let slow = LockedBox(0.0)
        let server = try TestHTTPServer { request in
            let host = "http://\(request.headers["host"]!)"
            if request.path == "/feed.json" {
                return .json(
                    "["
                        + images.withLock { $0 }.keys.sorted().map { #"{"url": "\#(host)/images/\#($0).jpg"}"# }
                        .joined(separator: ",") + "]")
            }
            let name = String(request.path.dropFirst("/images/".count).dropLast(4))
            guard let image = images.withLock({ $0[name] }) else { return .status(404) }
            let tag = "\"\(name)-\(image.version)\""
            // Before the answer is sent (each connection has a thread of its own).
            Thread.sleep(forTimeInterval: slow.withLock { $0 })
            return request.headers["if-none-match"] == tag ? .status(304) : .bytes(image.data, headers: [("ETag", tag)])
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json"},
             "filters": [{"op": "fit", "width": 50, "height": 50}], "output": {"format": "png", "name": "{name}.png"},
             "sink": {"type": "directory", "path": "out"}, "limits": {"downloads": 1}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let before = snapshot("out")
        // The last image is replaced: the interrupted run will not have come to it.
        let replacement = work.url("src/n8-new.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: 88), to: replacement)
        images.withLock { $0["n8"] = (2, try! Data(contentsOf: URL(fileURLWithPath: replacement))) }
        // Interrupted while it compares the first image (each answer now takes 0.5 s).
        slow.withLock { $0 = 0.5 }
        let asked = server.requests.count
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--incremental"], in: work.path)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !server.requests.dropFirst(asked).contains(where: { $0.path.hasPrefix("/images/") }) {
            usleep(10_000)
        }
        running.signal(SIGINT)
        #expect(running.wait().status == 130)
        slow.withLock { $0 = 0 }
        let resumedFrom = server.requests.count
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        let conditional = server.requests.dropFirst(resumedFrom).filter {
            $0.path.hasPrefix("/images/") && $0.headers["if-none-match"] != nil
        }
        #expect(!conditional.isEmpty, "the resume compared the images it had left through the server")
        let after = snapshot("out")
        #expect(after["n8.png"]?.data != before["n8.png"]?.data, "the image the server replaced was made again")
        for index in 1...7 { #expect(after["n\(index).png"]?.inode == before["n\(index).png"]?.inode, "n\(index).png") }
    }

    /// Four photos `n1`…`n4` at version 1, and a server of a feed of them (`/feed.json`, each
    /// entry's `updated` its version) and of their images (`/images/<name>.jpg`, with an ETag
    /// of name and version, and a 304 to it). An image is replaced by giving it a new version
    /// and other bytes in `images`.
    func versionedFeed() throws -> (images: LockedBox<[String: (version: Int, data: Data)]>, server: TestHTTPServer) {
        let images = LockedBox<[String: (version: Int, data: Data)]>([:])
        for index in 1...4 {
            let path = work.url("src/n\(index).jpg")
            try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: index), to: path)
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            images.withLock { $0["n\(index)"] = (1, data) }
        }
        let server = try TestHTTPServer { request in
            let host = "http://\(request.headers["host"]!)"
            if request.path == "/feed.json" {
                let items = images.withLock { $0 }.sorted { $0.key < $1.key }.map {
                    #"{"url": "\#(host)/images/\#($0.key).jpg", "updated": "v\#($0.value.version)"}"#
                }
                return .json("[" + items.joined(separator: ",") + "]")
            }
            let name = String(request.path.dropFirst("/images/".count).dropLast(4))
            guard let image = images.withLock({ $0[name] }) else { return .status(404) }
            let tag = "\"\(name)-\(image.version)\""
            if request.headers["if-none-match"] == tag { return .status(304) }
            return .bytes(image.data, headers: [("ETag", tag)])
        }
        return (images, server)
    }

    /// A remote feed: with `versionField` the feed's field decides (no image is asked for
    /// to plan, and only the changed one is fetched again); without it, the cache's ETag is
    /// sent and a 304 says unchanged.
    @Test func remoteItemsAreComparedByTheirVersionFieldOrTheirETag() throws {
        let (images, server) = try versionedFeed()
        func imageRequests() -> Int { server.requests.count { $0.path.hasPrefix("/images/") } }
        for (file, source) in [
            ("byfield.json", #""versionField": "updated", "cache": false"#), ("byetag.json", #""cache": true"#),
        ] {
            try work.write(
                """
                {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", \(source)},
                 "filters": [{"op": "fit", "width": 50, "height": 50}], "output": {"format": "png", "name": "{name}.png"},
                 "sink": {"type": "directory", "path": "\(file)-out"}}
                """, to: file)
            #expect(try imgpipe("run", file).status == 0)
        }
        #expect(imageRequests() == 8)
        // n2 is replaced: other bytes, a new version in the feed and a new ETag.
        let replacement = work.url("src/n2-new.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: 22), to: replacement)
        let newData = try Data(contentsOf: URL(fileURLWithPath: replacement))
        images.withLock { $0["n2"] = (2, newData) }

        let byField = try imgpipe("plan", "byfield.json", "--json")
        #expect(byField.status == 0, "\(byField.stderr)")
        #expect(byField.stdout.contains(#""changed" : 1"#) && byField.stdout.contains(#""unchanged" : 3"#), "\(byField.stdout)")
        #expect(imageRequests() == 8, "the version field decided: no image was asked for")

        // Planning writes nothing: not the state file, and not the cache, though it asks the
        // server again (it stored the changed image and recorded each use). SQLite's -wal
        // and -shm files beside the state file are SQLite's.
        func everything() -> [String: String] {
            Dictionary(
                uniqueKeysWithValues: work.files(under: ".imgpipe").filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }.map
                { name in
                    let path = work.url(".imgpipe/" + name)
                    var info = stat()
                    _ = stat(path, &info)
                    return (
                        name,
                        "\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec) "
                            + sha256Hex(FileManager.default.contents(atPath: path) ?? Data())
                    )
                })
        }
        let untouched = everything()
        let byTag = try imgpipe("plan", "byetag.json", "--json")
        #expect(byTag.stdout.contains(#""changed" : 1"#) && byTag.stdout.contains(#""unchanged" : 3"#), "\(byTag.stdout)")
        #expect(everything() == untouched, "\(Set(everything().keys).symmetricDifference(untouched.keys))")
        let asked = server.requests.filter { $0.path.hasPrefix("/images/") }.suffix(4)
        #expect(
            asked.count == 4 && asked.allSatisfy { $0.headers["if-none-match"] != nil },
            "conditional requests, from the cache's ETags")

        let before = snapshot("byfield.json-out")
        let requestsBefore = server.requests.filter { $0.path.hasPrefix("/images/") }.count
        let run = try imgpipe("run", "byfield.json", "--incremental")
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let fetched = server.requests.filter { $0.path.hasPrefix("/images/") }.dropFirst(requestsBefore).map(\.path)
        #expect(fetched == ["/images/n2.jpg"], "only the changed image was fetched again: \(fetched)")
        let after = snapshot("byfield.json-out")
        #expect(after["n2.png"]?.data != before["n2.png"]?.data)
        for name in ["n1.png", "n3.png", "n4.png"] { #expect(after[name]?.inode == before[name]?.inode, "\(name)") }

        // Again: every version as recorded, so no image is asked for. A feed listed from a
        // server is not looked at before the run (`UpToDate`): the run carries every item.
        let requestsNow = imageRequests()
        let same = try imgpipe("run", "byfield.json", "--incremental")
        #expect(same.status == 0 && !same.stderr.contains("up to date"), "\(same.stdout)\(same.stderr)")
        #expect(imageRequests() == requestsNow)
        // By ETag (once n2's change is taken in), each image is asked for once per re-run,
        // by the run: a feed listed from a server is not looked at first.
        #expect(try imgpipe("run", "byetag.json", "--incremental").status == 0)
        for _ in 1...2 {
            let asked = imageRequests()
            let again = try imgpipe("run", "byetag.json", "--incremental")
            #expect(again.status == 0 && !again.stderr.contains("up to date"), "\(again.stdout)\(again.stderr)")
            #expect(imageRequests() - asked == 4)
        }
    }

    /// A `versionField` named after the first run (the user's case, with the cache on): the
    /// first incremental run has no versions to compare and asks for each image once (a
    /// conditional request), and records the versions with what it carries over; from then
    /// on an unchanged version costs no request at all (it cost one per item, run after run),
    /// and a changed one fetches that image alone.
    @Test func aVersionFieldNamedLaterSparesEveryRequestAfterOneRun() throws {
        let (images, server) = try versionedFeed()
        func write(versionField: String) throws {
            try work.write(
                """
                {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json"\(versionField)},
                 "filters": [{"op": "fit", "width": 50, "height": 50}], "output": {"format": "png", "name": "{name}.png"},
                 "sink": {"type": "directory", "path": "out"}}
                """, to: "pipe.json")
        }
        var seen = 0
        /// The image requests since the last call.
        func imageRequests() -> [TestHTTPServer.Request] {
            let all = server.requests.filter { $0.path.hasPrefix("/images/") }
            defer { seen = all.count }
            return Array(all.dropFirst(seen))
        }
        try write(versionField: "")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        #expect(imageRequests().count == 4)
        let before = snapshot("out")

        try write(versionField: #", "versionField": "updated""#)
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        let compared = imageRequests()
        #expect(compared.count == 4 && compared.allSatisfy { $0.headers["if-none-match"] != nil }, "no versions yet: the bytes")
        for index in 2...3 {
            let run = try imgpipe("run", "pipe.json", "--incremental")
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            #expect(imageRequests().map(\.path) == [], "run \(index): the versions decided, no image asked for")
        }
        #expect(try imgpipe("plan", "pipe.json").stdout.contains("4 unchanged"))
        #expect(imageRequests().map(\.path) == [], "plan asked for no image either")
        #expect(snapshot("out").mapValues(\.inode) == before.mapValues(\.inode), "nothing was made again")

        // n3 is replaced: a new version in the feed, other bytes, a new ETag.
        let replacement = work.url("src/n3-new.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: 33), to: replacement)
        images.withLock { $0["n3"] = (2, try! Data(contentsOf: URL(fileURLWithPath: replacement))) }
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(imageRequests().map(\.path) == ["/images/n3.jpg"], "only the changed image was fetched")
        let after = snapshot("out")
        #expect(after["n3.png"]?.data != before["n3.png"]?.data)
        for name in ["n1.png", "n2.png", "n4.png"] { #expect(after[name]?.inode == before[name]?.inode, "\(name)") }
        #expect(try imgpipe("run", "pipe.json", "--incremental").status == 0)
        #expect(imageRequests().map(\.path) == [])
    }

    /// Items that failed last time are not "changed sources": `plan` counts them under a
    /// heading of their own and says what `run --incremental` does with them (tries each
    /// again from the start, as the runs below show: the file still broken fails again, the
    /// file replaced is made).
    @Test func planCountsItemsThatFailedLastTimeApartFromChangedSources() throws {
        for index in 1...3 { try photo("p\(index)", seed: index) }
        try work.write("not a picture", to: "in/broken.jpg")
        try pipeline(quality: 80)
        #expect(try imgpipe("run", "pipe.json").status == 1)

        let text = try imgpipe("plan", "pipe.json")
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("items: 0 new, 0 changed, 3 unchanged, 0 gone from the feed"), "\(text.stdout)")
        #expect(
            text.stdout.contains(
                "failed last time: 1 (run --incremental tries them again from the start, whatever their source; "
                    + "1 of them failed for a cause that does not pass by itself"), "\(text.stdout)")
        #expect(text.stdout.contains("output web: 1 to make (1 item(s) that failed last time)"), "\(text.stdout)")
        let json = try plan()
        #expect(
            json["changed"] as? Int == 0 && json["failedLastTime"] as? Int == 1 && json["failedLastTimeForGood"] as? Int == 1
                && json["unchanged"] as? Int == 3, "\(json)")

        let again = try imgpipe("run", "pipe.json", "--incremental")
        #expect(again.status == 1 && again.stdout.contains("1 failed"), "tried again, and failed again: \(again.stdout)")
        try photo("broken", seed: 9)
        #expect(try plan()["failedLastTime"] as? Int == 1)
        let fixed = try imgpipe("run", "pipe.json", "--incremental")
        #expect(fixed.status == 0, "\(fixed.stdout)\(fixed.stderr)")
        #expect(snapshot("out")["broken-web.jpg"] != nil && snapshot("out")["broken-thumb.png"] != nil)
    }
}
