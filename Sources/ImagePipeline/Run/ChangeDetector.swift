import Foundation
import PipelineKit
import Synchronization

/// Compares a pipeline and its feed with a finished run of a state file (the latest, or
/// the one an incremental run being resumed compares with), for `plan` and
/// `run --incremental`: which items are new, which sources changed, which outputs must be
/// made again and why, and which sinks must be delivered to again.
///
/// - An output is made again for every item when its own filters or encoding changed (its
///   `OutputSpec`, name template included), when the common `filters` or the `accept`
///   rules changed, or when the previous run had no output of that id; for one item when
///   this run would name it otherwise (`{index}` after items before it left the feed).
/// - A sink whose entry in the pipeline file changed (another folder, URL, type, outputs),
///   or whose `${…}` values make it another place, or that is new gets every output again;
///   the others keep what they were given.
/// - An output whose watermark image (a file of the same name) has other bytes, or whose
///   filters' `${…}` values changed, is made again.
/// - An item's source: a local file is unchanged when its size and modification time are
///   the recorded ones; when only the time differs the SHA-256 of its bytes decides. A
///   remote item is compared by the feed's version field when the source names one
///   (`versionField`) and both runs have it; else its image is fetched again (a conditional
///   request when the cache has its ETag or Last-Modified: a 304 is unchanged) and the
///   SHA-256 of the bytes decides.
/// - An item that did not end `done` in the previous run is done again, whatever its source:
///   one that failed or was skipped there is told apart from a changed source (`plan`
///   counts it on its own).
/// - An output is made again for one item when what the previous run delivered of it is no
///   longer there as delivered: a folder sink's file missing or of another size, or any
///   sink's location delivered to since by a later run with other bytes (an incremental
///   run killed, then abandoned with `--new`, had written over files the previous run keeps).
public final class ChangeDetector: Sendable {
    /// What became of one item of the feed since the previous run.
    public enum Source: String, Sendable {
        /// Not in the previous run.
        case new
        /// In it, with other bytes (or not done there).
        case changed
        /// In it, done, from the same bytes.
        case unchanged
        /// In it, failed there: tried again from the start (fetched or read anew, its
        /// attempts counted afresh), its source not compared.
        case failed
        /// In it, skipped there (robots.txt, an opt-out, the accept rules): tried again the same way.
        case skipped
    }

    public struct Verdict: Sendable {
        public let source: Source
        /// The outputs to make again (every output for a new or changed item).
        public let remake: [String]
        /// Of those, the ones made again only because this run names them otherwise.
        public let renamed: [String]
        /// Of those, the ones made again because what was delivered is no longer there as it was.
        public var replaced: [String] = []
        /// For an item that failed in the previous run: whether that failure may pass.
        public var lastFailure: FailureAdvice?
        /// The run that holds the item's record: the baseline, or one of its `heirs`.
        public var holder: Int64?
        /// How that run listed the item, for an unchanged one (`UpToDate` compares it with
        /// the listing now).
        public var listed: RunStore.ComparedItem.Listed?
    }

    /// The run compared with.
    public let baseline: RunRecord
    /// Outputs that every item must make again, with the reason.
    public let outputReasons: [String: String]
    /// Sinks that get every output again (changed or new in the pipeline file), with the reason.
    public let sinkReasons: [String: String]
    /// The sinks whose deliveries an unchanged output keeps.
    public let unchangedSinks: [String]
    private let outputs: [OutputSpec]
    private let store: RunStore
    private let fetcher: RemoteFetcher?
    private let versionField: String?
    private let scratch: String
    /// The runs whose deliveries may have written over the baseline's: after it, up to the
    /// newest when this detector was made, not the run it works for.
    private let newestRun: Int64
    private let currentRun: Int64?
    /// Whether there is such a run at all: a re-run of the latest run has none, and then
    /// nothing is asked of the file for each delivered file.
    private let laterRuns: Bool
    /// Later runs compared with the baseline, other than the current one: one abandoned,
    /// or one of `--limit N`, may have taken over some of its items whole
    /// (`HandOn`), which are looked for there when the baseline has them no more.
    public let heirs: [Int64]
    /// The folder sinks' roots by name: a file a folder sink was given is looked for under
    /// its recorded name there (its recorded location hides any `${…}` value as `***`).
    private let folders: [String: String]
    /// Items of the runs compared with, read ahead in key order while keys come in rising
    /// order (a folder listed by name): one statement for `readAhead` items instead of one
    /// for each. By run and `carriedFrom`.
    private let windows = Mutex<[WindowKey: Window]>([:])
    /// Whether the records read say how the run listed each item (`Verdict.listed`).
    private let listing: Bool
    /// The source files and delivered files looked at, found in their folders kept open.
    private let files = FolderStats()

