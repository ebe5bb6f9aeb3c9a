import Foundation

/// A Parquet file of a flat table, read a row group at a time.
///
/// What it reads: PLAIN, dictionary (PLAIN_DICTIONARY, RLE_DICTIONARY) and RLE-boolean
/// values, in data pages of either version, uncompressed or compressed with SNAPPY, GZIP or
/// ZSTD; required and optional columns at the top level of the schema. A nested column (a
/// list, map or struct) may be in the file but cannot be asked for; other encodings and
/// codecs are refused by name. Nothing in the file is trusted: the footer's length, every
/// offset and size, page sizes and dictionary indices are checked before use, and each
/// error names the byte where it was found. Memory is bounded by one row group's chunks
/// of the columns asked for.
public final class ParquetReader {
    public let columns: [ParquetColumn]
    /// The rows of every row group.
    public let rowCount: Int64
    let rowGroups: [RowGroup]
    /// Where the file's bytes come from: an open file, or bytes in memory.
    private enum Storage {
        case file(FileHandle)
        case memory([UInt8])
    }

    private let storage: Storage

    /// The largest footer read (a footer of a billion-row file is a few MB).
    static let maximumFooter = 64 << 20
    /// The largest page, compressed or not.
    static let maximumPage = 256 << 20
    /// The most structs a footer may hold (about 4,000 row groups of 50 columns).
    static let maximumFooterStructs = 1 << 20
    /// The most values one page may hold: a page's runs can repeat a value any number of
    /// times, so its size does not bound them.
    static let maximumPageValues = 1 << 22
    /// The deepest nesting of groups in a schema.
    static let maximumSchemaDepth = 64

    struct Chunk {
        let codec: ParquetCodec
        let start: Int
        let length: Int
        let values: Int64
        let offset: Int
    }

    struct RowGroup {
        let rows: Int64
        let chunks: [Chunk]
    }

    public var rowGroupCount: Int { rowGroups.count }

    public func rows(inGroup index: Int) -> Int64 { rowGroups[index].rows }

