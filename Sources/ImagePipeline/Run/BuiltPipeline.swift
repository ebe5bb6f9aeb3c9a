import Foundation
import Logging
import PipelineKit
import VipsKit

/// A pipeline ready to run: `${…}` expanded, paths resolved, feed, fetcher and sinks built.
public struct BuiltPipeline: Sendable {
    public let spec: PipelineSpec
    /// Absolute path of the pipeline file.
    public let path: String
    public let feed: any Feed
    /// Downloads remote items (nil when the source is local).
    public let fetcher: RemoteFetcher?
    public let sinks: [any Sink]
    public let processor: ImageProcessor
    public let environment: Environment
    /// Set when the run is interrupted; retry loops watch it.
    public let cancellation: CancellationFlag

    /// This pipeline with another feed (a shared run's worker takes its items from claimed
    /// chunks); everything else, the cancellation flag included, is the same.
    public func replacingFeed(_ feed: any Feed) -> BuiltPipeline {
        BuiltPipeline(
            spec: spec, path: path, feed: feed, fetcher: fetcher, sinks: sinks, processor: processor,
            environment: environment, cancellation: cancellation)
    }

    /// This pipeline with other sinks in place of its own (a program that embeds the runner
    /// and delivers somewhere of its own); everything else is the same.
    public func replacingSinks(_ sinks: [any Sink]) -> BuiltPipeline {
        BuiltPipeline(
            spec: spec, path: path, feed: feed, fetcher: fetcher, sinks: sinks, processor: processor,
            environment: environment, cancellation: cancellation)
    }

    /// Expands and resolves everything the run needs; errors are `SpecError`s naming the
    /// path of the value (an unset variable, a source directory that does not exist).
    /// `notice` receives what the feed has to say while listing (e.g. falling back).
    public static func build(
        _ spec: PipelineSpec, path: String, environment: Environment,
        logger: Logger = Logger(label: "imgpipe"),
        notice: @escaping @Sendable (String) -> Void = { _ in }
    ) throws -> BuiltPipeline {
        var assembly = Assembly(collecting: false)
        return try assembly.build(spec, path: path, environment: environment, logger: logger, notice: notice)
    }

    /// Every check `build` makes before a run, all of them rather than the first fault, and
    /// without creating anything (no cache folder): what `imgpipe validate` reports. A check
    /// that needs a value from an unset variable is not made; the unset variable is among
    /// the faults (`unsetVariable` says which).
    public static func check(_ spec: PipelineSpec, path: String, environment: Environment) -> [Error] {
        var assembly = Assembly(collecting: true)
        _ = try? assembly.build(
            spec, path: path, environment: environment,
            logger: Logger(label: "imgpipe"), notice: { _ in })
        return assembly.faults
    }

    /// One build: a run's stops at the first fault; a check's notes each fault and goes on
    /// to the next part (the source, each sink, each filter) without creating folders.
    private struct Assembly {
        let collecting: Bool
        var faults: [Error] = []

        /// `body`'s value; when collecting, a fault is noted and nil returned instead.
        mutating func attempt<T>(_ body: () throws -> T) throws -> T? {
            do {
                return try body()
            } catch  where collecting {
                faults.append(error)
                return nil
            }
        }

