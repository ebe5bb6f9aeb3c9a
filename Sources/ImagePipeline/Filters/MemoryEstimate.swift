/// The memory an item's pixel work needs, estimated from its header before any decoding
/// (`ImageHeader`), to admit it against the run's `limits.memory` (`MemoryBudget`).
///
/// It counts what the decoder must hold — the whole picture for an interlaced PNG, a
/// progressive JPEG's coefficients, GIF, WebP, HEIF/AVIF, a TIFF strip; a few rows for a
/// baseline JPEG or a plain PNG, which `vips_thumbnail` shrinks while loading — and the
/// pictures the chain keeps whole: the common result of several outputs, and the picture
/// of each output whose encoder takes it whole (WebP, AVIF, GIF). Measured on libvips 8.14
/// (README, "Memory"): a 95 MP 16-bit RGBA interlaced PNG fitted to 1024 peaked at
/// 1.25 × its raw size in its helper, a progressive JPEG at its coefficients.
public struct MemoryEstimate: Sendable, Equatable {
    public let bytes: Int
    /// What it is the estimate of: `16-bit RGBA interlaced PNG, 95 MP`.
    public let what: String

    /// The estimate in whole megabytes (MiB), rounded.
    public var megabytes: Int { Int((Double(bytes) / 1_048_576).rounded()) }

    /// Codec state, line buffers and the chain's regions: what any item holds.
    static let perItem = 16 << 20
}

extension ImageProcessor {
    /// The estimate for `input`, from its header alone; nil for an image whose header
    /// cannot be read here (the caller counts it as the whole budget: it runs alone).
    public func memoryEstimate(of input: ImageInput) -> MemoryEstimate? {
        let reading = switch input {
        case let .file(path): ImageHeader.read(path: path)
        case let .data(data): ImageHeader.read(data: data)
        }
        switch reading {
        case let .header(header): return memoryEstimate(header)
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
            loaded = min(loaded, sharedLoad.targets(from: size, format: header.format).map { $0.width * $0.height }.max() ?? loaded)
        } else if let thumbnail = plan.thumbnail {
            switch thumbnail.box {
            case let .fit(width, height, enlarge):
                let fitted = BoxGeometry.fit(width: size.width, height: size.height, box: (width, height), enlarge: enlarge)
                loaded = fitted.width * fitted.height
            case let .fill(width, height, _):
                loaded = width * height
            }
        }
        var decoder: Int
        switch header.holding {
        case .rows: decoder = 0
        // Measured: libspng's interlaced decode peaks at 1.25 × the picture.
        case let .whole(bytes) where header.format == .png: decoder = bytes + bytes / 4
        case let .whole(bytes), let .band(bytes): decoder = bytes
        }
        // WebP decodes at its load size, into a picture it holds whole.
        if header.scalesOnLoad { decoder += (sharedLoad == nil && plan.thumbnail == nil ? header.pixels : loaded) * header.bands }
        let wholeEncoders = outputs.filter { [.webp, .avif, .gif].contains($0.spec.format) }.count
        let kept = wholeEncoders + (outputs.count > 1 ? 1 : 0)
        let (working, overflow) = (loaded * 4).multipliedReportingOverflow(by: kept)
        let total = overflow ? Int.max / 2 : decoder + working + MemoryEstimate.perItem
        return MemoryEstimate(bytes: total, what: "\(header.kind), \(Self.megapixels(header.pixels))")
    }
}
