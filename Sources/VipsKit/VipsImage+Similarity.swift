import CVips
import Foundation

/// SSIM (Wang, Bovik, Sheikh and Simoncelli, 2004), computed entirely with libvips
/// operations.
extension VipsImage {
    /// The constants of SSIM for 8-bit samples: C1 = (0.01 · 255)², C2 = (0.03 · 255)².
    public static let ssimC1 = (0.01 * 255) * (0.01 * 255)
    public static let ssimC2 = (0.03 * 255) * (0.03 * 255)

    /// The image's luminance as one float band on the 0…255 scale, computed into memory:
    /// a colour image converted to 8-bit sRGB first (through an embedded profile, CMYK and
    /// 16-bit included), alpha flattened onto white, then libvips' greyscale (`B_W`).
    public func luminance() throws -> VipsImage {
        var image = isGrey ? self : try toSRGB()
        if image.hasAlpha { image = try image.flattened() }
        let grey = try image.toGrey()
        return try grey.derive("cast") { ip_cast(grey.pointer, &$0, VIPS_FORMAT_FLOAT) }.materialized()
    }

    /// The mean SSIM of this image against `reference`, which must have the same size:
    /// 1 for identical pictures, lower the more structure, contrast or brightness differs
    /// (`SimilarityReference`, made for one comparison).
    public func structuralSimilarity(to reference: VipsImage) throws -> Double {
        try SimilarityReference(reference).similarity(of: self)
    }
}

/// One reference picture that candidates are compared with by SSIM, its share of the
/// computation (its luminance, local mean and local variance) done once: a quality search
/// compares several encodes of one picture with it.
///
/// Candidates and reference are compared on their luminance (`VipsImage.luminance()`),
/// with local means, variances and covariance taken over a Gaussian window (σ = 1.5, 11
/// taps: the mask libvips' `gaussmat` makes for an amplitude of 0.003, normalised; edges
/// extended by copying, as libvips' `gaussblur` does) and the standard constants `ssimC1`,
/// `ssimC2`: `((2 μx μy + C1)(2 σxy + C2)) / ((μx² + μy² + C1)(σx² + σy² + C2))`, averaged
/// over every pixel. The windows are computed here, in single precision, by a separable
/// pass that the compiler vectorises: libvips' own float convolution took 80 % of each
/// comparison. Cost: a handful of float copies of the picture in memory.
///
/// Not for two threads at once: the comparisons of one reference share its buffers (a
/// search compares one candidate after another, and allocating seven float copies of the
/// picture for each took a quarter of its time in page faults).
public final class SimilarityReference {
    public let width: Int
    public let height: Int
    private let x: [Float]
    private let meanX: [Float]
    private let varianceX: [Float]
    /// The candidate's luminance, its square, its product with the reference's, their
    /// windows, and a row-pass buffer: filled anew by each comparison, which takes them out
    /// (so that they are its own, written in place) and puts them back.
    private struct Buffers {
        var y: [Float]
        var squares: [Float]
        var products: [Float]
        var meanY: [Float]
        var meanYY: [Float]
        var meanXY: [Float]
        var across: [Float]

        init(count: Int) {
            let zeros = [Float](repeating: 0, count: count)
            (y, squares, products, meanY, meanYY, meanXY, across) = (zeros, zeros, zeros, zeros, zeros, zeros, zeros)
        }
    }
    private var buffers: Buffers

    public init(_ reference: VipsImage) throws {
        width = reference.width
        height = reference.height
        let x = try reference.luminance().floatSamples()
        var rows = [Float](repeating: 0, count: x.count)
        var meanX = rows
        Self.window(x, into: &meanX, across: &rows, width: width, height: height)
        var meanXX = rows
        Self.window(x.map { $0 * $0 }, into: &meanXX, across: &rows, width: width, height: height)
        self.x = x
        self.meanX = meanX
        varianceX = zip(meanXX, meanX).map { $0 - $1 * $1 }
        buffers = Buffers(count: x.count)
    }

    /// The mean SSIM of `candidate` against the reference; it must have the same size.
    public func similarity(of candidate: VipsImage) throws -> Double {
        guard candidate.width == width, candidate.height == height else {
            throw VipsError(
                operation: "ssim",
                message: "the images differ in size: \(candidate.width)×\(candidate.height) against \(width)×\(height)")
        }
        var buffers = self.buffers
        self.buffers = Buffers(count: 0)
        defer { self.buffers = buffers }
        try candidate.luminance().floatSamples(into: &buffers.y)
        for index in 0..<buffers.y.count {
            let y = buffers.y[index]
            buffers.squares[index] = y * y
            buffers.products[index] = x[index] * y
        }
        Self.window(buffers.y, into: &buffers.meanY, across: &buffers.across, width: width, height: height)
        Self.window(buffers.squares, into: &buffers.meanYY, across: &buffers.across, width: width, height: height)
        Self.window(buffers.products, into: &buffers.meanXY, across: &buffers.across, width: width, height: height)
        let (meanY, meanYY, meanXY) = (buffers.meanY, buffers.meanYY, buffers.meanXY)
        let c1 = Float(VipsImage.ssimC1)
        let c2 = Float(VipsImage.ssimC2)
        var total = 0.0
        for row in 0..<height {
            // Summed in double precision: a long row of values near 1 in single precision
            // rounds upward (2e-5 at 20,000 pixels).
            var sum = 0.0
            for index in row * width..<(row + 1) * width {
                let mx = meanX[index]
                let my = meanY[index]
                // Written so that swapping the two pictures gives the same bits.
                let product = mx * my
                let numerator = (2 * product + c1) * (2 * (meanXY[index] - product) + c2)
                let denominator = (mx * mx + my * my + c1) * (varianceX[index] + (meanYY[index] - my * my) + c2)
                sum += Double(numerator / denominator)
            }
            total += sum
        }
        return total / Double(width * height)
    }

