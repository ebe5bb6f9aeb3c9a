import Foundation

/// A decoded, validated pipeline file (version 1). Strings keep their `${NAME}` form;
/// paths are resolved against `baseDirectory` when the pipeline is built for a run.
public struct PipelineSpec: Sendable {
    public static let currentVersion = 1

    public var version: Int
    /// `name`, or the file's stem.
    public var name: String
    public var source: SourceSpec
    public var filters: [FilterSpec]
    /// Every output of each item, in the file's order (one for `"output"`).
    public var outputs: [OutputSpec]
    public var sinks: [SinkSpec]
    /// The outputs a sink takes, by sink name, when it names them (`"outputs": [ids]`);
    /// a sink not here takes every output.
    public var sinkOutputs: [String: [String]] = [:]
    /// The sinks whose requests are not paced (`"pacing": "off"`), by name.
    public var unpacedSinks: Set<String> = []
    public var limits: Limits
    public var retry: RetryPolicy
    /// Sent as `User-Agent` with every request (feed pages, images, robots.txt, uploads).
    public var userAgent: String = ImgpipeIdentity.defaultUserAgent
    /// Which inputs are processed; the others are skipped.
    public var accept = AcceptRules()
    /// The addresses requests may connect to (`"network"`).
    public var network = AddressPolicy()
    /// Which repeats of the feed are skipped (`"dedup"`).
    public var dedup = DedupPolicy()
    /// The absolute directory of the pipeline file; relative paths start here.
    public var baseDirectory: String
    /// The document as written (no `${…}` expanded), for the state file.
    public var document: JSONValue
    /// The folder of the run's state (a SQLite state file's folder), set by the command
    /// that runs the pipeline, not by the file: a cache without a `path` lives in `cache`
    /// there, so that a run from another folder finds the cache beside the state it finds.
    /// Nil: `.imgpipe` in the current directory.
    public var stateFolder: String?

    /// The first output (the only one of a pipeline with `"output"`).
    public var output: OutputSpec { outputs[0] }

    /// The ids of the outputs `sink` takes, in the pipeline's order.
    public func outputs(of sink: String) -> [String] {
        let named = sinkOutputs[sink]
        return outputs.map(\.id).filter { named?.contains($0) ?? true }
    }

    /// The parts of the document that decide what an output looks like, as canonical JSON:
    /// `resume` refuses to continue a run if these changed. (`outputs` only when the file
    /// has it, so that the fingerprint of a one-output file is what it always was.)
    public var outputFingerprint: [String: String] {
        var parts = [
            "filters": (document["filters"] ?? .array([])).withoutComments.serialized(sortedKeys: true),
            "output": (document["output"] ?? .null).withoutComments.serialized(sortedKeys: true),
        ]
        if let several = document["outputs"] { parts["outputs"] = several.withoutComments.serialized(sortedKeys: true) }
        return parts
    }

    /// Makes a remote source's cache ask the server again (a conditional request) instead of
    /// serving what it holds: `plan` and `run --incremental` compare images as they are now.
    /// `readOnly` (`plan`): the cache is read and never written.
    public mutating func revalidateCache(readOnly: Bool = false) {
        guard var remote = source.parameters as? any RemoteSourceParameters else { return }
        let options = remote.remoteOptions.revalidating
        remote.remoteOptions = readOnly ? options.readingCacheOnly : options
        source = SourceSpec(parameters: remote)
    }

    /// `path` (already expanded) made absolute against the pipeline file's directory.
    public func resolvePath(_ path: String) -> String {
        if path.hasPrefix("/") { return URL(fileURLWithPath: path).standardizedFileURL.path }
        return URL(fileURLWithPath: baseDirectory).appendingPathComponent(path).standardizedFileURL.path
    }
}

/// Where items come from: a source of one of the kinds in `SourceRegistry`.
public struct SourceSpec: Sendable, Equatable {
    /// The entry, decoded by its kind.
    public let parameters: any SourceParameters

    public init(parameters: any SourceParameters) {
        self.parameters = parameters
    }

    public var typeName: String { type(of: parameters).typeName }

    /// `cache` and `fallback` of a remote source; nil for a local one.
    public var remote: RemoteOptions? { (parameters as? any RemoteSourceParameters)?.remoteOptions }

    public static func == (lhs: SourceSpec, rhs: SourceSpec) -> Bool {
        lhs.parameters.isEqual(rhs.parameters)
    }
}

