import Foundation

/// What an input's header says about the picture and how its decoder will hold it, read
/// by imgpipe itself from a few bytes of the file (never by decoding, and never by
/// libvips: the run reads it before handing the item to a pixel helper, so a hostile
/// header must not be able to crash it). `MemoryEstimate` turns it into bytes.
///
/// Only what decides memory is read: the size, the bands and bytes per sample libvips will
/// load, and whether the decoder must hold the whole picture (an interlaced PNG, a
/// progressive JPEG's coefficients, GIF, WebP, HEIF/AVIF, a TIFF strip or tile row). The
/// file's structure is checked later, in the pixel stage (`ImageStructure`).
struct ImageHeader: Sendable, Equatable {
    /// How the decoder holds the picture while it decodes.
    enum Holding: Sendable, Equatable {
        /// A few rows at a time (a baseline JPEG, a non-interlaced PNG).
        case rows
        /// The whole picture at `bytes` (an interlaced PNG, a progressive JPEG's DCT
        /// coefficients, a GIF frame, HEIF/AVIF).
        case whole(bytes: Int)
        /// `bytes` for a strip or a row of tiles (TIFF), the whole picture when it is in one strip.
        case band(bytes: Int)
    }

    let format: ImageFormat
    let width: Int
    let height: Int
    /// Bands as libvips loads them (a palette PNG with transparency: 4).
    let bands: Int
    let bytesPerSample: Int
    let holding: Holding
    /// How a person would name it: `16-bit RGBA interlaced PNG`.
    let kind: String
    /// A lossy WebP scales while decoding (`vips_thumbnail`'s shrink-on-load) and holds
    /// the picture at its load size; a lossless one also holds the whole input (libwebp's
    /// VP8L decoder keeps width × height 32-bit pixels).
    var scalesOnLoad = false

    var pixels: Int { product(width, height) }

    /// What reading a header came to.
    enum Reading: Sendable, Equatable {
        case header(ImageHeader)
        /// Not a format imgpipe decodes (it fails on its first bytes, before any decoding).
        case notAnImage
        /// An accepted format whose header cannot be read here (damaged, or cut short).
        case unreadable
    }

