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
    public var output: OutputSpec
    public var sinks: [SinkSpec]
    public var limits: Limits
    public var retry: RetryPolicy
    /// Sent as `User-Agent` with every request (feed pages, images, robots.txt, uploads).
    public var userAgent: String = ImgpipeIdentity.defaultUserAgent
    /// Which inputs are processed; the others are skipped.
    public var accept = AcceptRules()
    /// The absolute directory of the pipeline file; relative paths start here.
    public var baseDirectory: String
    /// The document as written (no `${…}` expanded), for the state file.
    public var document: JSONValue

    /// The parts of the document that decide what an output looks like, as canonical JSON:
    /// `resume` refuses to continue a run if these changed.
    public var outputFingerprint: [String: String] {
        [
            "filters": (document["filters"] ?? .array([])).withoutComments.serialized(sortedKeys: true),
            "output": (document["output"] ?? .null).withoutComments.serialized(sortedKeys: true),
        ]
    }

    /// `path` (already expanded) made absolute against the pipeline file's directory.
    public func resolvePath(_ path: String) -> String {
        if path.hasPrefix("/") { return URL(fileURLWithPath: path).standardizedFileURL.path }
        return URL(fileURLWithPath: baseDirectory).appendingPathComponent(path).standardizedFileURL.path
    }
}

/// Where items come from.
public indirect enum SourceSpec: Sendable, Equatable {
    /// Every image file below `path` (recursively unless `recursive` is false).
    case directory(path: EnvString, recursive: Bool)
    /// A local file of URLs (`.txt`, `.csv`, `.jsonl`, optionally `.gz`).
    case urlList(path: EnvString, remote: RemoteOptions)
    /// A JSON array of objects with an image URL each.
    case jsonFeed(url: EnvString, urlField: String, keyField: String?, remote: RemoteOptions)
    /// NASA's image search, paged by `next` links.
    case nasaImages(query: EnvString, endpoint: EnvString, mediaType: String, maxItems: Int?, remote: RemoteOptions)
    /// Flickr search, page by page.
    case flickrSearch(text: EnvString, apiKey: EnvString, endpoint: EnvString, perPage: Int, maxItems: Int?,
                      size: String, remote: RemoteOptions)

    public var typeName: String {
        switch self {
        case .directory: "directory"
        case .urlList: "url-list"
        case .jsonFeed: "json-feed"
        case .nasaImages: "nasa-images"
        case .flickrSearch: "flickr-search"
        }
    }

    /// `cache` and `fallback` of a remote source; nil for a directory.
    public var remote: RemoteOptions? {
        switch self {
        case .directory: nil
        case let .urlList(_, remote), let .jsonFeed(_, _, _, remote), let .nasaImages(_, _, _, _, remote),
             let .flickrSearch(_, _, _, _, _, _, remote): remote
        }
    }
}

/// What every remote source takes besides its own fields.
public struct RemoteOptions: Sendable, Equatable {
    /// nil when `"cache": false`.
    public var cache: CacheSpec?
    /// Listed instead when this source cannot be listed.
    public var fallback: SourceSpec?
    /// Skip an image answered with an opt-out `X-Robots-Tag` (`noai`, `noimageai`, `none`,
    /// `noindex`). Applies to the fallback's items too.
    public var respectOptOut = true
    /// Read each host's robots.txt and skip the images it disallows. Applies to the
    /// fallback's items too.
    public var robots = false

    public init(cache: CacheSpec? = CacheSpec(), fallback: SourceSpec? = nil, respectOptOut: Bool = true,
                robots: Bool = false) {
        self.cache = cache
        self.fallback = fallback
        self.respectOptOut = respectOptOut
        self.robots = robots
    }
}

/// `cache`: `true` (the default), `false`, or `{ "path", "revalidate", "maxSize" }`.
public struct CacheSpec: Sendable, Equatable {
    /// nil: `.imgpipe/cache` in the current directory.
    public var path: EnvString?
    public var revalidate = false
    /// Bytes of cached bodies at most (least recently used evicted first).
    public var maxSize: Int?

    /// The bound when the file sets none: a cache is a convenience, not a second copy of
    /// every feed ever fetched.
    public static let defaultMaxSize = 1 << 30

    /// `.imgpipe/cache` in the current directory, where a cache without a `path` lives.
    public static var defaultDirectory: String { URL(fileURLWithPath: ".imgpipe/cache").standardizedFileURL.path }

    /// The folder of this cache: its `path` expanded and resolved against the pipeline
    /// file's folder, else the default.
    public func directory(in spec: PipelineSpec, environment: Environment) throws -> String {
        try path.map { spec.resolvePath(try $0.expanded(in: environment)) } ?? Self.defaultDirectory
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

/// Where outputs go. Each sink has a name, unique in the pipeline (default: its type and
/// index, e.g. `upload-1`).
public enum SinkSpec: Sendable, Equatable {
    case directory(name: String, path: EnvString)
    /// The two-step upload: `GET endpoint` → `{"url": U}` → `POST U` (multipart).
    case upload(name: String, endpoint: EnvString, fields: [NamedValue], fileField: String, originalField: String)
    /// One request per item to a URL template: `PUT` (raw body) or `POST` (multipart).
    case http(name: String, url: EnvString, method: String, fileField: String, headers: [NamedValue])

    public var name: String {
        switch self {
        case let .directory(name, _), let .upload(name, _, _, _, _), let .http(name, _, _, _, _): name
        }
    }

    public var typeName: String {
        switch self {
        case .directory: "directory"
        case .upload: "upload"
        case .http: "http"
        }
    }
}

/// Concurrency and safety limits.
public struct Limits: Sendable, Equatable {
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
    /// Largest input accepted, in pixels (width × height, read from the header).
    public var maxPixels = 100_000_000

    public init() {}

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
        backoff * pow(2, Double(attempt - 1)) * Double.random(in: 0.5 ... 1.5)
    }
}