extension SourceSpec {
    /// The caption an item's metadata holds in the source's `captionField` (a string or a
    /// number), nil when the source names none or the item has none.
    public func caption(of metadata: String?) -> String? {
        field(parameters.captionField, of: metadata)
    }

    /// The SHA-256 an item's bytes must have, from the source's `sha256Field`, in lower case
    /// (nil: none expected). A value that is not 64 hex digits is given as it is, and so
    /// matches no input.
    public func expectedSHA256(of metadata: String?) -> String? {
        field(parameters.sha256Field, of: metadata).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .flatMap { $0.isEmpty ? nil : $0 }
    }

    private func field(_ name: String?, of metadata: String?) -> String? {
        name.flatMap { JSONValue.text(of: $0, inMetadata: metadata) }
    }
}

/// What every remote source takes besides its own fields.
public struct RemoteOptions: Sendable, Equatable {
    /// nil when `"cache": false`.
    public var cache: CacheSpec?
    /// Listed instead when this source cannot be listed.
    public var fallback: SourceSpec?
    /// Skip an image answered with an opt-out `X-Robots-Tag` (`noai`, `noimageai`, `noml`,
    /// `none`, `noindex`). Applies to the fallback's items too.
    public var respectOptOut = true
    /// With `respectOptOut`: after this many opt-out answers from one host, its other
    /// images are skipped without a request (`host-opt-out`); 0 never (`optOutHostAfter`).
    public var optOutHostAfter = RemoteOptions.defaultOptOutHostAfter
    /// Read each host's robots.txt and skip the images it disallows. Applies to the
    /// fallback's items too.
    public var robots = false
    /// The field of an item's metadata that changes whenever its image does (`"updated"`
    /// in the Eulerity feed): `plan` and `run --incremental` compare it instead of asking
    /// the server again.
    public var versionField: String?
    /// The largest feed page read, in bytes (`maxPageBytes`, json-feed and the paged
    /// APIs): a page is held in memory whole while it is parsed. Not `limits.maxBytes`,
    /// which bounds each image.
    public var maxPageBytes = RemoteOptions.defaultMaxPageBytes
    /// False with `"pacing": "off"`: the source's requests (feed pages, robots.txt, images)
    /// wait for no host's turn, and a 429 or 503 they get slows no host down (`HostPacing`).
    public var paced = true

    /// Three: once could be one image's rights, three in a run is the host's policy.
    public static let defaultOptOutHostAfter = 3
    /// 64 MiB: some hundred thousand entries of a typical feed.
    public static let defaultMaxPageBytes = 64 << 20
    /// 4 GiB: what a page may be set to at most (parsed, it takes several times that).
    public static let largestMaxPageBytes = 1 << 32

    public init(
        cache: CacheSpec? = CacheSpec(), fallback: SourceSpec? = nil, respectOptOut: Bool = true,
        robots: Bool = false
    ) {
        self.cache = cache
        self.fallback = fallback
        self.respectOptOut = respectOptOut
        self.robots = robots
    }
}

extension RemoteOptions {
    /// These options with the cache (if any) revalidating.
    var revalidating: RemoteOptions {
        var copy = self
        copy.cache?.revalidate = true
        return copy
    }

    /// These options with the cache (if any) read and never written.
    var readingCacheOnly: RemoteOptions {
        var copy = self
        copy.cache?.readOnly = true
        return copy
    }
}

/// `cache`: `true` (the default), `false`, or `{ "path", "revalidate", "maxSize" }`.
public struct CacheSpec: Sendable, Equatable {
    /// nil: `cache` beside the state file (`defaultDirectory(stateFolder:)`).
    public var path: EnvString?
    public var revalidate = false
    /// Read, never written (`plan`): nothing stored, nothing evicted, no use recorded.
    public var readOnly = false
    /// Bytes of cached bodies at most (least recently used evicted first).
    public var maxSize: Int?

    /// The bound when the file sets none: a cache is a convenience, not a second copy of
    /// every feed ever fetched.
    public static let defaultMaxSize = 1 << 30

    /// Where a cache without a `path` lives: `cache` in the folder of the state file
    /// (`stateFolder`), else `.imgpipe/cache` in the current directory.
    public static func defaultDirectory(stateFolder: String? = nil) -> String {
        URL(fileURLWithPath: stateFolder ?? ".imgpipe").appendingPathComponent("cache").standardizedFileURL.path
    }

