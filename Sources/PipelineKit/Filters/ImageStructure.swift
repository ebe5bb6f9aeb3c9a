import Foundation

/// A walk over an input's container structure before libvips sees it: every length,
/// offset and count a header declares must fit in the bytes that are actually there.
///
/// Decoders trust declared sizes: libpng allocates a chunk's declared length before
/// reading it (a 1 MB PNG whose `tEXt` chunk declares 2 GB took 2.1 GB of memory and 25 s
/// to fail), libtiff sizes arrays from tag counts, libheif reads item extents from `iloc`.
/// A size that cannot fit in the file is corruption, so the item fails as `decode` at once
/// with the format, what is wrong and the offset. Only structure is checked here; pixel
/// data is the decoders' job (with `fail_on` set so that their warnings fail too).
enum ImageStructure {
    /// Throws `ItemFailure(.decode, …)` when the container does not hold together.
    static func check(_ data: Data, format: ImageFormat) throws(ItemFailure) {
        let problem: Malformed? = data.withUnsafeBytes { raw -> ImageStructure.Malformed? in
            let walker = Walker(bytes: raw)
            do throws(ImageStructure.Malformed) {
                switch format {
                case .png: try walker.png()
                case .jpeg: try walker.jpeg()
                case .gif: try walker.gif()
                case .webp: try walker.webp()
                case .tiff: try walker.tiff()
                case .heif, .avif: try walker.isoMedia()
                }
                return nil
            } catch {
                return error
            }
        }
        if let problem {
            throw ItemFailure(.decode, "malformed \(format.rawValue): \(problem.what) (at byte offset \(problem.offset))")
        }
    }

    struct Malformed: Error {
        let what: String
        let offset: Int
    }
}

/// Reads a container's bytes, checking every declared size against what is left.
private struct Walker {
    let bytes: UnsafeRawBufferPointer
    var count: Int { bytes.count }

    init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    func fail(_ what: String, at offset: Int) -> ImageStructure.Malformed {
        ImageStructure.Malformed(what: what, offset: offset)
    }

    /// Fails unless `length` bytes from `offset` are inside the file.
    func need(_ length: Int, at offset: Int, for what: @autoclosure () -> String) throws(ImageStructure.Malformed) {
        guard offset >= 0, length >= 0, offset <= count, length <= count - offset else {
            throw fail("\(what()) needs \(length) bytes but \(max(0, count - offset)) are left", at: offset)
        }
    }

    func u8(_ offset: Int) -> Int { Int(bytes[offset]) }
    func be16(_ offset: Int) -> Int { Int(bytes[offset]) << 8 | Int(bytes[offset + 1]) }
    func le16(_ offset: Int) -> Int { Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 }
    func be32(_ offset: Int) -> Int { be16(offset) << 16 | be16(offset + 2) }
    func le32(_ offset: Int) -> Int { le16(offset) | le16(offset + 2) << 16 }
    func be64(_ offset: Int) -> UInt64 { UInt64(be32(offset)) << 32 | UInt64(be32(offset + 4)) }
    func le64(_ offset: Int) -> UInt64 { UInt64(le32(offset)) | UInt64(le32(offset + 4)) << 32 }

    func fourCC(_ offset: Int) -> String {
        String(
            (0..<4).map { index -> Character in
                let byte = bytes[offset + index]
                return (0x20...0x7E).contains(byte) ? Character(UnicodeScalar(byte)) : "?"
            })
    }

    // MARK: PNG

    /// Chunks from the signature to IEND: IHDR first and sane, each chunk's length within
    /// the bytes left, at least one IDAT.
    func png() throws(ImageStructure.Malformed) {
        var offset = 8
        var sawData = false
        while true {
            try need(12, at: offset, for: "a chunk header (the file ends before IEND)")
            let length = be32(offset)
            let type = fourCC(offset + 4)
            guard
                (0..<4).allSatisfy({ index in
                    let byte = bytes[offset + 4 + index]
                    return (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                })
            else { throw fail("chunk type \"\(type)\" is not four letters", at: offset + 4) }
            guard length <= 0x7FFF_FFFF, length <= count - offset - 12 else {
                throw fail("chunk \(type) declares \(length) bytes but \(count - offset - 12) are left", at: offset)
            }
            if offset == 8 {
                guard type == "IHDR", length == 13 else {
                    throw fail("the first chunk is \(type), not a 13-byte IHDR", at: offset)
                }
                try pngHeader(at: offset + 8)
            } else if type == "IHDR" {
                throw fail("a second IHDR", at: offset)
            }
            if type == "IDAT" { sawData = true }
            if type == "IEND" {
                guard sawData else { throw fail("IEND before any IDAT", at: offset) }
                return
            }
            offset += 12 + length
        }
    }

    private func pngHeader(at offset: Int) throws(ImageStructure.Malformed) {
        let width = be32(offset)
        let height = be32(offset + 4)
        let depth = u8(offset + 8)
        let colour = u8(offset + 9)
        guard (1...0x7FFF_FFFF).contains(width), (1...0x7FFF_FFFF).contains(height) else {
            throw fail("IHDR size \(width)×\(height) is out of range", at: offset)
        }
        let depths: [Int: [Int]] = [0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16]]
        guard depths[colour]?.contains(depth) == true else {
            throw fail("IHDR colour type \(colour) with bit depth \(depth) is not a PNG format", at: offset + 8)
        }
        guard u8(offset + 10) == 0, u8(offset + 11) == 0, u8(offset + 12) <= 1 else {
            throw fail("IHDR compression, filter or interlace method is unknown", at: offset + 10)
        }
    }

