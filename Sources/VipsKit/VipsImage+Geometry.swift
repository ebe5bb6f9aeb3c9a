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

    /// Resamples by independent horizontal and vertical factors.
    public func resized(horizontal: Double, vertical: Double) throws -> VipsImage {
        try derive("resize") { ip_resize(pointer, &$0, horizontal, vertical) }
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