    /// The Gaussian window's taps: `exp(-x² / 2σ²)` out to the last one of at least 0.003
    /// (x = ±5 for σ = 1.5), divided by their sum.
    static let taps: [Float] = {
        let twoSigmaSquared = 2 * 1.5 * 1.5
        var radius = 0
        while exp(-Double((radius + 1) * (radius + 1)) / twoSigmaSquared) >= 0.003 { radius += 1 }
        let values = (-radius...radius).map { exp(-Double($0 * $0) / twoSigmaSquared) }
        let sum = values.reduce(0, +)
        return values.map { Float($0 / sum) }
    }()

    /// `image` (`width` × `height` samples) convolved with `taps` across, then down, each
    /// edge extended by copying its last sample. Eight outputs at a time, summed in
    /// registers (`weighted`).
    static func window(_ image: [Float], into result: inout [Float], across: inout [Float], width: Int, height: Int) {
        let taps = Self.taps
        let radius = taps.count / 2
        var padded = [Float](repeating: 0, count: width + 2 * radius)
        image.withUnsafeBufferPointer { source in
            across.withUnsafeMutableBufferPointer { target in
                padded.withUnsafeMutableBufferPointer { line in
                    let base = UnsafePointer(line.baseAddress!)
                    for row in 0..<height {
                        let start = row &* width
                        for index in 0..<radius {
                            line[index] = source[start]
                            line[radius &+ width &+ index] = source[start &+ width &- 1]
                        }
                        for index in 0..<width { line[radius &+ index] = source[start &+ index] }
                        weighted(width, into: target.baseAddress! + start, taps) { base + $0 }
                    }
                }
            }
        }
        across.withUnsafeBufferPointer { source in
            result.withUnsafeMutableBufferPointer { target in
                let base = source.baseAddress!
                for row in 0..<height {
                    weighted(width, into: target.baseAddress! + row &* width, taps) { tap in
                        base + min(max(row &+ tap &- radius, 0), height &- 1) &* width
                    }
                }
            }
        }
    }

    /// `count` outputs, each the sum over the taps of the tap's weight times the sample at
    /// the same place in `row(tap)`.
    @inline(__always)
    private static func weighted(
        _ count: Int, into target: UnsafeMutablePointer<Float>, _ taps: [Float],
        _ row: (Int) -> UnsafePointer<Float>
    ) {
        taps.withUnsafeBufferPointer { weights in
            var rows: [UnsafePointer<Float>] = []
            rows.reserveCapacity(weights.count)
            for tap in 0..<weights.count { rows.append(row(tap)) }
            var index = 0
            while index &+ 8 <= count {
                var sum = SIMD8<Float>(repeating: 0)
                for tap in 0..<weights.count {
                    sum += weights[tap] * UnsafeRawPointer(rows[tap] + index).loadUnaligned(as: SIMD8<Float>.self)
                }
                UnsafeMutableRawPointer(target + index).storeBytes(of: sum, as: SIMD8<Float>.self)
                index &+= 8
            }
            while index < count {
                var sum: Float = 0
                for tap in 0..<weights.count { sum += weights[tap] * rows[tap][index] }
                target[index] = sum
                index &+= 1
            }
        }
    }
}

extension VipsImage {
    /// The samples of a one-band float image (`luminance()`), computed and copied out.
    func floatSamples() throws -> [Float] {
        var samples = [Float](repeating: 0, count: width * height)
        try floatSamples(into: &samples)
        return samples
    }

    /// The same, into `samples` (of `width` × `height` floats).
    func floatSamples(into samples: inout [Float]) throws {
        var size = 0
        guard let memory = vips_image_write_to_memory(pointer, &size) else {
            throw VipsError.take("write_to_memory", context: summary)
        }
        defer { g_free(memory) }
        let count = size / MemoryLayout<Float>.size
        guard bands == 1, count == width * height, count == samples.count else {
            throw VipsError(operation: "ssim", message: "expected one float band, got \(bands) band(s) of \(size) bytes")
        }
        samples.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: memory, count: size)) }
    }
}
