import VipsKit

/// An input format, recognised by its magic bytes (never by file name or Content-Type).
public enum ImageFormat: String, Sendable, CaseIterable, Codable {
    case jpeg, png, gif, webp, tiff, heif, avif

    /// How strict libvips' loader is for this format, for the header, the fused
    /// thumbnail and every later read of the pixels. Chosen by experiment on libvips 8.14
    /// with damaged copies of photos (cut short, cut with an end marker, zeroed and
    /// garbled data):
    ///
    /// - JPEG, `.warning`: a JPEG cut short with `FF D9` appended, or with a zeroed or
    ///   garbled scan, gives libjpeg warnings only ("Corrupt JPEG data: premature end of
    ///   data segment", "bad Huffman code") and passes `.error` as a half-grey picture.
    ///   The cost: JPEGs with harmless warnings ("extraneous bytes before marker", common
    ///   from some cameras and editors) now fail as `decode` too.
    /// - PNG, GIF, WebP, TIFF, HEIF, AVIF, `.error`: every damaged copy already fails at
    ///   `.error` (libpng "not enough image data", gif "unexpected end", libtiff read
    ///   errors), and `.warning` caught none that `.error` missed: it would only add the
    ///   risk of failing good files on those libraries' harmless warnings.
    var failOn: FailOn { self == .jpeg ? .warning : .error }

    /// What the first bytes of a file say it is.
    package enum Sniffed: Equatable {
        case accepted(ImageFormat)
        /// A format we recognise but refuse (libvips' untrusted loaders, or no loader).
        case refused(String)
        case unknown
    }

    /// Reads the first bytes (64 are plenty).
    package static func sniff(_ head: [UInt8]) -> Sniffed {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            head.count >= offset + prefix.count && Array(head[offset..<offset + prefix.count]) == prefix
        }
        func ascii(_ text: String, at offset: Int = 0) -> Bool { starts(Array(text.utf8), at: offset) }

        if starts([0xFF, 0xD8, 0xFF]) { return .accepted(.jpeg) }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .accepted(.png) }
        if ascii("GIF87a") || ascii("GIF89a") { return .accepted(.gif) }
        if ascii("RIFF"), ascii("WEBP", at: 8) { return .accepted(.webp) }
        if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A])
            || starts([0x49, 0x49, 0x2B, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2B])
        {
            return .accepted(.tiff)
        }
        if ascii("ftyp", at: 4), head.count >= 12 {
            let brand = String(decoding: head[8..<12], as: UTF8.self)
            if ["avif", "avis"].contains(brand) { return .accepted(.avif) }
            if ["heic", "heix", "hevc", "hevx", "heim", "heis", "hevm", "hevs", "mif1", "msf1"].contains(brand) {
                return .accepted(.heif)
            }
            return .refused("ISO media (\(brand))")
        }
        if ascii("%PDF") { return .refused("PDF") }
        if ascii("BM") { return .refused("BMP") }
        if ascii("8BPS") { return .refused("PSD") }
        if ascii("SIMPLE  =") { return .refused("FITS") }
        if starts([0x08, 0xF2, 0xA6, 0xB6]) || starts([0xB6, 0xA6, 0xF2, 0x08]) { return .refused("VIPS") }
        if starts([0x76, 0x2F, 0x31, 0x01]) { return .refused("OpenEXR") }
        if starts([0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20]) || starts([0xFF, 0x4F, 0xFF, 0x51]) {
            return .refused("JPEG 2000")
        }
        if head.count >= 2, head[0] == UInt8(ascii: "P"), (UInt8(ascii: "1")...UInt8(ascii: "7")).contains(head[1]) {
            return .refused("PPM/PGM/PBM")
        }
        if head.count >= 2, head[0] == UInt8(ascii: "P"), head[1] == UInt8(ascii: "F") || head[1] == UInt8(ascii: "f") {
            return .refused("PFM")
        }
        let text = String(decoding: head.prefix(64), as: UTF8.self).lowercased()
        if text.contains("<svg") || (text.hasPrefix("<?xml") && text.contains("svg")) { return .refused("SVG") }
        if text.hasPrefix("<?xml") || text.hasPrefix("<!doctype") || text.hasPrefix("<html") { return .refused("HTML/XML") }
        return .unknown
    }
}
