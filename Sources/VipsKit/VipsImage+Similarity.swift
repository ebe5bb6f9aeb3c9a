import CVips

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
    /// 1 for identical pictures, lower the more structure, contrast or brightness differs.
    ///
    /// Both are compared on their luminance (`luminance()`), with local means, variances
    /// and covariance taken over a Gaussian window (σ = 1.5, 11 taps, edges extended by
    /// copying, as libvips' `gaussblur` does) and the standard constants `ssimC1`, `ssimC2`:
    /// `((2 μx μy + C1)(2 σxy + C2)) / ((μx² + μy² + C1)(σx² + σy² + C2))`, averaged over
    /// every pixel (`vips_avg`). Cost: a handful of float images of this size in memory.
    public func structuralSimilarity(to reference: VipsImage) throws -> Double {
        guard width == reference.width, height == reference.height else {
            throw VipsError(
                operation: "ssim",
                message: "the images differ in size: \(width)×\(height) against \(reference.width)×\(reference.height)")
        }
        let x = try reference.luminance()
        let y = try luminance()
        func window(_ image: VipsImage) throws -> VipsImage {
            try image.derive("gaussblur") { ip_gaussblur_float(image.pointer, &$0, 1.5, 0.003) }.materialized()
        }
        let meanX = try window(x)
        let meanY = try window(y)
        let meanXX = try window(try x.multiplying(x))
        let meanYY = try window(try y.multiplying(y))
        let meanXY = try window(try x.multiplying(y))

        let meanXmeanY = try meanX.multiplying(meanY)
        let meanXSquared = try meanX.multiplying(meanX)
        let meanYSquared = try meanY.multiplying(meanY)
        let varianceSum = try meanXX.subtracting(meanXSquared).adding(try meanYY.subtracting(meanYSquared))
        let covariance = try meanXY.subtracting(meanXmeanY)

        let numerator = try meanXmeanY.linear([2], [Self.ssimC1], clipToByte: false)
            .multiplying(try covariance.linear([2], [Self.ssimC2], clipToByte: false))
        let denominator = try meanXSquared.adding(meanYSquared).linear([1], [Self.ssimC1], clipToByte: false)
            .multiplying(try varianceSum.linear([1], [Self.ssimC2], clipToByte: false))
        let map = try numerator.derive("divide", with: [denominator]) { ip_divide(numerator.pointer, denominator.pointer, &$0) }
        return try map.average()
    }
}