    // MARK: JPEG

    /// Marker segments from SOI to EOI: each segment within the file, a sane frame header
    /// before the first scan, the entropy-coded data skipped up to the next marker.
    func jpeg() throws(ImageStructure.Malformed) {
        var offset = 2
        var sawFrame = false
        var sawScan = false
        while true {
            try need(2, at: offset, for: "a marker (the file ends before the end-of-image marker)")
            guard bytes[offset] == 0xFF else {
                throw fail(String(format: "expected a marker, found byte 0x%02X", bytes[offset]), at: offset)
            }
            while offset + 2 < count, bytes[offset + 1] == 0xFF { offset += 1 }  // fill bytes
            let marker = bytes[offset + 1]
            let name = String(format: "FF%02X", marker)
            switch marker {
            case 0xD9:
                guard sawScan else { throw fail("end-of-image marker before any scan", at: offset) }
                return
            case 0x01, 0xD0...0xD7:
                offset += 2
                continue
            case 0x00, 0xD8:
                throw fail("marker \(name) out of place", at: offset)
            default:
                break
            }
            try need(4, at: offset, for: "segment \(name)")
            let length = be16(offset + 2)
            guard length >= 2 else { throw fail("segment \(name) declares length \(length)", at: offset) }
            guard length <= count - offset - 2 else {
                throw fail("segment \(name) declares \(length) bytes but \(count - offset - 2) are left", at: offset)
            }
            switch marker {
            case 0xC0...0xCF where ![0xC4, 0xC8, 0xCC].contains(marker):
                try jpegFrame(at: offset, length: length, name: name)
                sawFrame = true
            case 0xDA:
                guard sawFrame else { throw fail("scan before a frame header", at: offset) }
                let components = length >= 3 ? u8(offset + 4) : 0
                guard (1...4).contains(components), length == 6 + 2 * components else {
                    throw fail("scan header of \(length) bytes for \(components) components", at: offset)
                }
                offset = entropyCodedDataEnd(from: offset + 2 + length)
                sawScan = true
                continue
            default:
                break
            }
            offset += 2 + length
        }
    }

    private func jpegFrame(at offset: Int, length: Int, name: String) throws(ImageStructure.Malformed) {
        guard length >= 8 else { throw fail("frame header \(name) of \(length) bytes", at: offset) }
        let height = be16(offset + 5)
        let width = be16(offset + 7)
        let components = u8(offset + 9)
        guard width > 0, height > 0 else { throw fail("frame size \(width)×\(height)", at: offset) }
        guard (1...4).contains(components), length == 8 + 3 * components else {
            throw fail("frame header of \(length) bytes for \(components) components", at: offset)
        }
        for component in 0..<components {
            let sampling = u8(offset + 11 + 3 * component)
            guard (1...4).contains(sampling >> 4), (1...4).contains(sampling & 15) else {
                throw fail(String(format: "component sampling factors 0x%02X", sampling), at: offset + 11 + 3 * component)
            }
        }
    }

    /// The offset of the first marker after entropy-coded data (stuffed `FF 00`, restart
    /// markers and fill bytes are data), or the end of the file.
    private func entropyCodedDataEnd(from start: Int) -> Int {
        guard let base = bytes.baseAddress else { return count }
        var offset = start
        while offset + 1 < count {
            guard let found = memchr(base + offset, 0xFF, count - offset - 1) else { return count }
            offset = base.distance(to: UnsafeRawPointer(found))
            let next = bytes[offset + 1]
            if next == 0x00 || (0xD0...0xD7).contains(next) || next == 0xFF {
                offset += next == 0xFF ? 1 : 2
                continue
            }
            return offset
        }
        return count
    }

    // MARK: GIF

