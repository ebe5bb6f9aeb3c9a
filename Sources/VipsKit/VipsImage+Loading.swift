import CVips
import Foundation

/// How `thumbnail` treats the requested box.
public enum ThumbnailSize: Sendable {
    /// Fit inside the box, never enlarge.
    case down
    /// Fit inside the box, enlarging or reducing.
    case both
    /// Exactly the box, aspect ratio ignored.
    case force

    var vips: VipsSize {
        switch self {
        case .down: VIPS_SIZE_DOWN
        case .both: VIPS_SIZE_BOTH
        case .force: VIPS_SIZE_FORCE
        }
    }
}

/// Which part of an image a crop keeps (libvips' `VipsInteresting`).
public enum Interesting: String, Sendable, CaseIterable {
    case none, centre, entropy, attention

    var vips: VipsInteresting {
        switch self {
        case .none: VIPS_INTERESTING_NONE
        case .centre: VIPS_INTERESTING_CENTRE
        case .entropy: VIPS_INTERESTING_ENTROPY
        case .attention: VIPS_INTERESTING_ATTENTION
        }
    }
}

/// The least serious decoder complaint that fails a load (libvips' `VipsFailOn`).
///
/// libvips 8.14 loads `fail_on` `none` by default: a JPEG cut short with `FF D9`
/// appended, or with a zeroed or garbled scan, decodes with libjpeg warnings only and comes
/// out half grey. `.warning` makes jpegload check libjpeg's warning count (and libpng treat
/// benign errors as errors); `.error` fails on decoder errors and truncation.
public enum FailOn: Sendable {
    case error, warning

    var vips: VipsFailOn {
        switch self {
        case .error: VIPS_FAIL_ON_ERROR
        case .warning: VIPS_FAIL_ON_WARNING
        }
    }
}

/// Colour management for `thumbnail`: which profile to import with when the file has none,
/// and whether to convert to sRGB.
public struct ColourManagement: Sendable {
    public var importProfile: String?
    public var exportProfile: String?
    public init(importProfile: String? = nil, exportProfile: String? = nil) {
        self.importProfile = importProfile
        self.exportProfile = exportProfile
    }
    public static let none = ColourManagement()
}

extension VipsImage {
    /// Opens a file lazily, for sequential reading, failing on any decode error (a truncated
    /// file is an error, not a half-grey picture). Only the header is read here.
    public static func open(path: String, failOn: FailOn = .error) throws -> VipsImage {
        try VipsRuntime.setUp()
        guard let image = ip_new_from_file(path, failOn.vips) else {
            throw VipsError.take("load", context: path)
        }
        return VipsImage(taking: image)
    }

    /// Opens an image in memory. The bytes are kept alive with the image.
    public static func open(data: Data, failOn: FailOn = .error) throws -> VipsImage {
        try VipsRuntime.setUp()
        let storage = ByteStorage(data)
        guard let image = ip_new_from_buffer(storage.base, storage.count, failOn.vips) else {
            throw VipsError.take("load", context: "\(data.count) bytes")
        }
        return VipsImage(taking: image, keepAlive: [storage])
    }

    /// Opens an image in memory decoded at a reduced size where its format allows it, no
    /// smaller than `side` pixels on its longer side: a JPEG shrunk by 2, 4 or 8 in the DCT,
    /// a WebP scaled by libwebp; any other format whole. `width` and `height` are the image's
    /// own. The bytes are kept alive with the image.
    public static func open(data: Data, width: Int, height: Int, atLeast side: Int) throws -> VipsImage {
        try VipsRuntime.setUp()
        let storage = ByteStorage(data)
        let longer = max(width, height)
        let loader = ip_loader_of_buffer(storage.base, storage.count).map { String(cString: $0) } ?? ""
        var options = ""
        if loader.contains("Jpeg"), let shrink = [8, 4, 2].first(where: { longer / $0 >= side }) {
            options = "shrink=\(shrink)"
        } else if loader.contains("Webp"), longer > side {
            // A little over, so that rounding cannot take the result under `side`.
            options = "scale=\(min(1, (Double(side) + 1) / Double(longer)))"
        }
        guard let image = ip_new_from_buffer_options(storage.base, storage.count, options) else {
            throw VipsError.take("load", context: "\(data.count) bytes")
        }
        return VipsImage(taking: image, keepAlive: [storage])
    }

