import Foundation
import VipsKit

/// What an item's first output looks like, in a few bytes, recorded with every item made:
///
/// - `phash`: a 64-bit perceptual hash (`PerceptualHash`, 16 hex digits), which near
///   duplicates share but for a few bits (`dedup.similar`);
/// - `thumbhash`: the output's ThumbHash (base64, at most 40 characters), a blurred
///   placeholder a web page can paint before the image loads;
/// - `dominant`: the output's most common colour, `#rrggbb` (`DominantColour`).
///
/// All three come from one picture: the encoded output decoded again in the pixel helper, at
/// the smallest size its format decodes to cheaply that is at least 128 pixels on a side (a
/// JPEG shrunk by 2, 4 or 8 in libjpeg-turbo's DCT, `Pixels.scaledJPEG`; a WebP scaled by
/// libwebp; others whole, through libvips). The perceptual hash is taken from it; the
/// ThumbHash and the dominant colour from it averaged down to at most 64 pixels on a side
/// (`small`). It describes what the run made, and costs no second decode
/// of the input. (Keeping the output's pixels from before its encode cost more: libvips
/// then evaluates the chain twice, into memory and into the encoder.)
public struct ImageFingerprint: Sendable, Equatable, Codable {
    public let phash: String
    public let thumbhash: String
    public let dominant: String

    public init(phash: String, thumbhash: String, dominant: String) {
        self.phash = phash
        self.thumbhash = thumbhash
        self.dominant = dominant
    }

    /// The perceptual hash's bits; nil when `phash` is not 16 hex digits.
    package var perceptualHash: PerceptualHash? { PerceptualHash(hex: phash) }

    /// The picture's average colour as its ThumbHash keeps it (the DC terms of its header):
    /// lightness 0…1 and the two colour differences −1…1 (`ThumbHash`'s L, P and Q); nil
    /// when `thumbhash` is not one.
    package var averageColour: SIMD3<Double>? { Self.averageColour(ofThumbHash: thumbhash) }

    /// `averageColour` of a ThumbHash in base64.
    package static func averageColour(ofThumbHash text: String) -> SIMD3<Double>? {
        guard let bytes = Data(base64Encoded: text), bytes.count >= 5 else { return nil }
        let header =
            Int(bytes[bytes.startIndex]) | Int(bytes[bytes.startIndex + 1]) << 8
            | Int(bytes[bytes.startIndex + 2]) << 16
        return SIMD3(Double(header & 63) / 63, Double(header >> 6 & 63) / 31.5 - 1, Double(header >> 12 & 63) / 31.5 - 1)
    }

    /// Whether two average colours could be of the same picture, near copies included
    /// (brightened or darkened by a twentieth, re-encoded): a perceptual hash alone cannot
    /// tell flat or smooth pictures apart (their few structure bits are noise), their colour
    /// can.
    package static func coloursAlike(_ a: SIMD3<Double>, _ b: SIMD3<Double>) -> Bool {
        let apart = a - b
        return Swift.abs(apart.x) <= 0.12 && Swift.abs(apart.y) <= 0.13 && Swift.abs(apart.z) <= 0.13
    }

    /// The longest side of the picture the three are taken from (ThumbHash's bound is 100;
    /// 64 costs a third as much, and its seven coefficients a side need no more).
    static let side = 64
    /// The longer side an output is decoded to at least, for the perceptual hash's 32×32 grid
    /// (from 64 pixels, resized copies came out up to 8 bits apart; from 128, up to 4).
    static let decodedSide = 128
    /// The most pixels an output may have to be decoded whole for its fingerprint, when its
    /// format cannot shrink while decoding: 4 MP, 16 MB at most. A larger one is read through
    /// libvips' thumbnail, in bounded memory.
    static let wholePixels = 4_000_000

    /// The fingerprint of an output as the processor made it.
    package static func of(_ image: ProcessedImage) throws -> ImageFingerprint {
        try of(encoded: image.data, width: image.width, height: image.height)
    }

    /// The fingerprint of an encoded output `width`×`height` (its first frame, for an
    /// animation).
    package static func of(encoded data: Data, width: Int, height: Int) throws -> ImageFingerprint {
        if let pixels = Pixels.scaledJPEG(data, atLeast: decodedSide, maxPixels: wholePixels) { return of(pixels: pixels) }
        let image =
            width * height <= wholePixels
            ? try VipsImage.open(data: data, width: width, height: height, atLeast: decodedSide)
            : try VipsImage.thumbnail(
                data: data, width: 2 * decodedSide, height: 2 * decodedSide, size: .down, autorotate: false)
        return of(pixels: try image.toSRGB(useEmbeddedProfile: false).pixels())
    }

