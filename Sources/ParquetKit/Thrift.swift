/// Thrift's compact protocol, the encoding of Parquet's footer and page headers: only what
/// Parquet uses (no messages, no sets of their own).
///
/// The reader decodes a struct into its fields by id without knowing the schema, so that
/// fields a newer writer adds are read past, never misread. Every length and count is
/// checked against the bytes that are left before anything is allocated; nesting is bounded
/// (structs, lists and maps alike); lists of anything but structs, and maps, are read past
/// without being kept (Parquet's reader needs none of them); and the structs one reader
/// decodes are counted against a budget: a hostile footer gets an error naming the byte,
/// never a crash nor memory out of proportion.
enum ThriftType: UInt8 {
    case stop = 0
    case boolTrue = 1
    case boolFalse = 2
    case byte = 3
    case i16 = 4
    case i32 = 5
    case i64 = 6
    case double = 7
    case binary = 8
    case list = 9
    case
        set = 10
    case map = 11
    case structure = 12
}

/// A decoded value. Integers of every width are `int`; a list is a list of structs (a list
/// of anything else, or a map, is `skipped`).
enum ThriftValue {
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case binary([UInt8])
    case list([ThriftStruct])
    case structure(ThriftStruct)
    case skipped
}

/// A struct's fields by id, with typed accessors that say which field was wrong.
struct ThriftStruct {
    /// The fields in the order read (a struct has a handful: a list is smaller than a table).
    var fieldList: [(id: Int16, value: ThriftValue)] = []
    /// Where the struct began in the file, for errors.
    var offset: Int

    /// The field of an id (the last of a repeated id wins, as a dictionary's would).
    subscript(id: Int16) -> ThriftValue? {
        get { fieldList.last { $0.id == id }?.value }
        set {
            fieldList.removeAll { $0.id == id }
            if let newValue { fieldList.append((id, newValue)) }
        }
    }

    func int(_ id: Int16) -> Int64? {
        if case .int(let value)? = self[id] { return value }
        return nil
    }

    func bool(_ id: Int16) -> Bool? {
        if case .bool(let value)? = self[id] { return value }
        return nil
    }

    func binary(_ id: Int16) -> [UInt8]? {
        if case .binary(let value)? = self[id] { return value }
        return nil
    }

    func string(_ id: Int16) -> String? { binary(id).flatMap { String(validating: $0, as: UTF8.self) } }

    func structure(_ id: Int16) -> ThriftStruct? {
        if case .structure(let value)? = self[id] { return value }
        return nil
    }

    func list(_ id: Int16) -> [ThriftStruct]? {
        if case .list(let value)? = self[id] { return value }
        return nil
    }

    /// A required integer field, or an error naming `what`.
    func requiredInt(_ id: Int16, _ what: String) throws -> Int64 {
        guard let value = int(id) else { throw ParquetError(offset: offset, "\(what) is missing") }
        return value
    }
}

/// Reads compact-protocol values from bytes that start at `base` in the file.
struct ThriftReader {
    private let bytes: [UInt8]
    private(set) var position: Int
    private let base: Int
    /// Where the reader must stop (a page header may not run past it).
    private let end: Int
    /// The structs it may still decode.
    private var budget: Int
    private static let maximumDepth = 24

    /// Reads `bytes` from `position` up to `limit` bytes on (all of them without one),
    /// decoding at most `structs` structs.
    init(_ bytes: [UInt8], at position: Int = 0, base: Int = 0, limit: Int? = nil, structs: Int = 1 << 20) {
        self.bytes = bytes
        self.position = position
        self.base = base
        end = limit.map { min(bytes.count, position + $0) } ?? bytes.count
        budget = structs
    }

    /// Where the reader is, as an offset in the file.
    var fileOffset: Int { base + position }

    mutating func readStruct(depth: Int = 0) throws -> ThriftStruct {
        guard depth < Self.maximumDepth else { throw ParquetError(offset: fileOffset, "structures nested too deep") }
        guard budget > 0 else { throw ParquetError(offset: fileOffset, "more structures than a Parquet header holds") }
        budget -= 1
        var result = ThriftStruct(offset: fileOffset)
        var lastID: Int16 = 0
        while true {
            let header = try byte()
            if header == 0 { return result }
            let delta = header >> 4
            guard let type = ThriftType(rawValue: header & 0x0F), type != .stop else {
                throw ParquetError(offset: fileOffset - 1, "unknown Thrift type \(header & 0x0F)")
            }
            let id: Int16
            if delta == 0 {
                let raw = try zigzag()
                guard let narrow = Int16(exactly: raw) else { throw ParquetError(offset: fileOffset, "field id \(raw)") }
                id = narrow
            } else {
                id = lastID &+ Int16(delta)
            }
            lastID = id
            let value: ThriftValue
            switch type {
            case .boolTrue: value = .bool(true)
            case .boolFalse: value = .bool(false)
            default: value = try read(type, depth: depth + 1)
            }
            result.fieldList.append((id, value))
        }
    }

