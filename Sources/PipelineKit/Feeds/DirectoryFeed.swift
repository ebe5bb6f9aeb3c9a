import Foundation

/// Every file with an image extension below a directory, depth first, names in byte order
/// within each folder. The key is the path relative to the directory, with `/`.
///
/// Hidden entries (names starting with `.`) are skipped, and so are symbolic links to
/// folders (they could loop); symbolic links to files are followed. Which files are
/// images is decided by extension here only to choose what to list: each listed file is
/// then decoded by its magic bytes, and one that is not a decodable image fails as an item.
///
/// Nothing of the folder vanishes without a word: a name that is not valid UTF-8 is listed
/// (its key escaped, its location the exact bytes: `LocalPath`), a link that leads nowhere
/// is listed and fails naming itself, and a sub-folder that cannot be read makes the
/// listing end with an error naming it once the rest is listed (`UnreadFolders`).
public struct DirectoryFeed: Feed {
    public static let imageExtensions: Set<String> = ["jpg", "jpeg", "png", "webp", "gif", "tif", "tiff", "avif", "heic", "heif"]

    public let root: String
    public let recursive: Bool
    /// Folders below `root` that are not listed: where the pipeline's own outputs go (a
    /// directory sink, a dry-run's previews), so a run never reads what it writes.
    public let excluded: Set<String>

    public init(root: String, recursive: Bool = true, excluding folders: [String] = []) {
        self.root = root
        self.recursive = recursive
        excluded = Set(folders.map { URL(fileURLWithPath: $0).standardizedFileURL.path })
    }

    public var listsLocally: Bool { true }

