import Foundation

/// The memory an item's pixel work needs, estimated from its header before any decoding
/// (`ImageHeader`), to admit it against the run's `limits.memory` (`MemoryBudget`).
///
/// It counts what the decoder must hold — the whole picture for an interlaced PNG, a
/// progressive JPEG's coefficients, GIF, WebP, HEIF/AVIF, a TIFF strip; a few rows for a
/// baseline JPEG or a plain PNG, which `vips_thumbnail` shrinks while loading — and the
/// pictures the chain keeps whole: the common result of several outputs, and the picture
/// of each output whose encoder takes it whole (WebP, AVIF, GIF). Measured on libvips 8.14
/// (docs/limits.md, "Memory"): a 95 MP 16-bit RGBA interlaced PNG fitted to 1024 peaked at its
/// picture and 2048 rows of it in its helper, a progressive JPEG at its coefficients.
public struct MemoryEstimate: Sendable, Equatable {
    public let bytes: Int
    /// What it is the estimate of: `16-bit RGBA interlaced PNG, 95 MP`.
    public let what: String

    /// The estimate in whole megabytes (MiB), rounded.
    public var megabytes: Int { Int((Double(bytes) / 1_048_576).rounded()) }

    /// Codec state, encoders' buffers and the chain's regions: what any item holds.
    static let perItem = 16 << 20
    /// Rows of the loaded picture held by a sequential pipeline's caches.
    static let cachedRows = 2048
    /// The bytes a pixel of an output costs while its quality or format is searched.
    static let searchPerPixel = 48
}

extension ImageProcessor {
    /// The estimate for `input`, from its header alone; nil for an image whose header
    /// cannot be read here (the caller counts it as the whole budget: it runs alone).
    public func memoryEstimate(of input: ImageInput) -> MemoryEstimate? {
        let reading: ImageHeader.Reading
        let bytes: Int
        switch input {
        case .file(let path):
            reading = ImageHeader.read(path: path)
            var info = stat()
            bytes = stat(path, &info) == 0 ? Int(info.st_size) : 0
        case .data(let data):
            reading = ImageHeader.read(data: data)
            bytes = data.count
        }
        switch reading {
        case .header(let header):
            // Refused before any decoding (over maxPixels, or skipped by the accept rules its
            // format, size in bytes or aspect break, whichever way it is shown): it holds
            // nothing, and ends as it did without a budget.
            let flipped = (width: header.height, height: header.width)
            if header.pixels > limits.maxPixels || accept.screen(bytes: bytes, format: header.format) != nil
                || (accept.screen(shown: (header.width, header.height)) != nil && accept.screen(shown: flipped) != nil)
            {
                return MemoryEstimate(bytes: MemoryEstimate.perItem, what: "refused before decoding")
            }
            return memoryEstimate(header)
        // It fails on its first bytes, before libvips sees it.
        case .notAnImage: return MemoryEstimate(bytes: MemoryEstimate.perItem, what: "not an image")
        case .unreadable: return nil
        }
    }