    /// Screen descriptor, colour tables, extension and image blocks with their sub-blocks,
    /// up to the trailer.
    func gif() throws(ImageStructure.Malformed) {
        try need(13, at: 0, for: "the screen descriptor")
        var offset = 13
        let flags = u8(10)
        if flags & 0x80 != 0 {
            let size = 3 << ((flags & 7) + 1)
            try need(size, at: offset, for: "the global colour table")
            offset += size
        }
        while true {
            try need(1, at: offset, for: "a block (the file ends before the trailer)")
            switch bytes[offset] {
            case 0x3B:
                return
            case 0x21:
                try need(2, at: offset, for: "an extension")
                offset = try gifSubBlocks(from: offset + 2)
            case 0x2C:
                try need(10, at: offset, for: "an image descriptor")
                let flags = u8(offset + 9)
                offset += 10
                if flags & 0x80 != 0 {
                    let size = 3 << ((flags & 7) + 1)
                    try need(size, at: offset, for: "a local colour table")
                    offset += size
                }
                try need(1, at: offset, for: "the LZW code size")
                guard (1...11).contains(u8(offset)) else { throw fail("LZW code size \(u8(offset))", at: offset) }
                offset = try gifSubBlocks(from: offset + 1)
            default:
                throw fail(String(format: "unknown block 0x%02X", bytes[offset]), at: offset)
            }
        }
    }

    private func gifSubBlocks(from start: Int) throws(ImageStructure.Malformed) -> Int {
        var offset = start
        while true {
            try need(1, at: offset, for: "a sub-block size")
            let size = u8(offset)
            if size == 0 { return offset + 1 }
            try need(size, at: offset + 1, for: "a \(size)-byte sub-block")
            offset += 1 + size
        }
    }

    // MARK: WebP

    /// The RIFF size against the file, then each chunk within the RIFF payload.
    func webp() throws(ImageStructure.Malformed) {
        let riffSize = le32(4)
        guard riffSize >= 4, riffSize <= count - 8 else {
            throw fail("RIFF size \(riffSize) but the file holds \(count - 8) bytes after the header", at: 4)
        }
        let end = 8 + riffSize
        var offset = 12
        var sawImage = false
        while offset < end {
            guard offset + 8 <= end else { throw fail("a chunk header crosses the end of the RIFF payload", at: offset) }
            let type = fourCC(offset)
            let size = le32(offset + 4)
            guard size <= end - offset - 8 else {
                throw fail("chunk \(type) declares \(size) bytes but \(end - offset - 8) are left", at: offset)
            }
            if ["VP8 ", "VP8L", "ANMF"].contains(type) { sawImage = true }
            offset += 8 + size + size % 2
        }
        guard sawImage else { throw fail("no VP8, VP8L or ANMF chunk", at: 12) }
    }

    // MARK: TIFF

    /// The IFD chain (classic and BigTIFF): each IFD and each entry's out-of-line value
    /// within the file, strips and tiles within the file, no IFD visited twice.
    func tiff() throws(ImageStructure.Malformed) {
        try need(8, at: 0, for: "the TIFF header")
        let little = bytes[0] == 0x49
        let big = (little ? le16(2) : be16(2)) == 43
        func word(_ offset: Int) -> Int { little ? le16(offset) : be16(offset) }
        func long(_ offset: Int) -> Int { little ? le32(offset) : be32(offset) }
        func offsetValue(_ offset: Int) -> Int {
            guard big else { return long(offset) }
            let value = little ? le64(offset) : be64(offset)
            return value > UInt64(Int.max) ? Int.max : Int(value)
        }
        var ifd: Int
        if big {
            try need(16, at: 0, for: "the BigTIFF header")
            guard word(4) == 8, word(6) == 0 else { throw fail("BigTIFF offset size \(word(4))", at: 4) }
            ifd = offsetValue(8)
        } else {
            ifd = long(4)
        }
        let entrySize = big ? 20 : 12
        let inlineSize = big ? 8 : 4
        var visited = Set<Int>()
        while ifd != 0 {
            guard visited.insert(ifd).inserted, visited.count <= 1024 else {
                throw fail("the IFD chain loops or is longer than 1024", at: ifd)
            }
            try need(big ? 8 : 2, at: ifd, for: "an IFD's entry count")
            let entries = big ? offsetValue(ifd) : word(ifd)
            let first = ifd + (big ? 8 : 2)
            guard entries <= (count - first) / entrySize else {
                throw fail("IFD declares \(entries) entries but the file holds \(max(0, count - first) / entrySize)", at: ifd)
            }
            try need(entries * entrySize + inlineSize, at: first, for: "an IFD of \(entries) entries")
            var tags: [Int: (type: Int, count: Int, values: Int)] = [:]
            for index in 0..<entries {
                let entry = first + index * entrySize
                let tag = word(entry)
                let type = word(entry + 2)
                let valueCount = big ? offsetValue(entry + 4) : long(entry + 4)
                let field = entry + (big ? 12 : 8)
                let unit =
                    [1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8, 17: 8, 18: 8][type]
                    ?? 0
                let (size, overflow) = valueCount.multipliedReportingOverflow(by: max(unit, 1))
                guard !overflow, size <= count else {
                    throw fail("tag \(tag) declares \(valueCount) values, more than the file holds", at: entry)
                }
                var values = field
                if size > inlineSize {
                    values = offsetValue(field)
                    try need(size, at: values, for: "tag \(tag)'s \(valueCount) values")
                }
                tags[tag] = (type, valueCount, values)
            }
            for (offsets, counts, what) in [(273, 279, "strip"), (324, 325, "tile")] {
                guard let offsetTag = tags[offsets] else { continue }
                guard let countTag = tags[counts], countTag.count == offsetTag.count else {
                    throw fail("\(what) offsets without a matching \(what) byte counts tag", at: ifd)
                }
                func value(_ entry: (type: Int, count: Int, values: Int), _ index: Int) -> Int {
                    switch entry.type {
                    case 3: word(entry.values + 2 * index)
                    case 16: big ? offsetValue(entry.values + 8 * index) : Int.max
                    default: long(entry.values + 4 * index)
                    }
                }
                for index in 0..<offsetTag.count {
                    let start = value(offsetTag, index)
                    let length = value(countTag, index)
                    guard start <= count, length <= count - start else {
                        throw fail(
                            "\(what) \(index) at \(start) of \(length) bytes runs past the end of the file (\(count) bytes)",
                            at: ifd)
                    }
                }
            }
            ifd = offsetValue(first + entries * entrySize)
        }
        guard !visited.isEmpty else { throw fail("no image file directory", at: 4) }
    }

