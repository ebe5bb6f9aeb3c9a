import Foundation
import ImagePipelineTesting
import Testing

@testable import ParquetKit

/// ParquetKit against pyarrow, in both directions: files pyarrow writes (each codec, page
/// version, dictionary or not, nulls, every flat type) read back value for value; files
/// ParquetKit writes read by pyarrow; hostile files refused with the byte named.
@Suite("Parquet", .serialized)
struct ParquetTests {
    let work: TemporaryDirectory

    init() throws {
        work = try TemporaryDirectory("imgpipe-parquet")
    }

    func python(_ script: String, _ arguments: String...) throws -> String {
        try work.write(script, to: "script.py")
        let ran = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["python3", "script.py"] + arguments, in: work.path).wait()
        try #require(
            ran.status == 0, "python3 failed (pyarrow missing? `make test-deps` installs it): \(ran.stderr)")
        return ran.stdout
    }

    /// Every row of every row group, each value as text (nil for null).
    func readAll(_ path: String) throws -> (columns: [ParquetColumn], rows: [[String?]]) {
        let reader = try ParquetReader(path: path)
        var rows: [[String?]] = []
        for group in 0..<reader.rowGroupCount {
            var cursor = try reader.rows(inGroup: group, columns: Array(reader.columns.indices))
            while let row = try cursor.next() { rows.append(row.map { $0.map(Self.text) }) }
        }
        return (reader.columns, rows)
    }

    static func text(_ value: ParquetValue) -> String {
        switch value {
        case .bool(let bit): bit ? "true" : "false"
        case .int(let number): String(number)
        case .double(let number): String(number)
        case .bytes(let bytes): String(decoding: bytes, as: UTF8.self)
        }
    }

    /// The table pyarrow writes in every variant: 3,000 rows (several pages and, at 1,000
    /// rows a group, three row groups), text with repeats (dictionary pages) and nulls,
    /// integers of both widths, floats, doubles, booleans, fixed-length bytes.
    static let writer = """
        import sys, pyarrow as pa, pyarrow.parquet as pq
        n = 3000
        table = pa.table({
            "url": pa.array([f"https://example.org/{i % 700}.jpg" for i in range(n)]),
            "caption": pa.array([None if i % 7 == 3 else f"caption {i} é" for i in range(n)]),
            "i32": pa.array([(i * 37) - 50000 for i in range(n)], pa.int32()),
            "i64": pa.array([None if i % 11 == 0 else i * 10**12 for i in range(n)], pa.int64()),
            "f32": pa.array([i / 4 for i in range(n)], pa.float32()),
            "f64": pa.array([i / 3 for i in range(n)], pa.float64()),
            "flag": pa.array([None if i % 13 == 0 else i % 3 == 0 for i in range(n)]),
            "fixed": pa.array([bytes([65 + i % 26]) * 4 for i in range(n)], pa.binary(4)),
        })
        codec, version, dictionary = sys.argv[2], sys.argv[3], sys.argv[4] == "dict"
        pq.write_table(table, sys.argv[1], compression=codec, data_page_version=version,
                       use_dictionary=dictionary, row_group_size=1000, data_page_size=4096)
        """

    static func expectedRow(_ i: Int) -> [String?] {
        [
            "https://example.org/\(i % 700).jpg", i % 7 == 3 ? nil : "caption \(i) é", String(i * 37 - 50000),
            i % 11 == 0 ? nil : String(Int64(i) * 1_000_000_000_000), String(Double(Float(Double(i) / 4))),
            String(Double(i) / 3), i % 13 == 0 ? nil : (i % 3 == 0 ? "true" : "false"),
            String(repeating: String(UnicodeScalar(UInt8(65 + i % 26))), count: 4),
        ]
    }

    @Test(arguments: ["none", "snappy", "gzip", "zstd"])
    func readsWhatPyarrowWrites(codec: String) throws {
        for version in ["1.0", "2.0"] {
            for dictionary in ["dict", "plain"] {
                let path = work.url("\(codec)-\(version)-\(dictionary).parquet")
                _ = try python(Self.writer, path, codec, version, dictionary)
                let (columns, rows) = try readAll(path)
                #expect(columns.map(\.name) == ["url", "caption", "i32", "i64", "f32", "f64", "flag", "fixed"])
                #expect(columns[0].isText && columns[1].isText && !columns[7].isText)
                #expect(columns[2].type == .int32 && columns[7].type == .fixedLenByteArray && columns[7].length == 4)
                #expect(rows.count == 3000, "\(path)")
                let wrong = rows.indices.first { rows[$0] != Self.expectedRow($0) }
                #expect(
                    wrong == nil, "\(path): row \(wrong ?? 0): \(wrong.map { rows[$0] } ?? []) != \(Self.expectedRow(wrong ?? 0))"
                )
            }
        }
    }

    /// A column of a nested type (a list) may be in the file; the flat ones beside it are
    /// read, and asking for it says it is nested.
    @Test func leavesNestedColumnsAlone() throws {
        let path = work.url("nested.parquet")
        _ = try python(
            """
            import sys, pyarrow as pa, pyarrow.parquet as pq
            pq.write_table(pa.table({"tags": pa.array([["a", "b"], [], None]), "url": ["u1", "u2", "u3"]}), sys.argv[1])
            """, path)
        let reader = try ParquetReader(path: path)
        #expect(reader.columns.map(\.name) == ["tags.list.element", "url"])
        #expect(reader.columns[0].isNested && !reader.columns[1].isNested)
        var urls = try reader.rows(inGroup: 0, columns: [1])
        var read: [String] = []
        while let row = try urls.next() { read.append(row[0].map(Self.text) ?? "-") }
        #expect(read == ["u1", "u2", "u3"])
        #expect(throws: ParquetError.self) { _ = try reader.rows(inGroup: 0, columns: [0]) }
    }

    /// What ParquetKit writes, pyarrow and DuckDB read: types, nulls, text, several row groups and
    /// pages, both codecs.
    @Test(arguments: [ParquetCodec.snappy, .uncompressed])
    func pyarrowReadsWhatItWrites(codec: ParquetCodec) throws {
        let path = work.url("written-\(codec.rawValue).parquet")
        let writer = try ParquetWriter(
            path: path,
            columns: [
                .text("key", optional: false), .text("caption"), ParquetColumn(name: "width", type: .int64),
                ParquetColumn(name: "ratio", type: .double, optional: false), ParquetColumn(name: "ok", type: .boolean),
                ParquetColumn(name: "small", type: .int32, optional: false),
            ], codec: codec, rowGroupRows: 10_000)
        let count = 25_000
        for i in 0..<count {
            try writer.append([
                .text("k\(i)"), i % 5 == 0 ? nil : .text("ü \(i), \"q\""), i % 4 == 1 ? nil : .int(Int64(i) * 3),
                .double(Double(i) / 8),
                i % 6 == 0 ? nil : .bool(i % 2 == 0), .int(Int64(-i)),
            ])
        }
        try writer.finish()
        let out = try python(
            """
            import sys, json, duckdb, pyarrow.parquet as pq
            f = pq.ParquetFile(sys.argv[1])
            t = f.read()
            count, widths, nulls = duckdb.connect().execute(
                f"select count(*), sum(width), count(*) - count(caption) from read_parquet('{sys.argv[1]}')").fetchone()
            print(json.dumps({"groups": f.num_row_groups, "schema": [str(t.schema.field(i).type) for i in range(t.num_columns)],
                              "names": t.column_names, "rows": t.to_pylist(), "duckdb": [count, int(widths), nulls]}))
            """, path)
        let decoded = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        #expect(decoded["groups"] as? Int == 3)
        #expect(decoded["names"] as? [String] == ["key", "caption", "width", "ratio", "ok", "small"])
        #expect(decoded["schema"] as? [String] == ["string", "string", "int64", "double", "bool", "int32"])
        let rows = try #require(decoded["rows"] as? [[String: Any]])
        #expect(rows.count == count)
        let widths = (0..<count).filter { $0 % 4 != 1 }.reduce(0) { $0 + $1 * 3 }
        #expect(decoded["duckdb"] as? [Int] == [count, widths, count / 5], "DuckDB read otherwise")
        for i in [0, 1, 4, 5, 6, 9_999, 10_000, 24_999] {
            let row = rows[i]
            #expect(row["key"] as? String == "k\(i)")
            #expect((row["caption"] as? String) == (i % 5 == 0 ? nil : "ü \(i), \"q\""))
            #expect((row["width"] as? Int) == (i % 4 == 1 ? nil : i * 3))
            #expect(row["ratio"] as? Double == Double(i) / 8)
            #expect((row["ok"] as? Bool) == (i % 6 == 0 ? nil : i % 2 == 0))
            #expect(row["small"] as? Int == -i)
        }
        // And ParquetKit reads it back.
        let (_, read) = try readAll(path)
        #expect(read.count == count && read[24_999] == ["k24999", "ü 24999, \"q\"", "74997", "3124.875", "false", "-24999"])
    }

    /// Hostile files: each is refused with an error naming the byte, never a crash or a
    /// huge allocation.
    @Test func refusesHostileFiles() throws {
        let good = work.url("good.parquet")
        _ = try python(
            """
            import sys, pyarrow as pa, pyarrow.parquet as pq
            pq.write_table(pa.table({"url": [f"https://e.org/{i}" for i in range(50)]}), sys.argv[1],
                           compression="none", use_dictionary=True)
            """, good)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: good)))
        func refused(_ name: String, _ mutate: (inout [UInt8]) -> Void) throws -> String {
            var copy = bytes
            mutate(&copy)
            let path = work.url(name)
            try Data(copy).write(to: URL(fileURLWithPath: path))
            do {
                _ = try readAll(path)
                Issue.record("\(name) was read")
                return ""
            } catch let error as ParquetError {
                return error.description
            }
        }
        // A footer longer than the file.
        let long = try refused("long-footer.parquet") { $0[$0.count - 6] = 0x7F }
        #expect(long.contains("at byte \(bytes.count - 8)") && long.contains("footer length"), "\(long)")
        // No magic at the end: truncated.
        let cut = try refused("truncated.parquet") { $0.removeLast(3) }
        #expect(cut.contains("at byte") && cut.contains("PAR1"), "\(cut)")
        // The dictionary page's header, re-encoded with one field changed (the same length).
        let start = try ParquetReader(path: good).rowGroups[0].chunks[0].start
        var header = ThriftReader(bytes, at: start)
        let page = try header.readStruct()
        let end = header.position
        try #require(Self.encode(page) == Array(bytes[start..<end]), "the page header does not re-encode as it was")
        func changed(_ field: Int16, inside: Int16? = nil, to value: Int64) -> [UInt8] {
            var edited = page
            if let inside, case .structure(var inner)? = edited.fields[inside] {
                inner.fields[field] = .int(value)
                edited.fields[inside] = .structure(inner)
            } else {
                edited.fields[field] = .int(value)
            }
            let encoded = Self.encode(edited)
            #expect(encoded.count == end - start, "the edited header changed length")
            return encoded
        }
        // A page whose compressed size runs past its column chunk (and the file's data).
        let pageSize = try refused("page-size.parquet") { $0.replaceSubrange(start..<end, with: changed(3, to: 8000)) }
        #expect(pageSize.contains("at byte \(start)") && pageSize.contains("past the end of its column chunk"), "\(pageSize)")
        // A dictionary of one value where the indices reach 49.
        let index = try refused("index.parquet") { $0.replaceSubrange(start..<end, with: changed(1, inside: 7, to: 1)) }
        #expect(index.contains("at byte") && index.contains("dictionary index") && index.contains("dictionary of 1"), "\(index)")
        // Garbage: not Parquet at all.
        let garbage = try refused("garbage.parquet") { $0 = Array("url\nhttps://e.org/a\nhttps://e.org/b\n".utf8) }
        #expect(garbage.contains("at byte 0") && garbage.contains("PAR1"), "\(garbage)")
    }

    /// A page header's fields (integers, booleans, structs of them) in the compact protocol.
    static func encode(_ value: ThriftStruct) -> [UInt8] {
        func fields(_ value: ThriftStruct, _ writer: inout ThriftWriter) {
            for id in value.fields.keys.sorted() {
                switch value.fields[id]! {
                case .int(let number): writer.int(id, number, .i32)
                case .bool(let bit): writer.bool(id, bit)
                case .structure(let inner): writer.structure(id) { fields(inner, &$0) }
                default: Issue.record("field \(id) is not an integer, a boolean or a struct")
                }
            }
        }
        var writer = ThriftWriter()
        writer.beginStruct()
        fields(value, &writer)
        writer.endStruct()
        return writer.bytes
    }

    /// Random damage anywhere in a real file: an error or a read, never a crash.
    @Test func survivesDamageAnywhere() throws {
        let good = work.url("fuzz.parquet")
        _ = try python(Self.writer, good, "snappy", "2.0", "dict")
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: good)))
        var generator = SystemRandomNumberGenerator()
        var errors = 0
        for round in 0..<300 {
            var copy = bytes
            for _ in 0..<(1 + round % 4) {
                let at = Int.random(in: 0..<copy.count, using: &generator)
                copy[at] = UInt8.random(in: 0...255, using: &generator)
            }
            let path = work.url("fuzz-\(round % 2).parquet")
            try Data(copy).write(to: URL(fileURLWithPath: path))
            do { _ = try readAll(path) } catch is ParquetError { errors += 1 }
        }
        #expect(errors > 0)
    }
}