    /// Opens `path` and reads its footer.
    public convenience init(path: String) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw ParquetError(offset: 0, "cannot open: \(String(cString: strerror(errno)))")
        }
        try self.init(handle: handle)
    }

    /// Reads the file open in `handle` (which it closes when done), from its footer.
    public convenience init(handle: FileHandle) throws {
        try self.init(storage: .file(handle), size: Int(try handle.seekToEnd()))
    }

    /// Reads a file held in memory (the fuzz target's).
    public convenience init(bytes: [UInt8]) throws {
        try self.init(storage: .memory(bytes), size: bytes.count)
    }

    private init(storage: Storage, size: Int) throws {
        self.storage = storage
        guard size >= 12 else { throw ParquetError(offset: 0, "\(size) bytes is too short for a Parquet file") }
        let tail = try Self.read(storage, at: size - 8, count: 8)
        guard try Self.read(storage, at: 0, count: 4) == Array("PAR1".utf8) else {
            throw ParquetError(offset: 0, "no PAR1 magic number: not a Parquet file")
        }
        guard tail[4...] == Array("PAR1".utf8)[...] else {
            throw ParquetError(offset: size - 4, "no PAR1 magic number at the end: a truncated or encrypted file")
        }
        let footerLength = Int(tail[0]) | Int(tail[1]) << 8 | Int(tail[2]) << 16 | Int(tail[3]) << 24
        guard footerLength > 0, footerLength <= size - 12, footerLength <= Self.maximumFooter else {
            throw ParquetError(offset: size - 8, "a footer length of \(footerLength) bytes in a file of \(size)")
        }
        let footerStart = size - 8 - footerLength
        var reader = ThriftReader(
            try Self.read(storage, at: footerStart, count: footerLength), base: footerStart, structs: Self.maximumFooterStructs)
        let metadata = try reader.readStruct()
        guard let schema = metadata.list(2), !schema.isEmpty else {
            throw ParquetError(offset: footerStart, "the footer has no schema")
        }
        columns = try Self.leaves(of: schema, at: footerStart)
        var groups: [RowGroup] = []
        var total: Int64 = 0
        for group in metadata.list(4) ?? [] {
            let rows = try group.requiredInt(3, "a row group's row count")
            let (sum, overflow) = total.addingReportingOverflow(rows)
            guard rows >= 0, !overflow else { throw ParquetError(offset: group.offset, "a row group of \(rows) rows") }
            total = sum
            let chunks = group.list(1) ?? []
            guard chunks.count == columns.count else {
                throw ParquetError(
                    offset: group.offset, "a row group of \(chunks.count) column chunks for \(columns.count) columns")
            }
            var read: [Chunk] = []
            for chunk in chunks {
                guard let meta = chunk.structure(3) else {
                    throw ParquetError(offset: group.offset, "a column chunk without its metadata")
                }
                guard chunk.binary(1) == nil else {
                    throw ParquetError(offset: chunk.offset, "a column chunk in another file: not read")
                }
                let codecNumber = try meta.requiredInt(4, "a column chunk's codec")
                guard let codec = ParquetCodec(rawValue: codecNumber) else {
                    throw ParquetError(offset: meta.offset, "unknown compression codec \(codecNumber)")
                }
                let values = try meta.requiredInt(5, "a column chunk's value count")
                guard values > 0 || rows > 0 else {
                    // An empty chunk (pyarrow writes its data page offset as 0): nothing to read.
                    read.append(Chunk(codec: codec, start: 4, length: 0, values: 0, offset: meta.offset))
                    continue
                }
                let dataStart = try meta.requiredInt(9, "a column chunk's data page offset")
                let start = meta.int(11).map { $0 > 0 && $0 < dataStart ? $0 : dataStart } ?? dataStart
                let length = try meta.requiredInt(7, "a column chunk's compressed size")
                guard start >= 4, length >= 0, start <= Int64(footerStart), length <= Int64(footerStart) - start else {
                    throw ParquetError(
                        offset: meta.offset,
                        "a column chunk of \(length) bytes at byte \(start), past the data (which ends at \(footerStart))")
                }
                read.append(
                    Chunk(
                        codec: codec, start: Int(start), length: Int(length), values: values, offset: meta.offset))
            }
            groups.append(RowGroup(rows: rows, chunks: read))
        }
        rowGroups = groups
        rowCount = total
    }

    deinit { if case .file(let handle) = storage { try? handle.close() } }

    /// The schema's leaves, from its depth-first list: each element with children is a
    /// group, and its next `num_children` elements (recursively) are inside it.
    private static func leaves(of elements: [ThriftStruct], at offset: Int) throws -> [ParquetColumn] {
        var leaves: [ParquetColumn] = []
        var next = 1
        func walk(path: [String], nested: Bool) throws {
            guard next < elements.count else { throw ParquetError(offset: offset, "the schema ends inside a group") }
            let element = elements[next]
            next += 1
            let name = element.string(4) ?? ""
            let repetition = element.int(3) ?? 0
            let children = element.int(5) ?? 0
            let inside = nested || repetition == 2
            if children != 0 {
                guard children > 0, children <= Int64(elements.count - next) else {
                    throw ParquetError(offset: element.offset, "a group of \(children) columns past the schema's end")
                }
                guard path.count < Self.maximumSchemaDepth else {
                    throw ParquetError(offset: element.offset, "groups nested more than \(Self.maximumSchemaDepth) deep")
                }
                for _ in 0..<children { try walk(path: path + [name], nested: true) }
                return
            }
            let typeNumber = try element.requiredInt(1, "column \"\(name)\"'s type")
            guard let type = ParquetPhysicalType(rawValue: typeNumber) else {
                throw ParquetError(offset: element.offset, "column \"\(name)\" has unknown type \(typeNumber)")
            }
            let length = element.int(2) ?? 0
            if type == .fixedLenByteArray {
                guard length > 0, length <= 1 << 20 else {
                    throw ParquetError(offset: element.offset, "column \"\(name)\" has values of \(length) bytes")
                }
            }
            // STRING, ENUM and JSON (logical types 1, 4, 7; converted types 0, 4, 19) are text.
            let logical = element.structure(10)
            let converted = element.int(6)
            let isText = [0, 4, 19].contains(converted ?? -1) || [1, 4, 7].contains { logical?.structure($0) != nil }
            // UINT_8 … UINT_64 (converted 11–14), or INTEGER with isSigned false.
            let isUnsigned =
                (11...14).contains(converted ?? -1) || logical?.structure(10).map { $0.bool(2) == false } == true
            leaves.append(
                ParquetColumn(
                    name: (path + [name]).joined(separator: "."), type: type, length: Int(length),
                    optional: repetition == 1, isText: isText, isUnsigned: isUnsigned, isNested: inside))
        }
        let rootChildren = elements[0].int(5) ?? Int64(elements.count - 1)
        guard rootChildren >= 0, rootChildren < Int64(elements.count) else {
            throw ParquetError(offset: elements[0].offset, "a schema of \(rootChildren) columns in \(elements.count) elements")
        }
        for _ in 0..<rootChildren { try walk(path: [], nested: false) }
        guard next == elements.count else { throw ParquetError(offset: offset, "the schema has elements past its groups") }
        return leaves
    }

    /// The rows of row group `index`, each the values of the `wanted` columns (indices into
    /// `columns`, nil for a null), decoded a page at a time as they are asked for.
    public func rows(inGroup index: Int, columns wanted: [Int]) throws -> ParquetRows {
        let group = rowGroups[index]
        let decoders = try wanted.map { column in
            let described = columns[column]
            let chunk = group.chunks[column]
            guard !described.isNested else {
                throw ParquetError(offset: chunk.offset, "column \"\(described.name)\" is nested: not read")
            }
            guard chunk.codec.isRead else {
                throw ParquetError(
                    offset: chunk.offset, "column \"\(described.name)\" is compressed with \(chunk.codec.name): not read")
            }
            guard chunk.values == group.rows else {
                throw ParquetError(
                    offset: chunk.offset,
                    "column \"\(described.name)\" has \(chunk.values) values in a group of \(group.rows) rows")
            }
            return ChunkDecoder(
                column: described, chunk: chunk, bytes: try read(at: chunk.start, count: chunk.length),
                rows: group.rows)
        }
        return ParquetRows(decoders: decoders, rows: group.rows)
    }

    func read(at offset: Int, count: Int) throws -> [UInt8] { try Self.read(storage, at: offset, count: count) }

    private static func read(_ storage: Storage, at offset: Int, count: Int) throws -> [UInt8] {
        switch storage {
        case .file(let handle):
            try handle.seek(toOffset: UInt64(offset))
            let data = try handle.read(upToCount: count) ?? Data()
            guard data.count == count else { throw ParquetError(offset: offset, "the file ends before \(count) bytes") }
            return [UInt8](data)
        case .memory(let bytes):
            guard offset >= 0, count >= 0, offset <= bytes.count, count <= bytes.count - offset else {
                throw ParquetError(offset: offset, "the file ends before \(count) bytes")
            }
            return Array(bytes[offset..<(offset + count)])
        }
    }
}

