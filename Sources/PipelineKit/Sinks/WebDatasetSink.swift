import Crypto
import Foundation
import Synchronization

/// Writes items into WebDataset shards: `00000.tar`, `00001.tar`, … in a folder or under a
/// prefix of a bucket (`ShardPlace`), each holding `samplesPerShard` samples (the last one
/// of a run fewer), with its manifest `00000.parquet` (`ShardManifest`) and
/// `00000_stats.json` beside each.
///
/// A sample is the members `KEY.EXT` (the output; `KEY.OUTPUT.EXT` when the sink takes
/// several outputs), `KEY.txt` (the caption, when the item has one) and `KEY.json`, written
/// one after the other. `KEY` is the item's key made safe for WebDataset (`sampleKey`).
///
/// A shard is written under a temporary name in a staging folder (the folder itself, or
/// the state file's work folder for a bucket) while its batch is open, and appears whole
/// or not at all: at commit it is closed, flushed to disk, and published under the first
/// free number (a `link` that fails on a name that exists; an upload that fails on a key
/// that exists), so two processes sharing the place never take one number, and numbers
/// have no gaps. Before it is published, the shard's keys go into a journal in the state
/// file's work folder; if the process dies after the publishing and before the runner
/// records the batch, resume reads the journal, finds the shard published, and answers its
/// items as delivered instead of writing them again.
public final class WebDatasetSink: Sink {
    public let name: String
    let place: any ShardPlace
    public let samplesPerShard: Int
    /// The ids of the outputs the sink takes, in the pipeline's order.
    let outputs: [String]
    /// Whether member names carry the output's id (the sink takes several outputs).
    let namesOutputs: Bool
    /// The bytes a sample key may take (`sampleKey`).
    let keyRoom: Int

    static let partialPrefix = ".imgpipe-shard-"
    static let processPart = "\(FeedItem.safeName(ProcessInfo.processInfo.hostName))-\(getpid())"

    /// The shard being written.
    private struct OpenShard {
        let descriptor: Int32
        /// Its temporary name in the folder.
        let partial: String
        /// The SHA-256 of what is written so far (the journal's fingerprint of the shard).
        var digest = SHA256()
        var opened: Date
        var size = 0
        var keys: [String] = []
        /// Where each sample's members begin in the file, and its outputs' bytes (beside `keys`).
        var offsets: [Int] = []
        var sampleOutputBytes: [Int] = []
        /// The samples' `KEY.json` records, for the manifest.
        var records: [JSONValue] = []
        var outputBytes = 0
        var firstRun = ""
    }

    private struct State {
        var open: OpenShard?
        /// The number the next commit tries first.
        var next = 0
        /// Where temporary shards are written (set by `prepare`).
        var staging = ""
        /// The journal (set by `prepare`).
        var journal: ShardJournal?
        /// Items of the run that ended without reaching the sink since the last commit, by
        /// status (`failed`, `skipped`) and reason: the next shard's stats count them.
        var undelivered: [String: [String: Int]] = [:]
        /// The last shard this session committed: its stats' name and what they say, so that
        /// items that end after it (the session's last shard committed) are counted there.
        var lastStats: (name: String, stats: ShardStats)?
    }

    private let state = Mutex(State())

    public var takesWholeItems: Bool { true }

    /// Shards in the folder `root`; `outputs`: the ids of the outputs the sink takes.
    public convenience init(name: String, root: String, samplesPerShard: Int, outputs: [String]) {
        self.init(
            name: name, place: ShardFolder(root: URL(fileURLWithPath: root).standardizedFileURL.path),
            samplesPerShard: samplesPerShard, outputs: outputs)
    }

    init(name: String, place: any ShardPlace, samplesPerShard: Int, outputs: [String]) {
        self.name = name
        self.place = place
        self.samplesPerShard = max(1, samplesPerShard)
        self.outputs = outputs
        namesOutputs = outputs.count > 1
        // ustar's 100 bytes of name, less the longest extension and its dot (`.json`, `.webp`)
        // and, with several outputs, the longest id and its dot.
        keyRoom = 95 - (namesOutputs ? 1 + (outputs.map(\.utf8.count).max() ?? 0) : 0)
    }

    // MARK: - names

