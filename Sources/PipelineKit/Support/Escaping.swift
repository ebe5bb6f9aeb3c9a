import Foundation

extension String {
    /// The text with the five XML special characters escaped, for XML and HTML text and
    /// attribute values (S3 request bodies, the contact sheet, Pango markup).
    package var xmlEscaped: String {
        replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "'", with: "&apos;")
    }
}

extension String {
    /// The text as a terminal should show it: control characters (a feed's key or message
    /// may hold an escape sequence that clears the screen, or a line feed that forges a
    /// line of imgpipe's own) and the bidirectional overrides written as `\u{1B}`; a tab
    /// stays.
    public var printable: String { escapingControls(keepingLineFeeds: false) }

    /// `printable`, with line feeds kept: for text of several lines imgpipe made itself.
    public var printableLines: String { escapingControls(keepingLineFeeds: true) }

    private func escapingControls(keepingLineFeeds: Bool) -> String {
        guard unicodeScalars.contains(where: { $0.isUnprintable }) else { return self }
        var out = ""
        for scalar in unicodeScalars {
            if scalar.isUnprintable, !(keepingLineFeeds && scalar == "\n") {
                out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

extension Unicode.Scalar {
    /// A control character other than tab (C0, DEL, C1), or a bidirectional embedding,
    /// override or isolate, which reorder what a terminal shows.
    fileprivate var isUnprintable: Bool {
        (value < 0x20 && value != 0x09) || (0x7F...0x9F).contains(value)
            || (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value)
    }
}

extension CharacterSet {
    /// RFC 3986's unreserved characters: letters, digits and `-._~` (what percent-encoding
    /// for S3 signatures, and the URL forms of a secret, leave alone).
    static let rfc3986Unreserved = CharacterSet(
        charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
}