    /// Reads the header of the file at `path` (a few small reads: the first bytes, the
    /// chunks or segments before the picture's header, a TIFF's first directory).
    static func read(path: String) -> Reading {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .notAnImage }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return .notAnImage }
        return parse(
            HeaderBytes(size: Int(info.st_size)) { offset, count in
                var buffer = [UInt8](repeating: 0, count: count)
                let got = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, count, off_t(offset)) }
                return got < 0 ? [] : Array(buffer.prefix(got))
            })
    }

    /// The header of bytes in memory.
    static func read(data: Data) -> Reading {
        parse(
            HeaderBytes(size: data.count) { offset, count in
                guard offset < data.count else { return [] }
                let start = data.startIndex + offset
                return [UInt8](data[start..<min(data.endIndex, start + count)])
            })
    }

    /// The longest side read: libvips (8.14) opens nothing over 10,000,000 pixels a side, and
    /// larger declared sides would only risk overflow in the estimate.
    static let maxSide = 1 << 24

    static func parse(_ bytes: HeaderBytes) -> Reading {
        guard case .accepted(let format) = ImageFormat.sniff(bytes.at(0, 64)) else { return .notAnImage }
        let header: ImageHeader?
        switch format {
        case .png: header = png(bytes)
        case .jpeg: header = jpeg(bytes)
        case .gif: header = gif(bytes)
        case .webp: header = webp(bytes)
        case .tiff: header = tiff(bytes)
        case .heif, .avif: header = isoMedia(bytes, format: format)
        }
        guard let header, (1...maxSide).contains(header.width), (1...maxSide).contains(header.height) else { return .unreadable }
        return .header(header)
    }

    static func colourName(_ bands: Int) -> String {
        switch bands {
        case 1: "grey"
        case 2: "grey+alpha"
        case 3: "RGB"
        case 4: "RGBA"
        default: "\(bands)-band"
        }
    }

    // MARK: PNG

    private static func png(_ bytes: HeaderBytes) -> ImageHeader? {
        let ihdr = bytes.at(8, 25)
        guard ihdr.count == 25, String(decoding: ihdr[4..<8], as: UTF8.self) == "IHDR" else { return nil }
        let width = bytes.be32(ihdr, 8)
        let height = bytes.be32(ihdr, 12)
        guard width <= maxSide, height <= maxSide else { return nil }
        let depth = Int(ihdr[16])
        let colour = Int(ihdr[17])
        let interlaced = ihdr[20] == 1
        // Transparency for a grey, RGB or palette picture is a tRNS chunk before the first IDAT.
        var transparency = false
        var offset = 33
        for _ in 0..<64 {
            let chunk = bytes.at(offset, 8)
            guard chunk.count == 8 else { break }
            let type = String(decoding: chunk[4..<8], as: UTF8.self)
            if type == "tRNS" { transparency = true }
            if type == "IDAT" || type == "IEND" { break }
            offset += 12 + bytes.be32(chunk, 0)
        }
        let bands: Int
        switch colour {
        case 0: bands = transparency ? 2 : 1
        case 2, 3: bands = transparency ? 4 : 3
        case 4: bands = 2
        case 6: bands = 4
        default: return nil
        }
        let sample = depth == 16 ? 2 : 1
        let bits = colour == 3 ? "8-bit" : depth == 16 ? "16-bit" : "8-bit"
        return ImageHeader(
            format: .png, width: width, height: height, bands: bands, bytesPerSample: sample,
            holding: interlaced ? .whole(bytes: product(width, height, bands, sample)) : .rows,
            kind: "\(bits) \(colourName(bands))\(interlaced ? " interlaced" : "") PNG")
    }

    // MARK: JPEG

    /// The first frame header (SOFn), found by walking the marker segments before it.
    private static func jpeg(_ bytes: HeaderBytes) -> ImageHeader? {
        var offset = 2
        for _ in 0..<1024 {
            var marker = bytes.at(offset, 2)
            guard marker.count == 2, marker[0] == 0xFF else { return nil }
            while marker[1] == 0xFF {
                offset += 1
                marker = bytes.at(offset, 2)
                guard marker.count == 2 else { return nil }
            }
            let code = Int(marker[1])
            if code == 0x01 || (0xD0...0xD7).contains(code) {
                offset += 2
                continue
            }
            guard code != 0xD9, code != 0xDA else { return nil }
            let lengthBytes = bytes.at(offset + 2, 2)
            guard lengthBytes.count == 2 else { return nil }
            let length = bytes.be16(lengthBytes, 0)
            if (0xC0...0xCF).contains(code), ![0xC4, 0xC8, 0xCC].contains(code) {
                return jpegFrame(bytes.at(offset + 4, max(0, length - 2)), marker: code)
            }
            offset += 2 + length
        }
        return nil
    }

    private static func jpegFrame(_ frame: [UInt8], marker: Int) -> ImageHeader? {
        guard frame.count >= 6 else { return nil }
        let height = Int(frame[1]) << 8 | Int(frame[2])
        let width = Int(frame[3]) << 8 | Int(frame[4])
        let components = Int(frame[5])
        guard (1...4).contains(components), frame.count >= 6 + 3 * components else { return nil }
        var sampling: [(h: Int, v: Int)] = []
        for component in 0..<components {
            let factors = Int(frame[7 + 3 * component])
            sampling.append((h: max(1, factors >> 4), v: max(1, factors & 15)))
        }
        let maxH = sampling.map { $0.h }.max() ?? 1
        let maxV = sampling.map { $0.v }.max() ?? 1
        // Progressive (and lossless, hierarchical) frames are decoded from a buffer of every
        // block's DCT coefficients (64 of 16 bits each), kept for the whole picture.
        let sequential = [0xC0, 0xC1, 0xC9].contains(marker)
        let progressive = [0xC2, 0xC6, 0xCA, 0xCE].contains(marker)
        var coefficients = 0
        for component in sampling {
            // Blocks per component, rounded up to whole MCUs as libjpeg allocates them.
            let mcuWidth = (width + 8 * maxH - 1) / (8 * maxH)
            let mcuHeight = (height + 8 * maxV - 1) / (8 * maxV)
            coefficients += product(mcuWidth, component.h, mcuHeight, component.v, 64 * 2)
        }
        let name = components == 4 ? "CMYK" : components == 1 ? "grey" : "\(components)-component"
        let style = sequential ? "baseline" : progressive ? "progressive" : "lossless or hierarchical"
        return ImageHeader(
            format: .jpeg, width: width, height: height, bands: components, bytesPerSample: 1,
            holding: sequential ? .rows : .whole(bytes: coefficients),
            kind: "\(name) \(style) JPEG")
    }

    // MARK: GIF

    /// The logical screen, grown to the first frame's extent: libnsgif (libvips' GIF loader)
    /// lets the first image descriptor enlarge the canvas it decodes into (a 44 KB file whose
    /// screen says 16×16 and whose first frame is 8000×8000 is decoded at 8000×8000); later
    /// frames are clipped to that canvas. The blocks before the first descriptor (colour
    /// table, extensions and their sub-blocks) are skipped by their lengths, read in bounded
    /// chunks; a file with more than `gifWalk` bytes before it is unreadable here (it counts
    /// as the whole budget).
    private static func gif(_ bytes: HeaderBytes) -> ImageHeader? {
        let screen = bytes.at(6, 5)
        guard screen.count == 5 else { return nil }
        let screenWidth = bytes.le16(screen, 0)
        let screenHeight = bytes.le16(screen, 2)
        var width = screenWidth
        var height = screenHeight
        var reader = ChunkedBytes(bytes)
        var offset = 13
        if screen[4] & 0x80 != 0 { offset += 3 << ((Int(screen[4]) & 7) + 1) }
        walk: while true {
            guard offset <= gifWalk else { return nil }
            // A file cut short or damaged before its first frame: the screen (the structure
            // check fails it before any decoding).
            guard let block = reader.byte(at: offset) else { break }
            switch block {
            case 0x21:
                // Extension: label, then data sub-blocks up to an empty one.
                offset += 2
                while offset <= gifWalk {
                    guard let size = reader.byte(at: offset) else { break walk }
                    offset += 1 + Int(size)
                    if size == 0 { break }
                }
            case 0x2C:
                let descriptor = bytes.at(offset, 10)
                guard descriptor.count == 10 else { break walk }
                width = max(width, bytes.le16(descriptor, 1) + bytes.le16(descriptor, 5))
                height = max(height, bytes.le16(descriptor, 3) + bytes.le16(descriptor, 7))
                break walk
            default:
                // The trailer (no frame), or damage.
                break walk
            }
        }
        let grown = width > screenWidth || height > screenHeight
        // libnsgif decodes a frame into a 32-bit canvas, and libvips keeps its own copy.
        return ImageHeader(
            format: .gif, width: width, height: height, bands: 4, bytesPerSample: 1,
            holding: .whole(bytes: product(width, height, 2 * 4)),
            kind: grown ? "GIF whose first frame is \(width)×\(height) on a \(screenWidth)×\(screenHeight) screen" : "GIF")
    }

    /// How far into a GIF its first image descriptor is looked for.
    static let gifWalk = 16 << 20

    // MARK: WebP

    private static func webp(_ bytes: HeaderBytes) -> ImageHeader? {
        let head = bytes.at(12, 18)
        guard head.count >= 18 else { return nil }
        let type = String(decoding: head[0..<4], as: UTF8.self)
        var width = 0
        var height = 0
        var alpha = false
        var lossless = false
        switch type {
        case "VP8X":
            alpha = head[8] & 0x10 != 0
            width = 1 + (Int(head[12]) | Int(head[13]) << 8 | Int(head[14]) << 16)
            height = 1 + (Int(head[15]) | Int(head[16]) << 8 | Int(head[17]) << 16)
            // The image data's own chunk says whether it is lossless.
            lossless = bytes.firstChunk(of: ["VP8L", "VP8 "], from: 12) == "VP8L"
        case "VP8 ":
            width = bytes.le16(head, 14) & 0x3FFF
            height = bytes.le16(head, 16) & 0x3FFF
        case "VP8L":
            let bits = Int(head[9]) | Int(head[10]) << 8 | Int(head[11]) << 16 | Int(head[12]) << 24
            width = 1 + bits & 0x3FFF
            height = 1 + (bits >> 14) & 0x3FFF
            alpha = (bits >> 28) & 1 == 1
            lossless = true
        default:
            return nil
        }
        let bands = alpha ? 4 : 3
        var header = ImageHeader(
            format: .webp, width: width, height: height, bands: bands, bytesPerSample: 1,
            holding: .whole(bytes: lossless ? product(width, height, 4) : 0),
            kind: "\(lossless ? "lossless" : "lossy") \(colourName(bands)) WebP")
        header.scalesOnLoad = true
        return header
    }

    // MARK: TIFF

    /// The first directory (the page libvips loads): size, samples, bits, strips or tiles.
    private static func tiff(_ bytes: HeaderBytes) -> ImageHeader? {
        let start = bytes.at(0, 16)
        guard start.count >= 8 else { return nil }
        let little = start[0] == 0x49
        let big = (little ? bytes.le16(start, 2) : bytes.be16(start, 2)) == 43
        func value(_ raw: [UInt8], _ at: Int, _ width: Int) -> Int {
            var result = 0
            for index in 0..<width {
                let byte = Int(raw[at + (little ? width - 1 - index : index)])
                result = result << 8 | byte
            }
            return result
        }
        let ifd = big ? (start.count == 16 ? value(start, 8, 8) : 0) : value(start, 4, 4)
        guard ifd > 0, ifd < bytes.size else { return nil }
        let countBytes = bytes.at(ifd, big ? 8 : 2)
        guard countBytes.count == (big ? 8 : 2) else { return nil }
        let entries = min(value(countBytes, 0, big ? 8 : 2), 4096)
        let entrySize = big ? 20 : 12
        let table = bytes.at(ifd + (big ? 8 : 2), entries * entrySize)
        guard table.count == entries * entrySize else { return nil }
        var tags: [Int: Int] = [:]
        for index in 0..<entries {
            let entry = index * entrySize
            let tag = value(table, entry, 2)
            let type = value(table, entry + 2, 2)
            let count = value(table, entry + 4, big ? 8 : 4)
            // The first value is enough here (bits per sample are the same for every sample
            // in what libvips loads): inline, or where the field points when they do not fit.
            guard let unit = [1: 1, 3: 2, 4: 4, 16: 8][type] else { continue }
            var raw = Array(table[(entry + (big ? 12 : 8))..<(entry + entrySize)])
            let (size, overflow) = count.multipliedReportingOverflow(by: unit)
            if overflow || size < 0 || size > raw.count {
                raw = bytes.at(value(raw, 0, big ? 8 : 4), unit)
                guard raw.count == unit else { continue }
            }
            tags[tag] = value(raw, 0, unit)
        }
        guard let width = tags[256], let height = tags[257] else { return nil }
        let samples = max(1, tags[277] ?? 1)
        let bits = max(1, tags[258] ?? 1)
        guard width <= maxSide, height <= maxSide, samples <= 1024, bits <= 128 else { return nil }
        let sample = max(1, (bits + 7) / 8)
        let held: Int
        if let tileWidth = tags[322], let tileHeight = tags[323], (1...maxSide).contains(tileWidth), tileHeight > 0 {
            // A row of tiles, across the picture.
            held = product(min(height, tileHeight), (width + tileWidth - 1) / tileWidth, tileWidth, samples, sample)
        } else {
            held = product(min(height, max(1, tags[278] ?? height)), width, samples, sample)
        }
        let kind = "\(bits)-bit\(tags[339] == 3 ? " float" : "") \(colourName(samples)) TIFF"
        // The strip (or tiles) as decoded, and libvips' copy of it.
        return ImageHeader(
            format: .tiff, width: width, height: height, bands: samples, bytesPerSample: sample,
            holding: .band(bytes: product(2, held)), kind: kind)
    }

    // MARK: HEIF / AVIF

    /// The largest `ispe` (image spatial extent) among the items' properties: the primary
    /// image or its grid; the decoder holds it whole, with its YUV frame.
    private static func isoMedia(_ bytes: HeaderBytes, format: ImageFormat) -> ImageHeader? {
        var best: (width: Int, height: Int)?
        var depth = 8
        func walk(from start: Int, to end: Int, level: Int) {
            var offset = start
            var boxes = 0
            while offset + 8 <= end, boxes < 4096 {
                boxes += 1
                let head = bytes.at(offset, 16)
                guard head.count >= 8 else { return }
                var size = bytes.be32(head, 0)
                let type = String(decoding: head[4..<8], as: UTF8.self)
                var header = 8
                if size == 1, head.count == 16 {
                    size = Int(min(UInt64(Int.max), UInt64(bytes.be32(head, 8)) << 32 | UInt64(bytes.be32(head, 12))))
                    header = 16
                } else if size == 0 {
                    size = end - offset
                }
                guard size >= header, size <= end - offset else { return }
                switch type {
                case "meta" where level < 4: walk(from: offset + header + 4, to: offset + size, level: level + 1)
                case "iprp" where level < 4, "ipco" where level < 4:
                    walk(from: offset + header, to: offset + size, level: level + 1)
                case "ispe":
                    let body = bytes.at(offset + header, 12)
                    if body.count == 12 {
                        let width = bytes.be32(body, 4)
                        let height = bytes.be32(body, 8)
                        if product(width, height) > (best.map { product($0.width, $0.height) } ?? 0) { best = (width, height) }
                    }
                case "pixi":
                    let body = bytes.at(offset + header, 6)
                    if body.count >= 6, body[4] > 0 { depth = max(depth, Int(body[5])) }
                default: break
                }
                offset += size
            }
        }
        walk(from: 0, to: bytes.size, level: 0)
        guard let best, best.width < 1 << 20, best.height < 1 << 20 else { return nil }
        let sample = depth > 8 ? 2 : 1
        let pixels = best.width * best.height
        // libheif's RGBA picture and the decoder's 4:2:0 frame (1.5 samples a pixel).
        return ImageHeader(
            format: format, width: best.width, height: best.height, bands: 4, bytesPerSample: sample,
            holding: .whole(bytes: pixels * sample * 4 + pixels * sample * 3 / 2),
            kind: "\(depth)-bit \(format == .avif ? "AVIF" : "HEIF")")
    }
}

