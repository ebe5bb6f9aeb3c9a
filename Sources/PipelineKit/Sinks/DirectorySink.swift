import Foundation
import Synchronization

/// Writes outputs below a directory. Each file appears whole: it is linked (or, across
/// file systems, copied) to a temporary name in `.imgpipe-partial/` inside the directory,
/// then renamed into place. Names never leave the directory: `..` and absolute paths are
/// neutralised by `SafePath`, and the path is resolved beneath the directory at write
/// time without following symbolic links (`SinkFolder`): a folder on the way that is a
/// link, or becomes one mid-run, fails the item. A file of the same name left by an
/// earlier run is replaced.
public struct DirectorySink: OutputSink {
    public let name: String
    public let root: String
    /// `root` with the symbolic links it holds when the sink is made resolved (a sink may
    /// be a link to a folder elsewhere): each write opens this path without following a
    /// link at its end, so the sink's folder swapped for a link later is not followed.
    let resolvedRoot: String
    /// Whether `prune` removes files (`"prune": true`).
    public let prunes: Bool
    static let partialFolder = ".imgpipe-partial"
    private let folders = FolderCache()
    /// Source folders inside this one (symbolic links resolved): an output name that leads
    /// into one (`in/{stem}.jpg` in a sink `.` over a source `in`) would write over the
    /// originals, and is refused.
    let sourceFolders: [String]

    public init(name: String, root: String, prune: Bool = false, sourceFolders: [String] = []) {
        self.name = name
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
        resolvedRoot = URL(fileURLWithPath: self.root).resolvingSymlinksInPath().path
        prunes = prune
        self.sourceFolders = sourceFolders
    }

    /// With `"prune": true`, removes these files (where earlier runs delivered outputs an
    /// incremental run no longer makes, as recorded), each only if it is a regular file
    /// inside the folder as it is now; returns how many were removed. Without it, removes
    /// nothing. A file an earlier run wrote into a folder the sink no longer names is left.
    public func prune(_ locations: [String]) -> Int { pruning(locations, remove: true) }

    /// Whether `prune` would remove any of these files (`run --incremental` with nothing
    /// else to do still prunes).
    public func wouldPrune(_ locations: [String]) -> Bool { pruning(locations, remove: false) > 0 }

    /// The files of `locations` that `prune` removes: removed with `remove`, else the
    /// first one found is counted and the look ends.
    private func pruning(_ locations: [String], remove: Bool) -> Int {
        guard prunes, let base = try? SinkFolder.root(resolvedRoot) else { return 0 }
        var removed = 0
        // Each file is reached beneath the folder by descriptor, as outputs are written: a
        // folder swapped for a link meanwhile is not followed, and nothing outside is removed.
        for path in locations where path.hasPrefix(root + "/") {
            let relative = String(path.dropFirst(root.count + 1))
            let name = (relative as NSString).lastPathComponent
            guard let folder = base.existingFolder((relative as NSString).deletingLastPathComponent) else { continue }
            var info = stat()
            guard fstatat(folder.descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFREG else {
                continue
            }
            guard remove else { return 1 }
            guard unlinkat(folder.descriptor, name, 0) == 0 else { continue }
            removed += 1
        }
        return removed
    }

    /// Temporary files of this process: `.imgpipe-partial/<host>-<pid>/`, so that two
    /// imgpipe processes delivering into one folder never touch each other's files, also
    /// when they run on different machines sharing it (or in containers, each its pid 1).
    var partialDirectory: String { root + "/" + Self.partialFolder + "/" + Self.processFolder }

    static let processFolder = "\(FeedItem.safeName(ProcessInfo.processInfo.hostName))-\(getpid())"

    /// Creates the directory and removes temporary files killed processes left behind.
    public func prepare(workRoot: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(name): cannot create directory \(root): \(error.localizedDescription)")
        }
        let parent = root + "/" + Self.partialFolder
        let thisHost = FeedItem.safeName(ProcessInfo.processInfo.hostName) + "-"
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [] {
            // A folder of this machine whose process is gone, or this process's own (an
            // earlier run, or an earlier container of this pod: its pid 1 again). Another
            // machine's folders are left alone: whether its process lives cannot be told here.
            // (`<pid>` alone is the name older versions gave.)
            let pidText = entry.hasPrefix(thisHost) ? String(entry.dropFirst(thisHost.count)) : entry
            if let pid = Int32(pidText), pid == getpid() || (kill(pid, 0) != 0 && errno == ESRCH) {
                try? FileManager.default.removeItem(atPath: parent + "/" + entry)
            }
        }
        folders.removeAll()
    }

    public func finish() {
        // Removed only when empty: another process may be delivering into the parent.
        rmdir(partialDirectory)
        rmdir(root + "/" + Self.partialFolder)
        folders.removeAll()
    }

