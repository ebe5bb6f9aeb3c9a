import CResample
import CVips

/// A flip axis.
public enum FlipDirection: Sendable {
    case horizontal, vertical

    var vips: VipsDirection { self == .horizontal ? VIPS_DIRECTION_HORIZONTAL : VIPS_DIRECTION_VERTICAL }
}

/// Where text lines are aligned.
public enum TextAlign: Sendable {
    case low, centre, high

    var vips: VipsAlign {
        switch self {
        case .low: VIPS_ALIGN_LOW
        case .centre: VIPS_ALIGN_CENTRE
        case .high: VIPS_ALIGN_HIGH
        }
    }
}

/// Thin wrappers over single libvips operations; `ImagePipeline` composes them into ops.
extension VipsImage {
    public func flipped(_ direction: FlipDirection) throws -> VipsImage {
        try derive("flip") { ip_flip(pointer, &$0, direction.vips) }
    }

    /// Rotates anticlockwise by any angle; uncovered corners get `background`.
    public func rotated(degrees: Double, background: [Double]) throws -> VipsImage {
        try derive("rotate") { out in
            background.withUnsafeBufferPointer {
                ip_rotate(pointer, &out, degrees, $0.baseAddress, Int32($0.count))
            }
        }
    }

    /// Places the image at (x, y) in a `width`×`height` canvas filled with `background`.
    public func embedded(x: Int, y: Int, width: Int, height: Int, background: [Double]) throws -> VipsImage {
        try derive("embed") { out in
            background.withUnsafeBufferPointer {
                ip_embed(pointer, &out, Int32(x), Int32(y), Int32(width), Int32(height), $0.baseAddress, Int32($0.count))
            }
        }
    }

    /// The box inside a uniform border (the border's colour is the top-left pixel's).
    public func trimBox(threshold: Double) throws -> (left: Int, top: Int, width: Int, height: Int) {
        var left: Int32 = 0
        var top: Int32 = 0
        var width: Int32 = 0
        var height: Int32 = 0
        guard ip_find_trim(pointer, &left, &top, &width, &height, threshold) == 0 else {
            throw VipsError.take("find_trim", context: summary)
        }
        return (Int(left), Int(top), Int(width), Int(height))
    }

    /// Averages `factor`×`factor` blocks (a partial last block still makes a pixel).
    public func shrunk(by factor: Int) throws -> VipsImage {
        try derive("shrink") { ip_shrink_ceil(pointer, &$0, Double(factor), Double(factor)) }
    }

    /// Colour bands multiplied by alpha (float samples), for a resample that must not bring
    /// out the colour of transparent pixels; `unpremultiplied(like:)` undoes it.
    public func premultiplied() throws -> VipsImage {
        try derive("premultiply") { ip_premultiply(pointer, &$0) }
    }

    /// Undoes `premultiplied`, back to the sample format of `original`.
    public func unpremultiplied(like original: VipsImage) throws -> VipsImage {
        let float = try derive("unpremultiply") { ip_unpremultiply(pointer, &$0) }
        return try float.derive("cast") { ip_cast(float.pointer, &$0, vips_image_get_format(original.pointer)) }
    }

    /// Averages 2×2 blocks, as `shrunk(by: 2)` does, but leaves out a last odd row or
    /// column: (a + b + c + d + 2) / 4. An 8-bit picture in memory is halved in place by
    /// `rs_halve` (about 8× faster than libvips); any other by libvips, as bilinear samples
    /// at the blocks' centres (the same values: libvips 8.14's box shrink divides once per
    /// sample, and takes about 1.5× as long again).
    public func halved() throws -> VipsImage {
        let (w, h, b) = (width, height, bands)
        if w >= 2, h >= 2,
            let halved = try filledInMemory(
                "halve", width: w / 2, height: h / 2,
                { input, stride, output, outStride in
                    rs_halve(input, stride, Int32(w), Int32(h), Int32(b), output, outStride)
                })
        {
            return halved
        }
        return try derive("affine") { ip_halve(pointer, &$0) }
    }

