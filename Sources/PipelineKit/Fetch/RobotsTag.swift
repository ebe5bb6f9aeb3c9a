import Foundation

/// The `X-Robots-Tag` response header: comma-separated directives, each line optionally
/// addressed to one crawler (`X-Robots-Tag: googlebot: noindex`). A crawler name applies to
/// the directives after it on the same line, up to the next name.
public enum RobotsTag {
    /// Directives that opt an image out of imgpipe's use.
    public static let optOutDirectives: Set<String> = ["noai", "noimageai", "noml", "none", "noindex"]
    /// Directives whose own value follows a colon (not a crawler's name).
    static let directivesWithValues: Set<String> = [
        "unavailable_after", "max-snippet", "max-image-preview",
        "max-video-preview",
    ]

    /// The first opt-out directive in `lines` (every `X-Robots-Tag` value of one answer)
    /// that applies to the crawler named `agent` (a User-Agent's product token): one with
    /// no crawler name, or with that name (case-insensitive). nil when there is none.
    public static func optOut(in lines: [String], agent: String) -> (directive: String, line: String)? {
        let agent = agent.lowercased()
        for line in lines {
            var addressee: String?
            for part in line.split(separator: ",") {
                var directive = part.trimmingCharacters(in: .whitespaces).lowercased()
                if let colon = directive.firstIndex(of: ":") {
                    let name = directive[..<colon].trimmingCharacters(in: .whitespaces)
                    if !directivesWithValues.contains(name), !name.isEmpty, !name.contains(" ") {
                        addressee = name
                        directive = directive[directive.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                    }
                }
                if optOutDirectives.contains(directive), addressee == nil || addressee == agent {
                    return (directive, line)
                }
            }
        }
        return nil
    }
}