    /// The item's key as a WebDataset key: WebDataset splits a member's name at the first
    /// dot of its last component, so a key holds none. Letters, digits, `-` and `_` stay;
    /// every other byte becomes `~XX` (its hex), `~` included, so two keys never meet. A
    /// result longer than `room` is cut and ends in `~h` and 24 hex digits of the key's
    /// SHA-256 (no escape makes `~h`), `room` bytes in all (at least 34): a member's name then
    /// fits ustar's 100 bytes, for readers that know no pax header.
    public static func sampleKey(_ key: String, room: Int = 95) -> String {
        var out = ""
        for byte in key.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += String(format: "~%02X", byte)
            }
        }
        if out.isEmpty { return "~h" + SHA256.hash(data: Data()).prefix(12).hex }
        guard out.utf8.count > room else { return out }
        var cut = String(out.prefix(max(8, room - 26)))
        // An escape cut in two is dropped whole.
        if let tilde = cut.suffix(2).lastIndex(of: "~") { cut = String(cut[..<tilde]) }
        return cut + "~h" + SHA256.hash(data: Data(key.utf8)).prefix(12).hex
    }

    /// `00000.tar`, … (five digits at least).
    static func shardName(_ number: Int) -> String { String(format: "%05d.tar", number) }

    /// The number of a shard's file name, nil for any other name.
    static func shardNumber(_ fileName: String) -> Int? {
        guard fileName.hasSuffix(".tar") else { return nil }
        let digits = fileName.dropLast(4)
        guard digits.count >= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(digits)
    }

    // MARK: - the sink

    /// Makes the folders, settles what a killed process left (its journal, its temporary
    /// shards, its uploads), and finds the next shard number.
    public func prepare(workRoot: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: workRoot, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(name): cannot make folder \(workRoot): \(error.localizedDescription)")
        }
        try place.prepare(workRoot: workRoot, sink: name)
        let staging = place.staging(workRoot: workRoot, sink: name)
        let path = workRoot + "/webdataset-" + FeedItem.safeName(name) + ".journal"
        let journal: ShardJournal
        let next: Int
        do {
            journal = try ShardJournal.load(path: path, place: place, staging: staging, outputs: outputs)
            next = try place.nextNumber()
        } catch {
            throw SinkError("sink \(name): \(error)")
        }
        sweepPartials(in: staging)
        state.withLock { state in
            state.journal = journal
            state.next = next
            state.staging = staging
        }
    }

    public func accept(_ item: BatchItem, attempt: Int) throws(DeliveryFailure) -> Acceptance {
        let run = item.deliveries.first?.runUUID ?? ""
        // In a shard a killed process published: delivered already.
        if let shard = state.withLock({ $0.journal?.answer(run: run, key: item.key) }) {
            return .delivered(DeliveryReceipt(remoteURL: shard))
        }
        let (bytes, outputBytes, record) = try sample(item, attempt: attempt)
        return try state.withLock { state throws(DeliveryFailure) -> Acceptance in
            var shard: OpenShard
            if let open = state.open {
                shard = open
            } else {
                shard = try openShard(in: state.staging)
            }
            if shard.keys.isEmpty { shard.firstRun = run }
            do throws(ItemFailure) {
                try ShardFiles.write(bytes, to: shard.descriptor, at: shard.size, naming: state.staging + "/" + shard.partial)
                shard.digest.update(data: bytes)
            } catch {
                if shard.keys.isEmpty {
                    // Nothing held: no shard stays open.
                    close(shard.descriptor)
                    unlink(state.staging + "/" + shard.partial)
                    state.open = nil
                } else {
                    // What was written of the sample is cut off: the shard holds whole samples.
                    _ = ftruncate(shard.descriptor, off_t(shard.size))
                    state.open = shard
                }
                throw DeliveryFailure(error, attempts: attempt)
            }
            shard.offsets.append(shard.size)
            shard.sampleOutputBytes.append(outputBytes)
            shard.size += bytes.count
            shard.outputBytes += outputBytes
            shard.keys.append(item.key)
            shard.records.append(record)
            state.open = shard
            return .held(full: shard.keys.count >= samplesPerShard)
        }
    }

    public func commit() throws(DeliveryFailure) -> [String: DeliveryReceipt] {
        try state.withLock { state throws(DeliveryFailure) -> [String: DeliveryReceipt] in
            guard let shard = state.open else { return [:] }
            state.open = nil
            let partialPath = state.staging + "/" + shard.partial
            let statsPath = partialPath + ".stats.json"
            // Not `.parquet`: a reader's `*.parquet` takes committed manifests only.
            let manifestPath = partialPath + ".manifest"
            var published = false
            var entry: ShardJournal.Entry?
            defer {
                close(shard.descriptor)
                if !published {
                    unlink(partialPath)
                    unlink(statsPath)
                    unlink(manifestPath)
                }
            }
            do throws(ItemFailure) {
                let size = shard.size + TarFormat.end.count
                try ShardFiles.write(TarFormat.end, to: shard.descriptor, at: shard.size, naming: partialPath)
                guard fsync(shard.descriptor) == 0 else { throw ItemFailure(.upload, "cannot flush \(partialPath): \(CError())") }
                let stats = ShardStats(
                    samples: shard.keys.count, bytes: size, firstKey: shard.keys.first ?? "", lastKey: shard.keys.last ?? "",
                    run: shard.firstRun,
                    written: (
                        shard.outputBytes, (Date().timeIntervalSince(shard.opened) * 1000).rounded() / 1000, Self.processPart
                    ),
                    undelivered: state.undelivered)
                try ShardFiles.write(statsPath, stats.serialized)
                try ShardManifest.write(shard.records, outputs: outputs, to: manifestPath)
                // The batch before this one is recorded (the runner records a batch before it
                // commits the next): this shard's entry takes its place.
                var digest = shard.digest
                digest.update(data: TarFormat.end)
                let sha256 = digest.finalize().hex
                let saved = ShardJournal.Entry(
                    run: shard.firstRun, partial: shard.partial, size: size, sha256: sha256, keys: shard.keys)
                try state.journal?.saveOpen(saved)
                entry = saved
                let number = try place.publish(partialPath, sha256: sha256, from: state.next)
                published = true
                state.next = number + 1
                state.undelivered = [:]
                let stem = String(Self.shardName(number).dropLast(4))
                // The shard stands, and its items are in it, without these: a failure to put one
                // in place (after its retries) leaves it out, and is not the items' failure.
                try? place.place(statsPath, as: stem + "_stats.json")
                state.lastStats = (stem + "_stats.json", stats)
                try? place.place(manifestPath, as: stem + ".parquet")
                unlink(partialPath)
                let receipt = DeliveryReceipt(remoteURL: place.address(of: Self.shardName(number)))
                return Dictionary(shard.keys.map { ($0, receipt) }, uniquingKeysWith: { a, _ in a })
            } catch {
                // Its publishing failed, maybe after the shard was stored: the next session
                // settles it, so a retry of its failed items never writes them twice.
                if let entry, place.failureMayHavePublished { try? state.journal?.keepUnsettled(entry) }
                throw DeliveryFailure(error)
            }
        }
    }

    /// Takes the samples of `keys` out of the open shard: the shard is written again,
    /// under a new temporary name, without them. Nothing is taken when the copy fails.
    public func withdraw(_ keys: Set<String>) -> Set<String> {
        state.withLock { state in
            guard let shard = state.open, shard.keys.contains(where: keys.contains) else { return [] }
            guard var fresh = try? openShard(in: state.staging) else { return [] }
            fresh.firstRun = shard.firstRun
            fresh.opened = shard.opened
            let freshPath = state.staging + "/" + fresh.partial
            var withdrawn: Set<String> = []
            for (index, key) in shard.keys.enumerated() {
                if keys.contains(key) {
                    withdrawn.insert(key)
                    continue
                }
                let start = shard.offsets[index]
                let end = index + 1 < shard.offsets.count ? shard.offsets[index + 1] : shard.size
                var bytes = [UInt8](repeating: 0, count: end - start)
                let read = bytes.withUnsafeMutableBytes { pread(shard.descriptor, $0.baseAddress, end - start, off_t(start)) }
                do throws(ItemFailure) {
                    guard read == end - start else { throw ItemFailure(.upload, "cannot read the open shard: \(CError())") }
                    try ShardFiles.write(bytes, to: fresh.descriptor, at: fresh.size, naming: freshPath)
                } catch {
                    close(fresh.descriptor)
                    unlink(freshPath)
                    return []
                }
                fresh.digest.update(data: bytes)
                fresh.offsets.append(fresh.size)
                fresh.sampleOutputBytes.append(shard.sampleOutputBytes[index])
                fresh.size += bytes.count
                fresh.outputBytes += shard.sampleOutputBytes[index]
                fresh.keys.append(key)
                fresh.records.append(shard.records[index])
            }
            close(shard.descriptor)
            unlink(state.staging + "/" + shard.partial)
            if fresh.keys.isEmpty {
                close(fresh.descriptor)
                unlink(freshPath)
                state.open = nil
            } else {
                state.open = fresh
            }
            return withdrawn
        }
    }

    public func noteUndelivered(_ status: String, reason: String) {
        state.withLock { $0.undelivered[status, default: [:]][reason, default: 0] += 1 }
    }

    public func discard() {
        state.withLock { state in
            guard let shard = state.open else { return }
            state.open = nil
            close(shard.descriptor)
            unlink(state.staging + "/" + shard.partial)
        }
    }

    /// Every item this session committed or answered from the journal is recorded by now:
    /// their entries go. (An open shard left, which the runner commits or discards before,
    /// would be one whose every write failed: removed.)
    public func finish() {
        state.withLock { state in
            if let shard = state.open {
                close(shard.descriptor)
                unlink(state.staging + "/" + shard.partial)
                state.open = nil
            }
            // Items that ended after the session's last shard: counted in its stats, written
            // again under a temporary name and put in place.
            if !state.undelivered.isEmpty, var last = state.lastStats {
                last.stats.add(state.undelivered)
                if (try? place.place(last.stats, as: last.name, staging: state.staging)) != nil {
                    state.undelivered = [:]
                    state.lastStats = last
                }
            }
            try? state.journal?.endSession()
        }
    }

    // MARK: - samples

    /// The tar members of one sample, and the bytes of its outputs.
    private func sample(
        _ item: BatchItem, attempt: Int
    ) throws(DeliveryFailure) -> (bytes: [UInt8], outputBytes: Int, record: JSONValue) {
        let key = Self.sampleKey(item.key, room: keyRoom)
        let modified = Int(Date().timeIntervalSince1970)
        var bytes: [UInt8] = []
        var outputs: [JSONValue] = []
        var outputBytes = 0
        for delivery in item.deliveries {
            guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
                throw DeliveryFailure(
                    ItemFailure(.upload, "cannot read the staged output \(delivery.stagedPath)"), attempts: attempt)
            }
            guard data.count <= TarFormat.maxSize else {
                throw DeliveryFailure(
                    ItemFailure(.upload, "output \(delivery.output) is \(data.count) bytes: a tar member holds less than 8 GiB"),
                    attempts: attempt)
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
        if let width = item.inputWidth, let height = item.inputHeight {
            record += [("originalWidth", PipelineSchema.integer(width)), ("originalHeight", PipelineSchema.integer(height))]
        }
        if let sha256 = item.inputSHA256 { record.append(("sha256", .string(sha256))) }
        if let fingerprint = item.fingerprint {
            record += [
                ("phash", .string(fingerprint.phash)), ("thumbhash", .string(fingerprint.thumbhash)),
                ("dominant", .string(fingerprint.dominant)),
            ]
        }
        record.append(("outputs", .array(outputs)))
        let value = JSONValue.object(record)
        append(key + ".json", Array(value.serialized().utf8), to: &bytes, modified: modified)
        return (bytes, outputBytes, value)
    }

    private func append(_ name: String, _ data: [UInt8], to bytes: inout [UInt8], modified: Int) {
        bytes += TarFormat.header(name: name, size: data.count, modified: modified)
        bytes += data
        bytes += TarFormat.padding(data.count)
    }

    // MARK: - files

    /// A new temporary shard, locked. Another process's sweep may take a file between its
    /// making and its lock, so the lock is checked to hold the file at that name.
    private func openShard(in staging: String) throws(DeliveryFailure) -> OpenShard {
        for _ in 0..<5 {
            let partial = Self.partialPrefix + Self.processPart + "-" + UUID().uuidString + ".tar"
            let path = staging + "/" + partial
            let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else {
                throw DeliveryFailure(ItemFailure(.upload, "cannot make \(path): \(CError())"))
            }
            var held = stat()
            var named = stat()
            guard flock(descriptor, LOCK_EX) == 0, fstat(descriptor, &held) == 0, lstat(path, &named) == 0,
                held.st_ino == named.st_ino, held.st_dev == named.st_dev
            else {
                close(descriptor)
                continue
            }
            return OpenShard(
                descriptor: descriptor, partial: partial, opened: Date())
        }
        throw DeliveryFailure(ItemFailure(.upload, "cannot keep a temporary shard in \(staging): another process removes them"))
    }

    /// Removes temporary shards of this machine whose lock can be taken (their process is
    /// gone, or closed them), then stats files whose shard is gone.
    private func sweepPartials(in staging: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []
        let thisHost = Self.partialPrefix + FeedItem.safeName(ProcessInfo.processInfo.hostName) + "-"
        let mine = names.filter { $0.hasPrefix(thisHost) }
        for name in mine where name.hasSuffix(".tar") {
            let path = staging + "/" + name
            let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            var held = stat()
            var named = stat()
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0, fstat(descriptor, &held) == 0, lstat(path, &named) == 0,
                held.st_ino == named.st_ino
            else { continue }
            unlink(path)
        }
        for name in mine {
            guard let suffix = [".stats.json", ".manifest"].first(where: { name.hasSuffix($0) }) else { continue }
            let shard = staging + "/" + String(name.dropLast(suffix.count))
            if !FileManager.default.fileExists(atPath: shard) { unlink(staging + "/" + name) }
        }
    }
}
