import CVips

/// A libvips failure, with the text libvips left in its error buffer.
public struct VipsError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The VipsKit call that failed, e.g. `thumbnail` or `jpegsave`.
    public let operation: String
    /// libvips' own explanation, one line.
    public let message: String

    public init(operation: String, message: String) {
        self.operation = operation
        self.message = message
    }

    public var description: String { "\(operation): \(message)" }

    /// Takes (and clears) libvips' error buffer.
    ///
    /// The buffer is shared by every thread, so `vips_error_buffer_copy` is the only safe
    /// way to read it: it copies and clears under libvips' lock. Under concurrency the text
    /// may also hold another thread's error; we keep the distinct lines in order.
    static func take(_ operation: String) -> VipsError {
        guard let raw = vips_error_buffer_copy() else {
            return VipsError(operation: operation, message: "libvips reported no reason")
        }
        defer { g_free(raw) }
        var lines: [String] = []
        for line in String(cString: raw).split(separator: "\n") {
            let text = line.trimmingCharacters(in: " \t")
            if !text.isEmpty, !lines.contains(text) { lines.append(text) }
        }
        let message = lines.isEmpty ? "libvips reported no reason" : lines.prefix(3).joined(separator: "; ")
        return VipsError(operation: operation, message: message)
    }
}

extension StringProtocol {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var view = Substring(self)
        while let first = view.first, set.contains(first) { view = view.dropFirst() }
        while let last = view.last, set.contains(last) { view = view.dropLast() }
        return String(view)
    }
}
