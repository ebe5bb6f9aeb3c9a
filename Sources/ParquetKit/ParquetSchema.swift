/// Why a Parquet file cannot be read: what was wrong and at which byte of the file.
public struct ParquetError: Error, CustomStringConvertible, Sendable {
    public let offset: Int
    public let message: String

    init(offset: Int, _ message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { "at byte \(offset): \(message)" }
}

/// A column's physical type, by its number in Parquet's format.
public enum ParquetPhysicalType: Int64, Sendable {
    case boolean = 0
    case int32 = 1
    case int64 = 2
    case int96 = 3
    case float = 4
    case double = 5
    case byteArray = 6
    case fixedLenByteArray = 7

    var name: String {
        switch self {
        case .boolean: "BOOLEAN"
        case .int32: "INT32"
        case .int64: "INT64"
        case .int96: "INT96"
        case .float: "FLOAT"
        case .double: "DOUBLE"
        case .byteArray: "BYTE_ARRAY"
        case .fixedLenByteArray: "FIXED_LEN_BYTE_ARRAY"
        }
    }
}

/// One leaf column of a file's schema.
public struct ParquetColumn: Sendable, Equatable {
    /// The column's name: its path joined with dots for a column inside a group.
    public let name: String
    public let type: ParquetPhysicalType
    /// FIXED_LEN_BYTE_ARRAY's length.
    public let length: Int
    public let optional: Bool
    /// Annotated as text (STRING, ENUM or JSON).
    public let isText: Bool
    /// Annotated as an unsigned integer (UINT_8 … UINT_64, or INTEGER unsigned).
    public let isUnsigned: Bool
    /// Inside a group or repeated: a column of a nested table, which this reader leaves
    /// alone (it may be there; it cannot be asked for).
    public let isNested: Bool

    public init(name: String, type: ParquetPhysicalType, optional: Bool = true, isText: Bool = false) {
        self.name = name
        self.type = type
        self.length = 0
        self.optional = optional
        self.isText = isText
        self.isUnsigned = false
        self.isNested = false
    }

    init(
        name: String, type: ParquetPhysicalType, length: Int, optional: Bool, isText: Bool, isUnsigned: Bool, isNested: Bool
    ) {
        self.name = name
        self.type = type
        self.length = length
        self.optional = optional
        self.isText = isText
        self.isUnsigned = isUnsigned
        self.isNested = isNested
    }

    /// A text column (BYTE_ARRAY annotated STRING).
    public static func text(_ name: String, optional: Bool = true) -> ParquetColumn {
        ParquetColumn(name: name, type: .byteArray, optional: optional, isText: true)
    }
}

/// One value of a column. INT32 and INT64 are `int` (an unsigned INT64 is `uint`), FLOAT and
/// DOUBLE `double`, BYTE_ARRAY and FIXED_LEN_BYTE_ARRAY `bytes`.
public enum ParquetValue: Sendable, Equatable, Hashable {
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case bytes([UInt8])

    public static func text(_ text: String) -> ParquetValue { .bytes(Array(text.utf8)) }
}

/// Parquet's encodings, by number.
enum ParquetEncoding: Int64 {
    case plain = 0
    case plainDictionary = 2
    case rle = 3
    case bitPacked = 4
    case deltaBinaryPacked = 5
    case deltaLengthByteArray = 6
    case
        deltaByteArray = 7
    case rleDictionary = 8
    case byteStreamSplit = 9

    static func name(_ raw: Int64) -> String {
        switch ParquetEncoding(rawValue: raw) {
        case .plain: "PLAIN"
        case .plainDictionary: "PLAIN_DICTIONARY"
        case .rle: "RLE"
        case .bitPacked: "BIT_PACKED"
        case .deltaBinaryPacked: "DELTA_BINARY_PACKED"
        case .deltaLengthByteArray: "DELTA_LENGTH_BYTE_ARRAY"
        case .deltaByteArray: "DELTA_BYTE_ARRAY"
        case .rleDictionary: "RLE_DICTIONARY"
        case .byteStreamSplit: "BYTE_STREAM_SPLIT"
        case nil: "encoding \(raw)"
        }
    }
}

/// The RLE / bit-packed hybrid of definition levels, dictionary indices and RLE booleans.
enum HybridRLE {
    /// `count` values of `bitWidth` bits from `bytes[range]`; an error at `offset` (the
    /// file offset of `range.lowerBound`) when the runs end before `count` values.
    static func decode(
        _ bytes: [UInt8], _ range: Range<Int>, bitWidth: Int, count: Int, offset: Int
    ) throws -> [UInt32] {
        guard (0...32).contains(bitWidth) else { throw ParquetError(offset: offset, "a bit width of \(bitWidth)") }
        var values: [UInt32] = []
        values.reserveCapacity(count)
        var position = range.lowerBound
        let end = range.upperBound
        let byteWidth = (bitWidth + 7) / 8
        func fail(_ what: String) -> ParquetError {
            ParquetError(offset: offset + (position - range.lowerBound), what)
        }
        while values.count < count {
            var header: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard position < end, shift < 64 else {
                    throw fail("the levels or indices end after \(values.count) of \(count) values")
                }
                let byte = bytes[position]
                position += 1
                header |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { break }
                shift += 7
            }
            if header & 1 == 0 {
                let repeats = Int(min(header >> 1, UInt64(count - values.count)))
                guard end - position >= byteWidth else { throw fail("a run's value past the end") }
                var value: UInt32 = 0
                for index in 0..<byteWidth { value |= UInt32(bytes[position + index]) << (8 * index) }
                position += byteWidth
                values.append(contentsOf: repeatElement(value, count: repeats))
            } else {
                let groups = header >> 1
                guard groups <= UInt64(end - position), Int(groups) * bitWidth <= end - position else {
                    throw fail("a bit-packed run past the end")
                }
                let wanted = min(Int(groups) * 8, count - values.count)
                let mask: UInt64 = bitWidth == 32 ? 0xFFFF_FFFF : (1 << UInt64(bitWidth)) - 1
                let runEnd = position + Int(groups) * bitWidth
                for index in 0..<wanted {
                    let bit = index * bitWidth
                    let first = position + (bit >> 3)
                    var window: UInt64 = 0
                    for byte in 0..<min(5, runEnd - first) { window |= UInt64(bytes[first + byte]) << UInt64(8 * byte) }
                    values.append(UInt32((window >> UInt64(bit & 7)) & mask))
                }
                position += Int(groups) * bitWidth
            }
        }
        return values
    }

    /// `values` (each 0 or 1) as runs of one bit width 1: the encoding of definition levels
    /// the writer uses.
    static func encodeBits(_ values: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while index < values.count {
            var end = index + 1
            while end < values.count && values[end] == values[index] { end += 1 }
            var header = UInt64(end - index) << 1
            while header >= 0x80 {
                out.append(UInt8(header & 0x7F) | 0x80)
                header >>= 7
            }
            out.append(UInt8(header))
            out.append(values[index])
            index = end
        }
        return out
    }
}
