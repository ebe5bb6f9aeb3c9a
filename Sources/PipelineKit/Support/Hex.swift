import Crypto
import Foundation

extension Sequence where Element == UInt8 {
    /// Lower-case hexadecimal, two digits a byte (digests in names, keys and records).
    package var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The SHA-256 of `text`'s UTF-8 bytes, in lower-case hexadecimal: a stable name for a
/// text (cache keys, the file of a pipeline made from flags).
public func sha256Hex(_ text: String) -> String {
    sha256Hex(Data(text.utf8))
}

/// The SHA-256 of `data`, in lower-case hexadecimal (the `sha256` an export records).
public func sha256Hex(_ data: Data) -> String {
    SHA256.hash(data: data).hex
}