    /// The estimate for an input with this header, as this processor's chain will make it.
    func memoryEstimate(_ header: ImageHeader) -> MemoryEstimate {
        let size = (width: header.width, height: header.height)
        // The picture the chain works on after the load: the shrink-on-load's size when the
        // chain starts with a fit or fill (the largest output's, for a shared load), else
        // the input's.
        var loaded = header.pixels
        var loadedSize = size
        if let sharedLoad {
            loaded = min(
                loaded, sharedLoad.targets(from: size, format: header.format).map { product($0.width, $0.height) }.max() ?? loaded
            )
        } else if let thumbnail = plan.thumbnail {
            switch thumbnail.box {
            case .fit(let width, let height, let enlarge):
                loadedSize = BoxGeometry.fit(width: size.width, height: size.height, box: (width, height), enlarge: enlarge)
            case .fill(let width, let height, _, _):
                loadedSize = (width, height)
            }
            loaded = product(loadedSize.width, loadedSize.height)
        }
        var decoder: Int
        switch header.holding {
        case .rows: decoder = 0
        case .whole(let bytes), .band(let bytes): decoder = bytes
        }
        // A JPEG shrinks while decoding by 2, 4 or 8 when the fit leaves at least 2× for the
        // resize (`vips_thumbnail`), a WebP to the size it is fitted to.
        let shrinking = sharedLoad != nil || plan.thumbnail != nil
        let factor = shrinking ? (Double(header.pixels) / Double(max(1, loaded))).squareRoot() : 1
        var loadWidth = header.width
        if header.format == .jpeg { loadWidth /= factor >= 16 ? 8 : factor >= 8 ? 4 : factor >= 4 ? 2 : 1 }
        if header.scalesOnLoad {
            loadWidth = Int(Double(header.width) / max(1, factor))
            // WebP decodes at its load size, into a picture it holds whole.
            decoder += product(shrinking ? loaded : header.pixels, header.bands)
        }
        // The rows a sequential pipeline keeps in its caches (the load's line cache, the
        // shrink's window): measured at about 2048 rows of the loaded width for a 95 MP
        // picture fitted to 1024 (a plain PNG, a TIFF, the reading of an interlaced PNG's
        // decoded picture).
        decoder += product(min(header.height, MemoryEstimate.cachedRows), loadWidth, header.bands, header.bytesPerSample)
        let whole: Set<OutputFormat> = [.webp, .avif, .gif]
        let wholeEncoders = outputs.filter { output in output.spec.formats.contains { whole.contains($0) } }.count
        let kept = wholeEncoders + (outputs.count > 1 ? 1 : 0)
        // An output whose quality or format is searched holds its picture, every probe's
        // bytes and about ten float planes of it for SSIM (`QualitySearch`): measured at 48
        // bytes a pixel over a fixed quality (1200 × 1200, a target of 0.9).
        // (On the loaded picture: an upper bound of the output's when the chain starts with
        // its fit, as it should.) A `"best"` without a search holds its picture, 4 bytes a
        // pixel, and the candidates' bytes.
        let searching = outputs.filter { $0.spec.searchesQuality }.count
        let choosing = outputs.filter { !$0.spec.searchesQuality && $0.spec.bestOf != nil }.count
        // Each term is at most 2^60 (`product`), so the sum cannot overflow.
        let total =
            decoder + product(loaded, 4, kept + choosing) + product(loaded, MemoryEstimate.searchPerPixel, searching)
            + wholePictures(header, loaded: loadedSize) + MemoryEstimate.perItem
        return MemoryEstimate(bytes: total, what: "\(header.kind), \(Self.megapixels(header.pixels))")
    }
}

extension ImageProcessor {
    /// The most the chain's steps hold whole at once: a step that reads its picture out of
    /// order (`rotate` by any angle, an `autorotate` not fused into the shrink-on-load,
    /// `flip` vertical, `trim`, `normalize`, a smart crop, `round-corners`' mask) computes it
    /// into memory at the size it has when the step runs, and the picture the previous such
    /// step computed is held until then (what follows it is made from it). A 16000 × 16000
    /// baseline JPEG rotated by 90 (no shrink-on-load) peaked at 818 MB in its helper, where
    /// the decoder's rows alone came to 110 MB.
    func wholePictures(_ header: ImageHeader, loaded: (width: Int, height: Int)) -> Int {
        var common = ChainWalk(size: loaded, bands: header.bands, sample: header.bytesPerSample)
        common.run(plan.steps)
        var most = common.most
        for (index, steps) in outputSteps.enumerated() where !steps.isEmpty {
            var own = common
            if let sharedLoad {
                // After a shared load, each output's steps start from its own resize.
                let upright = (width: header.width, height: header.height)
                let target = sharedLoad.targets(from: upright, format: header.format)[index]
                let start: (width: Int, height: Int) =
                    switch sharedLoad.boxes[index] {
                    case .fit: target
                    case .fill(let width, let height, _, _): (min(width, target.width), min(height, target.height))
                    }
                own = ChainWalk(size: start, bands: header.bands, sample: header.bytesPerSample)
            }
            own.run(steps)
            most = max(most, own.most)
        }
        return most
    }
}

/// A chain's steps followed by the size, bands and bytes per sample of their picture (from
/// the filters alone, before any pixel), and what they compute whole into memory.
struct ChainWalk {
    var size: (width: Int, height: Int)
    var bands: Int
    /// Bytes per sample as loaded: kept (a step that makes it 8-bit is not counted down).
    let sample: Int
    /// The picture the last step computed whole, held while what is made from it is.
    private(set) var held = 0
    /// The most held at once.
    private(set) var most = 0

