import Foundation
import PipelineKit
import Synchronization

/// The spool folder's files, reused: a download goes into the file of an item already
/// done (renamed, and written over), not into a new one, while there is such a file.
///
/// Why: creating and deleting a file per download costs the file system an inode each
/// time, and ext4 without a journal (as on this project's build machines) looks at every
/// inode freed in the last half minute or more before it hands out a new one. A run that
/// deletes a spool file per item pays for that on every file it creates afterwards, its
/// outputs included (see bench/RESULTS.md). With reuse, a run has about as many spool
/// files as items in flight, created once.
///
/// A file waiting for reuse keeps its first `keptBytes` of blocks (and their cached pages),
/// which the next download writes over: a download of up to that size takes no new blocks
/// nor pages, and gives none back. Anything past that is freed (a hole punched), as
/// deleting the file would; when an output cannot be staged (a full disk), they are deleted
/// before it is tried again.
///
/// At most `keep` files wait, or as many as the session had made and not deleted, when
/// that is more: items held in a sink's open batch (a shard of 250 samples) keep their
/// files until it commits, and give them all back at once; keeping only `keep` of them
/// would delete the rest and create as many again. So the files waiting hold at most
/// `keptBytes` times the most files the session ever had. What is kept reaches the disk now
/// and then, where a hole never did: the kernel writes a file back once it has stayed dirty
/// for half a minute, so at most what the files waiting keep, every half minute.
///
/// The staged outputs' folder reuses its files the same way (`RunContext.stagedFiles`): an
/// output is written over a free file, renamed into place, and given back once delivered.
///
/// Nothing here changes what a spool file means: an item's spool file is written in full,
/// then renamed to `<seq>` and recorded `fetched`, as before. A download writes into the
/// free file it was given under that file's own name (`.free-<n>`; `<seq>.part` when none
/// was free), so one rename puts it in place. A file goes back for reuse only once its
/// item's end is recorded (nothing reads it again), and only when no other name links to it
/// (a cache entry shares the inode of the spool file it was linked to, and must never be
/// overwritten): such a file is deleted as before. Files waiting for reuse are named
/// `.free-<n>`, each name used once; a session that was killed leaves them behind, and the
/// next one deletes them with the other half-written files.
final class SpoolFiles: Sendable {
    let directory: String
    /// Files kept for reuse at most (the rest are deleted).
    let keep: Int
    /// Bytes of blocks a file waiting here keeps.
    let keptBytes: off_t
    /// Files ready for reuse, files being readied (counted against the limit), the last
    /// number, and the files made (a `take` that found none free) and deleted (`recycle`).
    private let state = Mutex<(free: [String], readying: Int, next: Int, made: Int, deleted: Int)>(([], 0, 0, 0, 0))

    static let freePrefix = ".free-"
    /// Bytes of blocks a file waiting for reuse keeps (a whole number of blocks).
    static let keptBytes: off_t = 1 << 20

    init(directory: String, keep: Int, keptBytes: off_t = SpoolFiles.keptBytes) {
        self.directory = directory
        self.keep = keep
        self.keptBytes = keptBytes
    }

    /// A free file for a download to write over, the last one given back; nil when none is
    /// waiting (the caller then makes a new file). The download renames it into place, or
    /// gives it back (`recycle`) when it does not end in it.
    func take() -> String? {
        state.withLock { state in
            if let free = state.free.popLast() { return free }
            state.made += 1
            return nil
        }
    }

    /// The item whose spool file is at `path` has ended: its file is kept for the next
    /// download (its blocks past `keptBytes` freed), or deleted.
    func recycle(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        let reusable = (info.st_mode & S_IFMT) == S_IFREG && info.st_nlink == 1
        let free = state.withLock { state -> String? in
            guard reusable, state.free.count + state.readying < max(keep, state.made - state.deleted) else {
                state.deleted += 1
                return nil
            }
            state.readying += 1
            state.next += 1
            return directory + "/" + Self.freePrefix + String(state.next)
        }
        guard let free else {
            unlink(path)
            return
        }
        let readied =
            Self.dropBlocks(path, from: keptBytes, size: info.st_size, blockSize: off_t(info.st_blksize))
            && rename(path, free) == 0
        if !readied { unlink(path) }
        state.withLock { state in
            state.readying -= 1
            if readied { state.free.append(free) } else { state.deleted += 1 }
        }
    }

    /// Frees the file's blocks and cached pages from `start` (a whole number of blocks) on,
    /// as deleting it would, keeping its inode and its length: a hole the next download
    /// writes over (`HTTPClient` cuts the file to the new body's length when that is
    /// shorter). Not a truncation, after which, to zero, ext4 writes the next contents to
    /// disk on close (`auto_da_alloc`), which deleting never did.
    private static func dropBlocks(_ path: String, from start: off_t, size: off_t, blockSize: off_t) -> Bool {
        guard size > start else { return true }
        guard let fallocate = Self.fallocate else { return false }
        let file = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard file >= 0 else { return false }
        defer { close(file) }
        // Whole blocks: a hole ending inside the last block would keep it, zeroed.
        let block = max(blockSize, 512)
        return fallocate(file, punchHole | keepSize, start, (size + block - 1) / block * block - start) == 0
    }

    // linux/falloc.h
    private static let keepSize: Int32 = 0x01
    private static let punchHole: Int32 = 0x02

    /// glibc's `fallocate`, which Swift's Glibc module does not declare (it is a GNU
    /// extension); nil where the C library has none (files are then deleted, not reused).
    private static let fallocate: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32)? = {
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate").map {
            unsafeBitCast($0, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
        }
    }()

    /// Deletes the files waiting for reuse: the session is over (nothing will download), or
    /// the disk is full (they hold space that another file needs). Returns how many there were.
    @discardableResult
    func clear() -> Int {
        let free = state.withLock { state -> [String] in
            defer { state.free = [] }
            return state.free
        }
        for file in free { unlink(file) }
        return free.count
    }

    /// Files left for reuse by a session that ended without tidying (a kill): not known to
    /// this one, so deleted.
    static func isLeftover(_ name: String) -> Bool { name.hasPrefix(freePrefix) }
}
