import Foundation
import Logging
import PipelineKit

/// Where a dry-run's samples come from.
public enum DryRunSamples: Sendable, Equatable {
    /// The image files of a local folder, listed as a `directory` source lists them.
    case folder(String)
    /// The first items of the pipeline's own source: a directory source's first files, or a
    /// remote feed's first items, downloaded through the pipeline's fetcher (its retries,
    /// limits and disk cache: with the cache on, a second dry-run reads no network) into
    /// `source/` of the output folder.
    case feed

    /// How many samples a dry-run takes when neither `--limit` nor `--all` is given: a
    /// folder may hold thousands of images, a remote feed millions.
    public static let sampleSize = 12

    /// How many entries of a remote feed a sample of `count` is spread over: its first 200,
    /// or 10 × `count` when that is more. A remote feed is listed page by page only that far
    /// (it may be endless); a folder is listed whole (no network, and `stat` is cheap).
    public static func window(for count: Int) -> Int { max(200, 10 * count) }

    /// Whether samples from `folder` come from its subfolders too: as the pipeline's own
    /// directory source lists them when it is that source's folder (`"recursive": false`
    /// previews only what the run would list), else yes.
    static func listsSubfolders(_ folder: String, spec: PipelineSpec, environment: Environment) -> Bool {
        guard let local = spec.source.parameters.localFolder, let expanded = try? local.path.expanded(in: environment)
        else { return true }
        return spec.resolvePath(expanded).realPath == folder.realPath ? local.recursive : true
    }

    /// One sample, as a local file ready for the filter chain, or why it could not be had.
    struct Sample {
        let item: FeedItem
        /// The file to process (nil when `failure` is set).
        let path: String?
        /// `reason: message` when the sample could not be downloaded.
        let failure: String?

        /// A relative path naming the sample's pictures in the output folder: the key of a
        /// local item, the file-name-safe key of a remote one.
        var fileKey: String { item.isLocal ? SafePath.relative(item.key) : item.nameKey }
    }

    /// Calls `body` with `count` samples spread across the listing (`SampleSpread`), in
    /// listing order, or with every entry as it is listed when `count` is nil, until `body`
    /// returns false; `selected` hears what was taken of what before the first sample. A
    /// folder (or a directory source) is listed whole; a remote feed only up to its first
    /// `window(for: count)` entries. A remote item that cannot be downloaded is passed with
    /// its failure; a feed that cannot be listed throws.
    /// The previews' folder (`previews`) and the pipeline's sink folders are never listed,
    /// even when they lie inside the samples folder: a dry-run never reads what it or the
    /// pipeline wrote.
    func list(
        spec: PipelineSpec, environment: Environment, count: Int?, downloads: String, previews: String, logger: Logger,
        notice: @escaping @Sendable (String) -> Void, selected: (DryRunSelection) -> Void,
        _ body: (Sample) throws -> Bool
    ) throws {
        let feed: any Feed
        var fetcher: RemoteFetcher?
        switch self {
        case .folder(let path):
            feed = DirectoryFeed(
                root: path, recursive: Self.listsSubfolders(path, spec: spec, environment: environment),
                excluding: [previews] + spec.sinkFolders(environment: environment))
        case .feed:
            fetcher = try BuiltPipeline.makeFetcher(
                spec, environment: environment, cancellation: CancellationFlag(),
                logger: logger)
            feed = try BuiltPipeline.makeFeed(
                spec.source, spec: spec, environment: environment, fetcher: fetcher,
                excluding: [previews], notice: notice)
        }
        // `position` counts from 1 in listing order: it numbers a remote sample's download.
        func each(_ position: Int, _ listed: FeedItem) throws -> Bool {
            guard !listed.isLocal else { return try body(Sample(item: listed, path: listed.location, failure: nil)) }
            // Keys and names reach the table and the contact sheet: `${…}` values put back as
            // references, as the runner records them.
            let item = listed.withoutSecrets(environment)
            guard let fetcher else {
                return try body(Sample(item: item, path: nil, failure: "download: a URL item in a local source"))
            }
            let downloaded = Result { () throws(ItemFailure) -> Download in
                try Self.download(item, number: position, into: downloads, fetcher: fetcher)
            }
            switch downloaded {
            case .success(.file(let path)): return try body(Sample(item: item, path: path, failure: nil))
            case .success(.skipped(let skip)):
                // Refused by robots.txt or opted out: shown with its reason, never previewed.
                return try body(Sample(item: item, path: nil, failure: "skipped: \(skip)"))
            case .failure(let failure): return try body(Sample(item: item, path: nil, failure: failure.description))
            }
        }
        guard let count else {
            var position = 0
            try feed.list { listed in
                position += 1
                return try each(position, listed)
            }
            return
        }
        let window = self == .feed && spec.source.remote != nil ? Self.window(for: count) : nil
        var listed: [FeedItem] = []
        try feed.list { item in
            listed.append(item)
            return window.map { listed.count < $0 } ?? true
        }
        let entries = listed.map(Self.entry)
        let positions = SampleSpread.pick(entries, count: count)
        selected(
            DryRunSelection(
                taken: positions.count, listed: listed.count, window: listed.count == window ? window : nil,
                folders: Set(positions.map { entries[$0].folder }).count,
                formats: Set(positions.map { entries[$0].format }).count))
        for position in positions {
            if try !each(position + 1, listed[position]) { break }
        }
    }