    /// A copy into a folder either works or fails for good (no retry).
    public func deliver(_ delivery: Delivery, attempt: Int) throws(DeliveryFailure) -> DeliveryAttempt {
        var tries = 0
        while true {
            do throws(ItemFailure) {
                return .delivered(try write(delivery))
            } catch {
                // The folder (or one inside it) was removed while the run went on: make the
                // folders again and try again. A removal still under way (`rm -rf` meeting
                // files made meanwhile) can take them again: a few tries, 10 ms apart.
                tries += 1
                guard tries < 5, folders.anyMissing() || !FileManager.default.fileExists(atPath: root) else {
                    throw DeliveryFailure(error)
                }
                folders.removeAll()
                usleep(10_000)
            }
        }
    }

    /// Resolved at write time, by descriptor: the sink's folder is opened, the output's
    /// folder and this process's temporary folder are opened beneath it without following
    /// any symbolic link (`SinkFolder`), the file is linked (or copied) into the temporary
    /// folder and renamed from there into the output's folder, descriptor to descriptor.
    /// A folder swapped for a link after it was checked is not followed.
    private func write(_ delivery: Delivery) throws(ItemFailure) -> DeliveryReceipt {
        let relative = SafePath.relative(delivery.name)
        let destination = root + "/" + relative
        let folderRelative = (relative as NSString).deletingLastPathComponent
        let fileName = (relative as NSString).lastPathComponent
        let folder = (destination as NSString).deletingLastPathComponent
        if !folders.contains(folder) {
            // Not even a folder is made inside a source folder: where it would be, its nearest
            // folder that exists with its symbolic links resolved (checked again once open).
            try refuseSourceFolder(folder.realPath, relative: relative)
        }
        let base = try SinkFolder.root(resolvedRoot)
        let partial = try base.folder(Self.partialFolder + "/" + Self.processFolder)
        let target = try base.folder(folderRelative)
        // The folder as it is, open: a source folder inside the sink's is refused whatever
        // name led there.
        try refuseSourceFolder(target.realPath ?? folder.realPath, relative: relative)
        folders.insert(folder)
        let temporary = "\(delivery.runId)-\(UUID().uuidString).tmp"
        defer { unlinkat(partial.descriptor, temporary, 0) }
        if linkat(AT_FDCWD, delivery.stagedPath, partial.descriptor, temporary, 0) != 0 {
            try copy(delivery.stagedPath, into: partial, as: temporary)
        }
        guard renameat(partial.descriptor, temporary, target.descriptor, fileName) == 0 else {
            throw ItemFailure(.upload, "cannot write \(destination): \(CError())")
        }
        return DeliveryReceipt(remoteURL: destination)
    }

    /// A copy of `source` as `name` in `folder` (a staged output on another file system).
    private func copy(_ source: String, into folder: SinkFolder, as name: String) throws(ItemFailure) {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw ItemFailure(.upload, "cannot read \(source): \(CError())") }
        defer { close(input) }
        let output = openat(folder.descriptor, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw ItemFailure(.upload, "cannot copy output to \(root): \(CError())") }
        defer { close(output) }
        var block = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let got = read(input, &block, block.count)
            if got < 0, errno == EINTR { continue }
            guard got >= 0 else { throw ItemFailure(.upload, "cannot read \(source): \(CError())") }
            if got == 0 { return }
            var offset = 0
            while offset < got {
                let written = block.withUnsafeBytes { Glibc.write(output, $0.baseAddress! + offset, got - offset) }
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { throw ItemFailure(.upload, "cannot copy output to \(root): \(CError())") }
                offset += written
            }
        }
    }
}

extension DirectorySink {
    /// Fails the delivery of `relative` when `folder` is, or is inside, a source folder.
    func refuseSourceFolder(_ folder: String, relative: String) throws(ItemFailure) {
        guard let source = sourceFolders.first(where: { folder == $0 || folder.hasPrefix($0 + "/") }) else { return }
        throw ItemFailure(
            .upload,
            "output name \"\(relative)\" leads into the source folder \(source): "
                + "the originals are never written over")
    }
}

/// Folders a sink has already created and checked (so that each is checked once).
final class FolderCache: Sendable {
    private let folders = Mutex<Set<String>>([])

    func contains(_ folder: String) -> Bool { folders.withLock { $0.contains(folder) } }
    func insert(_ folder: String) { folders.withLock { _ = $0.insert(folder) } }
    func removeAll() { folders.withLock { $0.removeAll() } }

    /// True when a folder checked before is gone.
    func anyMissing() -> Bool {
        folders.withLock { $0.contains { !FileManager.default.fileExists(atPath: $0) } }
    }
}
