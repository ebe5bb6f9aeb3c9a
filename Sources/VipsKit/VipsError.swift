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

    /// Which side of libvips failed, read once here from the lines of its error text.
    public enum Kind: Sendable, Equatable {
        /// A loader: the input is damaged, truncated or not what it claims to be.
        case decode
        /// A saver: the output could not be written.
        case encode
        /// Anything else (an operation on pixels).
        case other
    }

    /// The kind of failure, from the domain each libvips error line starts with
    /// (`jpegload_buffer: …`, `VipsJpeg: …`, `vips2jpeg: …`), matched whole, not as a
    /// substring: a loader's line makes it `decode`, else a saver's makes it `encode`.
    public var kind: Kind {
        let domains = message.components(separatedBy: "; ").map { line -> (String, String) in
            guard let colon = line.range(of: ": ") else { return ("", line) }
            return (String(line[..<colon.lowerBound]), String(line[colon.upperBound...]))
        }
        if domains.contains(where: { Self.isLoader($0.0) || Self.isDecoderComplaint($0.1) }) { return .decode }
        if domains.contains(where: { Self.isSaver($0.0) }) { return .encode }
        return .other
    }

    /// `jpegload`, `pngload_buffer`, `tiff2vips`, `VipsForeignLoadPng`, libjpeg's and
    /// libpng's own domains.
    static func isLoader(_ domain: String) -> Bool {
        if ["VipsJpeg", "vipspng", "spng", "libspng", "nsgif"].contains(domain) { return true }
        if domain.hasPrefix("VipsForeignLoad") { return domain.dropFirst(15).allSatisfy(\.isLetter) }
        return isLowerWord(domain, endingWith: ["load", "load_buffer", "load_source", "load_file", "2vips"])
    }

    /// `jpegsave`, `pngsave_buffer`, `vips2jpeg`, `VipsForeignSaveJpeg`.
    static func isSaver(_ domain: String) -> Bool {
        if domain.hasPrefix("VipsForeignSave") { return domain.dropFirst(15).allSatisfy(\.isLetter) }
        if domain.hasPrefix("vips2") {
            return domain.dropFirst(5).allSatisfy { $0.isLowercase || $0.isNumber } && domain.count > 5
        }
        return isLowerWord(domain, endingWith: ["save", "save_buffer", "save_target", "save_file"])
    }

    /// libjpeg's messages, which libvips passes on under the operation's name.
    static func isDecoderComplaint(_ text: String) -> Bool {
        [
            "Premature end of JPEG file", "Corrupt JPEG data", "out of order read", "Invalid SOS parameters",
            "Bogus marker length", "Huffman table",
        ].contains { text.hasPrefix($0) }
    }

    /// `domain` is a lower-case word (letters and digits) followed by one of `suffixes`.
    private static func isLowerWord(_ domain: String, endingWith suffixes: [String]) -> Bool {
        suffixes.contains { suffix in
            guard domain.hasSuffix(suffix), domain.count > suffix.count else { return false }
            return domain.dropLast(suffix.count).allSatisfy { ($0.isLowercase && $0.isASCII) || $0.isNumber }
        }
    }

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