    /// Counts the files when asked to (all of them: the run's total; `countFiles`), then
    /// lists those after `cursor`'s key in listing order, folders before it never opened: a
    /// resumed listing of a million files starts at once. A file added before the cursor
    /// since is not listed (a refresh, `resume --refresh-feed`, lists from the start).
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        expect?(.counted(countFiles()))
        let path = cursor.map { LocalPath.unescaped($0.key).split(separator: UInt8(ascii: "/")).map(Array.init) } ?? []
        try list(after: path, body)
    }

    /// Lists the files after the file at `path` (its key's components; none: every file).
    private func list(after path: [[UInt8]], _ body: (FeedItem) throws -> Bool) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw FeedError("source directory \(root) does not exist or is not a directory")
        }
        var unread = UnreadFolders(root: root)
        guard try walk(Array(root.utf8), relative: [], after: path[...], unread: &unread, body) else { return }
        if let error = unread.error { throw error }
    }

    /// How many files `list` would list, by the same rules (`readEntries(of:)`), counted without
    /// making items: `readdir` tells each entry's type, so a regular file costs no `stat`
    /// (only symbolic links, and entries of file systems that do not report types, are
    /// looked at). A folder that cannot be read counts as empty, as `list` lists nothing
    /// of it (and ends saying so).
    public func countFiles() -> Int {
        countFiles(in: Array(root.utf8))
    }

    private func countFiles(in directory: [UInt8]) -> Int {
        var count = 0
        _ = readEntries(of: directory) { name, kind in
            switch kind {
            case .image: count += 1
            case .folder: count += countFiles(in: directory + [UInt8(ascii: "/")] + name)
            }
        }
        return count
    }

    /// The entries of one folder that the listing looks at, in byte order of their names.
    /// The names are packed into one buffer: a folder of a million files costs about 30
    /// bytes a file here, where an array per name (and one per path) cost about 200.
    private struct FolderEntries {
        enum Kind { case image, folder }

        /// Eight bytes: a name is at most 255 bytes (`NAME_MAX`), a folder's names at most
        /// 4 GiB (`append` refuses more).
        struct Entry {
            let start: UInt32
            let count: UInt8
            let kind: Kind
        }

        private(set) var names: [UInt8] = []
        private(set) var entries: [Entry] = []

        /// False when the folder's names would pass 4 GiB.
        mutating func append(_ name: [UInt8], _ kind: Kind) -> Bool {
            guard name.count <= Int(UInt8.max), let start = UInt32(exactly: names.count),
                UInt32(exactly: names.count + name.count) != nil
            else { return false }
            entries.append(Entry(start: start, count: UInt8(name.count), kind: kind))
            names.append(contentsOf: name)
            return true
        }

        func name(of entry: Entry) -> ArraySlice<UInt8> { names[Int(entry.start)..<Int(entry.start) + Int(entry.count)] }

        /// Sorts the entries by name, byte by byte (a name that is a prefix of another first).
        mutating func sort() {
            names.withUnsafeBufferPointer { buffer in
                guard let base = buffer.baseAddress else { return }
                entries.sort { a, b in
                    let common = memcmp(base + Int(a.start), base + Int(b.start), Int(min(a.count, b.count)))
                    return common != 0 ? common < 0 : a.count < b.count
                }
            }
        }
    }

    /// The entries of `directory` that are listed (files with an image extension: regular
    /// files, links to regular files, and links that lead nowhere, which then fail as items
    /// naming them) or walked into (folders, when recursive and not excluded), names in
    /// byte order; or the `errno` of a folder that cannot be read. Names are bytes: one that
    /// is not valid UTF-8 is listed like any other.
    private func entries(of directory: [UInt8]) -> Result<FolderEntries, CError> {
        var found = FolderEntries()
        var full = false
        let error = readEntries(of: directory) { name, kind in
            if !full, !found.append(name, kind) { full = true }
        }
        if let error { return .failure(error) }
        if full { return .failure(CError(EOVERFLOW)) }
        found.sort()
        return .success(found)
    }

    /// Calls `body` with each entry of `directory` that the listing looks at, in the order
    /// `readdir` gives them; returns the `errno` of a folder that cannot be read.
    private func readEntries(of directory: [UInt8], _ body: ([UInt8], FolderEntries.Kind) -> Void) -> CError? {
        guard let handle = LocalPath.withCPath(bytes: directory, { opendir($0) }) else { return CError() }
        defer { closedir(handle) }
        while true {
            errno = 0
            guard let entry = readdir(handle) else {
                // The end, or a folder that fails while it is read.
                return errno != 0 ? CError() : nil
            }
            let name = Self.nameBytes(of: entry)
            if name.first == UInt8(ascii: ".") { continue }
            var type = Int(entry.pointee.d_type)
            if type == DT_LNK || type == DT_UNKNOWN {
                let path = directory + [UInt8(ascii: "/")] + name
                // Follow a link to a file, never one to a folder.
                var info = stat()
                var linkInfo = stat()
                guard LocalPath.withCPath(bytes: path, { lstat($0, &linkInfo) }) == 0 else { continue }
                let isLink = (linkInfo.st_mode & S_IFMT) == S_IFLNK
                if LocalPath.withCPath(bytes: path, { stat($0, &info) }) != 0 {
                    // A link that leads nowhere (or that cannot be followed): listed by its
                    // name, to fail with the reason, not passed over.
                    type = isLink ? DT_REG : DT_UNKNOWN
                } else {
                    switch info.st_mode & S_IFMT {
                    case S_IFDIR: type = isLink ? DT_LNK : DT_DIR
                    case S_IFREG: type = DT_REG
                    default: continue
                    }
                }
            }
            if type == DT_DIR {
                if recursive, !isExcluded(directory + [UInt8(ascii: "/")] + name) { body(name, .folder) }
            } else if type == DT_REG, Self.hasImageExtension(name) {
                body(name, .image)
            }
        }
    }

    private func isExcluded(_ path: [UInt8]) -> Bool {
        guard !excluded.isEmpty, let text = String(validating: path, as: UTF8.self) else { return false }
        return excluded.contains(text)
    }

    private static func hasImageExtension(_ name: [UInt8]) -> Bool {
        guard let dot = name.lastIndex(of: UInt8(ascii: ".")), dot > 0,
            let ext = String(validating: name[(dot + 1)...], as: UTF8.self)
        else { return false }
        return imageExtensions.contains(ext.lowercased())
    }

    /// An entry's name, read up to its terminating NUL in place. Not `entry.pointee.d_name`:
    /// that copies all 256 bytes of the field, and an entry is only as long as its name
    /// (`d_reclen`), so for the last entry of `readdir`'s buffer the copy read past the
    /// buffer's end, and crashed when a page without memory followed (a run crashed so,
    /// counting its source folder). Bytes that are not valid UTF-8 are repaired (`\u{FFFD}`):
    /// `nameBytes(of:)` gives them as they are.
    package static func name(of entry: UnsafePointer<dirent>) -> String {
        String(decoding: nameBytes(of: entry), as: UTF8.self)
    }

    /// An entry's name as bytes, read the same way.
    static func nameBytes(of entry: UnsafePointer<dirent>) -> [UInt8] {
        let name = (UnsafeRawPointer(entry) + nameOffset).assumingMemoryBound(to: UInt8.self)
        return Array(UnsafeBufferPointer(start: name, count: strlen(UnsafeRawPointer(name).assumingMemoryBound(to: CChar.self))))
    }

    /// Where `d_name` starts in an entry (a stored field: never nil).
    private static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!

    /// Returns false when `body` asked to stop. The key is the relative path with bytes
    /// that are not valid UTF-8 written `\xE9` (`LocalPath.escaped`); the location is the
    /// file's exact bytes (`LocalPath.location`). With `after` (the rest of a resumed
    /// listing's last path below this folder), entries before it are passed over unopened,
    /// the folder on it is walked after the rest of it, and the file it names is not listed
    /// again.
    private func walk(
        _ directory: [UInt8], relative: [UInt8], after: ArraySlice<[UInt8]> = [], unread: inout UnreadFolders,
        _ body: (FeedItem) throws -> Bool
    ) throws -> Bool {
        let folder: FolderEntries
        switch self.entries(of: directory) {
        case .success(let found): folder = found
        case .failure(let error):
            if relative.isEmpty { throw FeedError("cannot list source directory \(root): \(error)") }
            unread.add(LocalPath.escaped(relative), error)
            return true
        }
        for entry in folder.entries {
            let name = folder.name(of: entry)
            var rest: ArraySlice<[UInt8]> = []
            if let first = after.first {
                if name.lexicographicallyPrecedes(first) { continue }
                if name.elementsEqual(first) {
                    switch entry.kind {
                    case .image where after.count == 1: continue
                    case .folder where after.count > 1: rest = after.dropFirst()
                    default: break
                    }
                }
            }
            let key = relative.isEmpty ? Array(name) : relative + [UInt8(ascii: "/")] + name
            let path = directory + [UInt8(ascii: "/")] + name
            switch entry.kind {
            case .folder:
                if try !walk(path, relative: key, after: rest, unread: &unread, body) { return false }
            case .image:
                if try !body(FeedItem(key: LocalPath.escaped(key), location: LocalPath.location(path))) { return false }
            }
        }
        return true
    }
}

/// The sub-folders of a directory source that could not be read (`opendir` or `readdir`
/// failed: no permission, removed while listed): nothing of them is listed, and the
/// listing ends with an error naming them once the rest is listed, so that the run is
/// not whole (exit 1, the feed not complete) and `resume` lists them again.
private struct UnreadFolders {
    let root: String
    private var named: [String] = []
    private var count = 0

    /// The folders an error names; the others are counted.
    static let named = 10

    init(root: String) { self.root = root }

    mutating func add(_ relative: String, _ error: CError) {
        count += 1
        if named.count < Self.named { named.append("\(relative) (\(error))") }
    }

    var error: FeedError? {
        guard count > 0 else { return nil }
        return FeedError(
            "\(count) \(count == 1 ? "folder" : "folders") of \(root) could not be read, their files left out: "
                + named.joined(separator: ", ") + (count > named.count ? ", …" : ""))
    }
}
