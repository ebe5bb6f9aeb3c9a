import Foundation
import PipelineKit

/// Damaged copies of good files, each modelled on a way real attacks and real transfers
/// break images. They work on bytes, so any fixture can be damaged.
extension ImageFixtures {
    /// The first `fraction` of a JPEG with an end-of-image marker (`FF D9`) appended: a
    /// file cut short that still looks complete to a marker scanner.
    public static func jpegCutWithEndMarker(_ jpeg: Data, keeping fraction: Double) -> Data {
        jpeg.prefix(Int(Double(jpeg.count) * fraction)) + Data([0xFF, 0xD9])
    }

    /// A JPEG whose entropy-coded data (after the first start-of-scan) has its middle third
    /// set to zero bytes.
    public static func jpegScanZeroed(_ jpeg: Data) -> Data {
        var bytes = [UInt8](jpeg)
        for index in jpegScanMiddleThird(bytes) { bytes[index] = 0 }
        return Data(bytes)
    }

    /// A JPEG whose scan's middle third is replaced by random bytes (never `FF`, so no
    /// marker is made): data that decodes to nonsense rather than running out.
    public static func jpegScanGarbled(_ jpeg: Data, seed: UInt64 = 7) -> Data {
        var bytes = [UInt8](jpeg)
        var random = SeededRandom(seed: seed)
        for index in jpegScanMiddleThird(bytes) { bytes[index] = UInt8(random.next() % 255) }
        return Data(bytes)
    }

    /// A PNG with an ancillary `tEXt` chunk inserted after IHDR that declares `length`
    /// bytes while holding a few: the declared-length trap (libpng allocates the length).
    public static func pngWithOversizedChunk(_ png: Data, length: UInt32 = 0x7FFF_FFFF) -> Data {
        let afterHeader = 8 + 12 + 13
        let body = Array("Comment\0".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: 64)
        let chunk = bigEndian(length) + Array("tEXt".utf8) + body
        return png.prefix(afterHeader) + Data(chunk) + png.dropFirst(afterHeader)
    }

    /// The bytes of the entropy-coded data after a JPEG's first SOS segment, middle third.
    static func jpegScanMiddleThird(_ bytes: [UInt8]) -> Range<Int> {
        var offset = 2
        while offset + 4 <= bytes.count, bytes[offset] == 0xFF, bytes[offset + 1] != 0xDA {
            offset += 2 + Int(bytes[offset + 2]) << 8 + Int(bytes[offset + 3])
        }
        guard offset + 4 <= bytes.count else { return 0..<0 }
        let start = offset + 2 + Int(bytes[offset + 2]) << 8 + Int(bytes[offset + 3])
        let third = (bytes.count - 2 - start) / 3
        return start + third..<start + 2 * third
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// One PNG chunk: length, type, body, CRC.
    static func pngChunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + body
        return bigEndian(UInt32(body.count)) + typed + bigEndian(crc32(typed))
    }
}

/// A small deterministic generator (SplitMix64): the same seed gives the same mutants on
/// every machine and every run.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