    /// The fingerprint of 8-bit pixels (1 to 4 bands: grey, grey and alpha, RGB, RGBA): the
    /// perceptual hash's grid is averaged from them as they are, the ThumbHash and the
    /// dominant colour are taken from them averaged down to `side` (`small`).
    package static func of(pixels: Pixels) -> ImageFingerprint {
        let full = rgba(pixels)
        let grey = Self.grey(full, width: pixels.width, height: pixels.height, size: PerceptualHash.gridSize)
        let (rgba, width, height) = small(full, width: pixels.width, height: pixels.height)
        return ImageFingerprint(
            phash: PerceptualHash(grey: grey, size: PerceptualHash.gridSize).description,
            thumbhash: ThumbHash.base64(ThumbHash.encode(width: width, height: height, rgba: rgba)),
            dominant: DominantColour.hex(DominantColour.of(width: width, height: height, rgba: rgba)))
    }

    /// `rgba` averaged down to fit in `side`×`side` (as it is when it fits): each pixel of
    /// the result is the mean of the pixels it covers.
    static func small(_ rgba: [UInt8], width: Int, height: Int) -> (rgba: [UInt8], width: Int, height: Int) {
        guard max(width, height) > side else { return (rgba, width, height) }
        let scale = Double(side) / Double(max(width, height))
        let (newWidth, newHeight) = (
            max(1, Int((Double(width) * scale).rounded())), max(1, Int((Double(height) * scale).rounded()))
        )
        var out = [UInt8](repeating: 0, count: newWidth * newHeight * 4)
        rgba.withUnsafeBufferPointer { source in
            boxes(width: width, height: height, columns: newWidth, rows: newHeight) { cell, rows, columns in
                var sums = (0, 0, 0, 0)
                for y in rows {
                    var index = (y * width + columns.lowerBound) * 4
                    for _ in columns {
                        sums.0 += Int(source[index])
                        sums.1 += Int(source[index + 1])
                        sums.2 += Int(source[index + 2])
                        sums.3 += Int(source[index + 3])
                        index += 4
                    }
                }
                let count = rows.count * columns.count
                let at = cell * 4
                out[at] = UInt8((sums.0 + count / 2) / count)
                out[at + 1] = UInt8((sums.1 + count / 2) / count)
                out[at + 2] = UInt8((sums.2 + count / 2) / count)
                out[at + 3] = UInt8((sums.3 + count / 2) / count)
            }
        }
        return (out, newWidth, newHeight)
    }

    /// Cuts a `width`×`height` picture into a grid of `columns`×`rows` boxes and calls
    /// `body` with each box's place in the grid (row by row) and the picture's rows and
    /// columns it covers: at least one of each, so a picture smaller than the grid gives
    /// each box its nearest pixel.
    @inline(__always)
    static func boxes(width: Int, height: Int, columns: Int, rows: Int, _ body: (Int, Range<Int>, Range<Int>) -> Void) {
        for row in 0..<rows {
            let top = row * height / rows
            let bottom = max(top + 1, (row + 1) * height / rows)
            for column in 0..<columns {
                let left = column * width / columns
                let right = max(left + 1, (column + 1) * width / columns)
                body(row * columns + column, top..<bottom, left..<right)
            }
        }
    }

    /// Interleaved RGBA from 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA) bands.
    static func rgba(_ pixels: Pixels) -> [UInt8] {
        let count = pixels.width * pixels.height
        let bands = pixels.bands
        var out = [UInt8](repeating: 255, count: count * 4)
        pixels.samples.withUnsafeBufferPointer { samples in
            for index in 0..<count {
                let from = index * bands
                let to = index * 4
                switch bands {
                case 1, 2:
                    out[to] = samples[from]
                    out[to + 1] = samples[from]
                    out[to + 2] = samples[from]
                    if bands == 2 { out[to + 3] = samples[from + 1] }
                default:
                    out[to] = samples[from]
                    out[to + 1] = samples[from + 1]
                    out[to + 2] = samples[from + 2]
                    if bands >= 4 { out[to + 3] = samples[from + 3] }
                }
            }
        }
        return out
    }

    /// The picture's luminance (Rec. 601 weights, transparent parts over white) averaged
    /// into a `size`×`size` grid: each cell is the mean of the pixels it covers (the nearest
    /// pixel when the picture is smaller than the grid).
    static func grey(_ rgba: [UInt8], width: Int, height: Int, size: Int) -> [Double] {
        var luma = [Double](repeating: 0, count: width * height)
        for index in 0..<width * height {
            let alpha = Double(rgba[index * 4 + 3]) / 255
            let red = Double(rgba[index * 4])
            let green = Double(rgba[index * 4 + 1])
            let blue = Double(rgba[index * 4 + 2])
            luma[index] = (0.299 * red + 0.587 * green + 0.114 * blue) * alpha + 255 * (1 - alpha)
        }
        var grid = [Double](repeating: 0, count: size * size)
        boxes(width: width, height: height, columns: size, rows: size) { cell, rows, columns in
            var total = 0.0
            for y in rows {
                for x in columns { total += luma[y * width + x] }
            }
            grid[cell] = total / Double(rows.count * columns.count)
        }
        return grid
    }
}
