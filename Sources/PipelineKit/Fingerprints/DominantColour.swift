/// A picture's dominant colour: the mean of the most common colour, colours being told apart
/// at 4 bits a channel.
///
/// Exactly: pixels whose alpha is below 128 are left out (all are counted when every one
/// is); each pixel left goes to one of 4096 bins by the top 4 bits of its red, green and
/// blue (bin = (red >> 4) · 256 + (green >> 4) · 16 + (blue >> 4)); the bin with the most pixels
/// wins, the lowest-numbered among equals (so the answer never depends on anything but the
/// pixels); the answer is the mean of that bin's pixels, each channel rounded to the
/// nearest integer (halves up). A mean within one bin, not the bin's centre: the colour is
/// one the picture has, give or take the rounding.
package enum DominantColour {
    /// The dominant colour of a `width`×`height` picture given as RGBA bytes, row after
    /// row, four bytes a pixel (straight alpha). Both sides are at least 1.
    package static func of(width: Int, height: Int, rgba: [UInt8]) -> (red: UInt8, green: UInt8, blue: UInt8) {
        precondition(width >= 1 && height >= 1, "a picture has at least one pixel")
        precondition(rgba.count == width * height * 4, "4 bytes a pixel are needed")
        let pixels = width * height
        var anyOpaque = false
        for pixel in 0..<pixels where rgba[pixel * 4 + 3] >= 128 {
            anyOpaque = true
            break
        }
        var counts = [Int](repeating: 0, count: 4096)
        // sums[bin * 3 + channel].
        var sums = [Int](repeating: 0, count: 4096 * 3)
        for pixel in 0..<pixels where !anyOpaque || rgba[pixel * 4 + 3] >= 128 {
            let red = Int(rgba[pixel * 4])
            let green = Int(rgba[pixel * 4 + 1])
            let blue = Int(rgba[pixel * 4 + 2])
            let bin = (red >> 4) << 8 | (green >> 4) << 4 | blue >> 4
            counts[bin] += 1
            sums[bin * 3] += red
            sums[bin * 3 + 1] += green
            sums[bin * 3 + 2] += blue
        }
        var best = 0
        for bin in 1..<counts.count where counts[bin] > counts[best] {
            best = bin
        }
        let count = counts[best]
        // The nearest integer to sum / count, halves up.
        func mean(_ channel: Int) -> UInt8 {
            UInt8((2 * sums[best * 3 + channel] + count) / (2 * count))
        }
        return (mean(0), mean(1), mean(2))
    }

    /// `colour` as `#rrggbb`, lower-case hexadecimal.
    package static func hex(_ colour: (red: UInt8, green: UInt8, blue: UInt8)) -> String {
        "#" + [colour.red, colour.green, colour.blue].hex
    }
}
