import Foundation

/// A picture's perceptual hash: the classic DCT hash ("pHash") of its luminance, 64 bits,
/// compared by Hamming distance (near-duplicates are a few bits apart, unrelated pictures
/// about 32).
///
/// Why this hash: it keeps only the signs of the picture's low-frequency structure relative
/// to their median, so what resizing, re-encoding (JPEG, WebP) and small brightness or
/// contrast changes do (they move the fine detail, shift every value or scale them all) leaves
/// nearly every bit as it was, while a different picture sets its own; and it costs little:
/// one 32×32 grey picture, and 8 of its 32 frequencies along each axis.
///
/// How it is made, exactly:
/// 1. The 32×32 grey values (any scale: 0…1 or 0…255), less their mean, go through a 2-D
///    DCT-II (orthonormal, one axis after the other, from a precomputed table) of which
///    only the top-left 8×8 coefficients are computed. The DC term (the top-left) is then
///    32 × the mean, as the DCT of the values themselves would give. Taking the mean away
///    first changes no AC term except that a flat picture's all come out exactly 0, not as
///    rounding errors.
/// 2. An AC term smaller than a billionth of the largest any picture with these values
///    could have (32 × the largest magnitude among them) is taken as 0: rounding errors,
///    whose signs would otherwise set bits at random where a term is zero (a gradient's
///    vertical terms, a flat picture's).
/// 3. The median is that of the 63 AC terms (the 32nd smallest of them; the DC term, which
///    tells the brightness and nothing of the structure, is left out).
/// 4. Term i of the 8×8, row by row (i = 0 is the DC term), sets bit 63 − i when it is
///    greater than that median: the DC bit is thus 1 for any picture brighter than its
///    median AC term, which is nearly all of them, and the hex form reads the terms in order.
///
/// A flat picture has every AC term 0 and so the median 0: its hash is 8000000000000000
/// (only the DC bit), or 0000000000000000 when its value is 0 (black) or below.
package struct PerceptualHash: Hashable, Sendable, CustomStringConvertible {
    package let bits: UInt64

    /// The side of the grey picture a hash is made from.
    package static let gridSize = 32
    /// The side of the block of lowest frequencies the hash keeps.
    static let kept = 8

    package init(bits: UInt64) {
        self.bits = bits
    }

    /// The hash of a `size`×`size` grey picture (`size` is `gridSize`), given row by row.
    package init(grey: [Double], size: Int) {
        precondition(size == Self.gridSize, "a perceptual hash is made from \(Self.gridSize)×\(Self.gridSize) pixels")
        precondition(grey.count == size * size, "\(size)×\(size) grey values are needed")
        let kept = Self.kept
        let mean = grey.reduce(0, +) / Double(grey.count)
        let cosines = Self.cosines

        // Each row's first 8 terms: rows[y * 8 + u].
        var rows = [Double](repeating: 0, count: size * kept)
        for y in 0..<size {
            for u in 0..<kept {
                var sum = 0.0
                for x in 0..<size {
                    sum += (grey[y * size + x] - mean) * cosines[u * size + x]
                }
                rows[y * kept + u] = sum
            }
        }
        // Then down the columns: terms[v * 8 + u].
        var terms = [Double](repeating: 0, count: kept * kept)
        for v in 0..<kept {
            for u in 0..<kept {
                var sum = 0.0
                for y in 0..<size {
                    sum += cosines[v * size + y] * rows[y * kept + u]
                }
                terms[v * kept + u] = sum
            }
        }
        terms[0] = Double(size) * mean

        let peak = grey.reduce(0) { max($0, abs($1)) }
        let negligible = 1e-9 * Double(size) * peak
        for index in 1..<terms.count where abs(terms[index]) <= negligible {
            terms[index] = 0
        }
        let median = terms[1...].sorted()[(terms.count - 1) / 2]
        var bits: UInt64 = 0
        for (index, term) in terms.enumerated() where term > median {
            bits |= 1 << UInt64(63 - index)
        }
        self.bits = bits
    }

    /// A hash written as `hex` writes it: exactly 16 hexadecimal digits (either case), or nil.
    package init?(hex: String) {
        guard hex.utf8.count == 16, hex.utf8.allSatisfy(Self.isHexDigit), let bits = UInt64(hex, radix: 16) else {
            return nil
        }
        self.bits = bits
    }

    /// The number of bits in which the two hashes differ (0…64).
    package func distance(to other: PerceptualHash) -> Int {
        (bits ^ other.bits).nonzeroBitCount
    }

    /// The 64 bits as 16 lower-case hexadecimal digits, the DC bit's first.
    package var hex: String {
        let digits = String(bits, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    package var description: String { hex }

    /// Whether `byte` is an ASCII hexadecimal digit (0–9, a–f, A–F).
    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"):
            return true
        default:
            return false
        }
    }

    /// The orthonormal DCT-II basis for the first 8 frequencies of 32 samples:
    /// `cosines[u * 32 + x]` = α(u) · cos(π · (2x + 1) · u / 64), α(0) = √(1/32), else √(2/32).
    private static let cosines: [Double] = (0..<kept * gridSize).map { index in
        let u = index / gridSize
        let x = index % gridSize
        let scale = (u == 0 ? 1 : 2.0).squareRoot() / Double(gridSize).squareRoot()
        return scale * cos(Double.pi * Double(2 * x + 1) * Double(u) / Double(2 * gridSize))
    }
}