/// A row group's rows, one at a time.
public struct ParquetRows {
    fileprivate var decoders: [ChunkDecoder]
    public let rows: Int64
    private var done: Int64 = 0

    fileprivate init(decoders: [ChunkDecoder], rows: Int64) {
        self.decoders = decoders
        self.rows = rows
    }

    /// The next row's values, or nil after the last.
    public mutating func next() throws -> [ParquetValue?]? {
        guard done < rows else { return nil }
        done += 1
        var row: [ParquetValue?] = []
        row.reserveCapacity(decoders.count)
        for index in decoders.indices { row.append(try decoders[index].next()) }
        return row
    }
}

/// The pages of one column chunk, decoded one data page at a time into values.
private struct ChunkDecoder {
    let column: ParquetColumn
    let chunk: ParquetReader.Chunk
    let bytes: [UInt8]
    let rows: Int64
    /// The most bytes and structs a page header may take (its statistics hold a page's
    /// smallest and largest values).
    static let maximumHeader = 16 << 20
    static let maximumHeaderStructs = 64

    private var dictionary: [ParquetValue]?
    private var position = 0
    /// Values handed out and values decoded (in pages) so far.
    private var given: Int64 = 0
    private var decoded: Int64 = 0
    /// The current page: its definition levels (nil: all present), its values or its
    /// dictionary indices, and where the next of each is.
    private var levels: [UInt32]?
    private var plain: [ParquetValue] = []
    private var indices: [UInt32]?
    private var nextLevel = 0
    private var nextValue = 0

    init(column: ParquetColumn, chunk: ParquetReader.Chunk, bytes: [UInt8], rows: Int64) {
        self.column = column
        self.chunk = chunk
        self.bytes = bytes
        self.rows = rows
    }

    /// The next value (nil for a null).
    mutating func next() throws -> ParquetValue? {
        while given == decoded { try nextPage() }
        given += 1
        if let levels {
            let level = levels[nextLevel]
            nextLevel += 1
            if level == 0 { return nil }
        }
        defer { nextValue += 1 }
        guard let indices else { return plain[nextValue] }
        guard let dictionary, Int(indices[nextValue]) < dictionary.count else {
            throw ParquetError(
                offset: chunk.start + position,
                "column \"\(column.name)\": dictionary index \(indices[nextValue]) out of a dictionary of \(dictionary?.count ?? 0)"
            )
        }
        return dictionary[Int(indices[nextValue])]
    }

