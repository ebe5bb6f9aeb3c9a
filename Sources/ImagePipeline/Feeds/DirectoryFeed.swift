import Foundation

/// Every file with an image extension below a directory, depth first, names in byte order
/// within each folder. The key is the path relative to the directory, with `/`.
///
/// Hidden entries (names starting with `.`) are skipped, and so are symbolic links to
/// folders (they could loop); symbolic links to files are followed. Which files are
/// images is decided by extension here only to choose what to list: each listed file is
/// then decoded by its magic bytes, and one that is not a decodable image fails as an item.
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

    public func list(_ body: (FeedItem) throws -> Bool) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw FeedError("source directory \(root) does not exist or is not a directory")
        }
        _ = try walk(relative: "", body)
    }

    /// Counts the files first (`countFiles`), then lists them.
    public func list(expecting expect: (FeedCount) -> Void, _ body: (FeedItem) throws -> Bool) throws {
        expect(.counted(countFiles()))
        try list(body)
    }

    /// How many files `list` would list, by the same rules, counted without listing them:
    /// `readdir` tells each entry's type, so a regular file costs no `stat` (only symbolic
    /// links, and entries of file systems that do not report types, are looked at), and
    /// nothing is sorted. A folder that cannot be read counts as empty.
    public func countFiles() -> Int {
        countFiles(in: root)
    }

    private func countFiles(in directory: String) -> Int {
        guard let handle = opendir(directory) else { return 0 }
        defer { closedir(handle) }
        var count = 0
        while let entry = readdir(handle) {
            let name = Self.name(of: entry)
            if name.hasPrefix(".") { continue }
            let path = directory + "/" + name
            var type = Int(entry.pointee.d_type)
            if type == DT_LNK || type == DT_UNKNOWN {
                // What the listing does: follow a link to a file, never one to a folder.
                var info = stat()
                var linkInfo = stat()
                guard lstat(path, &linkInfo) == 0, stat(path, &info) == 0 else { continue }
                let isLink = (linkInfo.st_mode & S_IFMT) == S_IFLNK
                switch info.st_mode & S_IFMT {
                case S_IFDIR: type = isLink ? DT_LNK : DT_DIR
                case S_IFREG: type = DT_REG
                default: continue
                }
            }
            if type == DT_DIR {
                if recursive, !excluded.contains(path) { count += countFiles(in: path) }
            } else if type == DT_REG, Self.imageExtensions.contains((name as NSString).pathExtension.lowercased()) {
                count += 1
            }
        }
        return count
    }

    /// An entry's name, read up to its terminating NUL in place. Not `entry.pointee.d_name`:
    /// that copies all 256 bytes of the field, and an entry is only as long as its name
    /// (`d_reclen`), so for the last entry of `readdir`'s buffer the copy read past the
    /// buffer's end, and crashed when a page without memory followed (a run crashed so,
    /// counting its source folder).
    static func name(of entry: UnsafePointer<dirent>) -> String {
        String(cString: (UnsafeRawPointer(entry) + nameOffset).assumingMemoryBound(to: CChar.self))
    }

    /// Where `d_name` starts in an entry (a stored field: never nil).
    private static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!

    /// Returns false when `body` asked to stop.
    private func walk(relative: String, _ body: (FeedItem) throws -> Bool) throws -> Bool {
        let directory = relative.isEmpty ? root : root + "/" + relative
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            if relative.isEmpty { throw FeedError("cannot list source directory \(root): \(error.localizedDescription)") }
            return true
        }
        for name in names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) where !name.hasPrefix(".") {
            let key = relative.isEmpty ? name : relative + "/" + name
            let path = root + "/" + key
            var info = stat()
            var linkInfo = stat()
            guard lstat(path, &linkInfo) == 0, stat(path, &info) == 0 else { continue }
            let isLink = (linkInfo.st_mode & S_IFMT) == S_IFLNK
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                if recursive, !isLink, !excluded.contains(path), try !walk(relative: key, body) { return false }
            case S_IFREG:
                let ext = (name as NSString).pathExtension.lowercased()
                if Self.imageExtensions.contains(ext) {
                    if try !body(FeedItem(key: key, location: path)) { return false }
                }
            default:
                continue
            }
        }
        return true
    }
}
