/// What the text of a `caption` or `text` filter may say of the item it is drawn on:
/// `{key}` (the item's key), `{stem}` (the stem of its output name), `{caption}` (the
/// item's caption, from the metadata member its source names) and `{meta.NAME}`, a
/// field of the metadata its feed listed with it (`{meta.title}` for NASA and Flickr
/// items; any field of a JSON feed's entry besides the image URL, such as `{meta.created}`;
/// `{meta.a.b}` reaches into nested objects).
///
/// A field the item does not have is empty; a caption line that comes out empty is left
/// out. Strings are drawn as they are, numbers and booleans as written in JSON, arrays and
/// objects as compact JSON. Any other `{…}` is drawn literally.
public struct ItemFields: Sendable {
    public let key: String
    public let stem: String
    /// The metadata as stored, read only when a text asks for a `{meta.…}` field: most
    /// chains draw no text, and every item passes through here.
    package let metadata: String?
    /// The member of `metadata` that `{caption}` reads (set by the processor).
    package var captionField: String?

    /// `metadata` is the JSON object the feed listed (nil for local files or a URL list).
    public init(key: String, stem: String, metadata: String?) {
        self.key = key
        self.stem = stem
        self.metadata = metadata
    }

    /// True when `text` refers to a field, so that filling it can be skipped otherwise.
    static func mentionsFields(_ text: String) -> Bool {
        text.contains("{key}") || text.contains("{stem}") || text.contains("{meta.") || text.contains("{caption}")
    }

    /// `text` with every `{key}`, `{stem}` and `{meta.…}` replaced.
    package func fill(_ text: String) -> String {
        guard Self.mentionsFields(text) else { return text }
        var out = ""
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            out += rest[..<open]
            guard let close = rest[open...].firstIndex(of: "}") else { break }
            let name = rest[rest.index(after: open)..<close]
            if let value = value(of: name) {
                out += value
            } else {
                out += rest[open...close]
            }
            rest = rest[rest.index(after: close)...]
        }
        return out + rest
    }

    /// Whether `name` (what is between `{` and `}`) is a field: `key`, `stem`, `caption` or
    /// `meta.A.B…` with no empty part.
    static func isField(_ name: Substring) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return ["key", "stem", "caption"].contains(name) || (parts.count > 1 && parts[0] == "meta" && !parts.contains(""))
    }

    /// The text of field `name`, "" for a missing `meta.` field, nil when `name` is not a field.
    private func value(of name: Substring) -> String? {
        switch name {
        case "key": return key
        case "stem": return stem
        case "caption":
            guard let captionField else { return "" }
            return JSONValue.text(of: captionField, inMetadata: metadata) ?? ""
        default:
            guard name.hasPrefix("meta."), name.count > 5 else { return nil }
            var node = metadata.flatMap(JSONValue.lenient)
            for part in name.dropFirst(5).split(separator: ".", omittingEmptySubsequences: false) {
                node = node?[String(part)]
            }
            switch node {
            case nil, .null?: return ""
            case .string(let text)?: return text
            case let other?: return other.serialized()
            }
        }
    }
}

extension Caption {
    /// The caption with the item's fields filled in; a line that comes out blank is left out.
    package func filled(with fields: ItemFields) -> Caption {
        var caption = self
        caption.top = top.map(fields.fill).flatMap(Self.nonBlank)
        caption.bottom = bottom.map(fields.fill).flatMap(Self.nonBlank)
        return caption
    }

    private static func nonBlank(_ text: String) -> String? {
        text.allSatisfy(\.isWhitespace) ? nil : text
    }
}

extension TextOverlay {
    package func filled(with fields: ItemFields) -> TextOverlay {
        var overlay = self
        overlay.text = fields.fill(text)
        return overlay
    }
}
