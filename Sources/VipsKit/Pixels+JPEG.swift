import CJpegScale
import Foundation

extension Pixels {
    /// A JPEG in memory decoded by libjpeg-turbo at the smallest of 1/8, 1/4, 1/2 (or whole)
    /// of its size whose longer side is still `side` pixels or more, straight into RGB or
    /// grey pixels (no libvips operation: on a thumbnail, libvips' loader and evaluation cost
    /// several times the decode). nil when `data` is not a JPEG libjpeg decodes without a
    /// warning, when it is CMYK, or when the decoded pixels would be more than `maxPixels`.
    public static func scaledJPEG(_ data: Data, atLeast side: Int, maxPixels: Int) -> Pixels? {
        data.withUnsafeBytes { raw -> Pixels? in
            guard let base = raw.bindMemory(to: UInt8.self).baseAddress else { return nil }
            var pixels: UnsafeMutablePointer<UInt8>?
            var width: Int32 = 0
            var height: Int32 = 0
            var bands: Int32 = 0
            guard js_decode_scaled(base, raw.count, Int32(side), maxPixels, &pixels, &width, &height, &bands) == 0,
                let pixels
            else { return nil }
            defer { free(pixels) }
            let count = Int(width) * Int(height) * Int(bands)
            return Pixels(
                width: Int(width), height: Int(height), bands: Int(bands),
                samples: Array(UnsafeBufferPointer(start: pixels, count: count)))
        }
    }
}
