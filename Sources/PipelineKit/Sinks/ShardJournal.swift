import Crypto
import Foundation
import ParquetKit

/// What a `WebDatasetSink` writes down before it publishes a shard, in the state file's work
/// folder: the shard's temporary name, its size and the SHA-256 of its bytes, and its items'
/// keys. A process killed after publishing and before the runner recorded those items leaves
/// an entry the next session reads (`load`): a numbered shard with that size and digest
/// means the items are in it, and the sink answers them delivered instead of writing them
/// again; no such shard means it was never published, and its items go into a new one. (A
/// file's device and inode would say it faster, but a remount changes the one and a
/// removed file's inode is given to the next.)
///
/// Two files: the session's own entry, for the shard it is publishing, alone in `.open`
/// (rewritten at each commit: the runner records a batch before it commits the next), and
/// the entries inherited from killed sessions in the journal itself, written when a session
/// starts and ends. An inherited entry goes when a session that ends normally has answered
/// all of its items, or when a session ends that delivered items of another run (a run is
/// resumed or replaced, never both): its items are not handed to the sink again.
struct ShardJournal {
    struct Entry: Equatable {
        let run: String
        let partial: String
        let size: Int
        let sha256: String
        var keys: [String]
        /// The numbered shard it was found published as (inherited entries only).
        var shard: String?
    }

    let path: String
    private var openPath: String { path + ".open" }
    /// Published shards killed sessions did not see recorded, with their keys not yet
    /// answered in an ended session.
    private(set) var inherited: [Entry] = []
    /// Entries of shards this session failed to publish, kept for the next session to settle:
    /// a failure may come after the shard was stored (an upload whose answer was lost), and
    /// its items, failed, could be handed again by `resume --retry-failed`.
    private var unsettled: [Entry] = []
    /// `run NUL key` → the inherited entry holding it.
    private var lookup: [String: Int] = [:]
    /// Inherited items answered delivered in this session (`run NUL key`), and the runs
    /// of the items this session was handed.
    private var answered: Set<String> = []
    private var runs: Set<String> = []

    init(path: String) { self.path = path }

    /// The journal at `path` and its `.open` entry, settled against the shards at `place`
    /// (whose temporary files are in `staging`), and written back as what is left.
    static func load(path: String, place: any ShardPlace, staging: String, outputs: [String]) throws -> ShardJournal {
        var journal = ShardJournal(path: path)
        var written: [Entry] = []
        for file in [path, journal.openPath] {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            written += try entries(in: data, file: file)
        }
        journal.inherited = try settle(written, place: place, staging: staging, outputs: outputs)
        journal.index()
        do {
            try journal.saveInherited()
        } catch {
            throw SinkError("cannot write \(path): \(error)")
        }
        unlink(journal.openPath)
        return journal
    }

    private static func entries(in data: Data, file: String) throws -> [Entry] {
        guard let value = try? JSONParser.parse(bytes: Array(data)), let entries = value["entries"]?.arrayValue else {
            throw SinkError(
                "the journal \(file) cannot be read; remove it to go on (the last shard's items may be written twice)")
        }
        return try entries.map { entry in
            guard let run = entry["run"]?.string, let partial = entry["partial"]?.string,
                partial.hasPrefix(WebDatasetSink.partialPrefix), !partial.contains("/"),
                let size = entry["size"]?.string.flatMap({ Int($0) }), let sha256 = entry["sha256"]?.string,
                let keys = entry["keys"]?.arrayValue
            else {
                throw SinkError(
                    "the journal \(file) holds an entry it cannot read (written by another version of imgpipe?); "
                        + "remove it to go on: the items of the shard it names may then be written twice")
            }
            return Entry(
                run: run, partial: partial, size: size, sha256: sha256, keys: keys.compactMap(\.string),
                shard: entry["shard"]?.string.flatMap { WebDatasetSink.shardNumber($0) == nil ? nil : $0 })
        }
    }

