/// A value of the pipeline document together with its path, with typed readers whose
/// errors name that path and what was expected. Public only so that the kinds of sources
/// and sinks, which read their entries with it, can be public types.
public struct SpecNode {
    package let value: JSONValue
    package let path: JSONPath

    package func fail(_ message: String) -> SpecError {
        SpecError(path: path.description, message: message)
    }

    package func expected(_ what: String) -> SpecError {
        fail("expected \(what), got \(value.quoted)")
    }

    package func string() throws -> String {
        guard case .string(let text) = value else { throw expected("a string") }
        return text
    }

    func nonEmptyString() throws -> String {
        guard case .string(let text) = value, !text.isEmpty else { throw expected("a non-empty string") }
        return text
    }

    /// An RFC 6901 JSON Pointer (`"/data/items"`; `~1` for `/` and `~0` for `~` in a name).
    func jsonPointer() throws -> JSONPointer {
        guard case .string(let text) = value else { throw expected("a JSON Pointer such as \"/data/items\"") }
        switch JSONPointer.parse(text) {
        case .success(let pointer): return pointer
        case .failure(let error): throw fail("\(value.quoted) is not a JSON Pointer: \(error)")
        }
    }

    /// `"pacing"` of a source or sink: `"on"` (true) or `"off"` (false).
    package func pacing() throws -> Bool {
        try choice(["on", "off"]) == "on"
    }

    package func bool() throws -> Bool {
        guard case .bool(let flag) = value else { throw expected("true or false") }
        return flag
    }

    package func integer(in range: ClosedRange<Int>) throws -> Int {
        let what = SpecNode.describe(range)
        guard case .number(let number, _) = value, number.rounded() == number,
            abs(number) < 9e15
        else { throw expected(what) }
        let integer = Int(number)
        guard range.contains(integer) else { throw expected(what) }
        return integer
    }

    package func number(in range: ClosedRange<Double>) throws -> Double {
        let what = "a number from \(SpecNode.format(range.lowerBound)) to \(SpecNode.format(range.upperBound))"
        guard case .number(let number, _) = value, range.contains(number) else { throw expected(what) }
        return number
    }

    /// Other spellings users type for a choice: accepted as the name they stand for.
    static let aliases = [
        "center": "centre", "jpg": "jpeg", "tif": "tiff", "northwest": "north-west",
        "northeast": "north-east", "southwest": "south-west", "southeast": "south-east",
    ]

    /// The choices with the aliases that stand for one of them (for the JSON Schema).
    static func withAliases(_ options: [String]) -> [String] {
        options + aliases.keys.sorted().filter { aliases[$0].map(options.contains) == true }
    }

    func choice(_ options: [String]) throws -> String {
        guard case .string(let text) = value else { throw expected("one of " + options.joined(separator: ", ")) }
        if options.contains(text) { return text }
        if let name = Self.aliases[text.lowercased()] ?? options.first(where: { $0.lowercased() == text.lowercased() }),
            options.contains(name)
        {
            return name
        }
        let hint = Spelling.closest(to: text, in: options).map { " (did you mean \"\($0)\"?)" } ?? ""
        throw fail("expected one of \(options.joined(separator: ", ")), got \(JSONValue.quote(text))\(hint)")
    }

    package func array() throws -> [SpecNode] {
        guard case .array(let items) = value else { throw expected("an array") }
        return items.enumerated().map { SpecNode(value: $1, path: path.appending(index: $0)) }
    }

    /// An object whose keys are among `keys`. A key that starts with `//` is a comment, in
    /// any object (JSON has no comments; `imgpipe init` writes its explanations so).
    package func object(allowing keys: [String]) throws -> SpecObject {
        guard case .object(let members) = value else { throw expected("an object") }
        for member in members where !keys.contains(member.key) && !member.key.hasPrefix("//") {
            let node = SpecNode(value: member.value, path: path.appending(member.key))
            var message = "unknown key"
            if let guess = Spelling.closest(to: member.key, in: keys) { message += " (did you mean \"\(guess)\"?)" }
            message += "; expected one of: " + keys.joined(separator: ", ")
            throw node.fail(message)
        }
        return SpecObject(node: self, members: members)
    }

    package static func describe(_ range: ClosedRange<Int>) -> String {
        switch (range.lowerBound, range.upperBound) {
        case (1, Int.max): "a positive integer"
        case (0, Int.max): "a non-negative integer"
        case (let low, Int.max): "an integer of at least \(low)"
        case (let low, let high): "an integer from \(low) to \(high)"
        }
    }

    package static func format(_ number: Double) -> String {
        number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }

}

/// The members of one JSON object, read by key.
public struct SpecObject {
    package let node: SpecNode
    package let members: [(key: String, value: JSONValue)]

    package var path: JSONPath { node.path }

    package func has(_ key: String) -> Bool { members.contains { $0.key == key } }

    package func member(_ key: String) -> SpecNode? {
        members.first { $0.key == key }.map { SpecNode(value: $0.value, path: node.path.appending(key)) }
    }

    package func required<T>(_ key: String, _ read: (SpecNode) throws -> T) throws -> T {
        guard let member = member(key) else {
            throw SpecError(path: node.path.appending(key).description, message: "missing (required)")
        }
        return try read(member)
    }

    package func optional<T>(_ key: String, _ read: (SpecNode) throws -> T) throws -> T? {
        guard let member = member(key), member.value != .null else { return nil }
        return try read(member)
    }

    package func optional<T>(_ key: String, default fallback: T, _ read: (SpecNode) throws -> T) throws -> T {
        try optional(key, read) ?? fallback
    }
}