    /// A window holds the items of one run read with one `carriedFrom`.
    private struct WindowKey: Hashable {
        let run: Int64
        let carriedFrom: Int64?
    }
    static let readAhead = 256

    private struct Window {
        var read = RunStore.ComparedWindow(items: [:], last: nil)
        /// Every item of the run from `first` to `read.last` (to the end when that is nil)
        /// is in `read`; nothing is when `first` is nil. Keys as the state file has them.
        var first: [UInt8]?
        /// The last key looked for outside the window, and how many in a row rose.
        var previous: [UInt8]?
        var rising = 0

        func covers(_ key: [UInt8]) -> Bool {
            guard let first, !key.lexicographicallyPrecedes(first) else { return false }
            return read.last.map { !$0.lexicographicallyPrecedes(key) } ?? true
        }
    }

    /// Compares with run `baselineID` when given, else with the latest finished run; nil
    /// when there is none (every item is then new).
    /// With `listing`, each verdict on an unchanged item says how the run listed it
    /// (`Verdict.listed`, for `UpToDate`).
    public init?(
        store: RunStore, pipeline: BuiltPipeline, scratch: String, baselineID: Int64? = nil,
        current: Int64? = nil, listing: Bool = false
    ) throws {
        self.listing = listing
        let runs = try store.runs()
        // Not a run that listed part of the feed (`RunStore.partialListing`): its unlisted
        // items would all look new.
        guard
            let baseline = baselineID.map({ id in runs.first { $0.id == id } })
                ?? runs.first(where: { $0.state == .finished && store.partialListing(of: $0) == nil })
        else { return nil }
        self.baseline = baseline
        newestRun = runs.map(\.id).max() ?? baseline.id
        currentRun = current
        laterRuns = runs.contains { $0.id > baseline.id && $0.id != current }
        heirs = runs.filter { $0.baseline == baseline.id && $0.id != current }.map(\.id).sorted()
        self.store = store
        fetcher = pipeline.fetcher
        versionField = pipeline.spec.source.remote?.versionField
        self.scratch = scratch
        folders = Dictionary(
            pipeline.sinks.compactMap { sink in (sink as? DirectorySink).map { (sink.name, $0.root) } },
            uniquingKeysWith: { first, _ in first })
        let spec = pipeline.spec
        outputs = spec.outputs
        let document = try? JSONParser.parse(baseline.document)
        let before = document.flatMap { try? PipelineSpec.decode($0, baseDirectory: spec.baseDirectory, defaultName: spec.name) }
        let beforeOutputs = Dictionary((before?.outputs ?? []).map { ($0.id, $0) }, uniquingKeysWith: { $1 })
        func canonical(_ value: JSONValue?) -> String { (value ?? .null).withoutComments.serialized(sortedKeys: true) }
        let commonChanged = baseline.fingerprint["filters"] != spec.outputFingerprint["filters"]
        let acceptChanged = canonical(document?["accept"]) != canonical(spec.document["accept"])
        // Recorded since runs record them (`BuiltPipeline.runFingerprint`): the watermark
        // images' hashes per output, and each sink's entry with `${…}` expanded.
        let now = pipeline.runFingerprint
        func recorded(_ key: String, in fingerprint: [String: String]) -> [String: String]? {
            fingerprint[key].flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8)) }
        }
        let assetsBefore = recorded(BuiltPipeline.assetsKey, in: baseline.fingerprint)
        let assetsNow = recorded(BuiltPipeline.assetsKey, in: now) ?? [:]
        let targetsBefore = recorded(BuiltPipeline.sinkTargetsKey, in: baseline.fingerprint)
        let targetsNow = recorded(BuiltPipeline.sinkTargetsKey, in: now) ?? [:]
        var reasons: [String: String] = [:]
        for output in spec.outputs {
            if commonChanged {
                reasons[output.id] = "the common filters changed"
            } else if acceptChanged {
                reasons[output.id] = "the accept rules changed"
            } else if let old = beforeOutputs[output.id] {
                if old != output {
                    reasons[output.id] = "its filters or encoding changed"
                } else if let assetsBefore, assetsBefore[output.id] != assetsNow[output.id] {
                    reasons[output.id] = "a watermark image or a ${…} value of its filters changed"
                }
            } else {
                reasons[output.id] = "run #\(baseline.id) had no output \"\(output.id)\""
            }
        }
        outputReasons = reasons
        var sinkReasons: [String: String] = [:]
        var unchanged: [String] = []
        for sink in spec.sinks {
            if let old = before?.sinks.first(where: { $0.name == sink.name }) {
                // Where it delivers, by its kind (`SinkParameters.deliversLike`: a folder's
                // `prune` says what to remove, not where to deliver).
                // Its outputs as a set: their order is not where anything goes. An output it
                // takes now and did not is made for every item anyway when it is new (or
                // newly defined); an older output newly sent to it needs every item again.
                let added = Set(spec.outputs(of: sink.name)).subtracting(before?.outputs(of: sink.name) ?? [])
                if !sink.parameters.deliversLike(old.parameters) || !added.allSatisfy({ reasons[$0] != nil }) {
                    sinkReasons[sink.name] = "sink \"\(sink.name)\" changed"
                } else if let before = targetsBefore?[sink.name], let now = targetsNow[sink.name], before != now {
                    sinkReasons[sink.name] = "sink \"\(sink.name)\" goes elsewhere (a ${…} in it has another value)"
                } else {
                    unchanged.append(sink.name)
                }
            } else {
                sinkReasons[sink.name] = "run #\(baseline.id) had no sink \"\(sink.name)\""
            }
        }
        self.sinkReasons = sinkReasons
        unchangedSinks = unchanged
    }

    /// An item of the feed as the detector takes it (`classify`): its key and names as the
    /// run records them (`recorded`: `found` without its `${…}` values, `FeedItem.withoutSecrets`),
    /// which are what the compared run holds, and its location and metadata as listed (the
    /// file read or the image fetched with the values).
    public static func compared(_ found: FeedItem, recorded item: FeedItem) -> FeedItem {
        FeedItem(
            key: item.key, location: found.location, metadata: found.metadata, nameKey: item.nameKey,
            nameStem: item.nameStem, fromFallback: found.fromFallback, isLocal: found.isLocal)
    }

    /// The verdict on one item of the feed (as listed, its location as fetched), which this
    /// run numbers `index` (`{index}` in names). Without `fetching`, a remote item that
    /// would be fetched to compare its bytes is `changed` instead.
    public func classify(_ item: FeedItem, index: Int, fetching: Bool = true) -> Verdict {
        var holder = baseline.id
        var recorded = record(of: item.key, in: baseline.id)
        for heir in heirs where recorded == nil {
            recorded = record(of: item.key, in: heir, carriedFrom: baseline.id)
            holder = heir
        }
        let source = compare(item, recorded: recorded.map { ($0.status, $0.stamp) }, fetching: fetching)
        guard source == .unchanged else {
            var verdict = Verdict(source: source, remake: outputs.map(\.id), renamed: [])
            verdict.lastFailure = recorded?.failure
            return verdict
        }
        var remake: [String] = []
        var renamed: [String] = []
        var replaced: [String] = []
        let delivered = recorded?.delivered ?? []
        for output in outputs {
            if outputReasons[output.id] != nil {
                remake.append(output.id)
            } else if let names = output.namesBeforeMaking(key: item.nameKey, stem: item.nameStem, index: index),
                !names.contains(where: { $0 == recorded?.names[output.id] }),
                // Nor the name of its own the item got when that one was taken.
                output.namesBeforeMaking(
                    key: item.nameKey, stem: NameTemplate.uniqueStem(item.nameStem, key: item.key), index: index)?
                    .contains(where: { $0 == recorded?.names[output.id] }) != true
            {
                remake.append(output.id)
                renamed.append(output.id)
            } else if delivered.contains(where: { file in
                file.output == output.id && unchangedSinks.contains(file.sink)
                    && !stillThere(file, key: item.key, name: recorded?.names[output.id])
            }) {
                remake.append(output.id)
                replaced.append(output.id)
            }
        }
        var verdict = Verdict(source: source, remake: remake, renamed: renamed)
        verdict.replaced = replaced
        verdict.holder = holder
        verdict.listed = recorded?.listed
        return verdict
    }

    /// What run `runId` recorded of item `key` (`RunStore.comparedItem`), from the window
    /// read ahead when it covers the key. Keys are ordered by their bytes, as the state
    /// file's primary key orders them. Each item's record is read before the item is taken
    /// over (`HandOn`), and a later item's is not changed meanwhile.
    private func record(of key: String, in runId: Int64, carriedFrom: Int64? = nil) -> RunStore.ComparedItem? {
        windows.withLock { windows in
            let id = WindowKey(run: runId, carriedFrom: carriedFrom)
            var window = windows[id, default: Window()]
            defer { windows[id] = window }
            let bytes = RunStore.ComparedWindow.bytes(of: key)
            if window.covers(bytes) { return window.read.item(bytes: bytes) }
            let rising = window.previous.map { $0.lexicographicallyPrecedes(bytes) } ?? false
            window.rising = rising ? window.rising + 1 : 0
            window.previous = bytes
            // Keys in another order (a URL list) are read one by one: a window would be read
            // for one item of it. Eight rises in a row (nine keys) happen there about once in 360,000.
            guard window.rising >= 8 else {
                return try? store.comparedItem(runId: runId, key: key, carriedFrom: carriedFrom, listing: listing)
            }
            guard
                let read = try? store.comparedItems(
                    runId: runId, from: key, limit: Self.readAhead, carriedFrom: carriedFrom, listing: listing)
            else { return nil }
            window.read = read
            window.first = bytes
            return read.item(bytes: bytes)
        }
    }

    /// Whether what the compared run delivered is still where it went, as it was: a folder
    /// sink's file (its recorded name under the sink's folder) of the recorded size, and no
    /// later run's delivery of other bytes to the same place.
    private func stillThere(_ file: RunStore.DeliveredFile, key: String, name: String?) -> Bool {
        if let root = folders[file.sink], let name {
            let path = root + "/" + name
            guard let info = files.info(path), (info.st_mode & S_IFMT) == S_IFREG else { return false }
            if let bytes = file.bytes, Int(info.st_size) != bytes { return false }
        }
        return !laterRuns
            || (try? store.deliveredOtherwiseSince(
                runId: baseline.id, upTo: newestRun, excluding: currentRun, key: key,
                sink: file.sink, location: file.location, hash: file.hash)) == false
    }

    private func compare(_ item: FeedItem, recorded: (status: ItemStatus, stamp: SourceStamp?)?, fetching: Bool) -> Source {
        guard let recorded else { return .new }
        if recorded.status == .failed { return .failed }
        if recorded.status == .skipped { return .skipped }
        guard recorded.status == .done, let stamp = recorded.stamp else { return .changed }
        if item.isLocal {
            guard let info = files.sizeAndTime(item.location) else { return .changed }
            if info.size != stamp.size { return .changed }
            if info.modified == stamp.modified { return .unchanged }
            return SourceStamp.of(file: item.location, local: true)?.sha256 == stamp.sha256 ? .unchanged : .changed
        }
        if let field = versionField, let old = stamp.version, let now = SourceStamp.version(in: item.metadata, field: field) {
            return old == now ? .unchanged : .changed
        }
        guard fetching else { return .changed }
        return currentHash(of: item.location) == stamp.sha256 ? .unchanged : .changed
    }

    /// The SHA-256 of the remote image as it is now (nil when it cannot be fetched).
    private func currentHash(of location: String) -> String? {
        guard let fetcher else { return nil }
        try? FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let file = scratch + "/" + UUID().uuidString
        defer { unlink(file) }
        for attempt in 1...3 {
            switch Result(catching: { () throws(ItemFailure) in try fetcher.image(location, to: file, attempt: attempt) }) {
            case .success(.fetched): return SourceStamp.of(file: file, local: false)?.sha256
            case .success(.retry(let after)), .success(.later(let after, _)): Thread.sleep(forTimeInterval: min(after, 5))
            case .success(.skipped), .failure: return nil
            }
        }
        return nil
    }
}
