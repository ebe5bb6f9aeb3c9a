/// The type and range of one filter parameter.
public enum ParameterType: Sendable, Equatable {
    case integer(ClosedRange<Int>)
    case number(ClosedRange<Double>)
    case boolean
    case string
    case choice([String])
    /// `#rgb`, `#rrggbb` or `#rrggbbaa`.
    case colour
    /// `W:H`, two positive numbers, e.g. `16:9`.
    case aspect
    /// `{"x": …, "y": …}`, each a fraction from 0 to 1 or a template (`"{meta.fx}"`).
    case point

    /// What an error says was expected.
    var expectation: String {
        switch self {
        case .integer(let range): SpecNode.describe(range)
        case .number(let range): "a number from \(SpecNode.format(range.lowerBound)) to \(SpecNode.format(range.upperBound))"
        case .boolean: "true or false"
        case .string: "a string"
        case .choice(let options): "one of " + options.joined(separator: ", ")
        case .colour: "a colour such as \"#ff8800\" (#rgb, #rrggbb or #rrggbbaa)"
        case .aspect: "an aspect ratio such as \"16:9\""
        case .point: "an object {\"x\": …, \"y\": …}, each a fraction from 0 to 1 or a template such as \"{meta.fx}\""
        }
    }

    /// A short name for the catalogue table.
    public var summary: String {
        switch self {
        case .integer(let range):
            range.upperBound == Int.max ? "integer ≥ \(range.lowerBound)" : "integer \(range.lowerBound)..\(range.upperBound)"
        case .number(let range):
            "number \(SpecNode.format(range.lowerBound))..\(SpecNode.format(range.upperBound))"
        case .boolean: "boolean"
        case .string: "string"
        case .choice(let options): options.joined(separator: "|")
        case .colour: "colour"
        case .aspect: "W:H"
        case .point: "{x, y}"
        }
    }
}

extension ParameterType {
    /// Parses `W:H`.
    package static func aspect(_ text: String) -> (Double, Double)? {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let w = Double(parts[0]), let h = Double(parts[1]), w > 0, h > 0,
            w.isFinite, h.isFinite
        else { return nil }
        return (w, h)
    }
}

/// One parameter of a filter op. A parameter with no default and `required` false is
/// optional with no value (e.g. `fit`'s `height`).
public struct ParameterDefinition: Sendable {
    public let name: String
    public let type: ParameterType
    public let defaultValue: JSONValue?
    public let required: Bool
    public let summary: String

    public init(
        _ name: String, _ type: ParameterType, default defaultValue: JSONValue? = nil,
        required: Bool = false, _ summary: String
    ) {
        self.name = name
        self.type = type
        self.defaultValue = defaultValue
        self.required = required
        self.summary = summary
    }

    package func validate(_ node: SpecNode) throws -> JSONValue {
        switch type {
        case .integer(let range): return .number(Double(try node.integer(in: range)), isInteger: true)
        case .number(let range): return .number(try node.number(in: range), isInteger: false)
        case .boolean: return .bool(try node.bool())
        case .string: return .string(try node.string())
        case .choice(let options): return .string(try node.choice(options))
        case .colour:
            guard case .string(let text) = node.value, Colour(hex: text) != nil else { throw node.expected(type.expectation) }
            return .string(text)
        case .aspect:
            guard case .string(let text) = node.value, ParameterType.aspect(text) != nil else {
                throw node.expected(type.expectation)
            }
            return .string(text)
        case .point:
            let object = try node.object(allowing: ["x", "y"])
            var members: [(key: String, value: JSONValue)] = []
            for axis in ["x", "y"] {
                guard let member = object.member(axis) else {
                    throw SpecError(path: node.path.appending(axis).description, message: "missing (required)")
                }
                let text: String
                switch member.value {
                case .number(let value, _):
                    text = member.value.serialized()
                    guard (0...1).contains(value) else { throw member.expected("a fraction from 0 to 1") }
                case .string(let value):
                    guard FocusPoint.isTemplate(value) || FocusPoint.fraction(value) != nil else {
                        throw member.expected("a fraction from 0 to 1, or a template such as \"{meta.fx}\"")
                    }
                    text = value
                default: throw member.expected("a fraction from 0 to 1, or a template such as \"{meta.fx}\"")
                }
                members.append((axis, .string(text)))
            }
            return .object(members)
        }
    }
}

