import Foundation

/// ThumbHash (Evan Wallace's placeholder format): a picture of at most 100×100 pixels told
/// in 25 bytes or fewer, from which a blurred likeness with its aspect ratio and alpha can
/// be drawn. `encode` gives the bytes the reference encoder (`rgbaToThumbHash`) gives.
///
/// The picture is composited over its own average colour and turned into four channels:
/// luminance L, yellow–blue P, red–green Q and alpha A. Each channel keeps the lowest
/// terms of its cosine transform: up to 7×7 (a triangle of them) for L, 3×3 for P and Q,
/// 5×5 for A when the picture has any transparency (and then at most 5×5 for L). The
/// header holds the DC terms and the scales; each AC term, divided by its channel's
/// largest, is written as a 4-bit number.
///
/// The cosine transform is taken one axis at a time (each row projected onto the column
/// cosines, then those projections onto the row cosines: width·height·nx + height·nx·ny
/// products a channel, not width·height·nx·ny), in double precision like the reference;
/// numbers are rounded as JavaScript's `Math.round` rounds them (halves up). About 0.15 ms
/// for 100×100 pixels in a release build (0.4 ms for a flat colour, whose terms are all
/// summed again as below).
///
/// A term that is zero in exact arithmetic (a flat channel, a symmetric picture) is left by
/// the reference as a rounding error, whose sign then decides its nibble (7 or 8; for a flat
/// channel any nibble, harmless there: the channel's scale is written as 0). Such terms are
/// summed again in the reference's own order, so that even they come out as the reference's
/// with the C library's `cos` (which CPython's port uses too). JavaScript engines carry their
/// own `cos`, a last bit off for a few angles, and the Rust port computes in single
/// precision: on such pictures those give other nibbles for those terms, and agree on all
/// other pictures.
package enum ThumbHash {
    /// The ThumbHash of a `width`×`height` picture given as RGBA bytes, row after row, four
    /// bytes a pixel, with straight (not premultiplied) alpha. Both sides are 1…100.
    package static func encode(width: Int, height: Int, rgba: [UInt8]) -> [UInt8] {
        precondition((1...100).contains(width) && (1...100).contains(height), "ThumbHash takes 1…100 pixels a side")
        precondition(rgba.count == width * height * 4, "ThumbHash takes 4 bytes a pixel")
        let pixels = width * height

        // The average colour, weighted by alpha, and the total alpha. The reference's
        // `alpha / 255` and `alpha / 255 / 255` come from tables: the same doubles, fewer
        // divisions.
        let opacities = Self.opacities
        let weights = Self.weights
        var averageRed = 0.0
        var averageGreen = 0.0
        var averageBlue = 0.0
        var totalAlpha = 0.0
        for pixel in 0..<pixels {
            let weight = weights[Int(rgba[pixel * 4 + 3])]
            averageRed += weight * Double(rgba[pixel * 4])
            averageGreen += weight * Double(rgba[pixel * 4 + 1])
            averageBlue += weight * Double(rgba[pixel * 4 + 2])
            totalAlpha += opacities[Int(rgba[pixel * 4 + 3])]
        }
        if totalAlpha > 0 {
            averageRed /= totalAlpha
            averageGreen /= totalAlpha
            averageBlue /= totalAlpha
        }

        let hasAlpha = totalAlpha < Double(pixels)
        // Fewer luminance terms when alpha takes room in the hash.
        let luminanceLimit = hasAlpha ? 5 : 7
        let longest = Double(max(width, height))
        let luminanceX = max(1, jsRound(Double(luminanceLimit * width) / longest))
        let luminanceY = max(1, jsRound(Double(luminanceLimit * height) / longest))

        // The picture over its average colour, as L, P, Q and A.
        var luminance = [Double](repeating: 0, count: pixels)
        var yellowBlue = [Double](repeating: 0, count: pixels)
        var redGreen = [Double](repeating: 0, count: pixels)
        var opacity = [Double](repeating: 0, count: pixels)
        for pixel in 0..<pixels {
            let alpha = opacities[Int(rgba[pixel * 4 + 3])]
            let weight = weights[Int(rgba[pixel * 4 + 3])]
            let red = averageRed * (1 - alpha) + weight * Double(rgba[pixel * 4])
            let green = averageGreen * (1 - alpha) + weight * Double(rgba[pixel * 4 + 1])
            let blue = averageBlue * (1 - alpha) + weight * Double(rgba[pixel * 4 + 2])
            luminance[pixel] = (red + green + blue) / 3
            // Halving is exact: the same double as the reference's `/ 2`.
            yellowBlue[pixel] = (red + green) * 0.5 - blue
            redGreen[pixel] = red - green
            opacity[pixel] = alpha
        }

        let transform = Transform(width: width, height: height)
        let l = transform.encode(luminance, max(3, luminanceX), max(3, luminanceY))
        let p = transform.encode(yellowBlue, 3, 3)
        let q = transform.encode(redGreen, 3, 3)
        let a = hasAlpha ? transform.encode(opacity, 5, 5) : nil

        // The header: 24 bits, then 16.
        let isLandscape = width > height
        var header24 = jsRound(63 * l.dc)
        header24 |= jsRound(31.5 + 31.5 * p.dc) << 6
        header24 |= jsRound(31.5 + 31.5 * q.dc) << 12
        header24 |= jsRound(31 * l.scale) << 18
        header24 |= (hasAlpha ? 1 : 0) << 23
        var header16 = isLandscape ? luminanceY : luminanceX
        header16 |= jsRound(63 * p.scale) << 3
        header16 |= jsRound(63 * q.scale) << 9
        header16 |= (isLandscape ? 1 : 0) << 15
        var hash: [Int] = [header24 & 255, (header24 >> 8) & 255, header24 >> 16, header16 & 255, header16 >> 8]
        if let a {
            hash.append(jsRound(15 * a.dc) | jsRound(15 * a.scale) << 4)
        }

        // The AC terms, two to a byte, the first in the low half.
        var terms = l.ac + p.ac + q.ac
        if let a { terms += a.ac }
        let start = hash.count
        hash += [Int](repeating: 0, count: (terms.count + 1) / 2)
        for (index, term) in terms.enumerated() {
            hash[start + index / 2] |= jsRound(15 * term) << ((index & 1) * 4)
        }
        return hash.map { UInt8(truncatingIfNeeded: $0) }
    }

    /// `hash` in standard base64 with padding (at most 36 characters: a hash has at most
    /// 25 bytes), as the reference's examples show ThumbHashes.
    package static func base64(_ hash: [UInt8]) -> String {
        Data(hash).base64EncodedString()
    }

    /// `Double(a) / 255` for every alpha byte a: the reference's alpha.
    private static let opacities = (0...255).map { Double($0) / 255 }
    /// `Double(a) / 255 / 255` for every alpha byte a: the weight of a colour byte.
    private static let weights = opacities.map { $0 / 255 }

    /// `value` rounded to the nearest integer, halves towards +∞ (JavaScript's `Math.round`,
    /// which the reference uses: 2.5 gives 3, −2.5 gives −2).
    static func jsRound(_ value: Double) -> Int {
        let floor = value.rounded(.down)
        return Int(value - floor >= 0.5 ? floor + 1 : floor)
    }

    /// The cosine transform of one picture size, its cosines computed once for the channels.
    ///
    /// Eight lanes of a `SIMD8<Double>` hold the terms cx = 0…7 of one row of terms (a
    /// channel uses at most 7): each lane is its own sum, added up in the same order as one
    /// scalar sum would be, so the lanes change the speed, not the doubles.
    private struct Transform {
        let width: Int
        let height: Int
        /// Lane cx of element x: `cos(π/width · cx · (x + ½))`.
        let columnCosines: [SIMD8<Double>]
        /// `cos(π/height · cy · (y + ½))` at `cy * height + y`, for cy in 0..<7.
        let rowCosines: [Double]

        init(width: Int, height: Int) {
            self.width = width
            self.height = height
            // Written as the reference writes them, for the same doubles.
            columnCosines = (0..<width).map { x in
                var cosines = SIMD8<Double>()
                for cx in 0..<8 {
                    cosines[cx] = cos(Double.pi / Double(width) * Double(cx) * (Double(x) + 0.5))
                }
                return cosines
            }
            rowCosines = (0..<7 * height).map { index in
                cos(Double.pi / Double(height) * Double(index / height) * (Double(index % height) + 0.5))
            }
        }

        /// The terms (cx, cy) with cx·ny < nx·(ny − cy) of `channel`'s cosine transform, in
        /// the reference's order (cy, then cx): the DC term, the AC terms divided by the
        /// largest of them and moved to 0…1 (0.5 is zero), and that largest magnitude.
        ///
        /// Each row is projected onto the column cosines (width·height products of eight
        /// lanes), then each row of terms sums the projections against its row cosines
        /// (height products of eight lanes).
        func encode(_ channel: [Double], _ nx: Int, _ ny: Int) -> (dc: Double, ac: [Double], scale: Double) {
            let width = width
            let height = height
            // Row y's projections onto the column cosines.
            var rows = [SIMD8<Double>](repeating: SIMD8(), count: height)
            channel.withUnsafeBufferPointer { channel in
                columnCosines.withUnsafeBufferPointer { cosines in
                    for y in 0..<height {
                        var sum = SIMD8<Double>()
                        for x in 0..<width {
                            sum += SIMD8(repeating: channel[y * width + x]) * cosines[x]
                        }
                        rows[y] = sum
                    }
                }
            }
            let area = SIMD8<Double>(repeating: Double(width * height))
            var block = (0..<ny).map { cy in
                var sum = SIMD8<Double>()
                for y in 0..<height {
                    sum += rows[y] * SIMD8(repeating: rowCosines[cy * height + y])
                }
                return sum / area
            }
            // A term this small next to the channel's largest value may be zero but for
            // rounding errors, whose signs then decide its nibble (7 or 8): such rows of terms
            // are summed again in the reference's order, for the reference's errors.
            let peak = channel.reduce(0) { max($0, abs($1)) }
            let kept = { (cx: Int, cy: Int) in cx * ny < nx * (ny - cy) }
            let unsure = (0..<ny).filter { cy in (0..<nx).contains { kept($0, cy) && abs(block[cy][$0]) <= 1e-6 * peak } }
            if !unsure.isEmpty {
                for (cy, terms) in zip(unsure, referenceTerms(channel, unsure)) {
                    block[cy] = terms
                }
            }
            var dc = 0.0
            var ac: [Double] = []
            var scale = 0.0
            for cy in 0..<ny {
                for cx in 0..<nx where kept(cx, cy) {
                    let term = block[cy][cx]
                    if cx > 0 || cy > 0 {
                        ac.append(term)
                        scale = max(scale, abs(term))
                    } else {
                        dc = term
                    }
                }
            }
            if scale > 0 {
                ac = ac.map { 0.5 + 0.5 / scale * $0 }
            }
            return (dc, ac, scale)
        }

        /// Rows `cys` of terms of `channel`, each term summed pixel by pixel, row after row,
        /// as the reference sums it (`value · column cosine · row cosine`).
        func referenceTerms(_ channel: [Double], _ cys: [Int]) -> [SIMD8<Double>] {
            let width = width
            let height = height
            var sums = [SIMD8<Double>](repeating: SIMD8(), count: cys.count)
            channel.withUnsafeBufferPointer { channel in
                columnCosines.withUnsafeBufferPointer { cosines in
                    for y in 0..<height {
                        let rowCosines = cys.map { SIMD8(repeating: self.rowCosines[$0 * height + y]) }
                        for x in 0..<width {
                            let products = SIMD8(repeating: channel[y * width + x]) * cosines[x]
                            for index in cys.indices {
                                sums[index] += products * rowCosines[index]
                            }
                        }
                    }
                }
            }
            let area = SIMD8<Double>(repeating: Double(width * height))
            return sums.map { $0 / area }
        }
    }
}
