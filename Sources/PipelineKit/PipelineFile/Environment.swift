import Foundation
import Synchronization

/// The environment `${NAME}` references are read from, and the secrets that came from it.
///
/// Every value read through `value(of:)` is remembered, in every form it can take on its
/// way out: as written, percent-encoded (upper- or lower-case hex, with any of the usual
/// sets of characters left alone), form-encoded (a space as `+`) and JSON-escaped.
/// `redact(_:)` replaces each form with `***` in text bound for a log, the state file or
/// an error message; `recorded(_:)` puts the `${NAME}` reference back instead (and escapes
/// every other `${`), for what is written to disk and read again; `restored(_:)` reverses it.
public final class Environment: Sendable {
    private let variables: [String: String]
    /// The secrets read so far.
    private struct Secrets {
        /// Every form of every value read, longest first, with the reference that stands for it.
        var forms: [(text: String, reference: String)] = []
        var known: Set<String> = []
        /// The forms of each value read (`forms(of:)`, the value itself first), by name.
        var encodings: [String: [String]] = [:]
    }
    private let secrets = Mutex(Secrets())

    /// Values shorter than this are not masked (they would mask ordinary text).
    static let shortestSecret = 3

    public init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    public func value(of name: String) -> String? {
        guard let value = variables[name] else { return nil }
        if value.count >= Self.shortestSecret {
            secrets.withLock { secrets in
                guard secrets.known.insert(name + "\u{0}" + value).inserted else { return }
                let all = Self.forms(of: value)
                secrets.encodings[name] = all
                for (index, form) in all.enumerated() where !secrets.forms.contains(where: { $0.text == form }) {
                    secrets.forms.append((form, index == 0 ? "${\(name)}" : "${\(name):\(index)}"))
                }
                secrets.forms.sort { $0.text.utf8.count > $1.text.utf8.count }
            }
        }
        return value
    }

    /// `text` with every form of every expanded value replaced by `***`.
    public func redact(_ text: String) -> String {
        replacing(in: text) { _ in "***" }
    }

    /// `text` with every form of every expanded value replaced by its reference, and nothing
    /// else changed: for text that is shown or stored but never expanded again (output
    /// names). What is read back to be used goes through `recorded` and `restored`.
    public func referencing(_ text: String) -> String {
        replacing(in: text) { $0 }
    }

    /// `text` as it may be written to disk and read again (the state file, a shared run's
    /// database, cache entries and pages, journals): every form of every expanded value
    /// replaced by its reference, `${NAME}` for the value as written and `${NAME:n}` for its
    /// n-th encoded form (percent-encoded, JSON-escaped, …), and every other `$` that could
    /// be read as the start of a reference written `$$`. `restored(_:)` gives back exactly
    /// `text`.
    ///
    /// The escape is what keeps a feed from reading a secret: text that came from a feed
    /// (a URL, a key, a page) may hold `${AWS_SECRET_ACCESS_KEY}` itself; recorded, it is
    /// `$${AWS_SECRET_ACCESS_KEY}`, which `restored` turns back into the same literal text,
    /// never into the value. Only what this run replaced is ever expanded again.
    public func recorded(_ text: String) -> String {
        let known = secrets.withLock { $0.forms }
        return Self.recording(Substring(text), forms: known[...])
    }

    /// The inverse of `recorded`: each reference to a value read before is replaced by the
    /// form it stood for (a recorded location is fetched with its real value, encoded as it
    /// was), each `$$` by `$`. A reference to a value this process never read stays as it
    /// is (it can only have come from a recording by another process with other secrets).
    public func restored(_ recorded: String) -> String {
        guard recorded.utf8.contains(UInt8(ascii: "$")) else { return recorded }
        let known = secrets.withLock { $0.encodings }
        var out = ""
        var rest = Substring(recorded)
        while let dollar = rest.firstIndex(of: "$") {
            out += rest[..<dollar]
            let after = rest.index(after: dollar)
            if after < rest.endIndex, rest[after] == "$" {
                out += "$"
                rest = rest[rest.index(after: after)...]
            } else if after < rest.endIndex, rest[after] == "{", let close = rest[after...].firstIndex(of: "}"),
                let form = Self.form(named: rest[rest.index(after: after)..<close], in: known)
            {
                out += form
                rest = rest[rest.index(after: close)...]
            } else {
                out += "$"
                rest = rest[after...]
            }
        }
        return out + rest
    }