    private mutating func read(_ type: ThriftType, depth: Int) throws -> ThriftValue {
        switch type {
        case .stop: throw ParquetError(offset: fileOffset, "unexpected stop")
        case .boolTrue, .boolFalse: return .bool(try byte() == ThriftType.boolTrue.rawValue)
        case .byte: return .int(Int64(Int8(bitPattern: try byte())))
        case .i16, .i32, .i64: return .int(try zigzag())
        case .double:
            guard end - position >= 8 else { throw ParquetError(offset: fileOffset, "a double past the end") }
            var bits: UInt64 = 0
            for index in 0..<8 { bits |= UInt64(bytes[position + index]) << (8 * index) }
            position += 8
            return .double(Double(bitPattern: bits))
        case .binary:
            let length = try varint()
            guard length <= UInt64(end - position) else {
                throw ParquetError(offset: fileOffset, "a string of \(length) bytes past the end")
            }
            let start = position
            position += Int(length)
            return .binary(Array(bytes[start..<position]))
        case .list, .set:
            let header = try byte()
            var count = UInt64(header >> 4)
            if count == 15 { count = try varint() }
            guard let element = ThriftType(rawValue: header & 0x0F) else {
                throw ParquetError(offset: fileOffset - 1, "unknown Thrift list element type \(header & 0x0F)")
            }
            // Every element takes at least one byte: a count larger than what is left is a lie.
            guard count <= UInt64(end - position) else {
                throw ParquetError(offset: fileOffset, "a list of \(count) elements past the end")
            }
            guard depth < Self.maximumDepth else { throw ParquetError(offset: fileOffset, "lists nested too deep") }
            guard element == .structure else {
                for _ in 0..<count { _ = try read(element, depth: depth + 1) }
                return .skipped
            }
            var values: [ThriftStruct] = []
            values.reserveCapacity(Int(min(count, 1 << 16)))
            for _ in 0..<count { values.append(try readStruct(depth: depth + 1)) }
            return .list(values)
        case .map:
            let count = try varint()
            guard count > 0 else { return .skipped }
            let types = try byte()
            guard let key = ThriftType(rawValue: types >> 4), let value = ThriftType(rawValue: types & 0x0F),
                count <= UInt64(end - position) / 2, depth < Self.maximumDepth
            else { throw ParquetError(offset: fileOffset, "a malformed map") }
            for _ in 0..<count {
                _ = try read(key, depth: depth + 1)
                _ = try read(value, depth: depth + 1)
            }
            return .skipped
        case .structure: return .structure(try readStruct(depth: depth))
        }
    }

    private mutating func byte() throws -> UInt8 {
        guard position < end else { throw ParquetError(offset: fileOffset, "the header ends early") }
        defer { position += 1 }
        return bytes[position]
    }

    private mutating func varint() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let next = try byte()
            guard shift < 64 else { throw ParquetError(offset: fileOffset, "a varint longer than 64 bits") }
            result |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return result }
            shift += 7
        }
    }

    private mutating func zigzag() throws -> Int64 {
        let raw = try varint()
        return Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
    }
}

/// Writes compact-protocol structs: the caller opens and closes structs and writes fields in
/// increasing id order.
struct ThriftWriter {
    private(set) var bytes: [UInt8] = []
    private var lastIDs: [Int16] = [0]

    mutating func beginStruct() { lastIDs.append(0) }

    mutating func endStruct() {
        bytes.append(0)
        lastIDs.removeLast()
    }

    private mutating func field(_ id: Int16, _ type: ThriftType) {
        let delta = id - lastIDs[lastIDs.count - 1]
        if delta > 0 && delta <= 15 {
            bytes.append(UInt8(delta) << 4 | type.rawValue)
        } else {
            bytes.append(type.rawValue)
            zigzag(Int64(id))
        }
        lastIDs[lastIDs.count - 1] = id
    }

    mutating func int(_ id: Int16, _ value: Int64, _ type: ThriftType = .i64) {
        field(id, type)
        zigzag(value)
    }

    mutating func i32(_ id: Int16, _ value: Int) { int(id, Int64(value), .i32) }

    mutating func bool(_ id: Int16, _ value: Bool) { field(id, value ? .boolTrue : .boolFalse) }

    mutating func binary(_ id: Int16, _ value: some Collection<UInt8>) {
        field(id, .binary)
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    mutating func string(_ id: Int16, _ value: String) { binary(id, Array(value.utf8)) }

    /// A struct field: `body` writes its fields.
    mutating func structure(_ id: Int16, _ body: (inout ThriftWriter) -> Void) {
        field(id, .structure)
        beginStruct()
        body(&self)
        endStruct()
    }

    /// A list field of `count` elements of `element` type; `body` writes each (structs with
    /// `beginStruct`/`endStruct`, integers with `listInt`, strings with `listBinary`).
    mutating func list(_ id: Int16, _ element: ThriftType, count: Int, _ body: (inout ThriftWriter) -> Void) {
        field(id, .list)
        if count < 15 {
            bytes.append(UInt8(count) << 4 | element.rawValue)
        } else {
            bytes.append(0xF0 | element.rawValue)
            varint(UInt64(count))
        }
        body(&self)
    }

    mutating func listInt(_ value: Int64) { zigzag(value) }

    mutating func listBinary(_ value: some Collection<UInt8>) {
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    private mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    private mutating func zigzag(_ value: Int64) { varint(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }
}
