import Foundation

/// The environment `${NAME}` references are read from, and the secrets that came from it.
///
/// Every value read through `value(of:)` is remembered, in every form it can take on its
/// way out: as written, percent-encoded (upper- or lower-case hex, with any of the usual
/// sets of characters left alone), form-encoded (a space as `+`) and JSON-escaped.
/// `redact(_:)` replaces each form with `***` in text bound for a log, the state file or
/// an error message; `unexpanded(_:)` puts the `${NAME}` reference back instead, for what
/// is written to disk and read again (cache keys and cache metadata).
// @unchecked because the set of secrets is guarded by `lock`.
public final class Environment: @unchecked Sendable {
    private let variables: [String: String]
    private let lock = NSLock()
    /// Every form of every value read, longest first, with the reference that stands for it.
    private var forms: [(text: String, reference: String)] = []
    private var known: Set<String> = []
    /// The forms of each value read (`forms(of:)`, the value itself first), by name.
    private var encodings: [String: [String]] = [:]

    /// Values shorter than this are not masked (they would mask ordinary text).
    static let shortestSecret = 3

    public init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    public func value(of name: String) -> String? {
        guard let value = variables[name] else { return nil }
        if value.count >= Self.shortestSecret {
            lock.withLock {
                guard known.insert(name + "\u{0}" + value).inserted else { return }
                let all = Self.forms(of: value)
                encodings[name] = all
                for (index, form) in all.enumerated() where !forms.contains(where: { $0.text == form }) {
                    forms.append((form, index == 0 ? "${\(name)}" : "${\(name):\(index)}"))
                }
                forms.sort { $0.text.utf8.count > $1.text.utf8.count }
            }
        }
        return value
    }

    /// `text` with every form of every expanded value replaced by `***`.
    public func redact(_ text: String) -> String {
        replacing(in: text) { _ in "***" }
    }

    /// `text` with every form of every expanded value replaced by its reference: `${NAME}`
    /// for the value as written, `${NAME:n}` for its n-th encoded form (percent-encoded,
    /// JSON-escaped, …), so that `expanding` gives back exactly the same text.
    public func unexpanded(_ text: String) -> String {
        replacing(in: text) { $0 }
    }

    /// The inverse of `unexpanded`: each reference to a value read before is replaced by the
    /// form it stood for (a recorded location is fetched with its real value, encoded as it
    /// was).
    public func expanding(_ text: String) -> String {
        guard text.contains("${") else { return text }
        let known = lock.withLock { encodings }
        var out = text
        for (name, all) in known where out.contains("${\(name)") {
            for (index, form) in all.enumerated().reversed() {
                out = out.replacingOccurrences(of: index == 0 ? "${\(name)}" : "${\(name):\(index)}", with: form)
            }
        }
        return out
    }

    private func replacing(in text: String, with replacement: (String) -> String) -> String {
        let known = lock.withLock { forms }
        var out = text
        for form in known where out.contains(form.text) {
            out = out.replacingOccurrences(of: form.text, with: replacement(form.reference))
        }
        return out
    }

    /// The forms a value takes in URLs, form bodies and JSON.
    static func forms(of value: String) -> [String] {
        var sets: [CharacterSet] = [.rfc3986Unreserved, .alphanumerics, .urlQueryAllowed, .urlPathAllowed, .urlUserAllowed, .urlPasswordAllowed,
                                    .urlFragmentAllowed, .urlHostAllowed]
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
