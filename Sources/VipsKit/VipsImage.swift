import CVips

/// One libvips image. Owns its reference and drops it in `deinit`.
///
/// libvips images are immutable: every operation returns a new image that refers to its
/// inputs, so a chain of operations is a chain of `VipsImage` values and pixels are only
/// computed when the last one is saved.
// @unchecked because the wrapped libvips image is immutable once built; a VipsImage moves
// from thread to thread with its job but is never used by two threads at once.
public final class VipsImage: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<CVips.VipsImage>
    /// Memory libvips reads lazily (`new_from_buffer`, `thumbnail_buffer` do not copy);
    /// held for as long as this image, and so as long as any image made from it.
    private let keepAlive: [AnyObject]

    init(taking pointer: UnsafeMutablePointer<CVips.VipsImage>, keepAlive: [AnyObject] = []) {
        self.pointer = pointer
        self.keepAlive = keepAlive
    }

    deinit {
        g_object_unref(UnsafeMutableRawPointer(pointer))
    }

    /// Wraps the result of an operation that wrote its image to `out`, or throws the error
    /// libvips reported. The new image keeps the buffers of its inputs (this image and
    /// `others`) alive; libvips itself holds references to the input images.
    func derive(
        _ operation: String, with others: [VipsImage] = [],
        _ body: (inout UnsafeMutablePointer<CVips.VipsImage>?) -> Int32
    ) throws -> VipsImage {
        var out: UnsafeMutablePointer<CVips.VipsImage>?
        let status = withExtendedLifetime(others) { body(&out) }
        guard status == 0, let out else { throw VipsError.take(operation, context: summary) }
        var buffers = keepAlive
        for other in others { buffers += other.keepAlive }
        return VipsImage(taking: out, keepAlive: buffers)
    }

    /// A new picture of `width`×`height` with this one's header and metadata, its samples
    /// written by `fill` from this one's read in place (each given with its bytes per
    /// line); nil when this picture's samples cannot be read in place (see
    /// `ip_uchar_in_memory`) or `fill` returns non-zero (it could not do this one).
    func filledInMemory(
        _ operation: String, width: Int, height: Int,
        _ fill: (UnsafePointer<UInt8>, Int, UnsafeMutablePointer<UInt8>, Int) -> Int32
    ) throws -> VipsImage? {
        guard ip_uchar_in_memory(pointer) != 0 else { return nil }
        guard let out = ip_new_like(pointer, Int32(width), Int32(height)) else {
            throw VipsError.take(operation, context: summary)
        }
        let status = fill(UnsafePointer(ip_samples(pointer)), ip_line_bytes(pointer), ip_samples(out), ip_line_bytes(out))
        guard status == 0 else {
            g_object_unref(UnsafeMutableRawPointer(out))
            return nil
        }
        return VipsImage(taking: out, keepAlive: keepAlive)
    }

    // MARK: header

    /// Dimensions, bands and sample format, e.g. `800×600, 3 bands, uchar`: what an error
    /// message says about the image an operation failed on.
    public var summary: String {
        let format = vips_enum_nick(vips_band_format_get_type(), Int32(vips_image_get_format(pointer).rawValue))
        return "\(width)×\(height), \(vips_image_get_bands(pointer)) bands, \(format.map { String(cString: $0) } ?? "?")"
    }

    public var width: Int { Int(vips_image_get_width(pointer)) }
    public var height: Int { Int(vips_image_get_height(pointer)) }
    public var bands: Int { Int(vips_image_get_bands(pointer)) }
    public var hasAlpha: Bool { vips_image_hasalpha(pointer) != 0 }
    /// True when each sample is an 8-bit unsigned integer.
    public var isEightBit: Bool { vips_image_get_format(pointer) == VIPS_FORMAT_UCHAR }
    var interpretation: VipsInterpretation { vips_image_guess_interpretation(pointer) }

    /// The colour space of the pixels, after libvips' sanity checks.
    public var colourSpace: ColourSpace { ColourSpace(interpretation) }

    /// Pages in a multi-page file (GIF, TIFF, HEIF); 1 otherwise.
    public var pageCount: Int { Int(vips_image_get_n_pages(pointer)) }

    /// EXIF orientation 1…8 (1 when absent).
    public var orientation: Int {
        var value: Int32 = 1
        guard vips_image_get_typeof(pointer, "orientation") != 0,
            vips_image_get_int(pointer, "orientation", &value) == 0
        else { return 1 }
        return (1...8).contains(value) ? Int(value) : 1
    }

    /// Width and height of the picture as it is shown: swapped when the EXIF orientation
    /// (5 to 8) turns it a quarter.
    public var uprightSize: (width: Int, height: Int) {
        orientation >= 5 ? (height, width) : (width, height)
    }

    /// True when the file carries an ICC profile.
    public var hasICCProfile: Bool { vips_image_get_typeof(pointer, VIPS_META_ICC_NAME) != 0 }

    /// The loader libvips used, e.g. `jpegload` (`jpegload_buffer` for memory).
    public var loader: String? {
        var value: UnsafePointer<CChar>?
        guard vips_image_get_typeof(pointer, VIPS_META_LOADER) != 0,
            vips_image_get_string(pointer, VIPS_META_LOADER, &value) == 0,
            let value
        else { return nil }
        return String(cString: value)
    }

    /// True for a colour image stored as CMYK.
    public var isCMYK: Bool {
        interpretation == VIPS_INTERPRETATION_CMYK
    }

    /// True for a one-band (plus alpha) image.
    public var isGrey: Bool {
        let colourBands = hasAlpha ? bands - 1 : bands
        return colourBands < 3
    }
}

/// The colour spaces imgpipe distinguishes.
public enum ColourSpace: String, Sendable {
    case srgb, grey, cmyk, rgb16, grey16, other

    init(_ interpretation: VipsInterpretation) {
        switch interpretation {
        case VIPS_INTERPRETATION_sRGB, VIPS_INTERPRETATION_RGB: self = .srgb
        case VIPS_INTERPRETATION_B_W: self = .grey
        case VIPS_INTERPRETATION_CMYK: self = .cmyk
        case VIPS_INTERPRETATION_RGB16: self = .rgb16
        case VIPS_INTERPRETATION_GREY16: self = .grey16
        default: self = .other
        }
    }

    var vips: VipsInterpretation {
        switch self {
        case .srgb: VIPS_INTERPRETATION_sRGB
        case .grey: VIPS_INTERPRETATION_B_W
        case .cmyk: VIPS_INTERPRETATION_CMYK
        case .rgb16: VIPS_INTERPRETATION_RGB16
        case .grey16: VIPS_INTERPRETATION_GREY16
        case .other: VIPS_INTERPRETATION_MULTIBAND
        }
    }
}
