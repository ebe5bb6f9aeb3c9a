import Foundation

/// A local file's path as an item's location, and back. A Swift string holds only valid
/// UTF-8, and a file name on Linux is any bytes (`caf\xE9.jpg` saved by a Latin-1 system):
/// a path whose bytes are valid UTF-8 is its own location (`/photos/a.jpg`); any other is
/// written as a `file:` URL with its bytes percent-encoded (`file:///photos/caf%E9.jpg`),
/// which no absolute path starts with, and read back byte for byte when the file is opened.
package enum LocalPath {
    private static let urlPrefix = "file://"

    /// The location of the file at `path` (its bytes, without a terminating NUL).
    package static func location(_ path: [UInt8]) -> String {
        if let text = String(validating: path, as: UTF8.self), !text.hasPrefix(urlPrefix) { return text }
        var url = Array(urlPrefix.utf8)
        for byte in path {
            if PercentEscapes.isUnreserved(byte) || byte == UInt8(ascii: "/") {
                url.append(byte)
            } else {
                url += PercentEscapes.escape(byte)
            }
        }
        return String(decoding: url, as: UTF8.self)
    }

    /// The bytes of the path `location` stands for.
    package static func bytes(_ location: String) -> [UInt8] {
        guard location.hasPrefix(urlPrefix) else { return Array(location.utf8) }
        let url = Array(location.utf8.dropFirst(urlPrefix.utf8.count))
        return replacingEscapes(in: url, length: 3) { PercentEscapes.byte(at: $0, in: $1) }
    }

    /// `text` with each escape of `length` bytes that `byte` reads at an index turned into
    /// the byte it stands for; other bytes as they are.
    private static func replacingEscapes(in text: [UInt8], length: Int, _ byte: (Int, [UInt8]) -> UInt8?) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = 0
        while index < text.count {
            if let escaped = byte(index, text) {
                bytes.append(escaped)
                index += length
            } else {
                bytes.append(text[index])
                index += 1
            }
        }
        return bytes
    }

    /// Calls `body` with the NUL-terminated path `location` stands for (for `open`, `stat`).
    package static func withCPath<R>(_ location: String, _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try withCPath(bytes: bytes(location), body)
    }

    /// Calls `body` with `path` NUL-terminated.
    package static func withCPath<R>(bytes path: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try (path + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }

    /// The whole file `location` stands for; nil when it cannot be read.
    package static func contents(_ location: String) -> Data? {
        let fd = withCPath(location) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data = Data()
        var block = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let got = read(fd, &block, block.count)
            if got < 0, errno == EINTR { continue }
            if got < 0 { return nil }
            if got == 0 { return data }
            data.append(contentsOf: block[0..<got])
        }
    }

    /// `bytes` as text, each byte that is not part of valid UTF-8 written `\xE9`: a name
    /// shown, or used as a key, that says which bytes it has. In a name that needs an escape
    /// or holds a backslash, a backslash is written `\x5C`, so that no two names give the
    /// same text (a file named `caf\xE9.jpg` in letters and a Latin-1 `café.jpg`).
    static func escaped(_ bytes: [UInt8]) -> String {
        if !bytes.contains(UInt8(ascii: "\\")), let text = String(validating: bytes, as: UTF8.self) { return text }
        var text = ""
        var index = 0
        while index < bytes.count {
            let lead = bytes[index]
            let length = lead < 0x80 ? 1 : lead >> 5 == 0b110 ? 2 : lead >> 4 == 0b1110 ? 3 : lead >> 3 == 0b11110 ? 4 : 0
            if length > 0, lead != UInt8(ascii: "\\"), index + length <= bytes.count,
                let scalar = String(validating: bytes[index..<index + length], as: UTF8.self)
            {
                text += scalar
                index += length
            } else {
                text += "\\x" + String(lead, radix: 16, uppercase: true).leftPadded(to: 2)
                index += 1
            }
        }
        return text
    }
}

extension LocalPath {
    /// The bytes `escaped` made `text` from: a text with no backslash is its UTF-8 (a name
    /// that needs no escape has none), else each `\xNN` is the byte it names.
    static func unescaped(_ text: String) -> [UInt8] {
        let utf8 = Array(text.utf8)
        guard utf8.contains(UInt8(ascii: "\\")) else { return utf8 }
        return replacingEscapes(in: utf8, length: 4) { index, text in
            guard text[index] == UInt8(ascii: "\\"), index + 3 < text.count, text[index + 1] == UInt8(ascii: "x") else {
                return nil
            }
            return UInt8(String(decoding: text[index + 2...index + 3], as: UTF8.self), radix: 16)
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
