import Foundation
import PipelineKit
import VipsKit

/// Test images made on the spot, so tests assert against what the pixels must be rather
/// than against outputs we produced ourselves.
public enum ImageFixtures {
    /// An RGB colour.
    public typealias RGB = (UInt8, UInt8, UInt8)
    public static let red: RGB = (220, 30, 30)
    public static let green: RGB = (30, 200, 40)
    public static let blue: RGB = (30, 40, 210)
    public static let white: RGB = (250, 250, 250)

    /// Four flat quadrants: top-left red, top-right green, bottom-left blue,
    /// bottom-right white. Orientation and crops can be read back from where they land.
    public static func quadrants(width: Int, height: Int) throws -> VipsImage {
        var bytes = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let colour = y < height / 2 ? (x < width / 2 ? red : green) : (x < width / 2 ? blue : white)
                let i = (y * width + x) * 3
                bytes[i] = colour.0
                bytes[i + 1] = colour.1
                bytes[i + 2] = colour.2
            }
        }
        return try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb)
    }

    /// Smooth gradients with some texture, like a photograph, for size and speed tests.
    public static func photo(width: Int, height: Int, seed: Int = 1) throws -> VipsImage {
        var bytes = [UInt8](repeating: 0, count: width * height * 3)
        var state = UInt32(truncatingIfNeeded: seed &* 2_654_435_761 | 1)
        for y in 0..<height {
            for x in 0..<width {
                state ^= state << 13
                state ^= state >> 17
                state ^= state << 5
                let noise = Int(state & 15) - 8
                let i = (y * width + x) * 3
                bytes[i] = UInt8(clamping: x * 255 / max(1, width - 1) + noise)
                bytes[i + 1] = UInt8(clamping: y * 255 / max(1, height - 1) + noise)
                bytes[i + 2] = UInt8(clamping: (x + y + seed * 37) % 256 / 2 + 64 + noise)
            }
        }
        return try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb)
    }

    /// An animated GIF of `count` frames, `width`×`height` each: frame i is flat grey
    /// `frameGrey(i)` with a white square at x = i·(width − 8)/(count − 1), so that each
    /// frame can be told apart and followed. Frame i shows for `delays[i]` ms (100 each by
    /// default); the animation plays `loop` times (0: for ever).
    public static func animatedGIF(
        count: Int, width: Int, height: Int, delays: [Int]? = nil, loop: Int = 0
    ) throws -> Data {
        let frames = try (0..<count).map { index in
            var bytes = [UInt8](repeating: frameGrey(index), count: width * height * 3)
            let left = count > 1 ? index * (width - 8) / (count - 1) : 0
            for y in 0..<min(8, height) {
                for x in left..<min(left + 8, width) {
                    for band in 0..<3 { bytes[(y * width + x) * 3 + band] = 255 }
                }
            }
            return try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb)
        }
        let animation = try VipsImage.animation(frames, delays: delays ?? Array(repeating: 100, count: count), loop: loop)
        return try animation.encoded(.gif(strip: false))
    }

    /// The grey of frame `index` of `animatedGIF`: 16 levels apart (GIF's palette keeps
    /// them), never above 192 (the square stays the only white).
    public static func frameGrey(_ index: Int) -> UInt8 { UInt8(16 + (index * 16) % 192) }

    /// Writes `image`; the format comes from the suffix (`x.png[palette]` style options work).
    public static func write(_ image: VipsImage, to path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true)
        try image.write(toFile: path)
    }

    /// A JPEG of quadrants; with `orientation`, the EXIF tag is set (pixels unchanged).
    public static func jpeg(at path: String, width: Int, height: Int, orientation: Int? = nil) throws {
        var image = try quadrants(width: width, height: height)
        if let orientation { image = try image.settingOrientation(orientation) }
        try write(image, to: path)
    }

    /// `count` (at least 1) JPEGs of quadrants in `folder`, named `PREFIX001.jpg` and on:
    /// three digits, so that up to 999 a listing's order is the numbers' order.
    public static func jpegs(
        _ count: Int, in folder: String, prefix: String = "img-", width: Int = 64, height: Int = 48
    ) throws {
        for index in 1...count {
            try jpeg(at: folder + "/" + prefix + String(format: "%03d.jpg", index), width: width, height: height)
        }
    }

    /// A CMYK JPEG (no ICC profile): a flat colour given in CMYK ink percentages 0…255.
    public static func cmykJPEG(at path: String, width: Int, height: Int, ink: (UInt8, UInt8, UInt8, UInt8)) throws {
        var bytes = [UInt8](repeating: 0, count: width * height * 4)
        for i in stride(from: 0, to: bytes.count, by: 4) {
            bytes[i] = ink.0
            bytes[i + 1] = ink.1
            bytes[i + 2] = ink.2
            bytes[i + 3] = ink.3
        }
        let image = try VipsImage.fromPixels(bytes, width: width, height: height, bands: 4).labelled(.cmyk)
        try write(image, to: path)
    }

    /// A 16-bit RGB PNG of one flat colour (each channel 0…65535).
    public static func png16(at path: String, width: Int, height: Int, colour: (UInt16, UInt16, UInt16)) throws {
        var bytes = [UInt8](repeating: 0, count: width * height * 6)
        for i in stride(from: 0, to: bytes.count, by: 6) {
            for (offset, value) in [colour.0, colour.1, colour.2].enumerated() {
                bytes[i + offset * 2] = UInt8(value & 0xFF)
                bytes[i + offset * 2 + 1] = UInt8(value >> 8)
            }
        }
        let image = try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3, sixteenBit: true)
            .labelled(.rgb16)
        try write(image, to: path)
    }

    /// A grey + alpha PNG: grey level `grey`; the left half transparent, the right opaque.
    public static func greyAlphaPNG(at path: String, width: Int, height: Int, grey: UInt8) throws {
        var bytes = [UInt8](repeating: 0, count: width * height * 2)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * 2
                bytes[i] = grey
                bytes[i + 1] = x < width / 2 ? 0 : 255
            }
        }
        try write(try VipsImage.fromPixels(bytes, width: width, height: height, bands: 2).labelled(.grey), to: path)
    }

    /// An RGBA PNG of quadrants whose left half is fully transparent.
    public static func rgbaPNG(at path: String, width: Int, height: Int) throws {
        let colour = try quadrants(width: width, height: height)
        var alpha = [UInt8](repeating: 0, count: width * height)
        for y in 0..<height {
            for x in width / 2..<width { alpha[y * width + x] = 255 }
        }
        let mask = try VipsImage.fromPixels(alpha, width: width, height: height, bands: 1)
        try write(try colour.joined(with: mask).labelled(.srgb), to: path)
    }

    /// A palette (indexed) PNG of quadrants.
    public static func palettePNG(at path: String, width: Int, height: Int) throws {
        try write(try quadrants(width: width, height: height), to: path + "[palette]")
        // libvips wrote to the path without the option suffix.
    }

    /// A PNG that claims `width`×`height` but holds a few bytes of pixel data: a
    /// "decompression bomb" that must be refused from its header alone.
    public static func pngHeaderOnly(at path: String, width: UInt32, height: UInt32) throws {
        // A stored (uncompressed) zlib stream of 16 zero bytes: valid, but far too short.
        let zlib: [UInt8] =
            [0x78, 0x01, 0x01, 0x10, 0x00, 0xEF, 0xFF] + [UInt8](repeating: 0, count: 16) + [0x00, 0x10, 0x00, 0x01]
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        let bytes: [UInt8] =
            signature
            + pngChunk("IHDR", bigEndian(width) + bigEndian(height) + [8, 2, 0, 0, 0])
            + pngChunk("IDAT", zlib) + pngChunk("IEND", [])
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// The first `fraction` of a file's bytes, written to `to`.
    public static func truncate(_ source: String, to target: String, keeping fraction: Double) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: source))
        try data.prefix(Int(Double(data.count) * fraction)).write(to: URL(fileURLWithPath: target))
    }

    /// Decodes a file fully (for assertions on outputs).
    public static func decode(_ path: String) throws -> Pixels {
        let pixels = try VipsImage.open(path: path).pixels()
        VipsRuntime.endThreadWork()
        return pixels
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}