/// Random access to the first bytes of an input, in a file or in memory.
struct HeaderBytes {
    let size: Int
    /// Up to `count` bytes at `offset` (fewer at the end).
    let read: (_ offset: Int, _ count: Int) -> [UInt8]

    init(size: Int, read: @escaping (_ offset: Int, _ count: Int) -> [UInt8]) {
        self.size = size
        self.read = read
    }

    func at(_ offset: Int, _ count: Int) -> [UInt8] {
        guard offset >= 0, count > 0, offset < size else { return [] }
        return read(offset, min(count, size - offset, 1 << 20))
    }

    func be16(_ raw: [UInt8], _ at: Int) -> Int { Int(raw[at]) << 8 | Int(raw[at + 1]) }
    func le16(_ raw: [UInt8], _ at: Int) -> Int { Int(raw[at]) | Int(raw[at + 1]) << 8 }
    func be32(_ raw: [UInt8], _ at: Int) -> Int { be16(raw, at) << 16 | be16(raw, at + 2) }

    /// The type of the first RIFF chunk from `offset` on that is one of `types`.
    func firstChunk(of types: Set<String>, from offset: Int) -> String? {
        var offset = offset
        for _ in 0..<64 {
            let head = at(offset, 8)
            guard head.count == 8 else { return nil }
            let type = String(decoding: head[0..<4], as: UTF8.self)
            if types.contains(type) { return type }
            let length = Int(head[4]) | Int(head[5]) << 8 | Int(head[6]) << 16 | Int(head[7]) << 24
            offset += 8 + length + length % 2
        }
        return nil
    }
}

/// Bytes one at a time from `HeaderBytes`, read in chunks of 64 KiB (one `pread` each), for
/// walks over many small blocks (a GIF's sub-blocks).
struct ChunkedBytes {
    let bytes: HeaderBytes
    private var start = 0
    private var chunk: [UInt8] = []

    init(_ bytes: HeaderBytes) { self.bytes = bytes }

    /// The byte at `offset`; nil past the end.
    mutating func byte(at offset: Int) -> UInt8? {
        if offset < start || offset >= start + chunk.count {
            start = offset
            chunk = bytes.at(offset, 1 << 16)
        }
        return offset - start < chunk.count ? chunk[offset - start] : nil
    }
}

/// The product of sizes, saturating far below `Int.max` (a hostile header's sizes must not
/// trap; an estimate that large fails its item as over the budget).
package func product(_ factors: Int...) -> Int {
    var result = 1
    for factor in factors {
        let (next, overflow) = result.multipliedReportingOverflow(by: max(0, factor))
        if overflow || next > 1 << 60 { return 1 << 60 }
        result = next
    }
    return result
}
