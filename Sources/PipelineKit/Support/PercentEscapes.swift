/// `%XX` escapes read and written byte by byte, for text compared or sent as it is written
/// (robots.txt rules and the paths they are matched with, a URL an upload endpoint answers).
enum PercentEscapes {
    /// The byte the escape that starts at `index` stands for, or nil when `%XX` (two hex
    /// digits) does not start there.
    static func byte(at index: Int, in bytes: [UInt8]) -> UInt8? {
        guard index + 2 < bytes.count, bytes[index] == UInt8(ascii: "%"),
            let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
        else { return nil }
        return high << 4 | low
    }

    /// `byte` as an escape, with upper-case hex digits.
    static func escape(_ byte: UInt8) -> [UInt8] {
        let digits = Array("0123456789ABCDEF".utf8)
        return [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
    }

    /// Letters, digits and `-._~` (RFC 3986): an escape of one of them stands for itself.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// `text` with each byte a URL cannot hold as it is percent-encoded: all but unreserved
    /// and reserved characters (RFC 3986), and a `%` that does not start an escape (`100%`).
    /// Escapes already there are kept as written (`%20` stays `%20`, `%2F` stays `%2F`).
    /// `[` and `]` (which only an IP-literal host may hold) and a second `#` are encoded too:
    /// Foundation, given any of these, encodes every `%` of the text again.
    static func encodingWhatAURLCannotHold(_ text: String) -> String {
        let reserved = Set(":/?#@!$&'()*+,;=".utf8)
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var inFragment = false
        for (index, value) in bytes.enumerated() {
            let isHash = value == UInt8(ascii: "#")
            let kept =
                isUnreserved(value) || (reserved.contains(value) && !(inFragment && isHash))
                || byte(at: index, in: bytes) != nil
            if isHash { inFragment = true }
            if kept { out.append(value) } else { out += escape(value) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A URL's path with its escapes decoded, for a file name: `%2F` (which is not a folder)
    /// and escapes of control characters stay as written; a path whose escapes do not
    /// decode to UTF-8 is kept as written.
    static func decodedPath(_ path: String) -> String {
        let bytes = Array(path.utf8)
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if let decoded = byte(at: index, in: bytes), decoded >= 0x20, decoded != 0x7F, decoded != UInt8(ascii: "/") {
                out.append(decoded)
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(validating: out, as: UTF8.self) ?? path
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
