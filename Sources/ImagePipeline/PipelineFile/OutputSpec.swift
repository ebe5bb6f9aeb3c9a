/// An output file format.
public enum OutputFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp, avif, tiff, gif

    /// The file extension written for `{ext}`.
    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .png: "png"
        case .webp: "webp"
        case .avif: "avif"
        case .tiff: "tif"
        case .gif: "gif"
        }
    }

    /// The MIME type of the encoded file.
    public var contentType: String {
        switch self {
        case .jpeg: "image/jpeg"
        case .png: "image/png"
        case .webp: "image/webp"
        case .avif: "image/avif"
        case .tiff: "image/tiff"
        case .gif: "image/gif"
        }
    }

    /// Whether the format stores an alpha channel (JPEG output is flattened onto white).
    public var keepsAlpha: Bool { self != .jpeg }
}

/// How outputs are encoded and named.
public struct OutputSpec: Sendable, Equatable {
    public var format: OutputFormat = .jpeg
    /// 1…100, for JPEG, WebP and AVIF (default 85).
    public var quality = 85
    /// Remove metadata (EXIF, XMP, ICC) from the output.
    public var strip = true
    /// JPEG: progressive (interlaced) encoding.
    public var progressive = false
    /// PNG: zlib compression level 0…9.
    public var compression = 6
    /// WebP: lossless encoding.
    public var lossless = false
    /// WebP: encoder effort 0…6 (default 4); AVIF: 0…9 (default 4).
    public var effort = 4
    public var name = NameTemplate.standard

    public init() {}
}

/// The output file name template: literal text with `{key}`, `{stem}`, `{ext}`, `{index}`
/// and `{hash}` fields. `/` in the result makes sub-folders inside the sink.
///
/// - `{key}`: the item's key (for a directory source, its path relative to the directory);
/// - `{stem}`: the key without its extension (sub-folders kept);
/// - `{ext}`: the output format's extension (`jpg`, `png`, `webp`);
/// - `{index}`: the item's position in the feed, from 1;
/// - `{hash}`: the first 16 hex digits of the SHA-256 of the output bytes.
public struct NameTemplate: Sendable, Equatable, CustomStringConvertible {
    public static let fields = ["key", "stem", "ext", "index", "hash"]
    public static let standard = NameTemplate(parts: [.field("stem"), .literal("."), .field("ext")], raw: "{stem}.{ext}")

    enum Part: Equatable, Sendable { case literal(String), field(String) }
    let parts: [Part]
    public let raw: String

    public var description: String { raw }

    /// True when the name depends on the encoded bytes, so it is known only after encoding.
    public var usesHash: Bool { parts.contains(.field("hash")) }

    init(parts: [Part], raw: String) {
        self.parts = parts
        self.raw = raw
    }

    init(_ node: SpecNode) throws {
        let text = try node.nonEmptyString()
        var parts: [Part] = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            if open > rest.startIndex { parts.append(.literal(String(rest[..<open]))) }
            guard let close = rest[open...].firstIndex(of: "}") else {
                throw node.fail("unclosed { in \(JSONValue.quote(text))")
            }
            let field = String(rest[rest.index(after: open) ..< close])
            guard NameTemplate.fields.contains(field) else {
                throw node.fail("unknown field {\(field)}; expected one of: " + NameTemplate.fields.map { "{\($0)}" }.joined(separator: ", "))
            }
            parts.append(.field(field))
            rest = rest[rest.index(after: close)...]
        }
        if !rest.isEmpty {
            if rest.contains("}") { throw node.fail("unmatched } in \(JSONValue.quote(text))") }
            parts.append(.literal(String(rest)))
        }
        if text.hasPrefix("/") { throw node.fail("must be relative to the sink's directory, got \(JSONValue.quote(text))") }
        for part in parts {
            if case let .literal(literal) = part, literal.split(separator: "/").contains("..") {
                throw node.fail("must not contain \"..\", got \(JSONValue.quote(text))")
            }
        }
        self.parts = parts
        raw = text
    }

    /// The file name for one item; `hash` is needed only if the template uses `{hash}`.
    /// The result is made safe: it never leaves the sink's directory.
    public func render(key: String, stem: String? = nil, index: Int, format: OutputFormat, hash: String?) -> String {
        var out = ""
        for part in parts {
            switch part {
            case let .literal(text): out += text
            case let .field(field):
                switch field {
                case "key": out += key
                case "stem": out += stem ?? NameTemplate.stem(of: key)
                case "ext": out += format.fileExtension
                case "index": out += String(index)
                default: out += hash ?? "hash"
                }
            }
        }
        return SafePath.relative(out)
    }

    /// `key` without the extension of its last component (`a/b.c.jpg` → `a/b.c`).
    static func stem(of key: String) -> String {
        let slash = key.lastIndex(of: "/").map { key.index(after: $0) } ?? key.startIndex
        guard let dot = key[slash...].lastIndex(of: "."), dot > slash else { return key }
        return String(key[..<dot])
    }
}
