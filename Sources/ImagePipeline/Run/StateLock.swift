import Foundation

/// An exclusive lock on a state file for the life of the process, so that two imgpipe
/// processes never work on the same runs at once.
public final class StateLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock on `<stateFile>.lock`, or throws `RunError.stateFileBusy`.
    public init(stateFile: String) throws {
        let fd = open(stateFile + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StoreError("cannot create \(stateFile).lock: \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw RunError.stateFileBusy(stateFile: stateFile)
        }
        descriptor = fd
    }

    deinit { close(descriptor) }
}
