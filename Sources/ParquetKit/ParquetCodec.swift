import CSnappy
import CZlib
import CZstd

/// A column chunk's compression, by its number in Parquet's format.
public enum ParquetCodec: Int64, Sendable, CaseIterable {
    case uncompressed = 0
    case snappy = 1
    case gzip = 2
    case lzo = 3
    case brotli = 4
    case lz4 = 5
    case zstd = 6
    case lz4Raw = 7

    var name: String {
        switch self {
        case .uncompressed: "UNCOMPRESSED"
        case .snappy: "SNAPPY"
        case .gzip: "GZIP"
        case .lzo: "LZO"
        case .brotli: "BROTLI"
        case .lz4: "LZ4"
        case .zstd: "ZSTD"
        case .lz4Raw: "LZ4_RAW"
        }
    }

    /// Whether this reader can decompress it.
    var isRead: Bool { [.uncompressed, .snappy, .gzip, .zstd].contains(self) }

    /// `bytes` decompressed to exactly `size` bytes (the page header's word), or an error
    /// at `offset`: a page that decompresses to anything else is refused, so a hostile
    /// page can make the reader allocate no more than its header declared (itself bounded).
    func decompress(_ bytes: ArraySlice<UInt8>, to size: Int, offset: Int) throws -> [UInt8] {
        if self == .uncompressed {
            guard bytes.count == size else {
                throw ParquetError(offset: offset, "an uncompressed page of \(bytes.count) bytes declared as \(size)")
            }
            return Array(bytes)
        }
        // What the stream says of its own size, checked before the room for it is made.
        let stated: Int? = bytes.withUnsafeBytes { source in
            switch self {
            case .snappy:
                var length = 0
                let status = snappy_uncompressed_length(
                    source.baseAddress?.assumingMemoryBound(to: CChar.self), source.count, &length)
                return status == SNAPPY_OK ? length : -1
            case .zstd:
                let length = ZSTD_getFrameContentSize(source.baseAddress, source.count)
                // Unknown (a streamed frame): found out by decompressing into the room declared.
                if length == ZSTD_CONTENTSIZE_UNKNOWN { return nil }
                return length == ZSTD_CONTENTSIZE_ERROR || length > UInt64(Int.max) ? -1 : Int(length)
            default:
                return nil
            }
        }
        if let stated, stated != size {
            throw ParquetError(
                offset: offset,
                stated < 0 ? "a \(name) page that cannot be read" : "a \(name) page of \(stated) bytes declared as \(size)")
        }
        var output = [UInt8](repeating: 0, count: size)
        let produced: Int? = bytes.withUnsafeBytes { source in
            output.withUnsafeMutableBytes { target in
                let input = source.baseAddress?.assumingMemoryBound(to: CChar.self)
                switch self {
                case .snappy:
                    var length = 0
                    guard snappy_uncompressed_length(input, source.count, &length) == SNAPPY_OK, length == size else {
                        return nil
                    }
                    var written = size
                    let status = snappy_uncompress(
                        input, source.count, target.baseAddress?.assumingMemoryBound(to: CChar.self), &written)
                    return status == SNAPPY_OK ? written : nil
                case .zstd:
                    let written = ZSTD_decompress(target.baseAddress, size, source.baseAddress, source.count)
                    return ZSTD_isError(written) != 0 ? nil : written
                case .gzip:
                    return Self.gunzip(source, into: target)
                default:
                    return nil
                }
            }
        }
        guard let produced, produced == size else {
            throw ParquetError(offset: offset, "a \(name) page that does not decompress to the \(size) bytes it declares")
        }
        return output
    }

    /// A gzip stream inflated into `target`, which it must fill exactly: the count written,
    /// or nil when the stream is broken or longer.
    private static func gunzip(_ source: UnsafeRawBufferPointer, into target: UnsafeMutableRawBufferPointer) -> Int? {
        var stream = z_stream()
        guard inflateInit2_(&stream, 15 + 32, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else { return nil }
        defer { inflateEnd(&stream) }
        stream.next_in = UnsafeMutablePointer(mutating: source.baseAddress?.assumingMemoryBound(to: Bytef.self))
        stream.avail_in = uInt(source.count)
        stream.next_out = target.baseAddress?.assumingMemoryBound(to: Bytef.self)
        stream.avail_out = uInt(target.count)
        let status = inflate(&stream, Z_FINISH)
        guard status == Z_STREAM_END else { return nil }
        return target.count - Int(stream.avail_out)
    }

    /// `bytes` compressed (the writer uses `snappy` or `uncompressed`).
    func compress(_ bytes: [UInt8]) -> [UInt8] {
        switch self {
        case .snappy:
            var length = snappy_max_compressed_length(bytes.count)
            var output = [UInt8](repeating: 0, count: length)
            let status = bytes.withUnsafeBytes { source in
                output.withUnsafeMutableBytes { target in
                    snappy_compress(
                        source.baseAddress?.assumingMemoryBound(to: CChar.self), source.count,
                        target.baseAddress?.assumingMemoryBound(to: CChar.self), &length)
                }
            }
            precondition(status == SNAPPY_OK, "snappy_compress failed with room for its largest output")
            output.removeSubrange(length...)
            return output
        default:
            return bytes
        }
    }
}
