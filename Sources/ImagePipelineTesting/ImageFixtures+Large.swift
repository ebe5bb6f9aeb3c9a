import Foundation
import PipelineKit

/// Large pictures (tens of megapixels) for the memory tests, written without holding them:
/// black, so they compress to a few hundred kilobytes, and made in seconds.
extension ImageFixtures {
    /// An interlaced (Adam7) PNG of black pixels, `bands` 1 to 4 (grey, grey+alpha, RGB,
    /// RGBA), `depth` 8 or 16. Every filtered row of every pass is zeros, so the zlib stream
    /// is one fully flushed block of 8 MiB of zeros repeated, then the rest (Python's zlib):
    /// libvips would have to hold the whole picture to interlace it.
    public static func interlacedPNG(at path: String, width: Int, height: Int, bands: Int, depth: Int) throws {
        let script = """
            import struct, sys, zlib
            path, w, h, bands, depth = sys.argv[1], *map(int, sys.argv[2:])
            bpp = bands * depth // 8
            total = 0
            for x0, y0, dx, dy in [(0,0,8,8),(4,0,8,8),(0,4,4,8),(2,0,4,4),(0,2,2,4),(1,0,2,2),(0,1,1,2)]:
                pw, ph = (w - x0 + dx - 1) // dx if w > x0 else 0, (h - y0 + dy - 1) // dy if h > y0 else 0
                if pw and ph: total += ph * (1 + pw * bpp)
            size = 8 << 20
            full, rest = divmod(total, size)
            block = zlib.compressobj(9, zlib.DEFLATED, -15)
            block = block.compress(bytes(size)) + block.flush(zlib.Z_FULL_FLUSH)
            last = zlib.compressobj(9, zlib.DEFLATED, -15)
            last = last.compress(bytes(rest)) + last.flush()
            data = b"\\x78\\xda" + block * full + last + struct.pack(">I", (total % 65521) << 16 | 1)
            def chunk(kind, body):
                return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
            colour = {1: 0, 2: 4, 3: 2, 4: 6}[bands]
            with open(path, "wb") as out:
                out.write(b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 1)))
                out.write(chunk(b"IDAT", data) + chunk(b"IEND", b""))
            """
        try command("/usr/bin/env", ["python3", "-c", script, path, "\(width)", "\(height)", "\(bands)", "\(depth)"])
    }

    /// A black RGB JPEG, progressive or baseline (libvips' `jpegsave` streams it).
    public static func largeJPEG(at path: String, width: Int, height: Int, progressive: Bool) throws {
        let raw = path + ".v"
        defer { try? FileManager.default.removeItem(atPath: raw) }
        try command("/usr/bin/env", ["vips", "black", raw, "\(width)", "\(height)", "--bands", "3"])
        try command("/usr/bin/env", ["vips", "jpegsave", raw, path] + (progressive ? ["--interlace"] : []))
    }

    /// A black RGB GIF (libvips' `gifsave`) whose logical screen is then rewritten to
    /// `screen`: its one frame keeps `width` × `height`, and libnsgif grows the canvas to it.
    public static func gifWithSmallScreen(
        at path: String, width: Int, height: Int,
        screen: (width: Int, height: Int)
    ) throws {
        let raw = path + ".v"
        defer { try? FileManager.default.removeItem(atPath: raw) }
        try command("/usr/bin/env", ["vips", "black", raw, "\(width)", "\(height)", "--bands", "3"])
        try command("/usr/bin/env", ["vips", "gifsave", raw, path])
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes.replaceSubrange(
            6..<10,
            with: [
                UInt8(screen.width & 0xFF), UInt8(screen.width >> 8),
                UInt8(screen.height & 0xFF), UInt8(screen.height >> 8),
            ])
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// A black one-band 32-bit float TIFF, deflate-compressed, in libvips' strips.
    public static func floatTIFF(at path: String, width: Int, height: Int) throws {
        let raw = path + ".v"
        defer { try? FileManager.default.removeItem(atPath: raw) }
        try command("/usr/bin/env", ["vips", "black", raw, "\(width)", "\(height)"])
        try command("/usr/bin/env", ["vips", "cast", raw, path + "[compression=deflate]", "float"])
    }

    private static func command(_ executable: String, _ arguments: [String]) throws {
        let result = try ImgpipeBinary.launch(executable: executable, arguments, in: NSTemporaryDirectory()).wait()
        guard result.status == 0 else {
            throw CocoaError(
                .fileWriteUnknown,
                userInfo: [
                    NSLocalizedDescriptionKey:
                        "\(arguments.prefix(2).joined(separator: " ")) failed (\(result.status)): \(result.stderr.suffix(800))"
                ])
        }
    }
}
