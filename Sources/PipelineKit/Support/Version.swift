/// What imgpipe calls itself: the one place its version is written.
public enum ImgpipeIdentity {
    /// The release, as `imgpipe --version` prints it.
    public static let version = "0.1.0"
    /// The project's address, named in the default `User-Agent` so that a site's operator
    /// can find out what is fetching their images.
    public static let address = "https://github.com/imgpipe/imgpipe"
    /// Sent with every request when the pipeline file sets no `userAgent`.
    public static let defaultUserAgent = "imgpipe/\(version) (+\(address))"

    /// The product token of a `User-Agent` (`imgpipe` in `imgpipe/0.1.0 (+…)`): the name
    /// robots.txt groups and `X-Robots-Tag` prefixes address.
    public static func productToken(of userAgent: String) -> String {
        let token = userAgent.prefix { $0 != "/" && $0 != " " && $0 != "(" }
        return token.isEmpty ? "imgpipe" : String(token)
    }
}