    /// Repeats each pixel `factor` times across and down.
    public func zoomed(by factor: Int) throws -> VipsImage {
        try derive("zoom") { ip_zoom(pointer, &$0, Int32(factor), Int32(factor)) }
    }

    public func replicated(across: Int, down: Int) throws -> VipsImage {
        try derive("replicate") { ip_replicate(pointer, &$0, Int32(across), Int32(down)) }
    }

    /// `self * a + b` per band (one value applies to every band); `clipToByte` casts to
    /// 8 bits, clipping, else the result is float.
    public func linear(_ a: [Double], _ b: [Double], clipToByte: Bool) throws -> VipsImage {
        precondition(a.count == b.count, "linear needs as many offsets as factors")
        return try derive("linear") { out in
            a.withUnsafeBufferPointer { pa in
                b.withUnsafeBufferPointer { pb in
                    ip_linear(pointer, &out, pa.baseAddress, pb.baseAddress, Int32(a.count), clipToByte ? 1 : 0)
                }
            }
        }
    }

    public func adding(_ other: VipsImage) throws -> VipsImage {
        try derive("add", with: [other]) { ip_add(pointer, other.pointer, &$0) }
    }

    public func subtracting(_ other: VipsImage) throws -> VipsImage {
        try derive("subtract", with: [other]) { ip_subtract(pointer, other.pointer, &$0) }
    }

    public func multiplying(_ other: VipsImage) throws -> VipsImage {
        try derive("multiply", with: [other]) { ip_multiply(pointer, other.pointer, &$0) }
    }

    /// Each sample raised to `exponent`.
    public func power(_ exponent: Double) throws -> VipsImage {
        try derive("pow") { ip_pow_const(pointer, &$0, exponent) }
    }

    /// Rounded to the nearest integer.
    public func rounded() throws -> VipsImage {
        try derive("rint") { ip_rint(pointer, &$0) }
    }

    /// 255 − sample, for 8-bit images.
    public func inverted() throws -> VipsImage {
        try derive("invert") { ip_invert(pointer, &$0) }
    }

    /// 255 where the sample is at least `level`, else 0.
    public func atLeast(_ level: Double) throws -> VipsImage {
        try derive("moreeq") { ip_more_eq_const(pointer, &$0, level) }
    }

    public func minimum() throws -> Double {
        var value = 0.0
        guard ip_min(pointer, &value) == 0 else { throw VipsError.take("min", context: summary) }
        return value
    }

    public func maximum() throws -> Double {
        var value = 0.0
        guard ip_max(pointer, &value) == 0 else { throw VipsError.take("max", context: summary) }
        return value
    }

    /// The sample value below which `percent` % of samples lie.
    public func percentile(_ percent: Double) throws -> Int {
        var value: Int32 = 0
        guard ip_percent(pointer, percent, &value) == 0 else { throw VipsError.take("percent", context: summary) }
        return Int(value)
    }

    /// Multiplies each pixel's bands by a matrix (`rows` output bands × input bands).
    public func recombined(_ matrix: [[Double]]) throws -> VipsImage {
        let rows = matrix.count
        let cols = matrix.first?.count ?? 0
        let flat = matrix.flatMap { $0 }
        return try derive("recomb") { out in
            flat.withUnsafeBufferPointer {
                ip_recomb(pointer, &out, $0.baseAddress, Int32(rows), Int32(cols))
            }
        }
    }

    /// Appends a constant band (e.g. an opaque alpha of 255).
    public func appendingBand(_ value: Double) throws -> VipsImage {
        try derive("bandjoin_const") { ip_bandjoin_const(pointer, &$0, value) }
    }

    public func gaussianBlurred(sigma: Double) throws -> VipsImage {
        try derive("gaussblur") { ip_gaussblur(pointer, &$0, sigma) }
    }

    /// The `index`-th smallest value in each `size`×`size` window (median: the middle one).
    public func ranked(size: Int, index: Int) throws -> VipsImage {
        try derive("rank") { ip_rank(pointer, &$0, Int32(size), Int32(size), Int32(index)) }
    }

