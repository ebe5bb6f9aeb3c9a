import Foundation

extension String {
    /// The text with the five XML special characters escaped, for XML and HTML text and
    /// attribute values (S3 request bodies, the contact sheet, Pango markup).
    var xmlEscaped: String {
        replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "'", with: "&apos;")
    }
}

extension CharacterSet {
    /// RFC 3986's unreserved characters: letters, digits and `-._~` (what percent-encoding
    /// for S3 signatures, and the URL forms of a secret, leave alone).
    static let rfc3986Unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
}
