import Foundation

/// The memory an item's pixel work needs, estimated from its header before any decoding
/// (`ImageHeader`), to admit it against the run's `limits.memory` (`MemoryBudget`).
///
/// It counts what the decoder must hold — the whole picture for an interlaced PNG, a
/// progressive JPEG's coefficients, GIF, WebP, HEIF/AVIF, a TIFF strip; a few rows for a
/// baseline JPEG or a plain PNG, which `vips_thumbnail` shrinks while loading — and the
/// pictures the chain keeps whole: the common result of several outputs, and the picture
/// of each output whose encoder takes it whole (WebP, AVIF, GIF). Measured on libvips 8.14
/// (README, "Memory"): a 95 MP 16-bit RGBA interlaced PNG fitted to 1024 peaked at its
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
}

extension ImageProcessor {
    /// The estimate for `input`, from its header alone; nil for an image whose header
    /// cannot be read here (the caller counts it as the whole budget: it runs alone).
    public func memoryEstimate(of input: ImageInput) -> MemoryEstimate? {
        let reading: ImageHeader.Reading
        let bytes: Int
        switch input {
        case let .file(path):
            reading = ImageHeader.read(path: path)
            var info = stat()
            bytes = stat(path, &info) == 0 ? Int(info.st_size) : 0
        case let .data(data):
            reading = ImageHeader.read(data: data)
            bytes = data.count
        }
        switch reading {
        case let .header(header):
            // Refused before any decoding (over maxPixels, or skipped by the accept rules its
            // format, size in bytes or aspect break, whichever way it is shown): it holds
            // nothing, and ends as it did without a budget.
            let flipped = (width: header.height, height: header.width)
            if header.pixels > limits.maxPixels || accept.screen(bytes: bytes, format: header.format) != nil
                || (accept.screen(shown: (header.width, header.height)) != nil && accept.screen(shown: flipped) != nil) {
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
        if let sharedLoad {
            loaded = min(loaded, sharedLoad.targets(from: size, format: header.format).map { product($0.width, $0.height) }.max() ?? loaded)
        } else if let thumbnail = plan.thumbnail {
            switch thumbnail.box {
            case let .fit(width, height, enlarge):
                let fitted = BoxGeometry.fit(width: size.width, height: size.height, box: (width, height), enlarge: enlarge)
                loaded = product(fitted.width, fitted.height)
            case let .fill(width, height, _):
                loaded = product(width, height)
            }
        }
        var decoder: Int
        switch header.holding {
        case .rows: decoder = 0
        case let .whole(bytes), let .band(bytes): decoder = bytes
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
        let wholeEncoders = outputs.filter { [.webp, .avif, .gif].contains($0.spec.format) }.count
        let kept = wholeEncoders + (outputs.count > 1 ? 1 : 0)
        // Each term is at most 2^60 (`product`), so the sum cannot overflow.
        let total = decoder + product(loaded, 4, kept) + MemoryEstimate.perItem
        return MemoryEstimate(bytes: total, what: "\(header.kind), \(Self.megapixels(header.pixels))")
    }
}
