import Foundation
import PipelineKit

/// Where a worker of a shared run keeps its journal (its local state file): `<base>.sqlite`
/// in the pipeline's workers folder, `<base>` being `<host>-<pid>`, locked (`StateLock`)
/// for the life of the process.
///
/// Journals of workers that are gone are removed first, with their `-wal`, `-shm` and work
/// folders: the database is the run's record, and their leases ran out or were handed
/// back. A container restarted in place has the same host name and is pid 1 again: it used
/// to open its predecessor's journal, which already held the run, and fail for good.
/// - A journal at this worker's own name that no live process holds is its predecessor's:
///   emptied and taken.
/// - Another journal is removed when no process holds its lock and neither it nor its log
///   has been written for `idle` seconds: an imgpipe from before journals were locked holds
///   no lock, but writes its journal while it lives.
/// - A journal locked by a live process of the same name (another pid namespace on the same
///   host and folder), or one that is not a regular file of this user (a symbolic link,
///   another user's), is left alone, and this worker takes `<base>+2`, `<base>+3`, ….
/// After each lock, the name is checked to still be the file locked: a sweep by another
/// worker between the open and the lock would otherwise leave a lock on a deleted file.
public enum WorkerJournal {
    /// Seconds without a write after which an unlocked journal of another name is stale.
    static let idle: TimeInterval = 600

    /// The journal's path, and the lock that must be kept while the worker lives.
    public static func claim(folder: String, base: String) throws -> (path: String, lock: StateLock) {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        removeStale(in: folder, sparing: base)
        var lastError: Error?
        for number in 1...1000 {
            let path = "\(folder)/\(base)\(number == 1 ? "" : "+\(number)").sqlite"
            var info = stat()
            if lstat(path, &info) == 0, (info.st_mode & S_IFMT) != S_IFREG || info.st_uid != geteuid() { continue }
            let lock: StateLock
            do {
                lock = try StateLock(stateFile: path)
            } catch RunError.stateFileBusy {
                continue
            } catch {
                lastError = error
                continue
            }
            // Swept away between the open and the lock: this name again, afresh.
            guard sameFile(lock, path) else { return try claim(folder: folder, base: base) }
            // Its predecessor's: the log first (SQLite would replay it into the emptied
            // file), then its contents.
            if lstat(path, &info) == 0, info.st_size > 0 {
                removeCompanions(of: path)
                guard truncate(path, 0) == 0 else {
                    throw StoreError("cannot empty the old journal \(path): \(String(cString: strerror(errno)))")
                }
            }
            return (path, lock)
        }
        throw lastError ?? StoreError("no free journal name in \(folder) (1000 workers of \(base) running)")
    }

    /// Removes the journals in `folder` that no live worker holds (those of other names
    /// only once idle).
    static func removeStale(in folder: String, sparing base: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        let now = Date().timeIntervalSince1970
        for name in names where name.hasSuffix(".sqlite") {
            let path = "\(folder)/\(name)"
            // `+` is in no host's safe name: `web-1+2` is never host `web-1`'s journal.
            let own =
                name == "\(base).sqlite" || (name.hasPrefix("\(base)+") && Int(name.dropFirst(base.count + 1).dropLast(7)) != nil)
            if !own, [path, path + "-wal"].contains(where: { modified($0).map { now - $0 < idle } ?? false }) { continue }
            let descriptor = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            var opened = stat()
            var named = stat()
            guard fstat(descriptor, &opened) == 0, (opened.st_mode & S_IFMT) == S_IFREG,
                flock(descriptor, LOCK_EX | LOCK_NB) == 0,
                lstat(path, &named) == 0, named.st_dev == opened.st_dev, named.st_ino == opened.st_ino
            else { continue }
            removeCompanions(of: path)
            unlink(path)
        }
    }

    private static func modified(_ path: String) -> TimeInterval? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9
    }

    /// Whether `path` still names the regular file `lock` holds.
    private static func sameFile(_ lock: StateLock, _ path: String) -> Bool {
        var named = stat()
        return lstat(path, &named) == 0 && (named.st_mode & S_IFMT) == S_IFREG
            && lock.holds(device: UInt64(named.st_dev), inode: UInt64(named.st_ino))
    }

    /// A journal's SQLite log and shared memory, and its work folder (spooled inputs,
    /// staged outputs).
    private static func removeCompanions(of path: String) {
        for companion in [path + "-wal", path + "-shm"] { unlink(companion) }
        try? FileManager.default.removeItem(atPath: RunStore.workRoot(ofStateFile: path))
    }
}
