import Foundation
import GRDB
import ImagePipelineTesting
import Testing

@testable import PipelineKit

extension IncrementalTests {
    /// `run --incremental` with nothing changed makes no run (`UpToDate`): the state file,
    /// its runs and the sink's files stay as they were, and the report is the compared
    /// run's. Each kind of difference makes a run that does what it must, and the re-run
    /// after it is up to date again: a source changed in place and one added, one renamed
    /// (as many items as before), a delivered file removed, the pipeline file edited without
    /// touching any output, an earlier run's file left for a pruning sink, a failed item.
    @Test func aRerunWithNothingChangedMakesNoRunAndAnyDifferenceMakesOne() throws {
        for index in 1...4 { try photo("p\(index)", seed: index, width: 64, height: 48) }
        func write(name: String = "pipe") throws {
            try work.write(
                """
                {"version": 1, "name": "\(name)", "source": {"type": "directory", "path": "in"},
                 "filters": [{"op": "fit", "width": 40, "height": 40}],
                 "outputs": [{"id": "web", "format": "jpeg", "name": "{stem}.jpg"}],
                 "sinks": [{"type": "directory", "name": "site", "path": "out", "prune": true}]}
                """, to: "pipe.json")
        }
        try write()
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let state = work.url(".imgpipe/pipe.sqlite")
        func runs() throws -> [Int64] {
            try DatabaseQueue(path: state).read { try Int64.fetchAll($0, sql: "SELECT id FROM run ORDER BY id") }
        }
        /// The pages that hold something (the first session to open the file for writing
        /// may leave one free page, as a `resume` of a finished run does).
        func pages() throws -> Int {
            try DatabaseQueue(path: state).read {
                try (Int.fetchOne($0, sql: "PRAGMA page_count") ?? -1) - (Int.fetchOne($0, sql: "PRAGMA freelist_count") ?? 0)
            }
        }
        /// The run `run --incremental` reports, and whether it made one.
        func rerun(exit: Int32 = 0, sourceLocation: SourceLocation = #_sourceLocation) throws -> (run: Int, made: Bool) {
            let result = try imgpipe("run", "pipe.json", "--incremental", "--json")
            #expect(result.status == exit, "\(result.stderr)", sourceLocation: sourceLocation)
            let report = try #require(
                try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], sourceLocation: sourceLocation
            )
            let session = try #require(report["session"] as? [String: Any], sourceLocation: sourceLocation)
            return (report["run"] as? Int ?? -1, session["upToDate"] as? Bool != true)
        }

        let files = snapshot("out")
        let size = try pages()
        let nothing = try imgpipe("run", "pipe.json", "--incremental")
        #expect(nothing.status == 0, "\(nothing.stderr)")
        #expect(
            nothing.stderr.contains("up to date: the feed and the pipeline are as run #1 left them; no run made")
                && nothing.stdout.contains("run #1: 4 done, 0 skipped, 0 failed of 4 (0 this session"),
            "\(nothing.stdout)\(nothing.stderr)")
        #expect(try rerun() == (1, false))
        #expect(try runs() == [1] && pages() == size)
        #expect(snapshot("out").mapValues(\.inode) == files.mapValues(\.inode))

        // A source changed in place: run #2 makes it again.
        try photo("p2", seed: 9, width: 64, height: 48)
        #expect(try rerun() == (2, true))
        #expect(snapshot("out")["p2.jpg"]?.inode != files["p2.jpg"]?.inode)
        #expect(try rerun() == (2, false))

        // One more source, then one renamed (as many as before): p5's file is pruned.
        try photo("p5", seed: 5, width: 64, height: 48)
        #expect(try rerun() == (3, true))
        #expect(try rerun() == (3, false))
        try FileManager.default.moveItem(atPath: work.url("in/p5.jpg"), toPath: work.url("in/p6.jpg"))
        #expect(try rerun() == (4, true))
        #expect(Set(snapshot("out").keys) == ["p1.jpg", "p2.jpg", "p3.jpg", "p4.jpg", "p6.jpg"])
        #expect(try rerun() == (4, false))

        // A delivered file removed: made again.
        try FileManager.default.removeItem(atPath: work.url("out/p3.jpg"))
        #expect(try rerun() == (5, true))
        #expect(snapshot("out")["p3.jpg"] != nil)
        #expect(try rerun() == (5, false))

        // The pipeline file edited, no output touched: a run that carries every item.
        try write(name: "renamed")
        let kept = snapshot("out").mapValues(\.inode)
        #expect(try rerun() == (6, true))
        #expect(snapshot("out").mapValues(\.inode) == kept)
        #expect(try rerun() == (6, false))

        // A run that does not prune (a new run over the whole feed) leaves p1's file of the
        // earlier runs; the incremental run after it has that to prune.
        try FileManager.default.removeItem(atPath: work.url("in/p1.jpg"))
        #expect(try imgpipe("run", "pipe.json").status == 0)
        #expect(snapshot("out")["p1.jpg"] != nil)
        #expect(try rerun() == (8, true))
        #expect(snapshot("out")["p1.jpg"] == nil)
        #expect(try rerun() == (8, false))

        // A failed item is tried again by each re-run.
        try work.write("not an image", to: "in/bad.jpg")
        #expect(try rerun(exit: 1) == (9, true))
        #expect(try rerun(exit: 1) == (10, true))
        #expect(try runs() == Array(1...10))
    }
}