    /// What the spread looks at of a listed item: a local file's relative path and bytes,
    /// a remote item's URL.
    private static func entry(_ item: FeedItem) -> SampleSpread.Entry {
        guard item.isLocal else { return SampleSpread.Entry(path: item.location, size: nil) }
        var info = stat()
        let size = LocalPath.withCPath(item.location) { stat($0, &info) } == 0 ? Int(info.st_size) : nil
        return SampleSpread.Entry(path: item.key, size: size)
    }

    /// A sample's download: a file, or the reason the source's server (robots.txt,
    /// `X-Robots-Tag`) says it is not to be used.
    private enum Download {
        case file(String)
        case skipped(ItemSkip)
    }

    /// Downloads one remote item (or links it from the cache) to
    /// `downloads/<number>-<stem>.<format's extension>`, waiting between attempts as the
    /// pipeline's `retry` says.
    private static func download(
        _ item: FeedItem, number: Int, into downloads: String,
        fetcher: RemoteFetcher
    ) throws(ItemFailure) -> Download {
        do {
            try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        } catch {
            throw ItemFailure(.io, "cannot make \(downloads): \(error)")
        }
        let spool = downloads + "/.\(number).part"
        var attempt = 1
        var reserved = false
        fetching: while true {
            switch try fetcher.image(item.location, to: spool, attempt: attempt, reserved: reserved) {
            case .fetched: break fetching
            case .skipped(let skip): return .skipped(skip)
            case .retry(let delay):
                Thread.sleep(forTimeInterval: delay)
                attempt += 1
                reserved = false
            case .later(let delay, let turn):
                Thread.sleep(forTimeInterval: delay)
                reserved = turn
            }
        }
        let head = Array((FileHandle(forReadingAtPath: spool).flatMap { try? $0.read(upToCount: 64) }) ?? Data())
        var ext = "img"
        if case .accepted(let format) = ImageFormat.sniff(head) { ext = format == .jpeg ? "jpg" : format.rawValue }
        // One file of the folder: a remote item's stem has the URL's folders (`img/a`).
        let path = downloads + "/\(number)-\(NameTemplate.lastComponent(of: item.nameStem)).\(ext)"
        guard rename(spool, path) == 0 else {
            unlink(spool)
            throw ItemFailure(.io, "cannot move the download to \(path): \(String(cString: strerror(errno)))")
        }
        return .file(path)
    }
}

/// What a dry-run took of its source: `taken` samples of the `listed` entries, from
/// `folders` folders and `formats` formats; `window` is set when the listing stopped
/// there (a remote feed's first entries), so `listed` is not the whole feed.
public struct DryRunSelection: Sendable, Equatable {
    public let taken: Int
    public let listed: Int
    public let window: Int?
    public let folders: Int
    public let formats: Int

    /// Whether the sample is less than the whole source.
    public var isPartial: Bool { taken < listed || window != nil }
}