    init(size: (width: Int, height: Int), bands: Int, sample: Int) {
        self.size = size
        self.bands = bands
        self.sample = sample
    }

    private var whole: Int { product(size.width, size.height, bands, sample) }

    /// A picture of `bytes` computed into memory, beside the one before it.
    private mutating func hold(_ bytes: Int) {
        most = max(most, held + bytes)
        held = bytes
    }

    /// `canvas(for:)`: sRGB unless both are grey, with alpha for a colour that is not opaque.
    private mutating func canvas(_ colour: Colour) {
        let grey = bands <= 2 && colour.red == colour.green && colour.green == colour.blue
        let alpha = bands == 2 || bands == 4 || !colour.isOpaque
        bands = max(bands, (grey ? 1 : 3) + (alpha ? 1 : 0))
    }

    /// Sides kept within 2^30 (a step over `maxPixels` fails before computing anything).
    private static func side(_ length: Int) -> Int { min(max(1, length), 1 << 30) }

    mutating func run(_ steps: [FilterStep]) {
        for step in steps { apply(step) }
    }

    mutating func apply(_ step: FilterStep) {
        let (width, height) = size
        switch step {
        case .autorotate:
            // The orientation is not read from the header: counted as turned.
            hold(whole)
        case .fit(let w, let h, let enlarge):
            size = BoxGeometry.fit(width: width, height: height, box: (w, h), enlarge: enlarge)
        case .fill(let w, let h, let gravity, _):
            let cover = BoxGeometry.cover(width: width, height: height, box: (w, h))
            // A focus crop falls back to attention for an item without a usable point.
            if gravity.isSmart, cover != (w, h) {
                hold(product(cover.width, cover.height, bands, sample))
            }
            size = (min(w, cover.width), min(h, cover.height))
        case .resize(let w, let h, let scale):
            size = BoxGeometry.resize(width: width, height: height, to: (w, h), scale: scale)
        case .cropRect(let x, let y, let w, let h):
            if x < width, y < height { size = (Self.side(min(w, width - x)), Self.side(min(h, height - y))) }
        case .cropAspect(let aspectWidth, let aspectHeight, let gravity, _):
            let ratio = aspectWidth / aspectHeight
            var (w, h) = (width, Int((Double(width) / ratio).rounded()))
            if h > height {
                h = height
                w = max(1, min(width, Int((Double(h) * ratio).rounded())))
            }
            if gravity.isSmart, (w, h) != (width, height) { hold(whole) }
            size = (Self.side(w), Self.side(h))
        case .rotate(let degrees, let background):
            var turn = degrees.truncatingRemainder(dividingBy: 360)
            if turn < 0 { turn += 360 }
            switch turn {
            case 0: break
            case 90, 270:
                hold(whole)
                size = (height, width)
            case 180: hold(whole)
            default:
                canvas(background)
                hold(whole)
                let radians = turn * .pi / 180
                let (c, s) = (abs(cos(radians)), abs(sin(radians)))
                size = (
                    Self.side(Int((Double(width) * c + Double(height) * s).rounded(.up))),
                    Self.side(Int((Double(width) * s + Double(height) * c).rounded(.up)))
                )
            }
        case .flip(let horizontal):
            if !horizontal { hold(whole) }
        case .pad(let top, let right, let bottom, let left, let colour):
            canvas(colour)
            size = (Self.side(width + left + right), Self.side(height + top + bottom))
        case .border(let border, let colour):
            canvas(colour)
            size = (Self.side(width + 2 * border), Self.side(height + 2 * border))
        case .trim:
            // Computed whole to find the box; the crop is counted at the whole size.
            hold(whole)
        case .roundCorners:
            // Its one-band mask, computed whole; the picture gains alpha.
            hold(product(width, height))
            if bands == 1 || bands == 3 { bands += 1 }
        case .normalize:
            hold(whole)
        case .grayscale, .threshold:
            bands = bands == 2 || bands == 4 ? 2 : 1
        case .sepia, .tint, .text, .watermark, .caption:
            if bands < 3 { bands += 2 }
        default:
            break
        }
    }
}
