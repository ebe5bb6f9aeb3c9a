import CResample
import CVips

/// A quarter turn, clockwise.
public enum RightAngle: Sendable {
    case d90, d180, d270

    var vips: VipsAngle {
        switch self {
        case .d90: VIPS_ANGLE_D90
        case .d180: VIPS_ANGLE_D180
        case .d270: VIPS_ANGLE_D270
        }
    }
}

extension VipsImage {
    /// The pixels computed into memory: needed before an operation that reads out of order
    /// (rotation, smart crop) on an image opened for sequential reading.
    public func materialized() throws -> VipsImage {
        guard let copy = ip_copy_memory(pointer) else { throw VipsError.take("copy_memory", context: summary) }
        return VipsImage(taking: copy)
    }

    /// Applies the EXIF orientation tag and removes it.
    public func autorotated() throws -> VipsImage {
        try derive("autorot") { ip_autorot(pointer, &$0) }
    }

    /// Resamples by independent horizontal and vertical factors (`vips_resize`, lanczos3).
    public func resized(horizontal: Double, vertical: Double) throws -> VipsImage {
        try derive("resize") { ip_resize(pointer, &$0, horizontal, vertical) }
    }

    /// `resized`, but an 8-bit picture already in memory that gets smaller is reduced by
    /// `rs_reduce_lanczos3`, which gives libvips' scalar code's samples (its vector code's,
    /// on by default, differ by a fraction of a level on average) in about a quarter of its
    /// time. Used where imgpipe makes an item's smaller outputs from a larger one
    /// (`SharedLoad.resize`) and for a JPEG's leading `fit` (`ImageProcessor.reducedJPEG`),
    /// whatever the session; not for a pipeline's other steps: those stay libvips', so that
    /// `dry-run`, which holds each step's picture in memory, shows what `run` writes.
    public func reducedInMemory(horizontal: Double, vertical: Double) throws -> VipsImage {
        if horizontal <= 1, vertical <= 1, horizontal < 1 || vertical < 1 {
            let (w, h, b) = (width, height, bands)
            // As `vips_resize` reckons the factors it hands `reduceh` and `reducev`.
            let hshrink = 1 / max(horizontal, 1 / Double(w))
            let vshrink = 1 / max(vertical, 1 / Double(h))
            if rs_reduces_as_libvips(Int32(w), Int32(h), hshrink, vshrink) != 0,
                let reduced = try filledInMemory(
                    "reduce", width: Int(rs_reduced_length(Int32(w), hshrink)), height: Int(rs_reduced_length(Int32(h), vshrink)),
                    { input, stride, output, outStride in
                        rs_reduce_lanczos3(input, stride, Int32(w), Int32(h), Int32(b), output, outStride, hshrink, vshrink)
                    })
            {
                return reduced
            }
        }
        return try resized(horizontal: horizontal, vertical: vertical)
    }

    /// Whether `reducedInMemory` makes a `width`×`height` picture smaller by these factors
    /// (each over 1, as `vips_resize` is given them) in imgpipe's own code, as libvips would.
    public static func reducesAsLibvips(width: Int, height: Int, horizontal: Double, vertical: Double) -> Bool {
        rs_reduces_as_libvips(Int32(width), Int32(height), horizontal, vertical) != 0
    }

    /// Cuts out a rectangle; it must lie inside the image.
    public func cropped(left: Int, top: Int, width: Int, height: Int) throws -> VipsImage {
        try derive("extract_area") {
            ip_extract_area(pointer, &$0, Int32(left), Int32(top), Int32(width), Int32(height))
        }
    }

    /// Crops to `width`×`height` around the part libvips finds most interesting.
    public func smartCropped(width: Int, height: Int, interesting: Interesting) throws -> VipsImage {
        try derive("smartcrop") {
            ip_smartcrop(pointer, &$0, Int32(width), Int32(height), interesting.vips)
        }
    }

    /// Turns by a right angle, clockwise.
    public func rotated(_ angle: RightAngle) throws -> VipsImage {
        try derive("rot") { ip_rot(pointer, &$0, angle.vips) }
    }
}
