import Foundation

/// Compares a pipeline and its feed with the last finished run of a state file, for `plan`
/// and `run --incremental`: which items are new, which sources changed, and which outputs
/// must be made again and why.
///
/// - An output is redone for every item when its own filters or encoding changed (its
///   `OutputSpec`, name template included), when the common `filters` changed, or when the
///   previous run had no output of that id.
/// - An item's source: a local file is unchanged when its size and modification time are
///   the recorded ones; when only the time differs the SHA-256 of its bytes decides. A
///   remote item is compared by the feed's version field when the source names one
///   (`versionField`) and both runs have it; else its image is fetched again (a conditional
///   request when the cache has its ETag or Last-Modified: a 304 is unchanged) and the
///   SHA-256 of the bytes decides.
/// - An item that did not end `done` in the previous run is done again, whatever its source.
public final class ChangeDetector: Sendable {
    /// What became of one item of the feed since the previous run.
    public enum Source: String, Sendable {
        /// Not in the previous run.
        case new
        /// In it, with other bytes (or not done there).
        case changed
        /// In it, done, from the same bytes.
        case unchanged
    }

    public struct Verdict: Sendable {
        public let source: Source
        /// The outputs to make again (every output for a new or changed item).
        public let redo: [String]
    }

    /// The previous run: the latest finished one of the state file.
    public let baseline: RunRecord
    /// Outputs that every item must make again, with the reason.
    public let outputReasons: [String: String]
    private let outputIDs: [String]
    private let store: RunStore
    private let fetcher: RemoteFetcher?
    private let versionField: String?
    private let scratch: String

    /// Nil when the state file has no finished run (every item is then new).
    public init?(store: RunStore, pipeline: BuiltPipeline, scratch: String) throws {
        guard let baseline = try store.runs().first(where: { $0.state == .finished }) else { return nil }
        self.baseline = baseline
        self.store = store
        fetcher = pipeline.fetcher
        versionField = pipeline.spec.source.remote?.versionField
        self.scratch = scratch
        let spec = pipeline.spec
        outputIDs = spec.outputs.map(\.id)
        let before = Dictionary(RunStore.outputSpecs(ofDocument: baseline.document).map { ($0.id, $0) }, uniquingKeysWith: { $1 })
        let commonChanged = baseline.fingerprint["filters"] != spec.outputFingerprint["filters"]
        var reasons: [String: String] = [:]
        for output in spec.outputs {
            if commonChanged {
                reasons[output.id] = "the common filters changed"
            } else if let old = before[output.id] {
                if old != output { reasons[output.id] = "its filters or encoding changed" }
            } else {
                reasons[output.id] = "run #\(baseline.id) had no output \"\(output.id)\""
            }
        }
        outputReasons = reasons
    }

    /// The verdict on one item of the feed (as listed, secrets kept as references).
    public func classify(_ item: FeedItem) -> Verdict {
        let source = compare(item)
        let redo = source == .unchanged ? outputIDs.filter { outputReasons[$0] != nil } : outputIDs
        return Verdict(source: source, redo: redo)
    }

    private func compare(_ item: FeedItem) -> Source {
        guard let recorded = try? store.sourceStamp(runId: baseline.id, key: item.key) else { return .new }
        guard recorded.status == .done, let stamp = recorded.stamp else { return .changed }
        if item.isLocal {
            var info = stat()
            guard stat(item.location, &info) == 0 else { return .changed }
            let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
            if Int(info.st_size) != stamp.size { return .changed }
            if modified == stamp.modified { return .unchanged }
            return SourceStamp.of(file: item.location, local: true)?.sha256 == stamp.sha256 ? .unchanged : .changed
        }
        if let field = versionField, let old = stamp.version, let now = SourceStamp.version(in: item.metadata, field: field) {
            return old == now ? .unchanged : .changed
        }
        return currentHash(of: item.location) == stamp.sha256 ? .unchanged : .changed
    }

    /// The SHA-256 of the remote image as it is now (nil when it cannot be fetched).
    private func currentHash(of location: String) -> String? {
        guard let fetcher else { return nil }
        try? FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let file = scratch + "/" + UUID().uuidString
        defer { unlink(file) }
        for attempt in 1 ... 3 {
            switch Result(catching: { () throws(ItemFailure) in try fetcher.image(location, to: file, attempt: attempt) }) {
            case .success(.fetched): return SourceStamp.of(file: file, local: false)?.sha256
            case let .success(.retry(after)), let .success(.later(after, _)): Thread.sleep(forTimeInterval: min(after, 5))
            case .success(.skipped), .failure: return nil
            }
        }
        return nil
    }
}