        mutating func build(
            _ spec: PipelineSpec, path: String, environment: Environment,
            logger: Logger, notice: @escaping @Sendable (String) -> Void
        ) throws -> BuiltPipeline {
            let cancellation = CancellationFlag()
            // A check reads the cache's path (for its variables) but creates no folder.
            if let cache = spec.source.remote?.cache {
                _ = try attempt {
                    try PipelineSpec.checkFolder(
                        try cache.directory(in: spec, environment: environment),
                        at: cache.path?.path ?? "source.cache", what: "cache folder")
                }
            }
            // One for the run: a host that is both source and sink is paced once.
            let pacing = BuiltPipeline.makePacing(spec, logger: logger)
            // An S3 source's bucket, endpoint and credentials are checked here; its feed
            // needs them, so it is not made (nor checked again) without them.
            let withCache = !collecting
            let made = try attempt {
                try BuiltPipeline.makeFetcher(
                    spec, environment: environment, cancellation: cancellation, logger: logger,
                    withCache: withCache, pacing: pacing)
            }
            let fetcher = made ?? nil
            let feed =
                made == nil
                ? nil
                : try attempt {
                    try makeFeed(spec.source, spec: spec, environment: environment, fetcher: fetcher, notice: notice)
                }
            var uploadClients: [Bool: HTTPClient] = [:]
            /// The client of a sink's requests: paced with the run's other requests, or not
            /// at all for a sink with `"pacing": "off"` (its 429s and 503s slow nobody down).
            func uploads(_ sink: String) -> HTTPClient {
                let paced = !spec.unpacedSinks.contains(sink)
                if let client = uploadClients[paced] { return client }
                let client = HTTPClient(
                    timeout: spec.limits.timeout, cancellation: cancellation, userAgent: spec.userAgent,
                    pacing: paced ? pacing : nil, addresses: spec.network)
                uploadClients[paced] = client
                return client
            }
            var sinks: [any Sink] = []
            for sink in spec.sinks {
                let built: (any Sink)? = try attempt {
                    try sink.parameters.make(
                        SinkContext(name: sink.name, spec: spec, environment: environment, client: { uploads(sink.name) }))
                }
                if let built { sinks.append(built) }
            }
            let processor = try processor(spec, environment: environment)
            guard let feed, faults.isEmpty else { throw faults.first ?? SpecError(path: "source", message: "not built") }
            return BuiltPipeline(
                spec: spec, path: URL(fileURLWithPath: path).standardizedFileURL.path, feed: feed, fetcher: fetcher,
                sinks: sinks, processor: processor, environment: environment, cancellation: cancellation)
        }

        /// The run's image processor: each filter expanded and checked (variables, watermark
        /// images, output sizes), the sizes the chain makes checked without an image
        /// (`SizeBound`), every output with its own filters. When collecting, a fault is
        /// noted and the part left out.
        mutating func processor(_ spec: PipelineSpec, environment: Environment) throws -> ImageProcessor {
            var filters: [(step: FilterStep, path: String)] = []
            for (index, filter) in spec.filters.enumerated() {
                let at = "filters[\(index)]"
                if let step = try attempt({ try BuiltPipeline.checkedFilter(spec, filter, at: at, environment: environment) }) {
                    filters.append((step, at))
                }
            }
            var outputs: [OutputPlan] = []
            for (outputIndex, output) in spec.outputs.enumerated() {
                var steps: [(step: FilterStep, path: String)] = []
                for (index, filter) in output.filters.enumerated() {
                    let at = BuiltPipeline.path(ofFilter: index, ofOutput: outputIndex, in: spec)
                    if let step = try attempt({ try BuiltPipeline.checkedFilter(spec, filter, at: at, environment: environment) })
                    {
                        steps.append((step, at))
                    }
                }
                // Faults the sizes the chain makes show without an image (`SizeBound`): the
                // common steps' told once.
                for fault in SizeBound.faults(of: filters + steps)
                where outputIndex == 0 || !filters.contains(where: { $0.path == fault.path }) {
                    _ = try attempt { throw SpecError(path: fault.path, message: fault.message) }
                }
                outputs.append(
                    OutputPlan(
                        output, filters: steps.map(\.step),
                        path: BuiltPipeline.path(ofOutput: outputIndex, in: spec)))
            }
            return ImageProcessor(
                ProcessorSettings(
                    filters: filters.map(\.step), outputs: outputs, limits: spec.limits, baseDirectory: spec.baseDirectory,
                    accept: spec.accept, captionField: spec.source.parameters.captionField))
        }

