import Crypto
import Foundation
import Synchronization

/// Writes items into WebDataset shards: `00000.tar`, `00001.tar`, … in a folder, each
/// holding `samplesPerShard` samples (the last one of a run fewer), with
/// `00000_stats.json` beside each.
///
/// A sample is the members `KEY.EXT` (the output; `KEY.OUTPUT.EXT` when the sink takes
/// several outputs), `KEY.txt` (the caption, when the item has one) and `KEY.json`, written
/// one after the other. `KEY` is the item's key made safe for WebDataset (`sampleKey`).
///
/// A shard is written under a temporary name in the folder while its batch is open, and
/// appears whole or not at all: at commit it is closed, flushed to disk, and linked to the
/// first free number (`link` fails on a name that exists, so two processes sharing the
/// folder never take one number, and numbers have no gaps). Before that link, the shard's
/// keys go into a journal in the state file's work folder; if the process dies after the
/// link and before the runner records the batch, resume reads the journal, finds the shard
/// published, and answers its items as delivered instead of writing them again.
public final class WebDatasetSink: Sink {
    public let name: String
    public let root: String
    public let samplesPerShard: Int
    /// Whether member names carry the output's id (the sink takes several outputs).
    let namesOutputs: Bool

    static let partialPrefix = ".imgpipe-shard-"
    private static let processPart = "\(FeedItem.safeName(ProcessInfo.processInfo.hostName))-\(getpid())"

    /// The shard being written.
    private struct OpenShard {
        let descriptor: Int32
        /// Its temporary name in the folder.
        let partial: String
        let opened: Date
        var size = 0
        var keys: [String] = []
        var outputBytes = 0
        var firstRun = ""
    }

    private struct State {
        var open: OpenShard?
        /// The number the next commit tries first.
        var next = 0
        /// The journal's path (set by `prepare`).
        var journal: String?
        /// Items of a shard published before the process that wrote it recorded it, with
        /// the run they were of and where they went.
        var published: (run: String, keys: Set<String>, shard: String)?
    }

    private let state = Mutex(State())

    public var takesWholeItems: Bool { true }

    public init(name: String, root: String, samplesPerShard: Int, namesOutputs: Bool) {
        self.name = name
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
        self.samplesPerShard = max(1, samplesPerShard)
        self.namesOutputs = namesOutputs
    }

    // MARK: - names

    /// The item's key as a WebDataset key: WebDataset splits a member's name at the first
    /// dot of its last component, so a key holds none. Letters, digits, `-` and `_` stay;
    /// every other byte becomes `~XX` (its hex), `~` included, so two keys never meet. A
    /// result over 120 bytes is cut to 80 and ends in `~h` and 24 hex digits of the key's
    /// SHA-256 (no escape makes `~h`).
    public static func sampleKey(_ key: String) -> String {
        var out = ""
        for byte in key.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "~" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        if out.isEmpty { return "~h" + SHA256.hash(data: Data()).prefix(12).hex }
        guard out.utf8.count > 120 else { return out }
        var cut = String(out.prefix(80))
        // An escape cut in two is dropped whole.
        if let tilde = cut.suffix(2).lastIndex(of: "~") { cut = String(cut[..<tilde]) }
        return cut + "~h" + SHA256.hash(data: Data(key.utf8)).prefix(12).hex
    }

    /// `00000.tar`, … (five digits at least).
    static func shardName(_ number: Int) -> String { String(number).leftPadded(to: 5) + ".tar" }

    /// The number of a shard's file name, nil for any other name.
    static func shardNumber(_ fileName: String) -> Int? {
        guard fileName.hasSuffix(".tar") else { return nil }
        let digits = fileName.dropLast(4)
        guard digits.count >= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(digits)
    }

    // MARK: - the sink