/// The validated arguments of one filter, defaults filled in.
public struct FilterArguments: Sendable {
    package let values: [String: JSONValue]
    package let path: JSONPath

    package func int(_ name: String) -> Int? {
        if case .number(let value, _) = values[name] { return Int(value) }
        return nil
    }

    package func double(_ name: String) -> Double? {
        if case .number(let value, _) = values[name] { return value }
        return nil
    }

    package func bool(_ name: String) -> Bool? {
        if case .bool(let value) = values[name] { return value }
        return nil
    }

    package func string(_ name: String) -> String? {
        if case .string(let value) = values[name] { return value }
        return nil
    }

    package func colour(_ name: String) -> Colour? {
        string(name).flatMap(Colour.init(hex:))
    }

    func gravity(_ name: String) -> Gravity {
        string(name).flatMap(Gravity.init(name:)) ?? .centre
    }

    /// `gravity` and, when it is `focus`, the point from `focus` (required then, and
    /// refused with any other gravity).
    func placement() throws -> (Gravity, FocusPoint?) {
        let gravity = gravity("gravity")
        guard case .object(let members)? = values["focus"] else {
            if gravity == .focus { throw fail("focus", "missing (required by gravity \"focus\")") }
            return (gravity, nil)
        }
        guard gravity == .focus else { throw fail("focus", "is used only with gravity \"focus\"") }
        func text(_ axis: String) -> String {
            if case .string(let value)? = members.first(where: { $0.key == axis })?.value { return value }
            return ""
        }
        return (gravity, FocusPoint(x: text("x"), y: text("y")))
    }

    package func has(_ name: String) -> Bool { values[name] != nil }

    package func fail(_ message: String) -> SpecError {
        SpecError(path: path.description, message: message)
    }

    package func fail(_ parameter: String, _ message: String) -> SpecError {
        SpecError(path: path.appending(parameter).description, message: message)
    }
}

/// A filter op: its name, what it does, its parameters, and how its step is built.
public struct FilterDefinition: Sendable {
    public let name: String
    public let summary: String
    public let parameters: [ParameterDefinition]
    package let make: @Sendable (FilterArguments) throws -> FilterStep
}

/// The one list of filter ops. It drives validation of pipeline files, the runner, and the
/// catalogue commands.
public struct FilterRegistry: Sendable {
    public let definitions: [FilterDefinition]

    public func definition(named name: String) -> FilterDefinition? {
        definitions.first { $0.name == name }
    }

    /// Validates one entry of `filters`: the op exists, every parameter is known, of its
    /// type and in range; defaults are filled in.
    package func decode(_ node: SpecNode) throws -> FilterSpec {
        guard case .object(let members) = node.value else { throw node.expected("an object with an \"op\"") }
        guard let opMember = members.first(where: { $0.key == "op" }) else {
            throw SpecError(path: node.path.appending("op").description, message: "missing (required)")
        }
        let opNode = SpecNode(value: opMember.value, path: node.path.appending("op"))
        let names = definitions.map(\.name)
        let opName = try opNode.string()
        guard let definition = definition(named: opName) else {
            var message = "unknown op \(JSONValue.quote(opName))"
            if let guess = Spelling.closest(to: opName, in: names) { message += " (did you mean \"\(guess)\"?)" }
            throw opNode.fail(message + "; run `imgpipe filters` for the list")
        }
        let object = try node.object(allowing: ["op"] + definition.parameters.map(\.name))
        var values: [String: JSONValue] = [:]
        for parameter in definition.parameters {
            if let member = object.member(parameter.name), member.value != .null {
                values[parameter.name] = try parameter.validate(member)
            } else if let fallback = parameter.defaultValue {
                values[parameter.name] = fallback
            } else if parameter.required {
                throw SpecError(
                    path: node.path.appending(parameter.name).description,
                    message: "missing (required by \(opName))")
            }
        }
        let step = try definition.make(FilterArguments(values: values, path: node.path))
        return FilterSpec(op: opName, step: step, arguments: values)
    }
}

/// One decoded entry of a pipeline's `filters`.
public struct FilterSpec: Sendable, Equatable {
    public let op: String
    public let step: FilterStep
    /// Every parameter's value, defaults included.
    public let arguments: [String: JSONValue]
}
