import Foundation

/// Writes a flat table as a Parquet file, streamed: rows are appended one at a time, and a
/// row group is written out whenever its column chunks reach `rowGroupBytes` (or
/// `rowGroupRows` rows), so memory stays bounded however many rows there are.
///
/// Every column is PLAIN-encoded in version 1 data pages of about 1 MiB, compressed with
/// `codec` (SNAPPY by default: what pyarrow, DuckDB and Spark read fastest); an optional
/// column's nulls are RLE definition levels. Text columns are annotated STRING.
public final class ParquetWriter {
    public let columns: [ParquetColumn]
    private let codec: ParquetCodec
    private let rowGroupBytes: Int
    private let rowGroupRows: Int
    private let handle: FileHandle
    private var written = 4
    private var chunks: [ColumnChunkBuilder]
    private var groupRows = 0
    private var totalRows: Int64 = 0
    private var groups: [WrittenGroup] = []
    private static let pageBytes = 1 << 20
    private static let pageValues = 20_000

    struct WrittenChunk {
        let offset: Int
        let compressed: Int
        let uncompressed: Int
    }

    struct WrittenGroup {
        let rows: Int
        let chunks: [WrittenChunk]
    }

    /// Creates (or truncates) `path`.
    public init(
        path: String, columns: [ParquetColumn], codec: ParquetCodec = .snappy, rowGroupBytes: Int = 64 << 20,
        rowGroupRows: Int = 1 << 20
    ) throws {
        precondition([.uncompressed, .snappy].contains(codec), "the writer compresses with SNAPPY or not at all")
        // Opened in place (FileManager's `createFile` writes a temporary file beside it first,
        // which a kill would leave in the caller's folder).
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw ParquetError(offset: 0, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        self.columns = columns
        self.codec = codec
        self.rowGroupBytes = rowGroupBytes
        self.rowGroupRows = rowGroupRows
        chunks = columns.map { ColumnChunkBuilder(column: $0) }
        try handle.write(contentsOf: Data("PAR1".utf8))
    }

    deinit { try? handle.close() }

    /// One row: a value (or nil, in an optional column) for each column, of its type.
    public func append(_ row: [ParquetValue?]) throws {
        precondition(row.count == columns.count, "a row of \(row.count) values for \(columns.count) columns")
        for (index, value) in row.enumerated() { chunks[index].append(value, codec: codec) }
        groupRows += 1
        if groupRows >= rowGroupRows || chunks.reduce(0, { $0 + $1.size }) >= rowGroupBytes { try writeGroup() }
    }

    /// Writes what is left and the footer; with `sync`, the file is on disk when it returns.
    public func finish(sync: Bool = false) throws {
        if groupRows > 0 { try writeGroup() }
        var footer = ThriftWriter()
        footer.beginStruct()
        footer.i32(1, 1)
        footer.list(2, .structure, count: columns.count + 1) { list in
            list.beginStruct()
            list.string(4, "schema")
            list.i32(5, columns.count)
            list.endStruct()
            for column in columns {
                list.beginStruct()
                list.i32(1, Int(column.type.rawValue))
                if column.type == .fixedLenByteArray { list.i32(2, column.length) }
                list.i32(3, column.optional ? 1 : 0)
                list.string(4, column.name)
                if column.isText {
                    list.i32(6, 0)
                    list.structure(10) { logical in logical.structure(1) { _ in } }
                }
                list.endStruct()
            }
        }
        footer.int(3, totalRows)
        footer.list(4, .structure, count: groups.count) { list in
            for (ordinal, group) in groups.enumerated() {
                list.beginStruct()
                list.list(1, .structure, count: group.chunks.count) { chunkList in
                    for (index, chunk) in group.chunks.enumerated() {
                        let column = columns[index]
                        chunkList.beginStruct()
                        chunkList.int(2, Int64(chunk.offset))
                        chunkList.structure(3) { meta in
                            meta.i32(1, Int(column.type.rawValue))
                            meta.list(2, .i32, count: column.optional ? 2 : 1) { encodings in
                                encodings.listInt(ParquetEncoding.plain.rawValue)
                                if column.optional { encodings.listInt(ParquetEncoding.rle.rawValue) }
                            }
                            meta.list(3, .binary, count: 1) { path in path.listBinary(Array(column.name.utf8)) }
                            meta.i32(4, Int(codec.rawValue))
                            meta.int(5, Int64(group.rows))
                            meta.int(6, Int64(chunk.uncompressed))
                            meta.int(7, Int64(chunk.compressed))
                            meta.int(9, Int64(chunk.offset))
                        }
                        chunkList.endStruct()
                    }
                }
                list.int(2, Int64(group.chunks.reduce(0) { $0 + $1.uncompressed }))
                list.int(3, Int64(group.rows))
                list.int(5, Int64(group.chunks.first?.offset ?? 4))
                list.int(6, Int64(group.chunks.reduce(0) { $0 + $1.compressed }))
                list.int(7, Int64(ordinal), .i16)
                list.endStruct()
            }
        }
        footer.string(6, "imgpipe")
        footer.endStruct()
        var tail = footer.bytes
        let length = UInt32(tail.count)
        tail += [UInt8(length & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length >> 16 & 0xFF), UInt8(length >> 24)]
        tail += Array("PAR1".utf8)
        try handle.write(contentsOf: Data(tail))
        if sync { try handle.synchronize() }
        try handle.close()
    }

    private func writeGroup() throws {
        var written: [WrittenChunk] = []
        for index in chunks.indices {
            chunks[index].closePage(codec: codec)
            let chunk = chunks[index]
            try handle.write(contentsOf: Data(chunk.bytes))
            written.append(
                WrittenChunk(
                    offset: self.written, compressed: chunk.bytes.count, uncompressed: chunk.uncompressed))
            self.written += chunk.bytes.count
            chunks[index] = ColumnChunkBuilder(column: columns[index])
        }
        groups.append(WrittenGroup(rows: groupRows, chunks: written))
        totalRows += Int64(groupRows)
        groupRows = 0
    }

    /// One column's pages of the row group being built.
    private struct ColumnChunkBuilder {
        let column: ParquetColumn
        /// Finished pages, each a header and its (compressed) body.
        var bytes: [UInt8] = []
        var uncompressed = 0
        private var values: [UInt8] = []
        private var levels: [UInt8] = []
        private var booleans = 0
        private var count = 0

        init(column: ParquetColumn) { self.column = column }

        var size: Int { bytes.count + values.count }

        mutating func append(_ value: ParquetValue?, codec: ParquetCodec) {
            count += 1
            if column.optional { levels.append(value == nil ? 0 : 1) }
            switch value {
            case nil:
                precondition(column.optional, "a null in required column \(column.name)")
            case .bool(let bit)?:
                precondition(column.type == .boolean, "a boolean in column \(column.name)")
                if booleans % 8 == 0 { values.append(0) }
                if bit { values[values.count - 1] |= 1 << UInt8(booleans % 8) }
                booleans += 1
            case .int(let number)?:
                switch column.type {
                case .int32: little(UInt64(UInt32(truncatingIfNeeded: number)), 4)
                case .int64: little(UInt64(bitPattern: number), 8)
                default: preconditionFailure("an integer in column \(column.name)")
                }
            case .uint(let number)?:
                precondition(column.type == .int64, "an unsigned integer in column \(column.name)")
                little(number, 8)
            case .double(let number)?:
                switch column.type {
                case .double: little(number.bitPattern, 8)
                case .float: little(UInt64(Float(number).bitPattern), 4)
                default: preconditionFailure("a number in column \(column.name)")
                }
            case .bytes(let data)?:
                switch column.type {
                case .byteArray:
                    little(UInt64(data.count), 4)
                    values.append(contentsOf: data)
                case .fixedLenByteArray:
                    precondition(data.count == column.length, "\(data.count) bytes in column \(column.name)")
                    values.append(contentsOf: data)
                default: preconditionFailure("bytes in column \(column.name)")
                }
            }
            if values.count >= ParquetWriter.pageBytes || count >= ParquetWriter.pageValues { closePage(codec: codec) }
        }

        private mutating func little(_ value: UInt64, _ width: Int) {
            for index in 0..<width { values.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * index))) }
        }

        mutating func closePage(codec: ParquetCodec) {
            guard count > 0 else { return }
            var body: [UInt8] = []
            if column.optional {
                let encoded = HybridRLE.encodeBits(levels)
                let length = UInt32(encoded.count)
                body += [UInt8(length & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length >> 16 & 0xFF), UInt8(length >> 24)]
                body += encoded
            }
            body += values
            let compressed = codec.compress(body)
            var header = ThriftWriter()
            header.beginStruct()
            header.i32(1, 0)
            header.i32(2, body.count)
            header.i32(3, compressed.count)
            header.structure(5) { page in
                page.i32(1, count)
                page.i32(2, Int(ParquetEncoding.plain.rawValue))
                page.i32(3, Int(ParquetEncoding.rle.rawValue))
                page.i32(4, Int(ParquetEncoding.rle.rawValue))
            }
            header.endStruct()
            bytes += header.bytes
            bytes += compressed
            uncompressed += header.bytes.count + body.count
            values.removeAll(keepingCapacity: true)
            levels.removeAll(keepingCapacity: true)
            booleans = 0
            count = 0
        }
    }
}