    /// Reads pages up to the next data page and decodes it.
    private mutating func nextPage() throws {
        guard position < bytes.count else {
            throw ParquetError(
                offset: chunk.start + position, "column \"\(column.name)\" ends after \(decoded) of \(rows) values")
        }
        var reader = ThriftReader(
            bytes, at: position, base: chunk.start, limit: Self.maximumHeader, structs: Self.maximumHeaderStructs)
        let header = try reader.readStruct()
        let bodyStart = reader.position
        let compressed = Int(try header.requiredInt(3, "a page's compressed size"))
        let uncompressed = Int(try header.requiredInt(2, "a page's size"))
        guard compressed >= 0, compressed <= bytes.count - bodyStart else {
            throw ParquetError(offset: header.offset, "a page of \(compressed) bytes past the end of its column chunk")
        }
        guard uncompressed >= 0, uncompressed <= ParquetReader.maximumPage else {
            throw ParquetError(offset: header.offset, "a page of \(uncompressed) bytes uncompressed")
        }
        let body = bytes[bodyStart..<(bodyStart + compressed)]
        let bodyOffset = chunk.start + bodyStart
        position = bodyStart + compressed
        switch header.int(1) {
        case 2:
            guard let page = header.structure(7) else {
                throw ParquetError(offset: header.offset, "a dictionary page without its header")
            }
            let count = Int(try page.requiredInt(1, "a dictionary's size"))
            guard column.type != .boolean, count >= 0, count <= ParquetReader.maximumPageValues else {
                throw ParquetError(offset: header.offset, "a dictionary of \(count) values for column \"\(column.name)\"")
            }
            let plain = try chunk.codec.decompress(body, to: uncompressed, offset: bodyOffset)
            var at = 0
            dictionary = try plainValues(plain, &at, count: count, offset: bodyOffset)
        case 0:
            guard let page = header.structure(5) else {
                throw ParquetError(offset: header.offset, "a data page without its header")
            }
            let plain = try chunk.codec.decompress(body, to: uncompressed, offset: bodyOffset)
            try dataPage(
                plain, levels: nil, count: Int(try page.requiredInt(1, "a page's value count")),
                encoding: try page.requiredInt(2, "a page's encoding"), offset: bodyOffset)
        case 3:
            guard let page = header.structure(8) else {
                throw ParquetError(offset: header.offset, "a data page without its header")
            }
            let definitionLength = Int(try page.requiredInt(5, "a page's definition levels length"))
            let repetitionLength = Int(try page.requiredInt(6, "a page's repetition levels length"))
            let room = min(compressed, uncompressed)
            guard definitionLength >= 0, repetitionLength >= 0, definitionLength <= room, repetitionLength <= room,
                definitionLength + repetitionLength <= room
            else { throw ParquetError(offset: page.offset, "levels longer than their page") }
            let levelsEnd = body.startIndex + repetitionLength + definitionLength
            let rest = body[levelsEnd...]
            let size = uncompressed - repetitionLength - definitionLength
            let valuesOffset = bodyOffset + repetitionLength + definitionLength
            let plain =
                page.bool(7) == false
                ? try ParquetCodec.uncompressed.decompress(rest, to: size, offset: valuesOffset)
                : try chunk.codec.decompress(rest, to: size, offset: valuesOffset)
            try dataPage(
                plain, levels: Array(body[(body.startIndex + repetitionLength)..<levelsEnd]),
                count: Int(try page.requiredInt(1, "a page's value count")),
                encoding: try page.requiredInt(4, "a page's encoding"), offset: bodyOffset)
        default:
            break
        }
    }

