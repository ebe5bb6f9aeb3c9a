/// An output file format.
public enum OutputFormat: String, Sendable, CaseIterable, Codable {
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

    /// The formats that hold an animation.
    public static let animating: [OutputFormat] = [.gif, .webp]
}

/// One output of each item: its own filters (after the pipeline's common ones), how it is
/// encoded and how it is named. A pipeline has one (`"output"`) or several (`"outputs"`).
public struct OutputSpec: Sendable, Equatable, Codable {
    /// The id of a pipeline's only output when it has no id of its own.
    public static let defaultID = "default"
    /// Unique in the pipeline, `[a-z0-9-]+`; `{output}` in names.
    public var id = OutputSpec.defaultID
    /// Applied after the pipeline's common `filters`, for this output only.
    public var filters: [FilterSpec] = []
    public var format: OutputFormat = .jpeg
    /// `"format": "best"`: each image is encoded in each of these (`"formats"`, by default
    /// AVIF, WebP and JPEG) and the smallest kept, an image with an alpha channel only in
    /// those that keep it; `format` is then the first of them. Nil: one format, `format`.
    public var bestOf: [OutputFormat]?
    /// 1…100, for JPEG, WebP and AVIF (default 85): the quality of every image, unless
    /// `ssimTarget` or `maxBytes` choose one per image.
    public var quality = 85
    /// `"quality": { "ssim": T }`: each image gets the lowest quality whose encoded result
    /// reaches SSIM `T` against its pixels before encoding (`QualitySearch`).
    public var ssimTarget: Double?
    /// `"maxBytes"`: each image gets the highest quality whose result fits in so many bytes
    /// (with `ssimTarget`, the target's quality unless the budget forbids it).
    public var maxBytes: Int?
    /// The lowest quality a search goes down to (default 30): an image that does not fit
    /// `maxBytes` even there fails with `limit`.
    public var minQuality = 30
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
    /// GIF and WebP: an animated input stays animated (`"animation": "keep"`, the default)
    /// when the output's chain can apply to every frame (`FilterStep.appliesToFrames`); false
    /// (`"first"`): it is made from its first frame.
    public var keepsAnimation = true
    public var name = NameTemplate.standard

    public init() {}

    /// `filters` is not coded: a processor's outputs carry theirs expanded (`OutputPlan`).
    private enum CodingKeys: String, CodingKey {
        case id, format, bestOf, quality, ssimTarget, maxBytes, minQuality, strip, progressive, compression, lossless, effort
        case keepsAnimation, name
    }

    /// The formats `"best"` chooses from when `"formats"` does not say.
    public static let bestDefault: [OutputFormat] = [.avif, .webp, .jpeg]
    /// The formats `"best"` may choose from: those with a quality to search, and PNG.
    public static let bestCandidates: [OutputFormat] = [.avif, .webp, .jpeg, .png]

    /// The formats an image of this output may come out in.
    public var formats: [OutputFormat] { bestOf ?? [format] }

    /// The format as the file says it: `jpeg`, …, or `best` (status, export).
    public var formatName: String { bestOf == nil ? format.rawValue : "best" }

    /// The same with `best`'s candidates: `best of avif, webp, jpeg` (validate).
    public var formatDescription: String {
        bestOf.map { "best of " + $0.map(\.rawValue).joined(separator: ", ") } ?? format.rawValue
    }

    /// Whether each image's quality is chosen by a search (a target or a budget).
    public var searchesQuality: Bool { ssimTarget != nil || maxBytes != nil }
}

extension OutputSpec {
    /// This output's file name for an item, `made` filling `{hash}`, `{width}`, `{height}`
    /// and (for `"best"`) `{ext}`.
    package func fileName(key: String, stem: String, index: Int, made: ProcessedImage) -> String {
        name.render(
            key: key, stem: stem, index: index, format: made.format ?? format, hash: String(made.sha256.prefix(16)),
            output: id, size: (made.width, made.height))
    }

    /// The name before the output is made: known unless the template uses `{hash}`,
    /// `{width}` or `{height}` (`NameTemplate.dependsOnOutput`). For `"best"`, `{ext}` is
    /// the first format's: the name an item claims among the others (so that `x.jpg` and
    /// `x.png` still get names of their own), which the format chosen then completes
    /// (`fileName`); no two items share a stem, so no two chosen names meet.
    package func fileNameBeforeMaking(key: String, stem: String, index: Int) -> String? {
        name.dependsOnOutput ? nil : name.render(key: key, stem: stem, index: index, format: format, hash: nil, output: id)
    }

    /// Every name the output may get before it is made, one per format it may come out in
    /// (`plan` and `run --incremental` compare the recorded name with them); nil when the
    /// name depends on the output.
    package func namesBeforeMaking(key: String, stem: String, index: Int) -> [String]? {
        guard !name.dependsOnOutput else { return nil }
        return formats.map { name.render(key: key, stem: stem, index: index, format: $0, hash: nil, output: id) }
    }
}

/// The output file name template: literal text with `{key}`, `{stem}`, `{name}`, `{ext}`,
/// `{index}`, `{hash}`, `{output}`, `{width}` and `{height}` fields. `/` in the result makes
/// sub-folders inside the sink.
///
/// - `{key}`: the item's key (for a directory source, its path relative to the directory);
/// - `{stem}`: the key without its extension (sub-folders kept; for an item listed by its
///   URL, the URL's path below the host: `FeedItem.stem(ofURL:)`);
/// - `{name}`: `{stem}` without its folders (`shop/101/main` → `main`);
/// - `{ext}`: the output format's extension (`jpg`, `png`, `webp`);
/// - `{index}`: the item's position in the feed, from 1;
/// - `{hash}`: the first 16 hex digits of the SHA-256 of the output bytes;
/// - `{output}`: the output's id;
/// - `{width}`, `{height}`: the output's size in pixels.
public struct NameTemplate: Sendable, Equatable, Codable, CustomStringConvertible {
    public static let fields = ["key", "stem", "name", "ext", "index", "hash", "output", "width", "height"]
    public static let standard = NameTemplate(parts: [.field("stem"), .literal("."), .field("ext")], raw: "{stem}.{ext}")
    /// The default of each output of a pipeline with several.
    public static let standardOfSeveral = NameTemplate(
        parts: [.field("stem"), .literal("-"), .field("output"), .literal("."), .field("ext")], raw: "{stem}-{output}.{ext}")

