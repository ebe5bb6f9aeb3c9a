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
        case .uint(let number): String(number)
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
            if let inside, case .structure(var inner)? = edited[inside] {
                inner[field] = .int(value)
                edited[inside] = .structure(inner)
            } else {
                edited[field] = .int(value)
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
            for id in value.fieldList.map(\.id).sorted() {
                switch value[id]! {
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

    // MARK: - files made by hand: what a reviewer's attacks found

    /// A whole file: `PAR1`, `body`, then the footer `footer` writes, its length and `PAR1`.
    static func file(body: [UInt8] = [], footer: (inout ThriftWriter) -> Void) -> [UInt8] {
        var writer = ThriftWriter()
        writer.beginStruct()
        footer(&writer)
        writer.endStruct()
        let length = UInt32(writer.bytes.count)
        return Array("PAR1".utf8) + body + writer.bytes
            + [UInt8(length & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length >> 16 & 0xFF), UInt8(length >> 24)]
            + Array("PAR1".utf8)
    }

    /// A schema: the root with `rootChildren`, then each element's fields written by its closure.
    static func schema(rootChildren: Int, _ elements: [(inout ThriftWriter) -> Void]) -> (inout ThriftWriter) -> Void {
        { writer in
            writer.i32(1, 1)
            writer.list(2, .structure, count: elements.count + 1) { list in
                list.beginStruct()
                list.string(4, "schema")
                list.i32(5, rootChildren)
                list.endStruct()
                for element in elements {
                    list.beginStruct()
                    element(&list)
                    list.endStruct()
                }
            }
            writer.int(3, 0)
            writer.list(4, .structure, count: 0) { _ in }
        }
    }

    func readError(_ bytes: [UInt8], _ name: String) throws -> String {
        let path = work.url(name)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        do {
            _ = try readAll(path)
            return "read"
        } catch let error as ParquetError {
            return error.description
        }
    }

    /// Nesting that recursion would follow to the end of the stack is refused: lists of
    /// lists in an unknown footer field, groups in groups in the schema; and so are a root of
    /// fewer than no columns and values of fewer than one byte.
    @Test func refusesNestingAndNegativeCounts() throws {
        let good = Self.file(
            footer: Self.schema(
                rootChildren: 1,
                [
                    {
                        $0.i32(1, 6)
                        $0.i32(3, 1)
                        $0.string(4, "url")
                    }
                ]))
        #expect(try readError(good, "good.parquet") == "read")
        // A footer field 20 of 5,000 lists, each holding the next.
        var deep = good
        let footerLength = Int(good[good.count - 8]) | Int(good[good.count - 7]) << 8
        deep.removeLast(8)
        deep.removeLast()  // the footer's stop
        deep += [0x09, 0x28] + [UInt8](repeating: 0x19, count: 5000) + [0x09, 0x00]
        let length = footerLength - 1 + 2 + 5000 + 2
        deep += [UInt8(length & 0xFF), UInt8(length >> 8 & 0xFF), 0, 0] + Array("PAR1".utf8)
        let lists = try readError(deep, "deep-lists.parquet")
        #expect(lists.contains("nested too deep"), "\(lists)")
        // 5,000 groups, each the only child of the one before.
        let groups = try readError(
            Self.file(
                footer: Self.schema(
                    rootChildren: 1,
                    Array(
                        repeating: {
                            $0.string(4, "g")
                            $0.i32(5, 1)
                        }, count: 5000) + [
                            {
                                $0.i32(1, 6)
                                $0.string(4, "leaf")
                            }
                        ]
                )), "deep-groups.parquet")
        #expect(groups.contains("nested more than 64 deep"), "\(groups)")
        let negative = try readError(Self.file(footer: Self.schema(rootChildren: -1, [])), "negative-root.parquet")
        #expect(negative.contains("a schema of -1 columns"), "\(negative)")
        let fixed = try readError(
            Self.file(
                footer: Self.schema(
                    rootChildren: 1,
                    [
                        {
                            $0.i32(1, 7)
                            $0.i32(2, -1)
                            $0.string(4, "h")
                        }
                    ])),
            "fixed.parquet")
        #expect(fixed.contains(#"column "h" has values of -1 bytes"#), "\(fixed)")
    }

    /// A dictionary larger than a page may hold is refused before its values are made.
    @Test func refusesADictionaryOfTooManyValues() throws {
        let count = ParquetReader.maximumPageValues + 1
        let values = [UInt8](repeating: 0, count: count * 4)  // that many empty strings
        var header = ThriftWriter()
        header.beginStruct()
        header.i32(1, 2)
        header.i32(2, values.count)
        header.i32(3, values.count)
        header.structure(7) { page in
            page.i32(1, count)
            page.i32(2, 0)
        }
        header.endStruct()
        let body = header.bytes + values
        let bytes = Self.file(body: body) { footer in
            Self.schema(
                rootChildren: 1,
                [
                    {
                        $0.i32(1, 6)
                        $0.i32(3, 0)
                        $0.string(4, "url")
                    }
                ])(&footer)
            footer.list(4, .structure, count: 1) { groups in
                groups.beginStruct()
                groups.list(1, .structure, count: 1) { chunks in
                    chunks.beginStruct()
                    chunks.int(2, 4)
                    chunks.structure(3) { meta in
                        meta.i32(1, 6)
                        meta.list(2, .i32, count: 1) { $0.listInt(0) }
                        meta.list(3, .binary, count: 1) { $0.listBinary(Array("url".utf8)) }
                        meta.i32(4, 0)
                        meta.int(5, 1)
                        meta.int(6, Int64(body.count))
                        meta.int(7, Int64(body.count))
                        meta.int(9, 4)
                    }
                    chunks.endStruct()
                }
                groups.int(2, Int64(body.count))
                groups.int(3, 1)
                groups.endStruct()
            }
        }
        let error = try readError(bytes, "big-dictionary.parquet")
        #expect(error.contains("a dictionary of \(count) values"), "\(error)")
    }

    /// What pyarrow writes that the first reader refused or misread: a table of no rows, a
    /// row group of none between two, unsigned integers at their largest.
    @Test func readsEmptyGroupsAndUnsignedIntegers() throws {
        _ = try python(
            """
            import sys, pyarrow as pa, pyarrow.parquet as pq
            pq.write_table(pa.table({"url": pa.array([], pa.string())}), "zero.parquet")
            schema = pa.schema([("url", pa.string())])
            with pq.ParquetWriter("gap.parquet", schema) as w:
                w.write_table(pa.table({"url": ["a"]}, schema=schema))
                w.write_table(pa.table({"url": pa.array([], pa.string())}, schema=schema))
                w.write_table(pa.table({"url": ["b"]}, schema=schema))
            pq.write_table(pa.table({"u64": pa.array([2**64 - 1, 7], pa.uint64()), "u32": pa.array([2**32 - 1, 8], pa.uint32())}),
                           "unsigned.parquet")
            """)
        #expect(try readAll(work.url("zero.parquet")).rows.isEmpty)
        #expect(try readAll(work.url("gap.parquet")).rows == [["a"], ["b"]])
        #expect(try readAll(work.url("unsigned.parquet")).rows == [["18446744073709551615", "4294967295"], ["7", "8"]])
    }
}
