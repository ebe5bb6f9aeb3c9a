import Crypto
import Foundation
import GRDB
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// The `table` source end to end: tables written by Python's `csv` and `gzip` modules (an
/// independent writer), served images from a loopback server, the built binary, the state
/// file and the shards it writes.
@Suite("Table source", .serialized)
struct TableSourceTests {
    let work: TemporaryDirectory
    let server: TestHTTPServer
    let images: [String: Data]

    init() throws {
        work = try TemporaryDirectory("imgpipe-table")
        var images: [String: Data] = [:]
        for (index, name) in ["a", "b", "c", "d"].enumerated() {
            let path = work.url("src-\(name).jpg")
            try ImageFixtures.jpeg(at: path, width: 40 + index, height: 30)
            images["/\(name).jpg"] = try Data(contentsOf: URL(fileURLWithPath: path))
        }
        self.images = images
        let served = images
        server = try TestHTTPServer { request in
            served[request.path].map { .bytes($0) } ?? .status(404)
        }
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    func sha256(_ path: String) -> String { SHA256.hash(data: images[path]!).hex }

    /// Writes `rows` (the first is the header) with Python's csv module, gzipped when the
    /// name ends in `.gz`, tab-separated for `.tsv`.
    func writeTable(_ name: String, _ rows: [[String]]) throws {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: rows), as: UTF8.self)
        try work.write(json, to: "rows.json")
        try work.write(
            """
            import csv, gzip, io, json, sys
            name = sys.argv[1]
            rows = json.load(open("rows.json"))
            out = io.StringIO()
            csv.writer(out, delimiter="\\t" if ".tsv" in name else ",", lineterminator="\\n").writerows(rows)
            data = out.getvalue().encode()
            open(name, "wb").write(gzip.compress(data) if name.endswith(".gz") else data)
            """, to: "write_table.py")
        let wrote = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["python3", "write_table.py", name], in: work.path)
            .wait()
        try #require(wrote.status == 0, "\(wrote.stderr)")
    }

    func rows(_ sql: String) throws -> [Row] {
        try DatabaseQueue(path: work.url("state.sqlite")).read { try Row.fetchAll($0, sql: sql) }
    }

    /// A gzipped CSV with its own column names: rows become items keyed by `uid`, the caption
    /// (quotes and commas and all) reaches the shard's `.txt`, kept columns the metadata;
    /// rows without a usable URL or key are left out with one notice naming their lines; a
    /// row whose hash is not its bytes' fails as `hash-mismatch`, naming both.
    @Test func aCSVTableFeedsItemsCaptionsAndHashes() throws {
        let base = server.baseURL
        try writeTable(
            "urls.csv.gz",
            [
                ["URL", "uid", "TEXT", "sha256", "license", "unused"],
                ["\(base)/a.jpg", "id-a", "a cat, \"quoted\"", sha256("/a.jpg").uppercased(), "cc-by", "x"],
                ["\(base)/b.jpg", "id-b", "", "", "cc0", "x"],
                ["", "id-empty", "no url", "", "cc0", "x"],
                ["ftp://example.invalid/c.jpg", "id-ftp", "not http", "", "cc0", "x"],
                ["\(base)/c.jpg", "", "no key", "", "cc0", "x"],
                ["\(base)/d.jpg", "id-d", "a wrong hash", sha256("/a.jpg"), "cc-by", "x"],
            ])
        try work.write(
            """
            {"version": 1,
             "source": {"type": "table", "path": "urls.csv.gz",
                        "columns": {"url": "URL", "key": "uid", "caption": "TEXT", "sha256": "sha256"},
                        "keep": ["license"], "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 10}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(
            run.stderr.contains("urls.csv.gz: 2 rows left out, with no http(s) URL in column \"URL\", at lines: [4], [5]"),
            "\(run.stderr)")
        #expect(run.stderr.contains("1 row left out, with no key in column \"uid\", at lines: [6]"), "\(run.stderr)")

        let items = try rows("SELECT key, status, reason, message, metadata FROM item ORDER BY seq")
        #expect(items.map { $0["key"] as String } == ["id-a", "id-b", "id-d"])
        #expect(items.map { $0["status"] as String } == ["done", "done", "failed"])
        let failed = try #require(items.last)
        #expect(failed["reason"] == "hash-mismatch")
        let message: String = failed["message"]
        #expect(message.contains(sha256("/d.jpg")) && message.contains(sha256("/a.jpg")), "\(message)")
        let metadata = try #require(
            try JSONSerialization.jsonObject(with: Data((items[0]["metadata"] as String).utf8)) as? [String: String])
        #expect(metadata == ["TEXT": "a cat, \"quoted\"", "sha256": sha256("/a.jpg").uppercased(), "license": "cc-by"])

        // The shard: a's caption as its .txt, b (an empty caption) without one.
        try work.write(
            """
            import json, sys, tarfile
            with tarfile.open("shards/00000.tar") as tar:
                print(json.dumps({m.name: tar.extractfile(m).read().decode("utf-8", "replace") for m in tar}))
            """, to: "members.py")
        let read = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["python3", "members.py"], in: work.path).wait()
        let members = try #require(try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: String])
        #expect(members["id-a.txt"] == "a cat, \"quoted\"", "\(members.keys.sorted())")
        #expect(members["id-b.txt"] == nil && members["id-b.jpg"] != nil, "\(members.keys.sorted())")
        #expect(members["id-a.json"]?.contains(#""license":"cc-by""#) == true)
    }

    /// `{caption}` in a caption filter draws the row's caption: two rows of one picture,
    /// one with a caption and one with none, come out the same above the bottom band and
    /// different in it (an empty caption line is not drawn).
    @Test func captionTextDrawsTheRowsCaption() throws {
        let base = server.baseURL
        try writeTable(
            "urls.csv", [["url", "id", "text"], ["\(base)/a.jpg", "one", "HELLO THERE"], ["\(base)/a.jpg?again", "two", ""]])
        try work.write(
            """
            {"version": 1,
             "source": {"type": "table", "path": "urls.csv", "columns": {"url": "url", "key": "id", "caption": "text"},
                        "cache": false},
             "filters": [{"op": "resize", "width": 200, "height": 150}, {"op": "caption", "bottom": "{caption}"}],
             "output": {"format": "png", "name": "{key}.png"},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let one = try ImageFixtures.decode(work.url("out/one.png"))
        let two = try ImageFixtures.decode(work.url("out/two.png"))
        try #require(one.width == 200 && one.height == 150 && two.width == 200 && two.height == 150)
        let band = (150 * 70 / 100) * 200 * one.bands
        #expect(one.samples[..<band] == two.samples[..<band], "above the caption's band, the pictures are the same")
        let differing = zip(one.samples[band...], two.samples[band...]).filter { abs(Int($0) - Int($1)) > 32 }.count
        #expect(differing > (one.samples.count - band) / 100, "the caption is drawn in the band: \(differing) samples differ")
    }

    /// A TSV without a key column: keys are row numbers; a JSONL table reads its objects.
    @Test func tsvAndJSONLTablesAreRead() throws {
        let base = server.baseURL
        try writeTable("urls.tsv", [["url", "title"], ["\(base)/a.jpg", "first"], ["\(base)/b.jpg", "second"]])
        try work.write(
            """
            {"u": "\(base)/c.jpg", "k": 7, "t": "seven"}
            not json
            {"u": "\(base)/d.jpg", "k": "eight", "t": "eight"}

            """, to: "urls.jsonl")
        for (table, columns, keys) in [
            ("urls.tsv", #"{"url": "url", "caption": "title"}"#, ["1", "2"]),
            ("urls.jsonl", #"{"url": "u", "key": "k", "caption": "t"}"#, ["7", "eight"]),
        ] {
            try? FileManager.default.removeItem(atPath: work.url("state.sqlite"))
            try work.write(
                """
                {"version": 1, "source": {"type": "table", "path": "\(table)", "columns": \(columns), "cache": false},
                 "filters": [{"op": "fit", "width": 16, "height": 16}], "sink": {"type": "directory", "path": "out"}}
                """, to: "pipe.json")
            let run = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
            #expect(run.status == 0, "\(table): \(run.stderr)")
            #expect(try rows("SELECT key FROM item ORDER BY seq").map { $0["key"] as String } == keys, "\(table)")
            if table == "urls.jsonl" {
                #expect(run.stderr.contains("1 row left out, that cannot be read, at lines: [2]"), "\(run.stderr)")
            }
        }
    }

    /// What a table cannot be is said at once: a Parquet file (not read yet), a header
    /// without a named column.
    @Test func aTableThatCannotBeReadSaysWhy() throws {
        try work.write("x", to: "urls.parquet")
        try work.write(
            #"{"version": 1, "source": {"type": "table", "path": "urls.parquet", "columns": {"url": "URL"}}, "sink": {"type": "directory", "path": "out"}}"#,
            to: "parquet.json")
        let parquet = try imgpipe("validate", "parquet.json")
        #expect(parquet.status == 2 && parquet.stderr.contains("Parquet tables are not read yet"), "\(parquet.stderr)")

        try writeTable("urls.csv", [["link", "id"], ["\(server.baseURL)/a.jpg", "1"]])
        try work.write(
            #"{"version": 1, "source": {"type": "table", "path": "urls.csv", "columns": {"url": "URL"}}, "sink": {"type": "directory", "path": "out"}}"#,
            to: "header.json")
        let header = try imgpipe("run", "header.json", "--state", "state.sqlite")
        #expect(header.status != 0)
        #expect(header.stderr.contains(#"the header has no column "URL" (it has: "link", "id")"#), "\(header.stderr)")
    }
}
