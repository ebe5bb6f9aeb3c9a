import Foundation
import Synchronization

/// A disk cache of HTTP bodies (images and feed pages), keyed by the SHA-256 of the URL
/// in its recorded form (`Environment.recorded`): a URL that holds a `${…}` value (an API key) is keyed and
/// recorded with the `${NAME}` reference, never with the value, so no secret reaches the
/// cache's files. Each entry is `<hh>/<sha256>` (the body) and `<hh>/<sha256>.json` (URL,
/// ETag, Last-Modified, size, the answer's `X-Robots-Tag` lines), both written to a temporary name and renamed. A hit touches the
/// body's modification time; when the cache grows past `maxSize` bytes, the least
/// recently used entries go first.
public final class DiskCache: Sendable {
    public struct Entry: Sendable, Codable {
        public let url: String
        public let etag: String?
        public let lastModified: String?
        public let bytes: Int
        /// The `X-Robots-Tag` lines the body was served with (nil in entries made before
        /// they were kept, and when there were none), so that a cached copy is judged as
        /// the download was.
        public var robotsTag: [String]?
        /// True for a feed page stored as `Environment.recorded` writes text (every foreign
        /// `$` that could start a reference escaped). A page stored before that escape existed
        /// cannot tell its `${NAME}` references from a feed's own `${…}` text: it is never
        /// read again (`pageEntry(for:)`), only fetched anew.
        public var recordedPage: Bool?
        /// Where the body is.
        public var path: String = ""

        enum CodingKeys: String, CodingKey { case url, etag, lastModified, bytes, robotsTag, recordedPage }
    }

    public let directory: String
    public let maxSize: Int?
    /// Text as it may be written to disk (`Environment.recorded`), and back.
    private let recorded: @Sendable (String) -> String
    private let restored: @Sendable (String) -> String
    /// Total bytes of cached bodies, once counted.
    private let size = Mutex<Int?>(nil)
    /// Read and never written (`plan`): `store` keeps nothing, `entry` records no use, and
    /// downloads go to the system's temporary folder instead of the cache's.
    public let readOnly: Bool

    public init(
        directory: String, maxSize: Int?, recorded: @escaping @Sendable (String) -> String = { $0 },
        restored: @escaping @Sendable (String) -> String = { $0 }, readOnly: Bool = false
    ) throws {
        self.directory = directory
        self.maxSize = maxSize
        self.recorded = recorded
        self.restored = restored
        self.readOnly = readOnly
        guard !readOnly else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        sweepStaleDownloads()
    }

