/// Why a pipeline file was refused: the JSON path of the fault and what was expected.
///
/// `description` reads `filters[1].width: expected an integer from 1 to 100000, got "wide"`.
public struct SpecError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Dotted JSON path (`filters[1].width`); empty for the document itself.
    public let path: String
    public let message: String
    /// The environment variable whose absence is the fault, when that is the fault.
    public let unsetVariable: String?

    public init(path: String, message: String, unsetVariable: String? = nil) {
        self.path = path
        self.message = message
        self.unsetVariable = unsetVariable
    }

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

/// Where a value sits in the document, for error messages.
public struct JSONPath: Sendable, Equatable, CustomStringConvertible {
    private var text: String

    public static let root = JSONPath(text: "")

    private init(text: String) { self.text = text }

    public func appending(_ key: String) -> JSONPath {
        JSONPath(text: text.isEmpty ? key : "\(text).\(key)")
    }

    public func appending(index: Int) -> JSONPath {
        JSONPath(text: "\(text)[\(index)]")
    }

    public var description: String { text }
}
