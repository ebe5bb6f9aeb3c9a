import Foundation

/// Where a worker of a shared run keeps its journal (its local state file): `<base>.sqlite`
/// in the pipeline's workers folder, `<base>` being `<host>-<pid>`, locked (`StateLock`)
/// for the life of the process.
///
/// The journals of workers that are gone (their lock is free: killed, interrupted, ended
/// with failed items or without the database) are removed first, with their `-wal`, `-shm`
/// and work folders: the database is the run's record, and their leases ran out or were
/// handed back. A container restarted in place has the same host name and is pid 1 again:
/// it used to open its predecessor's journal, which already held the run, and fail for
/// good. A journal locked by a live process of the same name (another pid namespace on
/// the same host and folder) is left alone, and this worker takes `<base>-2`, `<base>-3`, ….
public enum WorkerJournal {
    /// The journal's path, and the lock that must be kept while the worker lives.
    public static func claim(folder: String, base: String) throws -> (path: String, lock: StateLock) {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        removeStale(in: folder)
        for number in 1 ... 1000 {
            let path = "\(folder)/\(base)\(number == 1 ? "" : "-\(number)").sqlite"
            let lock: StateLock
            do {
                lock = try StateLock(stateFile: path)
            } catch RunError.stateFileBusy {
                continue
            }
            // Left there since the sweep by a process of the same name that has ended: its
            // log first (SQLite would replay it into the emptied file), then its contents.
            var info = stat()
            if stat(path, &info) == 0, info.st_size > 0 {
                removeCompanions(of: path)
                guard truncate(path, 0) == 0 else {
                    throw StoreError("cannot empty the old journal \(path): \(String(cString: strerror(errno)))")
                }
            }
            return (path, lock)
        }
        throw StoreError("no free journal name in \(folder) (1000 workers of \(base) running)")
    }

    /// Removes every journal in `folder` that no live process holds.
    static func removeStale(in folder: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        for name in names where name.hasSuffix(".sqlite") {
            let path = "\(folder)/\(name)"
            let descriptor = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            var info = stat()
            guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
                  flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { continue }
            removeCompanions(of: path)
            unlink(path)
        }
    }

    /// A journal's SQLite log and shared memory, and its work folder (spooled inputs,
    /// staged outputs).
    private static func removeCompanions(of path: String) {
        for companion in [path + "-wal", path + "-shm"] { unlink(companion) }
        try? FileManager.default.removeItem(atPath: RunStore.workRoot(ofStateFile: path))
    }
}