    /// A data page's values: its definition levels (in `levels` for version 2, length-
    /// prefixed at the start of `plain` for version 1) say which are null.
    private mutating func dataPage(_ plain: [UInt8], levels: [UInt8]?, count: Int, encoding: Int64, offset: Int) throws {
        guard count >= 0, count <= ParquetReader.maximumPageValues, Int64(count) <= rows - decoded else {
            throw ParquetError(offset: offset, "a page of \(count) values where \(rows - decoded) are left")
        }
        var at = 0
        self.levels = nil
        if column.optional {
            if let levels {
                self.levels = try HybridRLE.decode(levels, 0..<levels.count, bitWidth: 1, count: count, offset: offset)
            } else {
                guard plain.count >= 4 else { throw ParquetError(offset: offset, "definition levels past the page's end") }
                let length = Int(plain[0]) | Int(plain[1]) << 8 | Int(plain[2]) << 16 | Int(plain[3]) << 24
                guard length <= plain.count - 4 else {
                    throw ParquetError(offset: offset, "definition levels past the page's end")
                }
                self.levels = try HybridRLE.decode(plain, 4..<(4 + length), bitWidth: 1, count: count, offset: offset + 4)
                at = 4 + length
            }
        }
        let present = self.levels.map { $0.reduce(0) { $0 + Int($1 & 1) } } ?? count
        if let levels = self.levels, levels.contains(where: { $0 > 1 }) {
            throw ParquetError(offset: offset, "a definition level above 1 in a flat column")
        }
        self.plain = []
        indices = nil
        switch ParquetEncoding(rawValue: encoding) {
        case .plain:
            self.plain = try plainValues(plain, &at, count: present, offset: offset)
        case .plainDictionary, .rleDictionary:
            guard dictionary != nil else { throw ParquetError(offset: offset, "dictionary indices without a dictionary page") }
            guard at < plain.count || present == 0 else {
                throw ParquetError(offset: offset + at, "no bit width for the indices")
            }
            let width = present == 0 ? 0 : Int(plain[at])
            indices = try HybridRLE.decode(
                plain, min(at + 1, plain.count)..<plain.count, bitWidth: width, count: present, offset: offset + at)
        case .rle where column.type == .boolean:
            guard plain.count - at >= 4 else { throw ParquetError(offset: offset + at, "booleans past the page's end") }
            self.plain = try HybridRLE.decode(plain, (at + 4)..<plain.count, bitWidth: 1, count: present, offset: offset + at).map
            {
                .bool($0 == 1)
            }
        default:
            throw ParquetError(
                offset: offset, "column \"\(column.name)\" uses the \(ParquetEncoding.name(encoding)) encoding: not read")
        }
        nextLevel = 0
        nextValue = 0
        decoded += Int64(count)
    }

    /// `count` PLAIN values of the column's type from `bytes[at...]`.
    private func plainValues(_ bytes: [UInt8], _ at: inout Int, count: Int, offset: Int) throws -> [ParquetValue] {
        guard count >= 0, count <= max(bytes.count, 1) * 8 else {
            throw ParquetError(offset: offset, "\(count) values in a page of \(bytes.count) bytes")
        }
        func fixed(_ width: Int) throws -> Int {
            guard count <= (bytes.count - at) / max(width, 1) else {
                throw ParquetError(offset: offset + at, "\(count) values of \(width) bytes past the page's end")
            }
            return width
        }
        func little(_ start: Int, _ width: Int) -> UInt64 {
            var value: UInt64 = 0
            for index in 0..<width { value |= UInt64(bytes[start + index]) << UInt64(8 * index) }
            return value
        }
        var result: [ParquetValue] = []
        result.reserveCapacity(min(count, bytes.count))
        switch column.type {
        case .boolean:
            guard (count + 7) / 8 <= bytes.count - at else {
                throw ParquetError(offset: offset + at, "booleans past the page's end")
            }
            for index in 0..<count { result.append(.bool(bytes[at + index / 8] >> UInt8(index % 8) & 1 == 1)) }
            at += (count + 7) / 8
        case .int32:
            let width = try fixed(4)
            for _ in 0..<count {
                let bits = UInt32(little(at, width))
                result.append(.int(column.isUnsigned ? Int64(bits) : Int64(Int32(bitPattern: bits))))
                at += width
            }
        case .int64:
            let width = try fixed(8)
            for _ in 0..<count {
                let bits = little(at, width)
                result.append(column.isUnsigned ? .uint(bits) : .int(Int64(bitPattern: bits)))
                at += width
            }
        case .float:
            let width = try fixed(4)
            for _ in 0..<count {
                result.append(.double(Double(Float(bitPattern: UInt32(little(at, width))))))
                at += width
            }
        case .double:
            let width = try fixed(8)
            for _ in 0..<count {
                result.append(.double(Double(bitPattern: little(at, width))))
                at += width
            }
        case .int96:
            let width = try fixed(12)
            for _ in 0..<count {
                result.append(.bytes(Array(bytes[at..<(at + width)])))
                at += width
            }
        case .fixedLenByteArray:
            let width = try fixed(column.length)
            for _ in 0..<count {
                result.append(.bytes(Array(bytes[at..<(at + width)])))
                at += width
            }
        case .byteArray:
            for index in 0..<count {
                guard bytes.count - at >= 4 else {
                    throw ParquetError(offset: offset + at, "value \(index + 1) of \(count) past the page's end")
                }
                let length = Int(little(at, 4))
                guard length <= bytes.count - at - 4 else {
                    throw ParquetError(offset: offset + at, "a value of \(length) bytes past the page's end")
                }
                result.append(.bytes(Array(bytes[(at + 4)..<(at + 4 + length)])))
                at += 4 + length
            }
        }
        return result
    }
}