    /// `overlay` composited over this image with its top-left corner at (x, y).
    public func compositing(_ overlay: VipsImage, x: Int, y: Int) throws -> VipsImage {
        try derive("composite", with: [overlay]) { ip_composite_over(pointer, overlay.pointer, &$0, Int32(x), Int32(y)) }
    }

    /// This image where `mask` is 0, `then` where it is 255, mixed in between.
    public func blended(with then: VipsImage, mask: VipsImage) throws -> VipsImage {
        try derive("ifthenelse", with: [then, mask]) { ip_blend(mask.pointer, then.pointer, pointer, &$0) }
    }

    /// A black image with `bands` bands.
    public static func black(width: Int, height: Int, bands: Int) throws -> VipsImage {
        try VipsRuntime.setUp()
        var out: UnsafeMutablePointer<CVips.VipsImage>?
        guard ip_black(&out, Int32(width), Int32(height), Int32(bands)) == 0, let out else {
            throw VipsError.take("black")
        }
        return VipsImage(taking: out)
    }

    /// A one-band text mask (0…255). `width` wraps lines; with `height` the font size is
    /// chosen to fill the box (libvips autofit).
    ///
    /// One text at a time in the process, always on the one text thread (`TextThread` says
    /// why). `vips_text` returns a finished memory image, so running the whole call there
    /// covers every Pango and fontconfig call it makes — once that image is also freed there:
    /// the mask handed back is a copy of its pixels (`ip_text_detached`), since the image
    /// itself can keep the text operation, and its Pango objects, alive until whichever
    /// thread releases it.
    public static func text(
        _ text: String, font: String, width: Int, height: Int? = nil,
        align: TextAlign = .centre, fontFile: String? = nil
    ) throws -> VipsImage {
        try VipsRuntime.setUp()
        let (status, made) = TextThread.shared.run { () -> (Int32, UnsafeMutablePointer<CVips.VipsImage>?) in
            var out: UnsafeMutablePointer<CVips.VipsImage>?
            let status = ip_text_detached(&out, text, font, Int32(width), Int32(height ?? 0), align.vips, fontFile)
            return (status, out)
        }
        guard status == 0, let made else { throw VipsError.take("text") }
        return VipsImage(taking: made)
    }

    /// Draws into a materialized image, in place. Returns self for chaining.
    @discardableResult
    public func drawRectangle(ink: [Double], left: Int, top: Int, width: Int, height: Int) throws -> VipsImage {
        let status = ink.withUnsafeBufferPointer {
            ip_draw_rect(pointer, $0.baseAddress, Int32($0.count), Int32(left), Int32(top), Int32(width), Int32(height))
        }
        guard status == 0 else { throw VipsError.take("draw_rect", context: summary) }
        return self
    }

    @discardableResult
    public func drawCircle(ink: [Double], centreX: Int, centreY: Int, radius: Int) throws -> VipsImage {
        let status = ink.withUnsafeBufferPointer {
            ip_draw_circle(pointer, $0.baseAddress, Int32($0.count), Int32(centreX), Int32(centreY), Int32(radius))
        }
        guard status == 0 else { throw VipsError.take("draw_circle", context: summary) }
        return self
    }

    /// Converts between the colour spaces imgpipe uses inside filters.
    public func converted(to space: WorkingSpace) throws -> VipsImage {
        try derive("colourspace") { ip_colourspace(pointer, &$0, space.vips) }
    }
}

/// Colour spaces filters work in.
public enum WorkingSpace: Sendable {
    /// Lightness, chroma, hue (degrees).
    case lch
    /// Linear-light RGB, float.
    case scRGB
    case srgb

    var vips: VipsInterpretation {
        switch self {
        case .lch: VIPS_INTERPRETATION_LCH
        case .scRGB: VIPS_INTERPRETATION_scRGB
        case .srgb: VIPS_INTERPRETATION_sRGB
        }
    }
}
