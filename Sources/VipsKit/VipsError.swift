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
    ///
    /// The buffer can also be empty: some failures set no text (libpng's longjmp out of
    /// the PNG header reader in 8.14, for one), and another worker's `take` may have
    /// cleared ours. The message then says what failed — the operation and `context`
    /// (the input's size, the image's dimensions and format) — instead of nothing.
    static func take(_ operation: String, context: @autoclosure () -> String? = nil) -> VipsError {
        var lines: [String] = []
        if let raw = vips_error_buffer_copy() {
            defer { g_free(raw) }
            for line in String(cString: raw).split(separator: "\n") {
                let text = line.trimmingCharacters(in: " \t")
                if !text.isEmpty, !lines.contains(text) { lines.append(text) }
            }
        }
        guard lines.isEmpty else {
            return VipsError(operation: operation, message: lines.prefix(3).joined(separator: "; "))
        }
        let on = context().map { " on \($0)" } ?? ""
        return VipsError(operation: operation, message: "libvips \(operation) failed\(on) without giving a reason")
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
