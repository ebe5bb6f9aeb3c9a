import Foundation

extension URL {
    /// A URL read as a browser reads one (WHATWG URL): its escapes kept as written, and only
    /// what a URI cannot hold percent-encoded (non-ASCII letters, a space, `|`), so that
    /// `…/Été%20sale%2050%25.jpg` is asked for as `…/%C3%89t%C3%A9%20sale%2050%25.jpg`.
    /// `URL(string:)` alone, given text with a character it must encode, encodes every `%`
    /// again (`%2520`), which asks for another file. A host with non-ASCII letters is given
    /// in its IDNA form (`xn--…`). Nil when Foundation cannot read the result.
    ///
    /// Every URL imgpipe requests goes through here: items' URLs, feed pages, endpoints.
    package init?(webAddress text: String) {
        guard let afterScheme = Self.afterScheme(text) else {
            self.init(string: PercentEscapes.encodingWhatAURLCannotHold(text))
            return
        }
        let originEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? afterScheme.endIndex
        var origin = String(text[..<originEnd])
        if !origin.utf8.allSatisfy({ $0 < 0x80 }) {
            // Foundation writes a non-ASCII host as IDNA; the rest is encoded below, not by it.
            guard let idna = URL(string: origin)?.absoluteString, idna.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
            origin = idna
        }
        self.init(string: origin + PercentEscapes.encodingWhatAURLCannotHold(String(text[originEnd...])))
    }

    /// What follows `scheme://` when `text` starts with one (`http://`, `s3://`), else nil.
    static func afterScheme(_ text: String) -> Substring? {
        guard let colon = text.firstIndex(of: ":"), let first = text.first, first.isASCIILetter,
            text[..<colon].allSatisfy({ $0.isASCIILetter || $0.isASCIIDigit || $0 == "+" || $0 == "-" || $0 == "." }),
            text[colon...].hasPrefix("://")
        else { return nil }
        return text[text.index(colon, offsetBy: 3)...]
    }
}