    /// Opens a JPEG in memory decoded at 1/`shrink` of its size (libjpeg's DCT scaling;
    /// `shrink` 1, 2, 4 or 8), as `vips_thumbnail` loads it before its resize. The bytes are
    /// kept alive with the image.
    public static func open(jpeg data: Data, shrink: Int, failOn: FailOn) throws -> VipsImage {
        try VipsRuntime.setUp()
        let storage = ByteStorage(data)
        let options = "shrink=\(shrink),fail_on=\(failOn == .warning ? "warning" : "error")"
        guard let image = ip_new_from_buffer_options(storage.base, storage.count, options) else {
            throw VipsError.take("load", context: "\(data.count) bytes")
        }
        return VipsImage(taking: image, keepAlive: [storage])
    }

    /// Loads and resizes in one step, letting the loader shrink while decoding (JPEG DCT
    /// scaling, WebP and HEIF scaled decode, PNG/TIFF pyramid pages). `crop` other than
    /// `.none` fills the box and crops to it.
    public static func thumbnail(
        path: String, width: Int, height: Int, size: ThumbnailSize,
        autorotate: Bool, crop: Interesting = .none,
        colour: ColourManagement = .none, failOn: FailOn = .error
    ) throws -> VipsImage {
        try VipsRuntime.setUp()
        var out: UnsafeMutablePointer<CVips.VipsImage>?
        let status = ip_thumbnail_any(
            path, nil, 0, &out, Int32(width), Int32(height), size.vips,
            autorotate ? 0 : 1, crop.vips,
            colour.importProfile, colour.exportProfile, failOn.vips)
        guard status == 0, let out else { throw VipsError.take("thumbnail", context: "\(path) to \(width)×\(height)") }
        return VipsImage(taking: out)
    }

    /// As `thumbnail(path:…)`, from memory. The bytes are kept alive with the image.
    public static func thumbnail(
        data: Data, width: Int, height: Int, size: ThumbnailSize,
        autorotate: Bool, crop: Interesting = .none,
        colour: ColourManagement = .none, failOn: FailOn = .error
    ) throws -> VipsImage {
        try VipsRuntime.setUp()
        let storage = ByteStorage(data)
        var out: UnsafeMutablePointer<CVips.VipsImage>?
        let status = ip_thumbnail_any(
            nil, storage.base, storage.count, &out, Int32(width),
            Int32(height), size.vips, autorotate ? 0 : 1, crop.vips,
            colour.importProfile, colour.exportProfile, failOn.vips)
        guard status == 0, let out else {
            throw VipsError.take("thumbnail", context: "\(data.count) bytes to \(width)×\(height)")
        }
        return VipsImage(taking: out, keepAlive: [storage])
    }

    /// An image made from raw interleaved pixels (copied), 8 or 16 bits per sample.
    public static func fromPixels(
        _ bytes: [UInt8], width: Int, height: Int, bands: Int,
        sixteenBit: Bool = false
    ) throws -> VipsImage {
        try VipsRuntime.setUp()
        let format = sixteenBit ? VIPS_FORMAT_USHORT : VIPS_FORMAT_UCHAR
        let image = bytes.withUnsafeBytes { raw in
            ip_new_from_memory_copy(
                raw.baseAddress, raw.count, Int32(width), Int32(height),
                Int32(bands), format)
        }
        guard let image else { throw VipsError.take("new_from_memory") }
        return VipsImage(taking: image)
    }
}

/// A stable copy of some bytes that libvips may read at any time until the image is freed.
final class ByteStorage {
    let base: UnsafeMutableRawPointer
    let count: Int

    init(_ data: Data) {
        count = data.count
        base = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 16)
        data.withUnsafeBytes { raw in
            if let source = raw.baseAddress { base.copyMemory(from: source, byteCount: count) }
        }
    }

    deinit { base.deallocate() }
}
