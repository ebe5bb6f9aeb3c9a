import Foundation

/// A string from the pipeline file that may contain `${NAME}` references to environment
/// variables. It is stored and shown as written; `expanded(in:)` resolves it at run time.
public struct EnvString: Sendable, Equatable, CustomStringConvertible {
    /// The text as written in the pipeline file.
    public let raw: String
    /// The JSON path it was read from, for error messages.
    public let path: String

    /// Checks the `${…}` syntax: names are letters, digits and `_`, not starting with a digit.
    package init(_ node: SpecNode) throws {
        let text = try node.string()
        raw = text
        path = node.path.description
        _ = try EnvString.parts(of: text, path: path)
    }

    public init(raw: String, path: String) {
        self.raw = raw
        self.path = path
    }

    public var description: String { raw }

    /// The same text is the same value wherever in the file it was read: a sink written as
    /// `"sink"` or as the only entry of `"sinks"` has not changed for a re-run.
    public static func == (lhs: EnvString, rhs: EnvString) -> Bool { lhs.raw == rhs.raw }

    /// True when the text refers to at least one variable (`$${X}` is the text `${X}`).
    public var hasReferences: Bool {
        guard raw.contains("${") else { return false }
        return (try? EnvString.parts(of: raw, path: path))?.contains { if case .variable = $0 { true } else { false } } ?? true
    }

    /// True when `expanded(in:)` may give other text than `raw`: a `${NAME}`, or a `$$`.
    static func needsExpansion(_ text: String) -> Bool { text.contains("${") || text.contains("$$") }

    /// The text with every `${NAME}` replaced; a variable that is not set is an error
    /// naming it and where it is used. Values that came from the environment are registered
    /// with `environment` as secrets, so that they can be redacted from any output.
    public func expanded(in environment: Environment) throws -> String {
        var out = ""
        for part in try EnvString.parts(of: raw, path: path) {
            switch part {
            case .literal(let text): out += text
            case .variable(let name):
                guard let value = environment.value(of: name) else {
                    throw SpecError(path: path, message: "environment variable \(name) is not set", unsetVariable: name)
                }
                out += value
            }
        }
        return out
    }

    package enum Part: Equatable {
        case literal(String)
        case variable(String)
    }

    /// The text's literal runs and `${NAME}` references. `$$` is one literal `$`, so that
    /// `$${meta.price}` is the text `${meta.price}` (a `$` before an item's field) and
    /// `$$${HOME}` a `$` before the variable; a `$` before anything else is itself.
    package static func parts(of text: String, path: String) throws -> [Part] {
        var parts: [Part] = []
        var literal = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            literal += rest[..<dollar]
            let next = rest[rest.index(after: dollar)...]
            if next.first == "$" {
                literal += "$"
                rest = next.dropFirst()
                continue
            }
            guard next.first == "{" else {
                literal += "$"
                rest = next
                continue
            }
            guard let end = next.firstIndex(of: "}") else {
                throw SpecError(path: path, message: "unterminated ${ in \(JSONValue.quote(text)) (write $$ for a literal $)")
            }
            let name = String(next[next.index(after: next.startIndex)..<end])
            guard let first = name.first, first == "_" || first.isASCIILetter,
                name.allSatisfy({ $0 == "_" || $0.isASCIILetter || $0.isASCIIDigit })
            else {
                throw SpecError(
                    path: path,
                    message: "invalid variable name ${\(name)} (letters, digits and _ only; "
                        + "write $$ for a literal $, as in $${meta.price})")
            }
            if !literal.isEmpty {
                parts.append(.literal(literal))
                literal = ""
            }
            parts.append(.variable(name))
            rest = rest[rest.index(after: end)...]
        }
        literal += rest
        if !literal.isEmpty { parts.append(.literal(literal)) }
        return parts
    }

    /// The names of the variables `text` refers to (`$${X}` refers to none).
    static func referencedNames(in text: String) -> [String] {
        ((try? parts(of: text, path: "")) ?? []).compactMap { if case .variable(let name) = $0 { name } else { nil } }
    }
}

extension Character {
    var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}

extension EnvString {
    /// The value expanded, as an http(s) URL with a host (feeds and upload endpoints):
    /// anything else is the pipeline's fault, named with its path.
    func expandedWebURL(in environment: Environment) throws -> URL {
        let address = try expanded(in: environment)
        guard let url = URL(webAddress: address), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil
        else {
            throw SpecError(path: path, message: "expected an http(s) URL, got \(JSONValue.quote(environment.redact(address)))")
        }
        return url
    }
}
