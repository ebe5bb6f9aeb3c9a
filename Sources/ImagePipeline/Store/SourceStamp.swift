import Foundation
import PipelineKit

/// What an item's source was when the item was processed, recorded with it so that a later
/// run can tell whether it changed (`ChangeDetector`): a local file's size and modification
/// time, the SHA-256 of the bytes (a local file's, or a download's), and the feed's version
/// field (`versionField`) when the source names one; and the picture's width and height as
/// decoded (which a shard's records carry; change detection does not look at them).
public struct SourceStamp: Sendable, Equatable {
    public var size: Int?
    public var modified: Double?
    public var sha256: String?
    public var version: String?
    public var width: Int?
    public var height: Int?

    public init(
        size: Int? = nil, modified: Double? = nil, sha256: String? = nil, version: String? = nil, width: Int? = nil,
        height: Int? = nil
    ) {
        self.size = size
        self.modified = modified
        self.sha256 = sha256
        self.version = version
        self.width = width
        self.height = height
    }

    /// The stamp of an input as the pixel stage read it (`bytes` of it, hashed): with the
    /// modification time of `file` when it is a local source's (a download's spool file is
    /// new each time).
    public init(read image: ProcessedImage, file: String, local: Bool) {
        self.init(
            size: image.inputBytes, modified: local ? Self.fileInfo(file)?.modified : nil, sha256: image.inputSHA256,
            width: image.inputWidth, height: image.inputHeight)
    }

    /// The stamp of the file at `path`, read again: its size, its modification time (`local`
    /// only) and the hash of its bytes; nil when it cannot be read.
    public static func of(file path: String, local: Bool) -> SourceStamp? {
        guard let info = fileInfo(path), let data = LocalPath.contents(path) else { return nil }
        return SourceStamp(size: info.size, modified: local ? info.modified : nil, sha256: sha256Hex(data))
    }

    /// A file's size and modification time (seconds since 1970, to the nanosecond); nil
    /// when it cannot be read.
    static func fileInfo(_ path: String) -> (size: Int, modified: Double)? {
        FolderStats.info(path).map(FolderStats.sizeAndTime)
    }

    /// The value of `field` in an item's metadata (a JSON object), as text: a string as it
    /// is, a number or a boolean as JSON writes it; nil when absent or null.
    public static func version(in metadata: String?, field: String?) -> String? {
        guard let field, let metadata,
            let object = try? JSONSerialization.jsonObject(with: Data(metadata.utf8)) as? [String: Any],
            let value = object[field], !(value is NSNull)
        else { return nil }
        if let text = value as? String { return text }
        return (try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed, .sortedKeys]))
            .map { String(decoding: $0, as: UTF8.self) }
    }
}
