import Foundation
import VipsKit

extension VipsImage {
    /// Core Image-style colour controls, in this order: exposure (linear light),
    /// brightness and contrast, saturation and hue (in LCh), gamma.
    func adjusted(_ a: Adjustments) throws -> VipsImage {
        try workingCopy().mappingColour { colour in
            var image = colour
            if a.exposure != 0 {
                let gain = pow(2, a.exposure)
                image = try image.converted(to: .scRGB).linear([gain], [0], clipToByte: false).converted(to: .srgb).castToUChar()
            }
            if a.brightness != 0 || a.contrast != 1 {
                let offset = 127.5 * (1 - a.contrast) + 255 * a.brightness
                image = try image.linear([a.contrast], [offset], clipToByte: true)
            }
            if !image.isGrey, a.saturation != 1 || a.hue != 0 {
                image = try image.converted(to: .lch).linear([1, a.saturation, 1], [0, 0, a.hue], clipToByte: false)
                    .converted(to: .srgb).castToUChar()
            }
            if a.gamma != 1 {
                image = try image.linear([1.0 / 255], [0], clipToByte: false).power(1 / a.gamma)
                    .linear([255], [0], clipToByte: true)
            }
            return image
        }
    }

    /// The classic sepia matrix, mixed with the identity by `intensity`.
    func sepia(intensity t: Double) throws -> VipsImage {
        let sepia = [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]]
        return try toSRGB().mappingColour { try $0.recombined(Self.mix(sepia, t)) }
    }

    /// Luminance coloured by `colour`, mixed with the original by `intensity`.
    func tinted(_ colour: Colour, intensity t: Double) throws -> VipsImage {
        let luma = [0.2126, 0.7152, 0.0722]
        let tint = [colour.red, colour.green, colour.blue].map { channel in luma.map { $0 * channel / 255 } }
        return try toSRGB().mappingColour { try $0.recombined(Self.mix(tint, t)) }
    }

    /// Multiplies by a smooth mask: 1 inside the untouched centre, falling to
    /// 1 − intensity at the corners. The mask is computed small and scaled up.
    func vignetted(intensity: Double, radius: Double) throws -> VipsImage {
        let image = try workingCopy()
        let side = 64
        let start = min(radius, 2) / 2
        var mask = [UInt8](repeating: 255, count: side * side)
        let centre = Double(side - 1) / 2
        for y in 0..<side {
            for x in 0..<side {
                let dx = (Double(x) - centre) / centre
                let dy = (Double(y) - centre) / centre
                let distance = (dx * dx + dy * dy).squareRoot() / 2.0.squareRoot()
                let t = start >= 1 ? 0 : min(1, max(0, (distance - start) / (1 - start)))
                let falloff = t * t * (3 - 2 * t)
                mask[y * side + x] = UInt8(clamping: Int((255 * (1 - intensity * falloff)).rounded()))
            }
        }
        let small = try VipsImage.fromPixels(mask, width: side, height: side, bands: 1)
        let full = try small.resizedExactly(to: (image.width, image.height))
        return try image.mappingColour { try $0.multiplying(full).linear([1.0 / 255], [0], clipToByte: true) }
    }

    /// Stretches luminance so the 1st percentile becomes 0 and the 99th becomes 255.
    func normalized() throws -> VipsImage {
        let image = try workingCopy().materialized()
        let luminance = image.hasAlpha ? try image.toGrey().extractBands(0) : try image.toGrey()
        let low = Double(try luminance.percentile(1))
        let high = Double(try luminance.percentile(99))
        guard high > low else { return image }
        let gain = 255 / (high - low)
        return try image.mappingColour { try $0.linear([gain], [-low * gain], clipToByte: true) }
    }

    /// `(1 − t) · I + t · matrix`.
    static func mix(_ matrix: [[Double]], _ t: Double) -> [[Double]] {
        matrix.enumerated().map { row, values in
            values.enumerated().map { column, value in (row == column ? 1 - t : 0) + t * value }
        }
    }
}