    /// The folder of this cache: its `path` expanded and resolved against the pipeline
    /// file's folder, else `cache` beside the pipeline's state.
    public func directory(in spec: PipelineSpec, environment: Environment) throws -> String {
        try path.map { spec.resolvePath(try $0.expanded(in: environment)) }
            ?? Self.defaultDirectory(stateFolder: spec.stateFolder)
    }

    public init(path: EnvString? = nil, revalidate: Bool = false, maxSize: Int? = CacheSpec.defaultMaxSize) {
        self.path = path
        self.revalidate = revalidate
        self.maxSize = maxSize
    }
}

/// A name and a value that may hold `${…}` (upload fields, HTTP headers).
public struct NamedValue: Sendable, Equatable {
    public let name: String
    public let value: EnvString
}

/// Where outputs go: a sink of one of the kinds in `SinkRegistry`, with its name, unique in
/// the pipeline (default: its type and index, e.g. `upload-1`).
public struct SinkSpec: Sendable, Equatable {
    public let name: String
    /// The entry's own keys, decoded by its kind.
    public let parameters: any SinkParameters

    public init(name: String, parameters: any SinkParameters) {
        self.name = name
        self.parameters = parameters
    }

    public var typeName: String { type(of: parameters).typeName }

    /// The folder the sink writes into, as written (nil: it writes no folder).
    public var folder: EnvString? { parameters.folder }

    public static func == (lhs: SinkSpec, rhs: SinkSpec) -> Bool {
        lhs.name == rhs.name && lhs.parameters.isEqual(rhs.parameters)
    }
}

/// Concurrency and safety limits.
public struct Limits: Sendable, Equatable, Codable {
    /// Concurrent downloads.
    public var downloads = 16
    /// Pixel workers; 0 means one per core.
    public var workers = 0
    /// Concurrent uploads.
    public var uploads = 8
    /// Seconds for a network request.
    public var timeout: Double = 30
    /// Largest input accepted, in bytes.
    public var maxBytes = 52_428_800
    /// Largest input accepted, in pixels (width × height, read from the header): sharp's
    /// limit, 16383 × 16383. Inputs a decoder must hold whole are bounded by `memory` too.
    public var maxPixels = 268_402_689
    /// The most frames an animation kept as one (`OutputSpec.keepsAnimation`) may have;
    /// `maxPixels` then counts every frame.
    public var maxFrames = 1000
    /// The run's memory budget for pixel work, in megabytes (MiB): items are admitted
    /// against it by an estimate read from their header (`MemoryEstimate`); nil is
    /// `defaultMemory`.
    public var memory: Int?
    /// Requests per second to any one host (downloads, feed pages and sink requests
    /// together); nil is unlimited. See `HostPacing`.
    public var rate: Double?
    /// Requests to a host that may start at once after a quiet spell; nil is
    /// `HostPacing.defaultBurst(for: rate)`.
    public var burst: Int?

    public init() {}

    /// `memory` in bytes, or half of the machine's memory (or its control group's limit),
    /// 2 GiB when neither can be read: the rest is the run's own, the system's and room for
    /// estimates that fall short.
    public var memoryBytes: Int {
        if let memory { return memory << 20 }
        return Self.defaultMemoryBytes
    }

    static let defaultMemoryBytes = (MachineMemory.available() ?? 4 << 30) / 2

    /// `workers`, with 0 replaced by the number of cores.
    public var effectiveWorkers: Int {
        workers > 0 ? workers : max(1, ProcessInfo.processInfo.activeProcessorCount)
    }
}

/// How often and how patiently a failing step is tried again.
public struct RetryPolicy: Sendable, Equatable {
    /// Tries in all, the first included.
    public var attempts = 3
    /// Seconds before the first retry; doubled each time, with jitter.
    public var backoff = 0.5

    public init() {}

    /// Seconds to wait before attempt `attempt + 1`: `backoff` × 2^(attempt−1) × a jitter
    /// of 0.5…1.5. The one backoff rule: downloads, deliveries and staging all wait this.
    public static func delay(afterAttempt attempt: Int, backoff: Double) -> Double {
        backoff * pow(2, Double(attempt - 1)) * Double.random(in: 0.5...1.5)
    }
}
