import Foundation
import VipsKit

/// What a step may need besides the image.
struct FilterContext: Sendable {
    /// The pipeline file's folder, for relative paths (watermark images).
    let baseDirectory: String
    /// The item being processed, for `{meta.…}` in text filters (nil: texts as written).
    var fields: ItemFields?
    /// Where this item's notes go (a focus point it could not use); nil: nowhere.
    var notes: ItemNotes?

    func resolve(_ path: String) -> String {
        path.hasPrefix("/") ? path : URL(fileURLWithPath: baseDirectory).appendingPathComponent(path).standardizedFileURL.path
    }
}

/// A filter that cannot run on this particular image (e.g. a crop outside it).
struct FilterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A step that failed on an item: where the pipeline file has it (`filters[1]`,
/// `outputs[0].filters[2]`), its op, the size of the picture it was given and why, e.g.
/// `filters[1] text on a 20×13 picture: embed: bad dimensions`. libvips' own text names its
/// operation, not the filter, and one filter makes several operations.
struct StepFailure: Error, CustomStringConvertible {
    let path: String
    let op: String
    let width: Int
    let height: Int
    let cause: any Error

    var description: String {
        let why = (cause as? VipsError)?.message ?? String(describing: cause)
        return "\(path) \(op) on a \(width)×\(height) picture: \(why)"
    }

    /// What failed under `error`: the step's own failure, or `error` itself.
    static func cause(of error: any Error) -> any Error {
        (error as? StepFailure)?.cause ?? error
    }
}

extension FilterStep {
    /// The op's name in pipeline files.
    package var opName: String {
        switch self {
        case .autorotate: "autorotate"
        case .fit: "fit"
        case .fill: "fill"
        case .resize: "resize"
        case .cropRect, .cropAspect: "crop"
        case .rotate: "rotate"
        case .flip: "flip"
        case .pad: "pad"
        case .trim: "trim"
        case .roundCorners: "round-corners"
        case .border: "border"
        case .adjust: "adjust"
        case .grayscale: "grayscale"
        case .sepia: "sepia"
        case .invert: "invert"
        case .posterize: "posterize"
        case .vignette: "vignette"
        case .tint: "tint"
        case .normalize: "normalize"
        case .threshold: "threshold"
        case .blur: "blur"
        case .sharpen: "sharpen"
        case .pixelate: "pixelate"
        case .median: "median"
        case .caption: "caption"
        case .text: "text"
        case .watermark: "watermark"
        }
    }

    /// The largest window of aspect `ratio` (width ÷ height) in a `width`×`height` picture.
    static func aspectWindow(_ ratio: Double, width: Int, height: Int) -> (width: Int, height: Int) {
        var w = width
        var h = Int((Double(w) / ratio).rounded())
        if h > height {
            h = height
            w = max(1, min(width, Int((Double(h) * ratio).rounded())))
        }
        return (w, max(1, h))
    }

    /// Runs this step. Pixels are computed later, when the output is encoded, except
    /// where a step must read the image more than once (it then computes it into memory).
    func apply(to image: VipsImage, context: FilterContext) throws -> VipsImage {
        switch self {
        case .autorotate:
            guard image.orientation != 1 else { return image }
            return try image.materialized().autorotated()
        case .fit(let width, let height, let enlarge):
            let size = BoxGeometry.fit(width: image.width, height: image.height, box: (width, height), enlarge: enlarge)
            return try image.resizedExactly(to: size)
        case .fill(let width, let height, let gravity, let focus):
            let cover = BoxGeometry.cover(width: image.width, height: image.height, box: (width, height))
            return try image.resizedExactly(to: cover).cropped(
                to: (width, height), gravity: gravity, focus: focus, context: context)
        case .resize(let width, let height, let scale):
            return try image.resizedExactly(
                to: BoxGeometry.resize(
                    width: image.width, height: image.height,
                    to: (width, height), scale: scale))
        case .cropRect(let x, let y, let width, let height):
            guard x < image.width, y < image.height else {
                throw FilterError("crop at (\(x), \(y)) lies outside the \(image.width)×\(image.height) image")
            }
            return try image.cropped(left: x, top: y, width: min(width, image.width - x), height: min(height, image.height - y))
        case .cropAspect(let aspectWidth, let aspectHeight, let gravity, let focus):
            let size = Self.aspectWindow(aspectWidth / aspectHeight, width: image.width, height: image.height)
            return try image.cropped(to: size, gravity: gravity, focus: focus, context: context)
        case .rotate(let degrees, let background):
            return try image.rotatedClockwise(degrees, background: background)
        case .flip(let horizontal):
            return horizontal ? try image.flipped(.horizontal) : try image.materialized().flipped(.vertical)
        case .pad(let top, let right, let bottom, let left, let colour):
            return try image.padded(top: top, right: right, bottom: bottom, left: left, colour: colour)
        case .border(let width, let colour):
            return try image.padded(top: width, right: width, bottom: width, left: width, colour: colour)
        case .trim(let threshold):
            let whole = try image.materialized()
            let box = try whole.trimBox(threshold: threshold)
            guard box.width > 0, box.height > 0 else { return whole }
            return try whole.cropped(left: box.left, top: box.top, width: box.width, height: box.height)
        case .roundCorners(let radius):
            return try image.roundingCorners(radius: radius)
        case .adjust(let adjustments):
            return try image.adjusted(adjustments)
        case .grayscale:
            return try image.toGrey()
        case .sepia(let intensity):
            return try image.sepia(intensity: intensity)
        case .invert:
            return try image.workingCopy().mappingColour { try $0.inverted() }
        case .posterize(let levels):
            let steps = Double(levels - 1)
            return try image.workingCopy().mappingColour {
                try $0.linear([steps / 255], [0], clipToByte: false).rounded().linear([255 / steps], [0], clipToByte: true)
            }
        case .vignette(let intensity, let radius):
            return try image.vignetted(intensity: intensity, radius: radius)
        case .tint(let colour, let intensity):
            return try image.tinted(colour, intensity: intensity)
        case .normalize:
            return try image.normalized()
        case .threshold(let level):
            return try image.toGrey().mappingColour { try $0.atLeast(level) }
        case .blur(let sigma):
            return try image.workingCopy().gaussianBlurred(sigma: sigma).castToUChar()
        case .sharpen(let sigma, let amount):
            return try image.workingCopy().mappingColour { colour in
                let blurred = try colour.gaussianBlurred(sigma: sigma)
                return try colour.linear([1 + amount], [0], clipToByte: false)
                    .adding(try blurred.linear([-amount], [0], clipToByte: false)).castToUChar()
            }
        case .pixelate(let size):
            let (width, height) = (image.width, image.height)
            return try image.shrunk(by: size).zoomed(by: size).cropped(left: 0, top: 0, width: width, height: height)
        case .median(let size):
            return try image.ranked(size: size, index: size * size / 2)
        case .caption(let caption):
            return try image.captioned(context.fields.map { caption.filled(with: $0) } ?? caption)
        case .text(let overlay):
            let filled = context.fields.map { overlay.filled(with: $0) } ?? overlay
            return filled.text.allSatisfy(\.isWhitespace) ? image : try image.withText(filled)
        case .watermark(let watermark):
            return try image.watermarked(watermark, path: context.resolve(watermark.image))
        }
    }
}

extension BoxGeometry {
    /// `resize`'s output size.
    static func resize(width: Int, height: Int, to box: (width: Int?, height: Int?), scale: Double?) -> (
        width: Int, height: Int
    ) {
        if let scale {
            return (max(1, Int((Double(width) * scale).rounded())), max(1, Int((Double(height) * scale).rounded())))
        }
        switch box {
        case (let w?, let h?): return (w, h)
        case (let w?, nil): return (w, max(1, Int((Double(height) * Double(w) / Double(width)).rounded())))
        case (nil, let h?): return (max(1, Int((Double(width) * Double(h) / Double(height)).rounded())), h)
        default: return (width, height)
        }
    }
}

extension VipsImage {
    /// Resamples to exactly `size` (aspect given by the caller); `ownCode` lets an 8-bit
    /// picture in memory be reduced by imgpipe's own vector code (`reducedInMemory`).
    func resizedExactly(to size: (width: Int, height: Int), ownCode: Bool = false) throws -> VipsImage {
        guard size.width != width || size.height != height else { return self }
        let (h, v) = (Double(size.width) / Double(width), Double(size.height) / Double(height))
        return ownCode ? try reducedInMemory(horizontal: h, vertical: v) : try resized(horizontal: h, vertical: v)
    }

    /// Crops to `size` around `gravity`; an image already that size is returned as is.
    func cropped(to size: (width: Int, height: Int), gravity: Gravity) throws -> VipsImage {
        let w = min(size.width, width)
        let h = min(size.height, height)
        guard w != width || h != height else { return self }
        switch gravity {
        // `focus` without its point (`cropped(to:gravity:focus:context:)` has it) acts as attention.
        case .attention, .focus: return try materialized().smartCropped(width: w, height: h, interesting: .attention)
        case .entropy: return try materialized().smartCropped(width: w, height: h, interesting: .entropy)
        default:
            let origin = gravity.offset(width: w, height: h, fullWidth: width, fullHeight: height)
            return try cropped(left: origin.x, top: origin.y, width: w, height: h)
        }
    }

    /// 8-bit greyscale stays greyscale; anything else becomes 8-bit sRGB. Alpha is kept.
    func workingCopy() throws -> VipsImage {
        isGrey && !isCMYK ? try toGrey() : try toSRGB()
    }

    /// Applies `body` to the colour bands only, keeping alpha as it was.
    /// The result keeps this image's colour space label (operations such as `ifthenelse`
    /// and `bandjoin` may lose it, and with it the alpha band's meaning).
    func mappingColour(_ body: (VipsImage) throws -> VipsImage) throws -> VipsImage {
        let space = colourSpace
        let result: VipsImage
        if hasAlpha {
            let colour = try extractBands(0, count: bands - 1)
            let alpha = try extractBands(bands - 1).castToUChar()
            let mapped = try body(colour).castToUChar()
            result = mapped.bands == colour.bands ? try mapped.joined(with: alpha) : mapped
        } else {
            result = try body(self).castToUChar()
        }
        let resultSpace: ColourSpace = result.isGrey ? .grey : space == .grey ? .srgb : space
        return resultSpace == .other ? result : try result.labelled(resultSpace)
    }

    /// The values to fill with `colour` in this image's bands (grey images get its luminance).
    package func fill(_ colour: Colour) -> [Double] {
        let base =
            isGrey
            ? [0.2126 * colour.red + 0.7152 * colour.green + 0.0722 * colour.blue]
            : [colour.red, colour.green, colour.blue]
        return hasAlpha ? base + [colour.alpha] : base
    }

    /// A working copy that can hold `colour`: sRGB unless both are grey, with alpha when
    /// the colour is not opaque.
    func canvas(for colour: Colour) throws -> VipsImage {
        let isGreyColour = colour.red == colour.green && colour.green == colour.blue
        var image = isGrey && isGreyColour && !isCMYK ? try toGrey() : try toSRGB()
        if !colour.isOpaque, !image.hasAlpha { image = try image.appendingBand(255) }
        return image
    }

    func padded(top: Int, right: Int, bottom: Int, left: Int, colour: Colour) throws -> VipsImage {
        let image = try canvas(for: colour)
        return try image.embedded(
            x: left, y: top, width: image.width + left + right, height: image.height + top + bottom,
            background: image.fill(colour))
    }

    func rotatedClockwise(_ degrees: Double, background: Colour) throws -> VipsImage {
        var turn = degrees.truncatingRemainder(dividingBy: 360)
        if turn < 0 { turn += 360 }
        switch turn {
        case 0: return self
        case 90: return try materialized().rotated(.d90)
        case 180: return try materialized().rotated(.d180)
        case 270: return try materialized().rotated(.d270)
        default:
            let image = try canvas(for: background).materialized()
            return try image.rotated(degrees: -turn, background: image.fill(background)).castToUChar()
        }
    }

    func roundingCorners(radius: Int) throws -> VipsImage {
        let image = try workingCopy()
        let (w, h) = (image.width, image.height)
        let r = max(0, min(radius, w / 2, h / 2))
        guard r > 0 else { return image }
        let mask = try VipsImage.black(width: w, height: h, bands: 1).linear([0], [255], clipToByte: true).materialized()
        for (x, y) in [(0, 0), (w - r, 0), (0, h - r), (w - r, h - r)] {
            try mask.drawRectangle(ink: [0], left: x, top: y, width: r, height: r)
        }
        for (x, y) in [(r, r), (w - 1 - r, r), (r, h - 1 - r), (w - 1 - r, h - 1 - r)] {
            try mask.drawCircle(ink: [255], centreX: x, centreY: y, radius: r)
        }
        guard image.hasAlpha else { return try image.joined(with: mask) }
        let colour = try image.extractBands(0, count: image.bands - 1)
        let alpha = try image.extractBands(image.bands - 1).multiplying(mask).linear([1.0 / 255], [0], clipToByte: true)
        return try colour.joined(with: alpha)
    }
}
