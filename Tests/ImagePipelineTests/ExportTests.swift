import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// `imgpipe export`: one record per item, checked against the files and uploads the run
/// actually made.
@Suite("Export", .serialized)
struct ExportTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-export") }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    func sha256(of path: String) throws -> String {
        sha256Hex(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// Every record agrees with the disk and the upload server: output name, size, hash and
    /// dimensions of the file written, the upload's URL, and the failure of a bad item.
    @Test func recordsMatchTheFilesAndUploadsTheRunMade() throws {
        let server = try UploadServer()
        for index in 1...3 {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 300 + index * 10, height: 200), to: work.url("in/p\(index).jpg"))
        }
        try work.write("not an image", to: "in/broken.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 20, height: 20), to: work.url("in/tiny.jpg"))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "accept": {"minWidth": 50},
             "filters": [{"op": "fit", "width": 100, "height": 100}], "output": {"format": "webp"},
             "sinks": [{"type": "directory", "name": "disk", "path": "out"},
                       {"type": "upload", "name": "web", "endpoint": "\(server.baseURL)/upload"}]}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 1)

        let exported = try imgpipe("export", "pipe.json")
        #expect(exported.status == 0, "stderr: \(exported.stderr)")
        let records = try exported.jsonLines()
        #expect(records.map { $0["key"] as? String } == ["broken.jpg", "p1.jpg", "p2.jpg", "p3.jpg", "tiny.jpg"])
        let broken = try #require(records.first)
        #expect(broken["status"] as? String == "failed" && broken["reason"] as? String == "decode")
        #expect((broken["outputs"] as? [String: Any])?.isEmpty == true)
        // A skipped item has no output, and no sink was asked for it: no delivery either.
        let tiny = try #require(records.last)
        #expect(tiny["status"] as? String == "skipped" && tiny["reason"] as? String == "too-small")
        #expect((tiny["outputs"] as? [String: Any])?.isEmpty == true)
        #expect((tiny["deliveries"] as? [String: Any])?.isEmpty == true, "\(tiny)")
        #expect(server.uploads.count == 3)
        let uploaded = Dictionary(uniqueKeysWithValues: server.uploads.map { ($0.filename ?? "", $0) })
        for record in records.dropFirst().dropLast() {
            #expect(record["status"] as? String == "done" && record["tier"] as? String == "local")
            let output = try #require((record["outputs"] as? [String: Any])?["default"] as? [String: Any])
            let name = try #require(output["name"] as? String)
            let file = work.url("out/" + name)
            let decoded = try ImageFixtures.decode(file)
            #expect(output["format"] as? String == "webp")
            #expect(output["width"] as? Int == decoded.width && output["height"] as? Int == decoded.height)
            #expect(output["bytes"] as? Int == (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int))
            #expect(output["sha256"] as? String == (try sha256(of: file)))
            let deliveries = try #require(record["deliveries"] as? [String: [String: [String: Any]]])
            #expect(deliveries["disk"]?["default"]?["remoteURL"] as? String == file)
            let web = try #require(deliveries["web"]?["default"])
            #expect(web["status"] as? String == "done" && web["httpStatus"] as? Int == 201)
            #expect((web["remoteURL"] as? String)?.hasPrefix(server.baseURL + "/files/") == true)
            #expect(uploaded[name]?.data == (try Data(contentsOf: URL(fileURLWithPath: file))), "the upload is the file")
        }

        let failed = try imgpipe("export", "pipe.json", "--only", "failed").jsonLines()
        #expect(failed.count == 1 && failed.first?["key"] as? String == "broken.jpg")
        #expect(try imgpipe("export", "pipe.json", "--only", "done").jsonLines().count == 3)
        #expect(try imgpipe("export", "pipe.json", "--only", "pending").status == 2)
        #expect(try imgpipe("export", "pipe.json", "--run", "7").stderr.contains("has no run #7"))

        // Parquet: the same records in CSV's columns, typed, read by pyarrow and DuckDB.
        let toTerminal = try imgpipe("export", "pipe.json", "--format", "parquet")
        #expect(toTerminal.status == 2 && toTerminal.stderr.contains("give it with -o FILE"), "\(toTerminal.stderr)")
        let parquet = try imgpipe("export", "pipe.json", "--format", "parquet", "-o", "items.parquet")
        #expect(parquet.status == 0, "\(parquet.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.url("items.parquet.partial")))
        try work.write(
            """
            import json, sys, duckdb, pyarrow.parquet as pq
            t = pq.read_table(sys.argv[1])
            done = duckdb.connect().execute(
                f"select count(*) from read_parquet('{sys.argv[1]}') where status = 'done' and \\"output.width\\" <= 100").fetchone()[0]
            print(json.dumps({"types": {f.name: str(f.type) for f in t.schema}, "rows": t.to_pylist(), "done": done}))
            """, to: "read_parquet.py")
        let read = try ImgpipeBinary.launch(
            executable: "/usr/bin/env", ["python3", "read_parquet.py", "items.parquet"], in: work.path
        )
        .wait()
        let table = try #require(
            try? JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: Any], "stderr: \(read.stderr)")
        let types = try #require(table["types"] as? [String: String])
        #expect(types["key"] == "string" && types["attempts"] == "int64" && types["output.width"] == "int64")
        #expect(types["delivery.web.httpStatus"] == "int64" && types["delivery.disk.remoteURL"] == "string", "\(types)")
        #expect(table["done"] as? Int == 3)
        let parquetRows = try #require(table["rows"] as? [[String: Any]])
        #expect(parquetRows.count == records.count)
        for (record, row) in zip(records, parquetRows) {
            #expect(row["key"] as? String == record["key"] as? String && row["status"] as? String == record["status"] as? String)
            #expect(
                row["reason"] as? String == record["reason"] as? String && row["attempts"] as? Int == record["attempts"] as? Int)
            let output = (record["outputs"] as? [String: [String: Any]])?["default"]
            #expect(
                row["output.width"] as? Int == output?["width"] as? Int && row["output.bytes"] as? Int == output?["bytes"] as? Int
            )
            #expect(row["output.sha256"] as? String == output?["sha256"] as? String)
            let web = (record["deliveries"] as? [String: [String: [String: Any]]])?["web"]?["default"]
            #expect(row["delivery.web.httpStatus"] as? Int == web?["httpStatus"] as? Int)
            #expect(row["delivery.web.remoteURL"] as? String == web?["remoteURL"] as? String)
            if output == nil { #expect(row["output.width"] is NSNull && row["output.name"] is NSNull, "\(row)") }
        }
    }

    /// CSV: a header naming each sink's columns, cells quoted where they must be, the feed's
    /// metadata kept; `-o` leaves the whole file and no partial one.
    @Test func csvCarriesMetadataAndQuotesWhatItMust() throws {
        let jpeg = try Data(
            contentsOf: URL(
                fileURLWithPath: try {
                    let path = work.url("fixture.jpg")
                    try ImageFixtures.jpeg(at: path, width: 64, height: 48)
                    return path
                }()))
        let server = try TestHTTPServer { request in
            if request.path == "/feed.json" {
                let base = "http://\(request.headers["host"]!)"
                return .json(#"[{"url": "\#(base)/images/a.jpg", "title": "Moon, \"full\"", "created": "Mar 14, 2018"}]"#)
            }
            return request.path.hasPrefix("/images/") ? .bytes(jpeg) : .status(404)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", "cache": false},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let json = try imgpipe("export", "pipe.json").jsonLines()
        let metadata = try #require(json.first?["metadata"] as? [String: Any])
        #expect(metadata["title"] as? String == "Moon, \"full\"" && metadata["created"] as? String == "Mar 14, 2018")

        #expect(try imgpipe("export", "pipe.json", "--format", "csv", "-o", "items.csv").status == 0)
        #expect(!FileManager.default.fileExists(atPath: work.url("items.csv.partial")))
        let script = """
            import csv, json, sys
            rows = list(csv.DictReader(open(sys.argv[1], newline="")))
            print(json.dumps({"count": len(rows), "columns": list(rows[0].keys()), "row": rows[0]}))
            """
        try work.write(script, to: "read.py")
        let read = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["python3", "read.py", "items.csv"], in: work.path).wait()
        let csv = (try? String(contentsOfFile: work.url("items.csv"), encoding: .utf8)) ?? ""
        let parsed = try #require(
            try? JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: Any],
            "csv: \(csv)\nstderr: \(read.stderr)")
        #expect(parsed["count"] as? Int == 1)
        let columns = try #require(parsed["columns"] as? [String])
        #expect(columns.prefix(3) == ["key", "location", "status"] && columns.contains("delivery.directory-0.remoteURL"))
        let row = try #require(parsed["row"] as? [String: String])
        #expect(row["status"] == "done" && row["output.format"] == "jpeg" && row["output.width"] == "64")
        let csvMetadata = try JSONSerialization.jsonObject(with: Data((row["metadata"] ?? "").utf8)) as? [String: Any]
        #expect(csvMetadata?["title"] as? String == "Moon, \"full\"", "the metadata cell survived CSV quoting")
    }

    /// 100,000 items are streamed: the child's peak memory stays that of a small export.
    @Test func aLargeRunIsStreamedInFlatMemory() throws {
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 32, height: 32)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        #expect(try imgpipe("run", "pipe.json").status == 0)
        let small = try ImgpipeBinary.runMeasured(["export", "pipe.json", "-o", "small.jsonl"], in: work.path)
        let queue = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite"))
        try queue.write { db in
            let insert = try db.makeStatement(
                sql: """
                    INSERT INTO item (runId, seq, key, location, status, attempts, reason, message, updatedAt)
                    VALUES (1, ?, ?, ?, 'failed', 1, 'decode', 'cannot decode jpeg: a long enough message to weigh something', 0)
                    """)
            for seq in 2...100_001 { try insert.execute(arguments: [seq, "synthetic/\(seq).jpg", "/nowhere/\(seq).jpg"]) }
        }
        let large = try ImgpipeBinary.runMeasured(["export", "pipe.json", "-o", "large.jsonl"], in: work.path)
        #expect(large.result.status == 0, "stderr: \(large.result.stderr)")
        let written = try String(contentsOfFile: work.url("large.jsonl"), encoding: .utf8)
        #expect(written.split(separator: "\n").count == 100_001)
        #expect(
            small.peakRSSMegabytes > 1 && large.peakRSSMegabytes < small.peakRSSMegabytes + 40,
            "peak RSS \(large.peakRSSMegabytes) MB for 100,001 items against \(small.peakRSSMegabytes) MB for one")
    }
}
