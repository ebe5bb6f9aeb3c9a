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

    /// What a table cannot be is said at once: a file of another kind, a header without a
    /// named column.
    @Test func aTableThatCannotBeReadSaysWhy() throws {
        try work.write("x", to: "urls.xlsx")
        try work.write(
            #"{"version": 1, "source": {"type": "table", "path": "urls.xlsx", "columns": {"url": "URL"}}, "sink": {"type": "directory", "path": "out"}}"#,
            to: "xlsx.json")
        let xlsx = try imgpipe("validate", "xlsx.json")
        #expect(
            xlsx.status == 2 && xlsx.stderr.contains("a table is a .csv, .tsv, .jsonl or .parquet file (optionally .gz)"),
            "\(xlsx.stderr)")

        try writeTable("urls.csv", [["link", "id"], ["\(server.baseURL)/a.jpg", "1"]])
        try work.write(
            #"{"version": 1, "source": {"type": "table", "path": "urls.csv", "columns": {"url": "URL"}}, "sink": {"type": "directory", "path": "out"}}"#,
            to: "header.json")
        let header = try imgpipe("run", "header.json", "--state", "state.sqlite")
        #expect(header.status != 0)
        #expect(header.stderr.contains(#"the header has no column "URL" (it has: "link", "id")"#), "\(header.stderr)")
    }

    // MARK: - Parquet

    /// Writes a Parquet table with pyarrow: `columns` is Python source for the table's
    /// dictionary of arrays; gzipped when the name ends in `.gz`.
    func writeParquet(_ name: String, _ columns: String, rowGroupSize: Int = 1000) throws {
        try work.write(
            """
            import gzip, io, sys, pyarrow as pa, pyarrow.parquet as pq
            table = pa.table(\(columns))
            out = io.BytesIO()
            pq.write_table(table, out, row_group_size=\(rowGroupSize))
            data = out.getvalue()
            open(sys.argv[1], "wb").write(gzip.compress(data) if sys.argv[1].endswith(".gz") else data)
            """, to: "write_parquet.py")
        let wrote = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["python3", "write_parquet.py", name], in: work.path)
            .wait()
        try #require(wrote.status == 0, "pyarrow could not write the table (make test-deps installs it): \(wrote.stderr)")
    }

    /// A pyarrow table, plain and gzipped: integer keys, a null caption, a SHA-256 stored as
    /// 32 binary bytes (read as its hex digest and checked), kept columns of two types; a
    /// null URL is left out naming its row; the shard's members carry caption and metadata.
    @Test(arguments: ["urls.parquet", "urls.parquet.gz"])
    func aParquetTableFeedsItemsCaptionsAndHashes(table: String) throws {
        let base = server.baseURL
        let hex = { (path: String) in "bytes.fromhex('\(self.sha256(path))')" }
        try writeParquet(
            table,
            """
            {"URL": ["\(base)/a.jpg", "\(base)/b.jpg", None, "\(base)/d.jpg"],
             "uid": pa.array([1001, 1002, 1003, 1004], pa.int64()),
             "TEXT": ["a cat, \\"quoted\\"", None, "no url", "wrong hash"],
             "sha256": pa.array([\(hex("/a.jpg")), None, None, \(hex("/a.jpg"))], pa.binary(32)),
             "license": ["cc-by", "cc0", "cc0", "cc-by"], "WIDTH": pa.array([40, 41, 42, 43], pa.int32())}
            """)
        try work.write(
            """
            {"version": 1,
             "source": {"type": "table", "path": "\(table)",
                        "columns": {"url": "URL", "key": "uid", "caption": "TEXT", "sha256": "sha256"},
                        "keep": ["license", "WIDTH"], "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 10}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(
            run.stderr.contains("\(table): 1 row left out, with no http(s) URL in column \"URL\", at rows: [3]"), "\(run.stderr)")
        let items = try rows("SELECT key, status, reason, message, metadata FROM item ORDER BY seq")
        #expect(items.map { $0["key"] as String } == ["1001", "1002", "1004"])
        #expect(items.map { $0["status"] as String } == ["done", "done", "failed"])
        #expect(items.last?["reason"] == "hash-mismatch")
        let message: String = items.last?["message"] ?? ""
        #expect(message.contains(sha256("/d.jpg")) && message.contains(sha256("/a.jpg")), "\(message)")
        let metadata = try #require(
            try JSONSerialization.jsonObject(with: Data((items[0]["metadata"] as String).utf8)) as? [String: Any])
        #expect(metadata["TEXT"] as? String == "a cat, \"quoted\"" && metadata["sha256"] as? String == sha256("/a.jpg"))
        #expect(metadata["license"] as? String == "cc-by" && metadata["WIDTH"] as? Int == 40, "\(metadata)")
        let second = try #require(
            try JSONSerialization.jsonObject(with: Data((items[1]["metadata"] as String).utf8)) as? [String: Any])
        #expect(second["TEXT"] is NSNull && second["WIDTH"] as? Int == 41, "\(second)")
        try FileManager.default.removeItem(atPath: work.url("shards"))
        try FileManager.default.removeItem(atPath: work.url("state.sqlite"))
    }

    /// A damaged Parquet table stops the listing with the file and the byte named.
    @Test func aDamagedParquetTableNamesFileAndByte() throws {
        try writeParquet("good.parquet", #"{"url": ["\#(server.baseURL)/a.jpg"]}"#)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: work.url("good.parquet")))
        bytes[bytes.count - 6] = 0x7F  // a footer length past the file's size
        try bytes.write(to: URL(fileURLWithPath: work.url("bad.parquet")))
        try work.write(
            #"{"version": 1, "source": {"type": "table", "path": "bad.parquet", "columns": {"url": "url"}}, "sink": {"type": "directory", "path": "out"}}"#,
            to: "bad.json")
        let run = try imgpipe("run", "bad.json", "--state", "state.sqlite")
        #expect(run.status != 0)
        #expect(
            run.stderr.contains("bad.parquet: at byte \(bytes.count - 8): a footer length of"), "\(run.stdout)\(run.stderr)")
        try work.write(
            #"{"version": 1, "source": {"type": "table", "path": "good.parquet", "columns": {"url": "link"}}, "sink": {"type": "directory", "path": "out"}}"#,
            to: "column.json")
        let column = try imgpipe("run", "column.json", "--state", "column.sqlite")
        #expect(
            column.status != 0 && column.stderr.contains(#"the table has no column "link" (it has: "url")"#), "\(column.stderr)")
    }

    /// A resumed listing starts after its cursor's key: in a Parquet table at the key's row
    /// (found from the URL and key columns), in a text table after the key's line; a key the
    /// table no longer has, or rows before it that came or went (not as many items up to it
    /// as the run listed), list from the start.
    @Test func aResumedListingStartsAfterItsCursor() throws {
        try writeParquet(
            "many.parquet", #"{"u": [f"https://e.org/{i}.jpg" for i in range(1, 2501)], "k": [f"k{i}" for i in range(1, 2501)]}"#)
        try writeParquet(
            "many.parquet.gz",
            #"{"u": [f"https://e.org/{i}.jpg" for i in range(1, 2501)], "k": [f"k{i}" for i in range(1, 2501)]}"#)
        try writeTable("few.csv", [["u", "k"]] + (1...5).map { ["https://e.org/\($0).jpg", "k\($0)"] })
        func keys(_ table: String, key: Bool, after cursor: String?, listed count: Int? = nil) throws -> [String] {
            let feed = TableFeed(
                path: work.url(table), format: try #require(TableFeed.Format(fileName: table)),
                columns: TableColumns(url: "u", key: key ? "k" : nil), keep: [], notice: { _ in })
            var listed: [String] = []
            let position = cursor.flatMap { Int($0.drop { !$0.isNumber }) }
            try feed.list(after: cursor.map { FeedCursor(key: $0, listed: count ?? position ?? 0) }, expecting: nil) {
                listed.append($0.key)
                return true
            }
            return listed
        }
        let keyed = try keys("many.parquet", key: true, after: "k1500")
        #expect(keyed.count == 1000 && keyed.first == "k1501" && keyed.last == "k2500")
        let unpacked = try keys("many.parquet.gz", key: true, after: "k1500")
        #expect(unpacked.count == 1000 && unpacked.first == "k1501", "a gzipped table, unpacked once")
        let numbered = try keys("many.parquet", key: false, after: "2000")
        #expect(numbered.count == 500 && numbered.first == "2001")
        #expect(try keys("many.parquet", key: true, after: "gone").count == 2500)
        #expect(try keys("many.parquet", key: true, after: nil).first == "k1")
        #expect(try keys("few.csv", key: true, after: "k3") == ["k4", "k5"])
        #expect(try keys("few.csv", key: false, after: "4") == ["5"])
        #expect(try keys("few.csv", key: true, after: "gone") == ["k1", "k2", "k3", "k4", "k5"])
        // Rows before the cursor came (the run listed 2 where the table now has 3 up to it).
        #expect(try keys("many.parquet", key: true, after: "k1500", listed: 1499).count == 2500)
        #expect(try keys("few.csv", key: true, after: "k3", listed: 2) == ["k1", "k2", "k3", "k4", "k5"])
        #expect(try keys("few.csv", key: false, after: "4", listed: 5).count == 5)
    }
}
