import Foundation
import PipelineKit

/// An exclusive lock on a state file for the life of the process, so that two imgpipe
/// processes never work on the same runs at once.
///
/// The lock is an `flock` on the state file itself (created if needed), so it holds
/// whatever path reaches the file: a symbolic link, `./x` and `x`, a bind mount. `flock`
/// locks are separate from the POSIX record locks SQLite takes on the same file. The
/// descriptor stays open for the life of the process: closing a descriptor of a SQLite
/// file would drop SQLite's own locks on it.
public final class StateLock: Sendable {
    private let descriptor: Int32
    public let stateFile: String
    /// The file's identity when it was locked.
    private let device: UInt64
    private let inode: UInt64
    /// Its size then: a state file never shrinks while imgpipe writes it.
    private let size: Int64

    /// Takes the lock, or throws `RunError.stateFileBusy`.
    public init(stateFile: String) throws {
        let fd = open(stateFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StoreError("cannot open state file \(stateFile): \(String(cString: strerror(errno)))") }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw StoreError("state file \(stateFile) is not a regular file")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw RunError.stateFileBusy(stateFile: stateFile)
        }
        descriptor = fd
        self.stateFile = stateFile
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        size = Int64(info.st_size)
    }

    /// Whether the lock is on the file of this device and inode.
    public func holds(device: UInt64, inode: UInt64) -> Bool { self.device == device && self.inode == inode }

    /// True when the file is smaller than when it was locked (cut short by someone else).
    public var shrank: Bool {
        var info = stat()
        return fstat(descriptor, &info) == 0 && Int64(info.st_size) < size
    }

    /// Why the state file is no longer the one that was locked (deleted, replaced or cut
    /// short while the run went on), or nil when it still is.
    public func problem() -> String? {
        var atPath = stat()
        guard stat(stateFile, &atPath) == 0 else {
            return "state file \(stateFile) was deleted while the run was going: what this session did is not recorded"
        }
        guard UInt64(atPath.st_dev) == device, UInt64(atPath.st_ino) == inode else {
            return
                "state file \(stateFile) was replaced by another file while the run was going: what this session did is not recorded"
        }
        var open = stat()
        if fstat(descriptor, &open) == 0, open.st_size == 0 {
            return "state file \(stateFile) was emptied while the run was going: what this session did is not recorded"
        }
        return nil
    }
}
