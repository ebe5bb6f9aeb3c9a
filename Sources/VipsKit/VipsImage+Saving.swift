import CVips
import Foundation

/// How to encode an image. The image must already be 8-bit sRGB or greyscale, with alpha
/// only where the format keeps it (see `ImagePipeline`'s output preparation).
public enum Encoding: Sendable, Equatable {
    case jpeg(quality: Int, progressive: Bool, strip: Bool)
    case png(compression: Int, strip: Bool)
    case webp(quality: Int, lossless: Bool, effort: Int, strip: Bool)
    /// AV1 in HEIF (libheif with libaom).
    case avif(quality: Int, effort: Int, strip: Bool)
    /// Deflate-compressed TIFF.
    case tiff(strip: Bool)
    /// GIF (libvips' cgif saver quantises to 256 colours).
    case gif(strip: Bool)

    /// The libvips saver, for error messages.
    var operation: String {
        switch self {
        case .jpeg: "jpegsave"
        case .png: "pngsave"
        case .webp: "webpsave"
        case .avif: "heifsave"
        case .tiff: "tiffsave"
        case .gif: "gifsave"
        }
    }
}

extension VipsImage {
    /// Encodes into memory. This is where a lazy chain's pixels are computed, so decode
    /// errors of a truncated input surface here too.
    public func encoded(_ encoding: Encoding) throws -> Data {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let status: Int32
        switch encoding {
        case .jpeg(let quality, let progressive, let strip):
            status = ip_jpegsave_buffer(
                pointer, &buffer, &length, Int32(quality), strip ? 1 : 0,
                progressive ? 1 : 0)
        case .png(let compression, let strip):
            status = ip_pngsave_buffer(pointer, &buffer, &length, Int32(compression), strip ? 1 : 0, 0)
        case .webp(let quality, let lossless, let effort, let strip):
            status = ip_webpsave_buffer(
                pointer, &buffer, &length, Int32(quality), lossless ? 1 : 0,
                strip ? 1 : 0, Int32(effort))
        case .avif(let quality, let effort, let strip):
            status = ip_avifsave_buffer(pointer, &buffer, &length, Int32(quality), Int32(effort), strip ? 1 : 0)
        case .tiff(let strip):
            status = ip_tiffsave_buffer(pointer, &buffer, &length, strip ? 1 : 0)
        case .gif(let strip):
            status = ip_gifsave_buffer(pointer, &buffer, &length, strip ? 1 : 0)
        }
        guard status == 0, let buffer else { throw VipsError.take(encoding.operation, context: summary) }
        defer { g_free(buffer) }
        return Data(bytes: buffer, count: length)
    }

    /// Writes to a file, the format chosen by the file name's suffix. For test fixtures and
    /// benchmarks; the pipeline encodes with `encoded(_:)`.
    public func write(toFile path: String) throws {
        guard ip_write_to_file(pointer, path) == 0 else { throw VipsError.take("write_to_file", context: summary) }
    }

    /// Sets the EXIF orientation written by the JPEG saver (1…8). For test fixtures.
    public func settingOrientation(_ orientation: Int) throws -> VipsImage {
        let copy = try derive("copy") { ip_copy_interpretation(pointer, &$0, interpretation) }
        vips_image_set_int(copy.pointer, "orientation", Int32(orientation))
        return copy
    }
}
