import CZlib
import Foundation
import ParquetKit

/// A Parquet table: read a row group at a time (ParquetKit), only the columns the source
/// names. A gzipped file (`.parquet.gz`) is unpacked to a temporary file first, since
/// Parquet is read from its end: a file without a name (unlinked as soon as it is made, so
/// that nothing is left if the process dies), at most `maximumUnpacked` bytes, refused as
/// soon as its first bytes are not Parquet's.
extension TableFeed {
    /// The rows of `table` (`openParquet`) from row number `start + 1` on.
    func parquetRows(of table: ParquetReader, from start: Int, _ each: (Row) throws -> Bool) throws {
        try withParquet(table) { reader in
            let names = neededColumns
            let indices = try columnIndices(names, in: reader)
            var first = 0
            for group in 0..<reader.rowGroupCount {
                let count = Int(reader.rows(inGroup: group))
                defer { first += count }
                if first + count <= start { continue }
                var rows = try reader.rows(inGroup: group, columns: indices)
                var at = first
                while let values = try rows.next() {
                    at += 1
                    if at <= start { continue }
                    if try !each(Row(cells: Self.cells(values, of: indices, in: reader), at: at)) { return }
                }
            }
        }
    }

    /// The row number of the cursor's key, found from the URL and key columns alone, when
    /// as many rows up to it made items as the run listed (the table is the one listed);
    /// nil otherwise: the listing starts from the first row.
    func parquetRow(of table: ParquetReader, after cursor: FeedCursor) throws -> Int? {
        try withParquet(table) { reader in
            let names = [columns.url] + (columns.key.map { [$0] } ?? [])
            let indices = try columnIndices(names, in: reader)
            var at = 0
            var items = 0
            for group in 0..<reader.rowGroupCount {
                var rows = try reader.rows(inGroup: group, columns: indices)
                while let values = try rows.next() {
                    at += 1
                    let cells = Self.cells(values, of: indices, in: reader)
                    guard case .item(_, let key) = verdict(cells, rowNumber: at) else { continue }
                    items += 1
                    if key == cursor.key { return items == cursor.listed ? at : nil }
                }
            }
            return nil
        }
    }

    /// A row's values as cells by column name; nil when one cannot be read.
    private static func cells(_ values: [ParquetValue?], of indices: [Int], in reader: ParquetReader) -> [String: JSONValue]? {
        var cells: [String: JSONValue] = [:]
        for (index, value) in zip(indices, values) {
            guard let cell = json(value, reader.columns[index]) else { return nil }
            cells[reader.columns[index].name] = cell
        }
        return cells
    }

    /// The columns' indices, or an error naming the one the file does not have.
    private func columnIndices(_ names: [String], in reader: ParquetReader) throws -> [Int] {
        try names.map { name in
            guard let index = reader.columns.firstIndex(where: { $0.name == name }) else {
                let flat = reader.columns.filter { !$0.isNested }.map { "\"\($0.name)\"" }.joined(separator: ", ")
                throw FeedError("\(path): the table has no column \"\(name)\" (it has: \(flat))")
            }
            guard !reader.columns[index].isNested else {
                throw FeedError(
                    "\(path): column \"\(name)\" is nested (inside a list, map or struct): only flat columns are read")
            }
            return index
        }
    }

    /// The file open, its footer read: once per listing (a `.parquet.gz` is unpacked by
    /// `list` before it reads).
    func openParquet() throws -> ParquetReader {
        try withParquet(nil) { $0 }
    }

    /// `body` with `table`, or the file opened; a Parquet error becomes a feed error naming
    /// the file.
    private func withParquet<T>(_ table: ParquetReader?, _ body: (ParquetReader) throws -> T) throws -> T {
        do {
            return try body(try table ?? ParquetReader(path: readPath))
        } catch let error as ParquetError {
            throw FeedError("table \(path): \(error)\(unpacked ? " (of the file unpacked)" : "")")
        }
    }

    /// The most a `.parquet.gz` may unpack to.
    static let maximumUnpacked: Int64 = 64 << 30

    /// A cell as JSON: text as a string (nil when the text is not UTF-8), an integer as a
    /// number (as a string past ±2⁵³, where a JSON number loses digits), a float as a
    /// number (null when not finite), bytes not marked as text as UTF-8 when they are, else
    /// as lowercase hex (a binary SHA-256 reads as its hex digest), a null as null.
    static func json(_ value: ParquetValue?, _ column: ParquetColumn) -> JSONValue? {
        switch value {
        case nil: return .null
        case .bool(let bit)?: return .bool(bit)
        case .int(let number)?:
            return number.magnitude <= 1 << 53 ? .number(Double(number), isInteger: true) : .string(String(number))
        case .uint(let number)?:
            return number <= 1 << 53 ? .number(Double(number), isInteger: true) : .string(String(number))
        case .double(let number)?: return number.isFinite ? .number(number, isInteger: false) : .null
        case .bytes(let bytes)?:
            if column.isText { return String(validating: bytes, as: UTF8.self).map(JSONValue.string) }
            if column.type == .byteArray, let text = String(validating: bytes, as: UTF8.self) { return .string(text) }
            return .string(bytes.hex)
        }
    }

    /// `path` unpacked into a temporary file without a name, open for reading.
    func gunzip() throws -> FileHandle {
        let maximumUnpacked = Self.maximumUnpacked
        guard let input = gzopen(readPath, "rb") else { throw FeedError("cannot open table \(path)") }
        defer { gzclose(input) }
        let output = try Self.nameless()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var written: Int64 = 0
        while true {
            let read = buffer.withUnsafeMutableBytes { gzread(input, $0.baseAddress, UInt32($0.count)) }
            guard read >= 0 else { throw FeedError("table \(path): the gzip stream is broken") }
            if read == 0 {
                // The end of the data, or of the file before the stream's end.
                var status: Int32 = Z_OK
                _ = gzerror(input, &status)
                if status != Z_OK && status != Z_STREAM_END {
                    throw FeedError("table \(path): the gzip file is cut short")
                }
                break
            }
            if written == 0, read < 4 || buffer[0..<4] != Array("PAR1".utf8)[...] {
                throw FeedError("table \(path): unpacked, it does not begin as a Parquet file (PAR1)")
            }
            written += Int64(read)
            guard written <= maximumUnpacked else {
                throw FeedError("table \(path): unpacks to more than \(maximumUnpacked >> 30) GiB")
            }
            do { try output.write(contentsOf: Data(buffer[0..<Int(read)])) } catch {
                throw FeedError("cannot unpack table \(path) in the temporary folder: \(error)")
            }
        }
        return output
    }
}