    // MARK: HEIF / AVIF

    /// ISO media boxes: each box within its parent, `meta`'s children walked, and every
    /// item extent in `iloc` that points into the file within the file.
    func isoMedia() throws(ImageStructure.Malformed) {
        try boxes(from: 0, to: count, depth: 0)
    }

    private func boxes(from start: Int, to end: Int, depth: Int) throws(ImageStructure.Malformed) {
        var offset = start
        while offset < end {
            guard end - offset >= 8 else { throw fail("a box header crosses the end of its parent", at: offset) }
            var size = be32(offset)
            let type = fourCC(offset + 4)
            var header = 8
            if size == 1 {
                guard end - offset >= 16 else { throw fail("box \(type)'s 64-bit size crosses the end", at: offset) }
                let large = be64(offset + 8)
                size = large > UInt64(Int.max) ? Int.max : Int(large)
                header = 16
            } else if size == 0 {
                size = end - offset
            }
            guard size >= header, size <= end - offset else {
                throw fail("box \(type) declares \(size) bytes but \(end - offset) are left", at: offset)
            }
            let body = offset + header
            switch type {
            case "meta" where depth < 4:
                try boxes(from: body + 4, to: offset + size, depth: depth + 1)
            case "iprp" where depth < 4, "ipco" where depth < 4, "dinf" where depth < 4:
                try boxes(from: body, to: offset + size, depth: depth + 1)
            case "iloc":
                try itemLocations(from: body, to: offset + size)
            default:
                break
            }
            offset += size
        }
    }

    private func itemLocations(from start: Int, to end: Int) throws(ImageStructure.Malformed) {
        var offset = start
        func read(_ width: Int) throws(ImageStructure.Malformed) -> Int {
            guard width <= end - offset else { throw fail("iloc ends inside an item", at: offset) }
            defer { offset += width }
            switch width {
            case 0: return 0
            case 2: return be16(offset)
            case 4: return be32(offset)
            case 8:
                let value = be64(offset)
                return value > UInt64(Int.max) ? Int.max : Int(value)
            default: throw fail("iloc field width \(width)", at: offset)
            }
        }
        let version = try read(4) >> 24
        guard version <= 2 else { throw fail("iloc version \(version)", at: start) }
        let sizes = try read(2)
        let offsetSize = sizes >> 12
        let lengthSize = sizes >> 8 & 15
        let baseSize = sizes >> 4 & 15
        let indexSize = version >= 1 ? sizes & 15 : 0
        let items = try read(version < 2 ? 2 : 4)
        for _ in 0..<items {
            _ = try read(version < 2 ? 2 : 4)
            let method = version >= 1 ? try read(2) & 15 : 0
            _ = try read(2)
            let base = try read(baseSize)
            let extents = try read(2)
            for _ in 0..<extents {
                let at = offset
                _ = try read(indexSize)
                let extentOffset = try read(offsetSize)
                let length = try read(lengthSize)
                guard method == 0 else { continue }
                let (position, overflow) = base.addingReportingOverflow(extentOffset)
                guard !overflow, position <= count, length <= count - position else {
                    throw fail(
                        "iloc extent at \(position) of \(length) bytes runs past the end of the file (\(count) bytes)", at: at)
                }
            }
        }
    }
}