    /// Makes the folder, settles what a killed process left (its journal, its temporary
    /// shards), and finds the next shard number.
    public func prepare(workRoot: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: workRoot, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(name): cannot make folder \(root): \(error.localizedDescription)")
        }
        let journal = workRoot + "/webdataset-" + FeedItem.safeName(name) + ".journal"
        let published = try settle(journal: journal)
        sweepPartials()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let next = (names.compactMap(Self.shardNumber).max() ?? -1) + 1
        state.withLock { state in
            state.journal = journal
            state.next = next
            state.published = published
        }
    }

    public func accept(_ item: BatchItem, attempt: Int) throws(DeliveryFailure) -> Acceptance {
        let run = item.deliveries.first?.runUUID ?? ""
        if let published = state.withLock({ $0.published }), published.run == run, published.keys.contains(item.key) {
            return .delivered(DeliveryReceipt(remoteURL: published.shard))
        }
        let (bytes, outputBytes) = try sample(item)
        return try state.withLock { state throws(DeliveryFailure) -> Acceptance in
            if state.open == nil { state.open = try openShard() }
            guard var shard = state.open else { return .retry(after: 0, ItemFailure(.upload, "no shard open")) }
            if shard.keys.isEmpty { shard.firstRun = run }
            do throws(ItemFailure) {
                try write(bytes, to: shard.descriptor, at: shard.size)
            } catch {
                // What was written of the sample is cut off: the shard holds whole samples.
                _ = ftruncate(shard.descriptor, off_t(shard.size))
                throw DeliveryFailure(error, attempts: attempt)
            }
            shard.size += bytes.count
            shard.outputBytes += outputBytes
            shard.keys.append(item.key)
            state.open = shard
            return .held(full: shard.keys.count >= samplesPerShard)
        }
    }

    public func commit() throws(DeliveryFailure) -> [String: DeliveryReceipt] {
        try state.withLock { state throws(DeliveryFailure) -> [String: DeliveryReceipt] in
            guard let shard = state.open else { return [:] }
            state.open = nil
            let partialPath = root + "/" + shard.partial
            let statsPath = partialPath + ".stats.json"
            var committed = false
            defer {
                close(shard.descriptor)
                if !committed {
                    unlink(partialPath)
                    unlink(statsPath)
                }
            }
            do throws(ItemFailure) {
                try write(TarFormat.end, to: shard.descriptor, at: shard.size)
                guard fsync(shard.descriptor) == 0 else { throw ItemFailure(.upload, "cannot flush \(partialPath): \(CError())") }
                try writeFile(statsPath, stats(of: shard, size: shard.size + TarFormat.end.count))
                if let journal = state.journal {
                    let entry = JSONValue.object([
                        ("run", .string(shard.firstRun)), ("partial", .string(shard.partial)),
                        ("keys", .array(shard.keys.map { .string($0) })),
                    ])
                    try writeFile(journal + ".tmp", Array(entry.serialized().utf8), sync: true)
                    guard rename(journal + ".tmp", journal) == 0 else {
                        throw ItemFailure(.upload, "cannot write \(journal): \(CError())")
                    }
                }
                // The first free number, taken by a link that fails if the name exists.
                var number = state.next
                while link(partialPath, root + "/" + Self.shardName(number)) != 0 {
                    guard errno == EEXIST else {
                        throw ItemFailure(.upload, "cannot publish shard \(Self.shardName(number)) in \(root): \(CError())")
                    }
                    number += 1
                }
                committed = true
                state.next = number + 1
                syncFolder()
                let shardPath = root + "/" + Self.shardName(number)
                rename(statsPath, root + "/" + String(Self.shardName(number).dropLast(4)) + "_stats.json")
                unlink(partialPath)
                return Dictionary(shard.keys.map { ($0, DeliveryReceipt(remoteURL: shardPath)) }, uniquingKeysWith: { a, _ in a })
            } catch {
                throw DeliveryFailure(error)
            }
        }
    }

    public func discard() {
        state.withLock { state in
            guard let shard = state.open else { return }
            state.open = nil
            close(shard.descriptor)
            unlink(root + "/" + shard.partial)
        }
    }

    /// Every batch this session committed is recorded by now: the journal has told what it
    /// had to.
    public func finish() {
        state.withLock { state in
            if let journal = state.journal { unlink(journal) }
            state.published = nil
        }
    }

    // MARK: - samples

    /// The tar members of one sample, and the bytes of its outputs.
    private func sample(_ item: BatchItem) throws(DeliveryFailure) -> (bytes: [UInt8], outputBytes: Int) {
        let key = Self.sampleKey(item.key)
        let modified = Int(Date().timeIntervalSince1970)
        var bytes: [UInt8] = []
        var outputs: [JSONValue] = []
        var outputBytes = 0
        for delivery in item.deliveries {
            guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
                throw DeliveryFailure(ItemFailure(.upload, "cannot read the staged output \(delivery.stagedPath)"))
            }
            let member = key + (namesOutputs ? "." + delivery.output : "") + "." + delivery.format.fileExtension
            append(member, Array(data), to: &bytes, modified: modified)
            outputBytes += data.count
            outputs.append(
                .object([
                    ("output", .string(delivery.output)), ("member", .string(member)),
                    ("format", .string(delivery.format.rawValue)), ("width", PipelineSchema.integer(delivery.width)),
                    ("height", PipelineSchema.integer(delivery.height)), ("bytes", PipelineSchema.integer(data.count)),
                    ("sha256", .string(delivery.sha256)),
                ]))
        }
        if let caption = item.caption, !caption.isEmpty {
            append(key + ".txt", Array(caption.utf8), to: &bytes, modified: modified)
        }
        var record: [(key: String, value: JSONValue)] = [("key", .string(item.key))]
        if let origin = item.deliveries.first?.origin { record.append(("url", .string(origin))) }
        if let caption = item.caption { record.append(("caption", .string(caption))) }
        if let metadata = item.metadata, let value = try? JSONParser.parse(metadata) { record.append(("meta", value)) }
        if let first = item.deliveries.first {
            record += [("width", PipelineSchema.integer(first.width)), ("height", PipelineSchema.integer(first.height))]
        }
        record.append(("outputs", .array(outputs)))
        append(key + ".json", Array(JSONValue.object(record).serialized().utf8), to: &bytes, modified: modified)
        return (bytes, outputBytes)
    }

    private func append(_ name: String, _ data: [UInt8], to bytes: inout [UInt8], modified: Int) {
        bytes += TarFormat.header(name: name, size: data.count, modified: modified)
        bytes += data
        bytes += TarFormat.padding(data.count)
    }

    private func stats(of shard: OpenShard, size: Int) -> [UInt8] {
        let seconds = (Date().timeIntervalSince(shard.opened) * 1000).rounded() / 1000
        let value = JSONValue.object([
            ("samples", PipelineSchema.integer(shard.keys.count)), ("bytes", PipelineSchema.integer(size)),
            ("outputBytes", PipelineSchema.integer(shard.outputBytes)), ("seconds", .number(seconds, isInteger: false)),
            ("firstKey", .string(shard.keys.first ?? "")), ("lastKey", .string(shard.keys.last ?? "")),
            ("run", .string(shard.firstRun)), ("writer", .string(Self.processPart)),
        ])
        return Array((value.serialized() + "\n").utf8)
    }

    // MARK: - files

    private func openShard() throws(DeliveryFailure) -> OpenShard {
        let partial = Self.partialPrefix + Self.processPart + "-" + UUID().uuidString + ".tar"
        let descriptor = open(root + "/" + partial, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw DeliveryFailure(ItemFailure(.upload, "cannot write a shard in \(root): \(CError())"))
        }
        // Held while the shard is open: another process's sweep leaves it alone.
        _ = flock(descriptor, LOCK_EX)
        return OpenShard(descriptor: descriptor, partial: partial, opened: Date())
    }

    private func write(_ bytes: [UInt8], to descriptor: Int32, at offset: Int) throws(ItemFailure) {
        var done = 0
        while done < bytes.count {
            let wrote = bytes.withUnsafeBytes {
                pwrite(descriptor, $0.baseAddress! + done, bytes.count - done, off_t(offset + done))
            }
            if wrote < 0, errno == EINTR { continue }
            guard wrote > 0 else { throw ItemFailure(.upload, "cannot write a shard in \(root): \(CError())") }
            done += wrote
        }
    }

    private func writeFile(_ path: String, _ bytes: [UInt8], sync: Bool = false) throws(ItemFailure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw ItemFailure(.upload, "cannot write \(path): \(CError())") }
        defer { close(descriptor) }
        try write(bytes, to: descriptor, at: 0)
        if sync, fsync(descriptor) != 0 { throw ItemFailure(.upload, "cannot flush \(path): \(CError())") }
    }

    private func syncFolder() {
        let folder = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { return }
        _ = fsync(folder)
        close(folder)
    }

    /// Reads the journal a killed process left: the shard it was committing is published
    /// (its temporary name gone, or linked twice) or not (linked once: it is removed, and its
    /// items are written again). Returns the published shard's items.
    private func settle(journal: String) throws -> (run: String, keys: Set<String>, shard: String)? {
        guard let data = FileManager.default.contents(atPath: journal) else { return nil }
        guard let value = try? JSONParser.parse(bytes: Array(data)), case .object(let members) = value,
            let run = members.first(where: { $0.key == "run" })?.value.stringValue,
            let partial = members.first(where: { $0.key == "partial" })?.value.stringValue,
            partial.hasPrefix(Self.partialPrefix), !partial.contains("/"),
            case .array(let keys) = members.first(where: { $0.key == "keys" })?.value
        else {
            throw SinkError("sink \(name): the journal \(journal) cannot be read; remove it to go on")
        }
        let partialPath = root + "/" + partial
        var info = stat()
        var shard = root
        if lstat(partialPath, &info) == 0 {
            guard info.st_nlink >= 2 else {
                // Never published: its items are undelivered, and go into a new shard.
                unlink(partialPath)
                unlink(partialPath + ".stats.json")
                unlink(journal)
                return nil
            }
            // Published, and the process died before it tidied up.
            let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
            for name in names where Self.shardNumber(name) != nil {
                var other = stat()
                guard lstat(root + "/" + name, &other) == 0, other.st_ino == info.st_ino, other.st_dev == info.st_dev
                else { continue }
                shard = root + "/" + name
                rename(partialPath + ".stats.json", root + "/" + String(name.dropLast(4)) + "_stats.json")
            }
            unlink(partialPath)
        }
        return (run, Set(keys.compactMap(\.stringValue)), shard)
    }

    /// Removes temporary shards of processes of this machine that are gone (or of this
    /// process, from an earlier run), and any whose lock can be taken.
    private func sweepPartials() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let thisHost = FeedItem.safeName(ProcessInfo.processInfo.hostName) + "-"
        for name in names where name.hasPrefix(Self.partialPrefix + thisHost) {
            let path = root + "/" + name
            // A shard's stats file, not yet renamed, goes with its shard.
            if name.hasSuffix(".stats.json") {
                let shard = root + "/" + String(name.dropLast(".stats.json".count))
                if !FileManager.default.fileExists(atPath: shard) { unlink(path) }
                continue
            }
            let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { unlink(path) }
        }
    }
}

extension String {
    /// The string with `0`s before it up to `width` characters.
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
