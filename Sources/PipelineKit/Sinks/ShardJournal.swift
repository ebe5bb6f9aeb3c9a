import Foundation

/// What a `WebDatasetSink` writes down before it publishes a shard, in the state file's work
/// folder: the shard's temporary name, its file's device, inode and size, and its items'
/// keys. A process killed after the link and before the runner recorded those items leaves
/// an entry the next session reads (`load`): a numbered shard that is that very file (same
/// device, inode and size) means the items are in it, and the sink answers them delivered
/// instead of writing them again; no such shard means it was never published, and its
/// items go into a new one.
///
/// An inherited entry stays until every one of its items has been answered in a session
/// that ended normally (`endSession`: the runner has recorded them by then); the session's
/// own entry, for the shard it is publishing, is replaced at the next commit (the runner
/// records a batch before it commits the next) and dropped at the end.
struct ShardJournal {
    struct Entry: Equatable {
        let run: String
        let partial: String
        let device: UInt64
        let inode: UInt64
        let size: Int
        var keys: [String]
        /// The numbered shard it was found published as (inherited entries only).
        var shard: String?
    }

    let path: String
    /// Published shards a killed process did not see recorded, with their keys not yet
    /// answered in an ended session.
    private(set) var inherited: [Entry] = []
    /// `run NUL key` → the inherited entry holding it.
    private var lookup: [String: Int] = [:]
    /// Inherited items answered delivered in this session (`run NUL key`).
    private var answered: Set<String> = []
    /// The entry of the shard this session is publishing.
    var own: Entry?

    init(path: String) { self.path = path }

    /// The journal at `path`, settled against the shards in `root` (nothing there: empty).
    static func load(path: String, root: String) throws -> ShardJournal {
        var journal = ShardJournal(path: path)
        guard let data = FileManager.default.contents(atPath: path) else { return journal }
        guard let value = try? JSONParser.parse(bytes: Array(data)), let entries = value["entries"]?.arrayValue
        else {
            throw SinkError(
                "the journal \(path) cannot be read; remove it to go on (the last shard's items may be written twice)")
        }
        var written: [Entry] = []
        for entry in entries {
            // Device and inode are written as text: a JSON number holds 53 bits.
            guard let run = entry["run"]?.string, let partial = entry["partial"]?.string,
                partial.hasPrefix(WebDatasetSink.partialPrefix), !partial.contains("/"),
                let device = entry["device"]?.string.flatMap({ UInt64($0) }),
                let inode = entry["inode"]?.string.flatMap({ UInt64($0) }),
                let size = entry["size"]?.string.flatMap({ Int($0) }), let keys = entry["keys"]?.arrayValue
            else {
                throw SinkError("the journal \(path) holds an entry it cannot read; remove it to go on")
            }
            written.append(
                Entry(
                    run: run, partial: partial, device: device, inode: inode, size: size,
                    keys: keys.compactMap(\.string)))
        }
        journal.inherited = settle(written, root: root)
        journal.index()
        return journal
    }

    /// The entries whose shard is published, each with its shard; the partial file of any
    /// other is removed (if it is still there) and the entry dropped.
    private static func settle(_ entries: [Entry], root: String) -> [Entry] {
        guard !entries.isEmpty else { return [] }
        var shards: [String: String] = [:]
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        for name in names where WebDatasetSink.shardNumber(name) != nil {
            var info = stat()
            guard lstat(root + "/" + name, &info) == 0 else { continue }
            shards["\(info.st_dev) \(info.st_ino) \(info.st_size)"] = name
        }
        var published: [Entry] = []
        for var entry in entries {
            let partial = root + "/" + entry.partial
            guard let name = shards["\(entry.device) \(entry.inode) \(entry.size)"] else {
                // Never published (killed before the link, or the link failed): whatever is
                // left of it goes, and its items are written again.
                var info = stat()
                if lstat(partial, &info) == 0, UInt64(info.st_ino) == entry.inode { unlink(partial) }
                unlink(partial + ".stats.json")
                continue
            }
            // Published, and maybe not tidied up: its stats go into place, its temporary name.
            let number = String(name.dropLast(4))
            if rename(partial + ".stats.json", root + "/" + number + "_stats.json") != 0 { unlink(partial + ".stats.json") }
            unlink(partial)
            entry.shard = root + "/" + name
            published.append(entry)
        }
        return published
    }

    private mutating func index() {
        lookup = [:]
        for (index, entry) in inherited.enumerated() {
            for key in entry.keys { lookup[entry.run + "\u{0}" + key] = index }
        }
    }

    /// The shard an inherited entry says holds the item, which is then taken as answered.
    mutating func answer(run: String, key: String) -> String? {
        let id = run + "\u{0}" + key
        guard let index = lookup[id] else { return nil }
        answered.insert(id)
        return inherited[index].shard
    }

    /// The inherited entries and the session's own, written under a temporary name, flushed
    /// and renamed into place (the folder flushed too); nothing to say: no file.
    func save() throws(ItemFailure) {
        let entries = inherited + (own.map { [$0] } ?? [])
        guard !entries.isEmpty else {
            unlink(path)
            return
        }
        let value = JSONValue.object([
            (
                "entries",
                .array(
                    entries.map { entry in
                        .object([
                            ("run", .string(entry.run)), ("partial", .string(entry.partial)),
                            ("device", .string(String(entry.device))), ("inode", .string(String(entry.inode))),
                            ("size", .string(String(entry.size))), ("keys", .array(entry.keys.map { .string($0) })),
                        ])
                    })
            )
        ])
        try ShardFiles.write(path + ".tmp", Array(value.serialized().utf8), sync: true)
        guard rename(path + ".tmp", path) == 0 else { throw ItemFailure(.upload, "cannot write \(path): \(CError())") }
        ShardFiles.syncFolder((path as NSString).deletingLastPathComponent)
    }

    /// The session ended, every item it answered or committed recorded: those entries go.
    mutating func endSession() throws(ItemFailure) {
        own = nil
        inherited = inherited.compactMap { entry in
            var entry = entry
            entry.keys.removeAll { answered.contains(entry.run + "\u{0}" + $0) }
            return entry.keys.isEmpty ? nil : entry
        }
        answered = []
        index()
        try save()
    }
}

/// Plain file writes of the shards and their journal.
enum ShardFiles {
    /// Writes all of `bytes` at `offset`.
    static func write(_ bytes: [UInt8], to descriptor: Int32, at offset: Int, naming path: String) throws(ItemFailure) {
        var done = 0
        while done < bytes.count {
            let wrote = bytes.withUnsafeBytes {
                pwrite(descriptor, $0.baseAddress! + done, bytes.count - done, off_t(offset + done))
            }
            if wrote < 0, errno == EINTR { continue }
            guard wrote > 0 else { throw ItemFailure(.upload, "cannot write \(path): \(CError())") }
            done += wrote
        }
    }

    /// `bytes` as the whole of the file `path` (made or emptied), flushed when `sync`.
    static func write(_ path: String, _ bytes: [UInt8], sync: Bool = false) throws(ItemFailure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw ItemFailure(.upload, "cannot write \(path): \(CError())") }
        defer { close(descriptor) }
        try write(bytes, to: descriptor, at: 0, naming: path)
        if sync, fsync(descriptor) != 0 { throw ItemFailure(.upload, "cannot flush \(path): \(CError())") }
    }

    /// Flushes a folder's entries (a rename or link in it) to disk.
    static func syncFolder(_ path: String) {
        let folder = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { return }
        _ = fsync(folder)
        close(folder)
    }
}
