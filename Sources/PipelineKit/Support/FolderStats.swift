import Foundation
import Synchronization

/// `stat` of many files that share a few folders, as `plan` and `run --incremental` look at
/// each item's source file and at the file delivered for it: the folders looked in are kept
/// open, and a file is found by its name in its folder (`fstatat`), not walked to from `/`
/// again (a million lookups of six-part paths were a sixth of a `plan`'s time).
///
/// A folder is opened once and kept (up to `keptFolders`, then all are closed and opened
/// again as needed): a folder renamed or replaced meanwhile is still the one first opened
/// (a `plan` looks at a moment of the files, as a listing does).
package final class FolderStats: Sendable {
    /// Folders kept open at most.
    static let keptFolders = 64

    private let folders = Mutex<[HashedBytes: Int32]>([:])

    package init() {}

    deinit {
        folders.withLock { kept in
            for descriptor in kept.values { close(descriptor) }
        }
    }

    /// `stat(2)` of the file at `location` (a link followed; a location as `LocalPath`
    /// writes it), nil when it cannot be read.
    package func info(_ location: String) -> stat? {
        let path = LocalPath.bytes(location)
        // A NUL ends the path `stat` sees: such a location is looked at as `stat` would.
        guard let slash = path.lastIndex(of: UInt8(ascii: "/")), slash > 0, slash < path.count - 1, !path.contains(0)
        else { return Self.info(bytes: path) }
        let name = Array(path[(slash + 1)...])
        // Looked up under the lock: another thread cannot close the folder meanwhile.
        return folders.withLock { kept -> stat? in
            let descriptor = Self.descriptor(of: HashedBytes(Array(path[..<slash])), in: &kept)
            guard descriptor >= 0 else { return Self.info(bytes: path) }
            var info = stat()
            return LocalPath.withCPath(bytes: name, { fstatat(descriptor, $0, &info, 0) }) == 0 ? info : nil
        }
    }

    /// The size and modification time (seconds since 1970, to the nanosecond) of the file at
    /// `location`; nil when it cannot be read.
    package func sizeAndTime(_ location: String) -> (size: Int, modified: Double)? {
        info(location).map(Self.sizeAndTime)
    }

    /// `stat(2)` of the file at `location`, by its whole path (one look at one file).
    package static func info(_ location: String) -> stat? { info(bytes: LocalPath.bytes(location)) }

    private static func info(bytes path: [UInt8]) -> stat? {
        var info = stat()
        return LocalPath.withCPath(bytes: path, { stat($0, &info) }) == 0 ? info : nil
    }

    /// A file's size, and its modification time in seconds since 1970 to the nanosecond.
    package static func sizeAndTime(_ info: stat) -> (size: Int, modified: Double) {
        (Int(info.st_size), Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
    }

    /// An open descriptor of `folder`, or -1 when it cannot be opened (the caller then
    /// walks the whole path). Opened for lookups only (`O_PATH`): a folder that may be
    /// walked through but not read is kept too.
    private static func descriptor(of folder: HashedBytes, in kept: inout [HashedBytes: Int32]) -> Int32 {
        if let descriptor = kept[folder] { return descriptor }
        if kept.count >= keptFolders {
            for descriptor in kept.values { close(descriptor) }
            kept.removeAll(keepingCapacity: true)
        }
        let descriptor = LocalPath.withCPath(bytes: folder.bytes) { open($0, lookupsOnly | O_DIRECTORY | O_CLOEXEC) }
        // A folder that cannot be opened is not kept: it may be there at the next look.
        if descriptor >= 0 { kept[folder] = descriptor }
        return descriptor
    }

    /// Linux's `O_PATH` (the same on x86-64 and arm64; Glibc's module leaves it out).
    private static let lookupsOnly: Int32 = 0o10000000
}