extension IncrementalTests {
    /// What reviews of the look found, each kept from coming back: a table with a folder to
    /// fall back on is listed from local files; a table counts its rows before listing,
    /// some of which are left out (no URL), so its count says at most how many items come;
    /// the feed's notices are given once, by the look when nothing changed
    /// and by the run when one follows; the metadata's version decides without a request;
    /// and an item whose key holds a `${…}` value is compared under its key as recorded
    /// (the run asked for it under the value, found nothing, and made it again each time).
    @Test func aTableWithARowLeftOutAndAKeyHoldingAValueIsComparedRight() throws {
        let (images, server) = try versionedFeed()
        func table(n2: String) throws {
            let rows =
                ["url,key,v"]
                + [("n1", "n1", "v1"), ("n2", "n2", n2), ("n3", "n3", "v1"), ("n4", "zq9-door", "v1")].map {
                    "\(server.baseURL)/images/\($0.0).jpg,\($0.1),\($0.2)"
                } + [",n9,v1"]
            try work.write(rows.joined(separator: "\n") + "\n", to: "urls.csv")
        }
        try table(n2: "v1")
        try work.folder("bundled")
        try work.write(
            """
            {"version": 1, "source": {"type": "table", "path": "urls.csv", "columns": {"url": "url", "key": "key"},
                                      "keep": ["v"], "versionField": "v", "cache": false,
                                      "fallback": {"type": "directory", "path": "bundled"}},
             "filters": [{"op": "fit", "width": 50, "height": 50}], "output": {"format": "png", "name": "{key}.png"},
             "sink": {"type": "directory", "path": "${OUTDIR}"}}
            """, to: "pipe.json")
        func run(_ arguments: String...) throws -> CommandResult {
            let result = try ImgpipeBinary.run(arguments, in: work.path, environment: ["OUTDIR": "zq9"])
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            return result
        }
        func leftOut(_ result: CommandResult) -> Int { result.stderr.components(separatedBy: "left out").count - 1 }
        func imageRequests() -> Int { server.requests.count { $0.path.hasPrefix("/images/") } }
        let first = try run("run", "pipe.json")
        #expect(leftOut(first) == 1, "\(first.stderr)")
        let files = snapshot("zq9")
        #expect(files.count == 4, "\(files.keys.sorted())")
        let asked = imageRequests()

        let same = try run("run", "pipe.json", "--incremental")
        #expect(same.stderr.contains("up to date: the feed and the pipeline are as run #1 left them"), "\(same.stderr)")
        #expect(leftOut(same) == 1 && imageRequests() == asked, "\(same.stderr)")

        // n2 replaced: made again alone; the item of key `zq9-door` (which holds the value
        // of ${OUTDIR}) keeps its file.
        let replacement = work.url("src/n2-new.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: 22), to: replacement)
        images.withLock { $0["n2"] = (2, try! Data(contentsOf: URL(fileURLWithPath: replacement))) }
        try table(n2: "v2")
        let changed = try run("run", "pipe.json", "--incremental")
        #expect(!changed.stderr.contains("up to date") && leftOut(changed) == 1, "\(changed.stderr)")
        #expect(imageRequests() == asked + 1, "only n2 was fetched")
        let after = snapshot("zq9")
        #expect(after.count == 4, "\(after.keys.sorted())")
        for (name, file) in files {
            if name.hasPrefix("n2") {
                #expect(after[name]?.inode != file.inode, "\(name) made again")
            } else {
                #expect(after[name]?.inode == file.inode, "\(name) kept")
            }
        }
        #expect(try run("run", "pipe.json", "--incremental").stderr.contains("up to date"))

        // A row without the version field (a JSONL table): its bytes decide, so each re-run
        // asks for that image once, in the run. The look before it asks nothing
        // (`fetching: false`) and is not satisfied.
        let lines = [
            #"{"url": "\#(server.baseURL)/images/n1.jpg", "key": "n1", "v": "v1"}"#,
            #"{"url": "\#(server.baseURL)/images/n3.jpg", "key": "n3"}"#,
        ]
        try work.write(lines.joined(separator: "\n") + "\n", to: "urls.jsonl")
        try work.write(
            try String(contentsOfFile: work.url("pipe.json"), encoding: .utf8).replacingOccurrences(
                of: "urls.csv", with: "urls.jsonl"), to: "jsonl.json")
        _ = try run("run", "jsonl.json")
        for _ in 1...2 {
            let before = imageRequests()
            let unversioned = try run("run", "jsonl.json", "--incremental")
            #expect(!unversioned.stderr.contains("up to date"), "\(unversioned.stderr)")
            #expect(imageRequests() - before == 1, "n3 asked for by the run alone")
        }
    }
}