        /// A step that sets both sides of its result must stay within `limits.maxPixels`,
        /// as inputs do: `fill 40000×40000` would hold every item for minutes and gigabytes.
        static func checkOutputSize(_ step: FilterStep, at path: String, limits: Limits) throws {
            let size: (Int, Int)?
            switch step {
            case .fill(let width, let height, _, _): size = (width, height)
            case .fit(let width?, let height?, true): size = (width, height)
            case .resize(let width?, let height?, _): size = (width, height)
            default: size = nil
            }
            guard let (width, height) = size,
                width.multipliedReportingOverflow(by: height).overflow
                    || width * height > limits.maxPixels
            else { return }
            throw SpecError(
                path: path,
                message: "\(step.opName) \(width)×\(height) makes images over limits.maxPixels "
                    + "(\(ImageProcessor.megapixels(limits.maxPixels))); raise the limit or make them smaller")
        }

        /// A watermark must be a readable regular file (a FIFO or a device such as
        /// `/dev/zero` would block the run or never end) within `limits.maxBytes`.
        static func checkWatermark(_ resolved: String, at path: String, limits: Limits) throws {
            var info = stat()
            guard stat(resolved, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
                FileManager.default.isReadableFile(atPath: resolved)
            else {
                throw SpecError(
                    path: "\(path).image", message: "cannot read watermark image \(resolved): not a readable regular file")
            }
            guard Int(info.st_size) <= limits.maxBytes else {
                throw SpecError(
                    path: "\(path).image",
                    message: "watermark image \(resolved) is \(info.st_size) bytes, over limits.maxBytes (\(limits.maxBytes))")
            }
            // Not an image at all: the pipeline's fault, not every item's `decode`.
            var head: [UInt8] = []
            if let handle = FileHandle(forReadingAtPath: resolved) {
                head = [UInt8]((try? handle.read(upToCount: 64)) ?? Data())
                try? handle.close()
            }
            guard case .accepted = ImageFormat.sniff(head) else {
                throw SpecError(
                    path: "\(path).image",
                    message: "watermark image \(resolved) is not a JPEG, PNG, GIF, WebP, TIFF, HEIF or AVIF file")
            }
            // Damaged or too large: also the pipeline's fault. Decoded whole once here, so that
            // its failure is not blamed on every item as `decode`.
            let image: VipsImage
            do {
                try VipsRuntime.setUp()
                image = try VipsImage.open(path: resolved)
            } catch {
                throw SpecError(path: "\(path).image", message: "watermark image \(resolved) cannot be read: \(error)")
            }
            let (pixels, overflow) = image.width.multipliedReportingOverflow(by: image.height)
            guard !overflow, pixels <= limits.maxPixels else {
                throw SpecError(
                    path: "\(path).image",
                    message: "watermark image \(resolved) is \(image.width)×\(image.height), "
                        + "over limits.maxPixels (\(ImageProcessor.megapixels(limits.maxPixels)))")
            }
            do {
                _ = try image.average()
            } catch {
                throw SpecError(path: "\(path).image", message: "watermark image \(resolved) cannot be decoded: \(error)")
            }
        }
    }

    /// The processor a run of `spec` would have, with every check `build` makes of its
    /// filters and outputs (variables, watermark images, sizes): what a dry-run needs before
    /// any sample (a missing watermark is the pipeline's fault, named with its path, not a
    /// failure of every sample).
    public static func processor(for spec: PipelineSpec, environment: Environment) throws -> ImageProcessor {
        var assembly = Assembly(collecting: false)
        return try assembly.processor(spec, environment: environment)
    }

    /// Where an output's filter is written: `output.filters[i]` or `outputs[j].filters[i]`.
    static func path(ofFilter index: Int, ofOutput outputIndex: Int, in spec: PipelineSpec) -> String {
        "\(path(ofOutput: outputIndex, in: spec)).filters[\(index)]"
    }

    /// Where an output is written: `output` or `outputs[j]`.
    static func path(ofOutput index: Int, in spec: PipelineSpec) -> String {
        spec.document["outputs"] == nil ? "output" : "outputs[\(index)]"
    }