    /// A recorded text as a person reads it: each `$$` back to `$`, references kept as
    /// `${NAME}` (no value is expanded). For keys and locations in `status`, `export` and
    /// messages: a feed's key `k$` is shown `k$`, not as it is stored.
    public static func shown(_ recorded: String) -> String {
        // A byte scan first: most keys and locations have no `$$` at all. Two `$` bytes side
        // by side are needed for two `$` letters side by side (the loop below reads letters,
        // as `escapingDollars` wrote them: a `$` with a combining mark is another letter).
        let dollar = UInt8(ascii: "$")
        var previous: UInt8 = 0
        var pair = false
        for byte in recorded.utf8 {
            if byte == dollar, previous == dollar {
                pair = true
                break
            }
            previous = byte
        }
        guard pair else { return recorded }
        var out = ""
        var rest = Substring(recorded)
        while let dollar = rest.firstIndex(of: "$") {
            out += rest[...dollar]
            let after = rest.index(after: dollar)
            rest = after < rest.endIndex && rest[after] == "$" ? rest[rest.index(after: after)...] : rest[after...]
        }
        return out + rest
    }

    /// `NAME` or `NAME:n` → the form it stands for, when that value was read.
    private static func form(named reference: Substring, in known: [String: [String]]) -> String? {
        let parts = reference.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard let all = known[String(parts[0])] else { return nil }
        guard parts.count == 2 else { return all[0] }
        guard let index = Int(parts[1]), index > 0, index < all.count else { return nil }
        return all[index]
    }

    /// `text` split at each occurrence of the longest form first, each piece recorded with
    /// the shorter forms, references between them; what no form matches is escaped.
    private static func recording(_ text: Substring, forms: ArraySlice<(text: String, reference: String)>) -> String {
        guard let first = forms.first else { return escapingDollars(text) }
        let rest = forms.dropFirst()
        guard text.contains(first.text) else { return recording(text, forms: rest) }
        return text.split(separator: first.text, omittingEmptySubsequences: false)
            .map { recording($0, forms: rest) }
            .joined(separator: first.reference)
    }

    /// Each `$` that is followed by `$` or `{`, or ends the piece (a reference may follow
    /// it), doubled; any other `$` is kept (so a recorded text without `${` or `$$` reads as
    /// it did before the escape existed).
    private static func escapingDollars(_ text: Substring) -> String {
        // A byte scan: Foundation's `contains` of a string costs more than the rest of a listing.
        guard text.utf8.contains(UInt8(ascii: "$")) else { return String(text) }
        var out = ""
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            let next = text.index(after: index)
            out.append(character)
            if character == "$", next == text.endIndex || text[next] == "$" || text[next] == "{" { out.append("$") }
            index = next
        }
        return out
    }

    private func replacing(in text: String, with replacement: (String) -> String) -> String {
        let known = secrets.withLock { $0.forms }
        var out = text
        for form in known where out.contains(form.text) {
            out = out.replacingOccurrences(of: form.text, with: replacement(form.reference))
        }
        return out
    }

    /// The forms a value takes in URLs, form bodies and JSON.
    package static func forms(of value: String) -> [String] {
        var sets: [CharacterSet] = [
            .rfc3986Unreserved, .alphanumerics, .urlQueryAllowed, .urlPathAllowed, .urlUserAllowed, .urlPasswordAllowed,
            .urlFragmentAllowed, .urlHostAllowed,
        ]
        // What URLComponents leaves alone in a query item's value.
        sets.append(CharacterSet.urlQueryAllowed.subtracting(CharacterSet(charactersIn: "&=+")))
        var result: [String] = [value]
        func add(_ form: String) { if !result.contains(form) { result.append(form) } }
        for allowed in sets {
            guard let encoded = value.addingPercentEncoding(withAllowedCharacters: allowed) else { continue }
            add(encoded)
            add(lowercasingEscapes(encoded))
            add(encoded.replacingOccurrences(of: "%20", with: "+"))
        }
        // JSON string escapes (`/` may be written `\/`).
        var json = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        add(json)
        json = json.replacingOccurrences(of: "/", with: "\\/")
        add(json)
        return result
    }

    /// `%2F` → `%2f`: some encoders write lower-case hex.
    private static func lowercasingEscapes(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        while let percent = rest.firstIndex(of: "%") {
            out += rest[..<percent]
            let escape = rest[percent...].prefix(3)
            out += escape.lowercased()
            rest = rest[escape.endIndex...]
        }
        return out + rest
    }
}
