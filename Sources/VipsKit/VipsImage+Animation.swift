import CVips
import Foundation

/// Animated images as libvips has them: every frame stacked top to bottom in one tall
/// image, `pageHeight` rows each, with each frame's delay and the loop count in its
/// metadata. Savers that can animate (GIF, WebP) write such an image as an animation.
extension VipsImage {
    /// Every frame of an image in memory, read in order (sequential access: frames are
    /// decoded as the saver asks for them, not all held). The bytes are kept alive with
    /// the image.
    public static func openFrames(data: Data, failOn: FailOn = .error) throws -> VipsImage {
        try VipsRuntime.setUp()
        let storage = ByteStorage(data)
        guard let image = ip_new_from_buffer_pages(storage.base, storage.count, failOn.vips) else {
            throw VipsError.take("load", context: "\(data.count) bytes, every frame")
        }
        return VipsImage(taking: image, keepAlive: [storage])
    }

    /// The height of one frame (the whole height for a still image).
    public var pageHeight: Int { Int(ip_page_height(pointer)) }

    /// Each frame's delay in milliseconds, as the file gives them; empty when it has none.
    public var frameDelays: [Int] {
        var values: UnsafeMutablePointer<Int32>?
        let count = Int(ip_delays(pointer, &values))
        guard count > 0, let values else { return [] }
        return (0..<count).map { Int(values[$0]) }
    }

    /// How many times the animation plays (0: for ever); nil when the file does not say.
    public var loopCount: Int? {
        let loop = Int(ip_loop(pointer))
        return loop < 0 ? nil : loop
    }

    /// Frame `index` of a `pageHeight`-tall stack.
    public func frame(_ index: Int, height: Int) throws -> VipsImage {
        try cropped(left: 0, top: index * height, width: width, height: height)
    }

    /// `pictures` (each as wide as the first) stacked top to bottom.
    public static func stacked(_ pictures: [VipsImage]) throws -> VipsImage {
        guard let first = pictures.first else { throw VipsError(operation: "arrayjoin", message: "nothing to stack") }
        var pointers: [UnsafeMutablePointer<CVips.VipsImage>?] = pictures.map(\.pointer)
        return try first.derive("arrayjoin", with: Array(pictures.dropFirst())) { out in
            pointers.withUnsafeMutableBufferPointer { ip_stack($0.baseAddress, Int32(pictures.count), &out) }
        }
    }

    /// This tall picture as `height / pageHeight` frames of `pageHeight` rows, each shown
    /// for its delay (milliseconds; empty: as the picture had them), played `loop` times
    /// (0: for ever; nil: as the picture had it).
    public func labelledAsFrames(pageHeight: Int, delays: [Int], loop: Int?) throws -> VipsImage {
        let values = delays.map { Int32(clamping: $0) }
        let count = height / max(1, pageHeight)
        return try derive("copy") { out in
            values.withUnsafeBufferPointer { delays in
                ip_label_pages(
                    pointer, &out, Int32(pageHeight), Int32(count), delays.isEmpty ? nil : delays.baseAddress,
                    Int32(delays.count), Int32(loop ?? -1))
            }
        }
    }

    /// `frames` (each the same size) as one animation, with these delays (one per frame,
    /// milliseconds) and loop count.
    public static func animation(_ frames: [VipsImage], delays: [Int], loop: Int?) throws -> VipsImage {
        guard let first = frames.first else { throw VipsError(operation: "arrayjoin", message: "no frames") }
        return try stacked(frames).labelledAsFrames(pageHeight: first.height, delays: delays, loop: loop)
    }
}