    /// Removes partial downloads a killed process left (older than an hour: a younger one
    /// may belong to another imgpipe using the same cache).
    private func sweepStaleDownloads() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        let cutoff = Date().addingTimeInterval(-3600)
        for name in names where name.hasPrefix(".download-") && name.hasSuffix(".tmp") {
            let path = directory + "/" + name
            if let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date,
                modified < cutoff
            {
                unlink(path)
            }
        }
    }

    package static func key(_ url: String) -> String {
        sha256Hex(url)
    }

    private func paths(_ url: String) -> (folder: String, body: String, meta: String) {
        let key = Self.key(recorded(url))
        let folder = directory + "/" + key.prefix(2)
        return (folder, folder + "/" + key, folder + "/" + key + ".json")
    }

    /// The entry for `url`, or nil. Counts as a use (for eviction).
    public func entry(for url: String) -> Entry? {
        let (_, body, meta) = paths(url)
        guard let data = FileManager.default.contents(atPath: meta),
            var entry = try? JSONDecoder().decode(Entry.self, from: data), entry.url == recorded(url),
            FileManager.default.fileExists(atPath: body)
        else { return nil }
        entry.path = body
        if !readOnly { utimes(body, nil) }
        return entry
    }

    /// The entry for the feed page at `url`, or nil (also for a page stored before the
    /// recorded form escaped a feed's own `${…}` text).
    public func pageEntry(for url: String) -> Entry? {
        entry(for: url).flatMap { $0.recordedPage == true ? $0 : nil }
    }

    /// Moves a downloaded file into the cache (it must be on the same file system, e.g. a
    /// temporary file in the cache's folder), replacing an older entry.
    @discardableResult
    public func store(
        url: String, file: String, etag: String?, lastModified: String?,
        robotsTag: [String]? = nil, recordedPage: Bool? = nil
    ) throws -> Entry {
        let (folder, body, meta) = paths(url)
        let bytes = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
        var entry = Entry(
            url: recorded(url), etag: etag, lastModified: lastModified, bytes: bytes,
            robotsTag: robotsTag.map { $0.map(recorded) }, recordedPage: recordedPage)
        if readOnly {
            unlink(file)
            return entry
        }
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let previous = (try? FileManager.default.attributesOfItem(atPath: body)[.size] as? Int) ?? 0
        guard rename(file, body) == 0 else {
            throw CacheError(description: "cannot move \(file) into the cache: \(String(cString: strerror(errno)))")
        }
        let temporary = meta + ".\(UUID().uuidString).tmp"
        try JSONEncoder().encode(entry).write(to: URL(fileURLWithPath: temporary))
        rename(temporary, meta)
        entry.path = body
        size.withLock { size in if size != nil { size! += bytes - previous } }
        evictIfNeeded()
        return entry
    }

    /// Stores a feed page. A page is text that may echo a `${…}` value back (a signed image
    /// link): it is stored recorded (`Environment.recorded`) and restored by `page(at:)`.
    @discardableResult
    public func storePage(url: String, data: Data, etag: String?, lastModified: String?) throws -> Entry {
        // A page that is not UTF-8 cannot be recorded (a secret it echoes would be stored as
        // it is): it is not kept. (A JSON page is UTF-8.)
        guard let text = String(data: data, encoding: .utf8) else {
            throw CacheError(description: "a feed page that is not UTF-8 text is not cached")
        }
        let file = temporaryFile()
        try Data(recorded(text).utf8).write(to: URL(fileURLWithPath: file))
        return try store(url: url, file: file, etag: etag, lastModified: lastModified, recordedPage: true)
    }

    /// A stored feed page (an entry from `pageEntry(for:)`), restored: the references this
    /// run recorded expanded, the feed's own `$` text as it was.
    public func page(at entry: Entry) -> Data? {
        guard let data = FileManager.default.contents(atPath: entry.path) else { return nil }
        guard let text = String(data: data, encoding: .utf8), text.contains("$") else { return data }
        return Data(restored(text).utf8)
    }

    /// A fresh name inside the cache folder, for a download that may be stored.
    public func temporaryFile() -> String {
        (readOnly ? NSTemporaryDirectory() : directory) + "/.download-\(UUID().uuidString).tmp"
    }

    /// Total bytes of cached bodies.
    public func totalSize() -> Int {
        size.withLock { size in
            if let size { return size }
            let computed = bodies().reduce(0) { $0 + $1.bytes }
            size = computed
            return computed
        }
    }

    private func bodies() -> [(path: String, bytes: Int, used: Date)] {
        var result: [(String, Int, Date)] = []
        let folders = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for folder in folders where folder.count == 2 {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory + "/" + folder)) ?? []
            for name in names where !name.hasSuffix(".json") && !name.hasSuffix(".tmp") {
                let path = directory + "/" + folder + "/" + name
                guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { continue }
                result.append((path, attributes[.size] as? Int ?? 0, attributes[.modificationDate] as? Date ?? .distantPast))
            }
        }
        return result
    }

    /// How many bodies the cache holds and their bytes.
    public func contents() -> (entries: Int, bytes: Int) {
        let all = bodies()
        return (all.count, all.reduce(0) { $0 + $1.bytes })
    }

    /// Removes every entry (and partial downloads); the folder stays.
    public func clear() throws {
        try size.withLock { size in
            for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
                try FileManager.default.removeItem(atPath: directory + "/" + name)
            }
            size = 0
        }
    }

    /// Removes least recently used entries until the cache fits `maxSize`.
    public func evictIfNeeded() {
        guard let maxSize, totalSize() > maxSize else { return }
        size.withLock { size in
            var total = bodies().reduce(0) { $0 + $1.bytes }
            for body in bodies().sorted(by: { $0.used < $1.used }) where total > maxSize {
                unlink(body.path)
                unlink(body.path + ".json")
                total -= body.bytes
            }
            size = total
        }
    }
}

/// A file of the disk cache that could not be written.
public struct CacheError: Error, Sendable, CustomStringConvertible {
    public let description: String
}