    /// The entries whose shard is published, each with its shard; the temporary files of
    /// every entry are removed, and stats or a manifest a published shard lacks are put in
    /// place (made again from the entry and the shard, if need be).
    private static func settle(_ entries: [Entry], place: any ShardPlace, staging: String, outputs: [String]) throws
        -> [Entry]
    {
        guard !entries.isEmpty else { return [] }
        let sizes = try place.shards()
        // Newest first: a shard published just before a kill has one of the last numbers.
        let names = sizes.keys.sorted { (WebDatasetSink.shardNumber($0) ?? 0) > (WebDatasetSink.shardNumber($1) ?? 0) }
        var digests: [String: String] = [:]
        var published: [Entry] = []
        for var entry in entries {
            let partial = staging + "/" + entry.partial
            // Found before (an entry a session started with): its shard, if still that size.
            // Else the shards of its size, by digest; one that cannot be read stops the
            // sink, the journal kept, rather than write its items again.
            var match = entry.shard.map { ($0 as NSString).lastPathComponent }.flatMap { sizes[$0] == entry.size ? $0 : nil }
            for name in names where match == nil && sizes[name] == entry.size {
                if digests[name] == nil {
                    do {
                        digests[name] = try place.sha256(of: name) ?? ""
                    } catch {
                        throw SinkError(
                            "cannot read \(place.address(of: name)) to settle the journal's entry of \(entry.partial): \(error)")
                    }
                }
                if digests[name] == entry.sha256 { match = name }
            }
            guard let name = match else {
                // Never published (killed before, or the publishing failed): whatever is left of
                // it goes, and its items are written again.
                unlink(partial)
                unlink(partial + ".stats.json")
                unlink(partial + ".manifest")
                continue
            }
            // Published, and maybe not tidied up: its stats and manifest go into place (or are
            // made again, from the entry and the shard's records, if another process swept them
            // or a kill cut the making short), its temporary name goes.
            let stem = String(name.dropLast(4))
            if !put(partial + ".manifest", as: stem + ".parquet", at: place) {
                let copy = try place.localCopy(of: name, in: staging)
                defer { if copy.isCopy { unlink(copy.path) } }
                try ShardManifest.write(
                    try ShardManifest.records(inShard: copy.path), outputs: outputs, to: partial + ".manifest")
                do throws(ItemFailure) {
                    try place.place(partial + ".manifest", as: stem + ".parquet")
                } catch {
                    throw SinkError("cannot put the manifest of \(name) in place: \(error.message)")
                }
            }
            if !put(partial + ".stats.json", as: stem + "_stats.json", at: place) {
                let stats = ShardStats(
                    samples: entry.keys.count, bytes: entry.size, firstKey: entry.keys.first ?? "",
                    lastKey: entry.keys.last ?? "", run: entry.run)
                try? place.place(stats, as: stem + "_stats.json", staging: staging)
            }
            unlink(partial)
            entry.shard = place.address(of: name)
            published.append(entry)
        }
        return published
    }

    /// Puts the temporary file `path`, if there is one, in place as `name`; true when `name`
    /// is there and whole after.
    private static func put(_ path: String, as name: String, at place: any ShardPlace) -> Bool {
        if FileManager.default.fileExists(atPath: path), (try? place.place(path, as: name)) != nil { return true }
        unlink(path)
        return place.holds(name)
    }

    private mutating func index() {
        lookup = [:]
        for (index, entry) in inherited.enumerated() {
            for key in entry.keys { lookup[entry.run + "\u{0}" + key] = index }
        }
    }

    /// The shard an inherited entry says holds the item, which is then taken as answered.
    mutating func answer(run: String, key: String) -> String? {
        runs.insert(run)
        let id = run + "\u{0}" + key
        guard let index = lookup[id] else { return nil }
        answered.insert(id)
        return inherited[index].shard
    }

    /// Writes the entry of the shard this session is about to publish (the one before it
    /// is recorded by now), flushed.
    func saveOpen(_ entry: Entry) throws(ItemFailure) {
        try Self.save([entry], to: openPath)
    }

    /// The publishing of `entry`'s shard (the `.open` one) failed: the entry is kept in the
    /// journal, and the next session looks for its shard.
    mutating func keepUnsettled(_ entry: Entry) throws(ItemFailure) {
        unsettled.append(entry)
        try saveInherited()
        unlink(openPath)
    }

    /// The session ended, every item it answered or committed recorded: those entries go,
    /// and those of runs other than the ones it was handed items of.
    mutating func endSession() throws(ItemFailure) {
        inherited = inherited.compactMap { entry in
            guard runs.isEmpty || runs.contains(entry.run) else { return nil }
            var entry = entry
            entry.keys.removeAll { answered.contains(entry.run + "\u{0}" + $0) }
            return entry.keys.isEmpty ? nil : entry
        }
        answered = []
        runs = []
        index()
        try saveInherited()
        unlink(openPath)
    }

    private func saveInherited() throws(ItemFailure) {
        guard !inherited.isEmpty || !unsettled.isEmpty else {
            unlink(path)
            return
        }
        try Self.save(inherited + unsettled, to: path)
    }

    private static func save(_ entries: [Entry], to path: String) throws(ItemFailure) {
        let value = JSONValue.object([
            (
                "entries",
                .array(
                    entries.map { entry in
                        .object(
                            [
                                ("run", .string(entry.run)), ("partial", .string(entry.partial)),
                                ("size", .string(String(entry.size))), ("sha256", .string(entry.sha256)),
                                ("keys", .array(entry.keys.map { .string($0) })),
                            ] + (entry.shard.map { [("shard", JSONValue.string(($0 as NSString).lastPathComponent))] } ?? []))
                    })
            )
        ])
        try ShardFiles.write(path + ".tmp", Array(value.serialized().utf8), sync: true)
        guard rename(path + ".tmp", path) == 0 else { throw ItemFailure(.upload, "cannot write \(path): \(CError())") }
        ShardFiles.syncFolder((path as NSString).deletingLastPathComponent)
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

    /// The SHA-256 of a file's bytes, read a MiB at a time; throws when it cannot be read.
    static func sha256(of path: String) throws -> String {
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        var hasher = SHA256()
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
        return hasher.finalize().hex
    }

    /// Flushes a folder's entries (a rename or link in it) to disk.
    static func syncFolder(_ path: String) {
        let folder = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { return }
        _ = fsync(folder)
        close(folder)
    }
}