    package enum Part: Equatable, Sendable, Codable {
        case literal(String)
        case field(String)
    }
    package let parts: [Part]
    public let raw: String

    public var description: String { raw }

    /// True when the name depends on the encoded output (its bytes or its size), so it is
    /// known only after encoding.
    public var dependsOnOutput: Bool {
        parts.contains(.field("hash")) || parts.contains(.field("width")) || parts.contains(.field("height"))
    }

    /// Whether this template and `other` (of two outputs, in `format` and `otherFormat`)
    /// give every item the same name: the same template (unless `{ext}` with two
    /// different extensions tells them apart), or two templates that give a sample item the
    /// same name (`{stem}.jpg` and `{stem}.{ext}` for JPEG). Names with `{output}`,
    /// `{hash}`, `{width}` or `{height}` are told apart (or not) per item when the outputs
    /// are made: two outputs of one item named alike fail the item, naming the name.
    func mayEqual(_ other: NameTemplate, _ format: OutputFormat, _ otherFormat: OutputFormat) -> Bool {
        let perItem = ["output", "hash", "width", "height"]
        if perItem.contains(where: { uses($0) || other.uses($0) }) { return false }
        if raw == other.raw { return !(uses("ext") && format.fileExtension != otherFormat.fileExtension) }
        // The sample's fields are unlike each other, so that none stands in for another.
        func sample(_ template: NameTemplate, _ format: OutputFormat) -> String {
            template.render(key: "k1/s2.x3", stem: "k1/s2", index: 4, format: format, hash: nil)
        }
        return sample(self, format) == sample(other, otherFormat)
    }

    /// Whether the template uses `field`.
    public func uses(_ field: String) -> Bool { parts.contains(.field(field)) }

    package init(parts: [Part], raw: String) {
        self.parts = parts
        self.raw = raw
    }

    package init(_ node: SpecNode) throws {
        let text = try node.nonEmptyString()
        var parts: [Part] = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            if open > rest.startIndex { parts.append(.literal(String(rest[..<open]))) }
            guard let close = rest[open...].firstIndex(of: "}") else {
                throw node.fail("unclosed { in \(JSONValue.quote(text))")
            }
            let field = String(rest[rest.index(after: open)..<close])
            guard NameTemplate.fields.contains(field) else {
                throw node.fail(
                    "unknown field {\(field)}; expected one of: " + NameTemplate.fields.map { "{\($0)}" }.joined(separator: ", "))
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
            if case .literal(let literal) = part,
                SafePath.components(of: literal).contains(where: { $0.elementsEqual("..".utf8) })
            {
                throw node.fail("must not contain \"..\", got \(JSONValue.quote(text))")
            }
        }
        self.parts = parts
        raw = text
    }

    /// The file name for one item; `hash` and `size` are needed only if the template uses
    /// `{hash}`, `{width}` or `{height}`. The result is made safe: it never leaves the
    /// sink's directory.
    public func render(
        key: String, stem: String? = nil, index: Int, format: OutputFormat, hash: String?,
        output: String = OutputSpec.defaultID, size: (width: Int, height: Int)? = nil
    ) -> String {
        var out = ""
        for part in parts {
            switch part {
            case .literal(let text): out += text
            case .field(let field):
                switch field {
                case "key": out += key
                case "stem": out += stem ?? NameTemplate.stem(of: key)
                case "name": out += NameTemplate.lastComponent(of: stem ?? NameTemplate.stem(of: key))
                case "ext": out += format.fileExtension
                case "index": out += String(index)
                case "output": out += output
                case "width": out += size.map { String($0.width) } ?? "width"
                case "height": out += size.map { String($0.height) } ?? "height"
                default: out += hash ?? "hash"
                }
            }
        }
        return SafePath.relative(out)
    }

    /// The stem an item's names are made from when a name made from `stem` is held by
    /// another item of the run: `stem` and the first 8 hex digits of the SHA-256 of the
    /// item's key (`photos/dup` → `photos/dup-3c9a0b1e`). The key is unique in the run, so
    /// two items that want one name get two; the first in feed order keeps the plain name.
    public static func uniqueStem(_ stem: String, key: String) -> String {
        stem + "-" + sha256Hex(key).prefix(8)
    }

    /// `stem` as the feed gave it: without the suffix `uniqueStem` adds, if it has it.
    /// What `{stem}` is in an item's text (captions), whichever names the item got.
    public static func plainStem(_ stem: String, key: String) -> String {
        let suffix = "-" + sha256Hex(key).prefix(8)
        return stem.count > suffix.count && stem.hasSuffix(suffix) ? String(stem.dropLast(suffix.count)) : stem
    }

    /// The last `/`-separated part of `path` that is not empty (`a/b/` → `b`).
    package static func lastComponent(of path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// `key` without the extension of its last component (`a/b.c.jpg` → `a/b.c`).
    package static func stem(of key: String) -> String {
        let slash = key.lastIndex(of: "/").map { key.index(after: $0) } ?? key.startIndex
        guard let dot = key[slash...].lastIndex(of: "."), dot > slash else { return key }
        return String(key[..<dot])
    }
}