    /// `filter` (at `path` in the file) expanded, its watermark image and its output size
    /// checked.
    static func checkedFilter(
        _ spec: PipelineSpec, _ filter: FilterSpec, at path: String,
        environment: Environment
    ) throws -> FilterStep {
        let step = try PipelineSpec.expanded(filter, path: path, in: environment)
        if case .watermark(let watermark) = step {
            try Assembly.checkWatermark(spec.resolvePath(watermark.image), at: path, limits: spec.limits)
        }
        try Assembly.checkOutputSize(step, at: path, limits: spec.limits)
        return step
    }

    /// The per-host pacing of a run's requests (`limits.rate`, `limits.burst`, and the
    /// back-off after 429 and 503, which is always on); a slowed-down host is logged.
    static func makePacing(_ spec: PipelineSpec, logger: Logger) -> HostPacing {
        HostPacing(rate: spec.limits.rate, burst: spec.limits.burst) { note in
            logger.warning("\(note)")
        }
    }

    /// The fetcher of a remote source (feed pages and images, through its disk cache when
    /// it has one and `withCache`); nil for a local source.
    static func makeFetcher(
        _ spec: PipelineSpec, environment: Environment, cancellation: CancellationFlag,
        logger: Logger, withCache: Bool = true, pacing: HostPacing? = nil
    ) throws -> RemoteFetcher? {
        guard let remote = spec.source.remote else { return nil }
        var cache: DiskCache?
        var revalidate = false
        if let cacheSpec = remote.cache, withCache {
            cache = try DiskCache(
                directory: try cacheSpec.directory(in: spec, environment: environment), maxSize: cacheSpec.maxSize,
                recorded: environment.recorded, restored: environment.restored, readOnly: cacheSpec.readOnly)
            revalidate = cacheSpec.revalidate
        }
        let client = HTTPClient(
            timeout: spec.limits.timeout, cancellation: cancellation, userAgent: spec.userAgent,
            pacing: remote.paced ? pacing ?? makePacing(spec, logger: logger) : nil, addresses: spec.network)
        var fetcher = RemoteFetcher(
            client: client, cache: cache, revalidate: revalidate, attempts: spec.retry.attempts,
            backoff: spec.retry.backoff, maxBytes: spec.limits.maxBytes,
            respectOptOut: remote.respectOptOut, robots: remote.robots, logger: logger,
            redact: environment.redact)
        fetcher.maxPageBytes = remote.maxPageBytes
        fetcher.optOutHosts = HostOptOuts(after: remote.optOutHostAfter)
        fetcher.objects = try spec.source.parameters.objectClient(in: environment, http: client)
        return fetcher
    }

    /// `excluding`: folders a directory source must not list besides its directory sinks'.
    static func makeFeed(
        _ source: SourceSpec, spec: PipelineSpec, environment: Environment, fetcher: RemoteFetcher?,
        excluding: [String] = [], notice: @escaping @Sendable (String) -> Void
    ) throws -> any Feed {
        let told: @Sendable (String) -> Void = { message in notice(environment.redact(message)) }
        let feed = try source.parameters.makeFeed(
            FeedContext(spec: spec, environment: environment, fetcher: fetcher, excluding: excluding, notice: told))
        guard let fallback = source.remote?.fallback else { return feed }
        let fallbackFeed = try makeFeed(
            fallback, spec: spec, environment: environment, fetcher: fetcher, excluding: excluding,
            notice: notice)
        return FallbackFeed(primary: feed, fallback: fallbackFeed, onFallback: told)
    }
}

extension BuiltPipeline {
    /// Keys of a run's fingerprint that `resume` does not compare (where outputs go, which
    /// a resume may change under a sink's name), or compares only when the run recorded
    /// them (runs of an older imgpipe did not).
    public static let sinkTargetsKey = "sinkTargets"
    public static let assetsKey = "assets"

