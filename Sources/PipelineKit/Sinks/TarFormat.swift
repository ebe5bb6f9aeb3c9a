import Foundation

/// The bytes of a tar archive (POSIX.1-2001 "pax" interchange format): each member is a
/// 512-byte ustar header, its data, and zeros up to the next 512 bytes; the archive ends
/// with two blocks of zeros. A name longer than ustar's 100 bytes goes before its header
/// in a pax extended header (`path=`), which GNU tar, Python's `tarfile` and WebDataset's
/// readers all follow.
enum TarFormat {
    static let blockSize = 512
    /// The largest member ustar's 11 octal digits can state (8 GiB less one byte).
    static let maxSize = (1 << 33) - 1
    /// What closes an archive.
    static let end = [UInt8](repeating: 0, count: 2 * blockSize)

    /// The header of a regular file named `name` holding `size` bytes, modified at
    /// `modified` (seconds since 1970), with a pax header before it when the name needs one.
    static func header(name: String, size: Int, modified: Int) -> [UInt8] {
        let utf8 = Array(name.utf8)
        guard utf8.count > 100 || !utf8.allSatisfy({ $0 < 0x80 }) else {
            return block(name: utf8, size: size, modified: modified, type: UInt8(ascii: "0"))
        }
        let record = paxRecord("path", name)
        var out = block(
            name: Array("././@PaxHeader".utf8), size: record.count, modified: modified, type: UInt8(ascii: "x"))
        out += record
        out += padding(record.count)
        // The ustar name of a member with a pax path is for readers that know no pax: in
        // ASCII, cut before the extensions of its last part (from its first dot), which stay,
        // so that `KEY.jpg` and `KEY.json` stay apart.
        let ascii = utf8.map { $0 < 0x80 ? $0 : UInt8(ascii: "_") }
        let lastPart = (ascii.lastIndex(of: UInt8(ascii: "/")) ?? -1) + 1
        let tail = ascii[lastPart...].firstIndex(of: UInt8(ascii: ".")).map { Array(ascii[$0...]) } ?? []
        let fallback = tail.count < 100 ? Array(ascii.prefix(100 - tail.count)) + tail : Array(ascii.prefix(100))
        out += block(name: fallback, size: size, modified: modified, type: UInt8(ascii: "0"))
        return out
    }

    /// Zeros from the end of `size` bytes of data to the next block.
    static func padding(_ size: Int) -> [UInt8] {
        [UInt8](repeating: 0, count: (blockSize - size % blockSize) % blockSize)
    }

    /// `"<length> <key>=<value>\n"`, where the length counts the record's own digits.
    static func paxRecord(_ key: String, _ value: String) -> [UInt8] {
        let body = " \(key)=\(value)\n".utf8.count
        var length = body + 1
        while String(length).count + body != length { length = String(length).count + body }
        return Array("\(length) \(key)=\(value)\n".utf8)
    }

    private static func block(name: [UInt8], size: Int, modified: Int, type: UInt8) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: blockSize)
        func put(_ bytes: [UInt8], at offset: Int) {
            for (index, byte) in bytes.enumerated() { header[offset + index] = byte }
        }
        func octal(_ value: Int, digits: Int) -> [UInt8] {
            let text = String(value, radix: 8)
            return Array((String(repeating: "0", count: max(0, digits - text.count)) + text).utf8) + [0]
        }
        put(name, at: 0)
        put(octal(0o644, digits: 7), at: 100)
        put(octal(0, digits: 7), at: 108)
        put(octal(0, digits: 7), at: 116)
        put(octal(size, digits: 11), at: 124)
        put(octal(max(0, modified), digits: 11), at: 136)
        header[156] = type
        put(Array("ustar".utf8) + [0], at: 257)
        put(Array("00".utf8), at: 263)
        // The checksum is the sum of the header's bytes with its own field as spaces.
        put([UInt8](repeating: 0x20, count: 8), at: 148)
        let sum = header.reduce(0) { $0 + Int($1) }
        put(octal(sum, digits: 6) + [0x20], at: 148)
        return header
    }
}
