import Foundation

/// `accept`: which inputs are worth processing. An input outside the rules is skipped
/// (not failed), judged from its bytes and header before any pixel is decoded.
///
/// Width and height are the picture as it is shown: a header whose EXIF orientation turns
/// it (5 to 8) has its width and height swapped first, so `minWidth` means the same for a
/// portrait photo stored sideways as for one stored upright.
public struct AcceptRules: Sendable, Equatable, Codable {
    public var minWidth: Int?
    public var minHeight: Int?
    /// The long side over the short side at most (3 lets a 3:1 panorama through).
    public var maxAspect: Double?
    public var minBytes: Int?
    /// nil: every format imgpipe reads.
    public var formats: [ImageFormat]?

    public init(
        minWidth: Int? = nil, minHeight: Int? = nil, maxAspect: Double? = nil, minBytes: Int? = nil,
        formats: [ImageFormat]? = nil
    ) {
        self.minWidth = minWidth
        self.minHeight = minHeight
        self.maxAspect = maxAspect
        self.minBytes = minBytes
        self.formats = formats
    }

    /// What the bytes alone decide: their size and their format (by magic bytes).
    package func screen(bytes: Int, format: ImageFormat) -> ItemSkip? {
        if let minBytes, bytes < minBytes {
            return ItemSkip(.tooSmall, "\(bytes) bytes is under accept.minBytes \(minBytes)")
        }
        if let formats, !formats.contains(format) {
            return ItemSkip(
                .format, "\(format.rawValue) is not in accept.formats (\(formats.map(\.rawValue).joined(separator: ", ")))")
        }
        return nil
    }

    /// What the header decides, from the size of the picture as shown (`uprightSize`).
    package func screen(shown: (width: Int, height: Int)) -> ItemSkip? {
        let (width, height) = shown
        let size = "\(width)×\(height)"
        if let minWidth, width < minWidth {
            return ItemSkip(.tooSmall, "\(size) is under accept.minWidth \(minWidth)")
        }
        if let minHeight, height < minHeight {
            return ItemSkip(.tooSmall, "\(size) is under accept.minHeight \(minHeight)")
        }
        if let maxAspect, min(width, height) > 0 {
            let aspect = Double(max(width, height)) / Double(min(width, height))
            if aspect > maxAspect {
                return ItemSkip(
                    .aspect, "\(size) is \(String(format: "%.2f", aspect)):1, over accept.maxAspect \(SpecNode.format(maxAspect))"
                )
            }
        }
        return nil
    }
}