    /// What the store records as the run's fingerprint: the pipeline's `outputFingerprint`
    /// (filters and outputs as written) and, for change-aware re-runs,
    /// - `assets`: per output whose filters (common and its own) read a watermark image or
    ///   hold a `${…}`, a SHA-256 of the images' bytes and of the filters with their values
    ///   expanded: another picture under the same file name, or another `${LABEL}`, changes
    ///   the output as much as another filter;
    /// - `sinkTargets`: per sink whose entry holds a `${…}`, a SHA-256 of where it delivers
    ///   with the values expanded (a folder's path; a URL or endpoint without its query; a
    ///   bucket, prefix, region and key template): `"path": "${OUTDIR}"` sent elsewhere is
    ///   another sink, though its entry as written is the same. Headers, form fields,
    ///   metadata and credentials are not part of it.
    public var runFingerprint: [String: String] {
        var fingerprint = spec.outputFingerprint
        func parts(_ filters: [FilterSpec]) -> [String] {
            var found = filters.compactMap { (try? PipelineSpec.expanded($0, path: "", in: environment)).flatMap(watermarkHash) }
            let written = JSONValue.array(
                filters.map { filter in
                    .object([("op", .string(filter.op))] + filter.arguments.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
                }
            ).serialized(sortedKeys: true)
            if written.contains("${") { found.append(sha256Hex(expandingAll(written))) }
            return found
        }
        let common = parts(spec.filters)
        var assets: [(String, JSONValue)] = []
        for output in spec.outputs.sorted(by: { $0.id < $1.id }) {
            let found = common + parts(output.filters)
            if !found.isEmpty { assets.append((output.id, .string(sha256Hex(found.joined(separator: " "))))) }
        }
        if !assets.isEmpty { fingerprint[Self.assetsKey] = JSONValue.object(assets).serialized(sortedKeys: true) }
        let written = spec.document["sinks"]?.arrayValue ?? spec.document["sink"].map { [$0] } ?? []
        var targets: [(String, JSONValue)] = []
        for (sink, entry) in zip(spec.sinks, written) {
            guard case .object(var members) = entry.withoutComments else { continue }
            // A bucket given as a location of its own (`"s3": {…}` of a `webdataset` sink): its
            // fields say where outputs go as the `s3` sink's own do.
            if let index = members.firstIndex(where: { $0.key == "s3" }), case .object(let location) = members[index].value {
                members.remove(at: index)
                members += location
            }
            let place = members.compactMap { member -> (String, JSONValue)? in
                guard Self.whereOutputsGo.contains(member.key) else { return nil }
                guard case .string(let text) = member.value else { return (member.key, member.value) }
                var expanded = expandingAll(text)
                // A folder as the folder it is, however it is spelled (`./out`, `out/`, a link).
                if member.key == "path", case .string("directory")? = members.first(where: { $0.key == "type" })?.value {
                    expanded = spec.resolvePath(expanded).realPath
                }
                // A URL's query (where an API key often rides) is not where outputs go.
                let kept =
                    ["url", "endpoint"].contains(member.key) ? String(expanded.prefix { $0 != "?" && $0 != "#" }) : expanded
                return (member.key, .string(kept))
            }
            guard JSONValue.object(members.filter { Self.whereOutputsGo.contains($0.key) }).serialized().contains("${") else {
                continue
            }
            targets.append((sink.name, .string(sha256Hex(JSONValue.object(place).serialized(sortedKeys: true)))))
        }
        if !targets.isEmpty { fingerprint[Self.sinkTargetsKey] = JSONValue.object(targets).serialized(sortedKeys: true) }
        return fingerprint
    }

    /// `text` with every `${NAME}` replaced by its value, short ones included (`Environment.restored`
    /// knows only the values long enough to be masked).
    func expandingAll(_ text: String) -> String {
        (try? EnvString(raw: text, path: "").expanded(in: environment)) ?? text
    }

    /// Sink fields that say where outputs go.
    static let whereOutputsGo: Set<String> = [
        "type", "path", "url", "endpoint", "method", "bucket", "prefix", "region",
        "pathStyle", "key",
    ]

    /// The SHA-256 of a watermark step's image file as it is now (nil for other steps).
    func watermarkHash(_ step: FilterStep) -> String? {
        guard case .watermark(let watermark) = step else { return nil }
        guard let data = FileManager.default.contents(atPath: spec.resolvePath(watermark.image)) else { return "unreadable" }
        return sha256Hex(data)
    }
}
