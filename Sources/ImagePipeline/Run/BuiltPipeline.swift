import Foundation
import Logging

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

    /// Expands and resolves everything the run needs; errors are `SpecError`s naming the
    /// path of the value (an unset variable, a source directory that does not exist).
    /// `notice` receives what the feed has to say while listing (e.g. falling back).
    public static func build(_ spec: PipelineSpec, path: String, environment: Environment, tuning: Tuning = Tuning(),
                             logger: Logger = Logger(label: "imgpipe"),
                             notice: @escaping @Sendable (String) -> Void = { _ in }) throws -> BuiltPipeline {
        let cancellation = CancellationFlag()
        let fetcher = try makeFetcher(spec, environment: environment, cancellation: cancellation, logger: logger)
        let feed = try makeFeed(spec.source, spec: spec, environment: environment, fetcher: fetcher, notice: notice)
        var uploadClient: HTTPClient?
        func uploads() -> HTTPClient {
            if let uploadClient { return uploadClient }
            let client = HTTPClient(timeout: spec.limits.timeout, cancellation: cancellation)
            uploadClient = client
            return client
        }
        var sinks: [any Sink] = []
        for sink in spec.sinks {
            switch sink {
            case let .directory(name, pathValue):
                sinks.append(DirectorySink(name: name, root: spec.resolvePath(try pathValue.expanded(in: environment))))
            case let .upload(name, endpointValue, fieldValues, fileField, originalField):
                let endpoint = try endpointValue.expanded(in: environment)
                guard let url = URL(string: endpoint), ["http", "https"].contains(url.scheme?.lowercased() ?? "") else {
                    throw SpecError(path: endpointValue.path, message: "expected an http(s) URL, got \(JSONValue.quote(environment.redact(endpoint)))")
                }
                let fields = try fieldValues.map { ($0.name, try $0.value.expanded(in: environment)) }
                sinks.append(UploadSink(name: name, endpoint: url, fields: fields, fileField: fileField, originalField: originalField,
                                        client: uploads(), retry: spec.retry))
            case let .http(name, urlValue, method, fileField, headerValues):
                let template = try urlValue.expanded(in: environment)
                guard template.lowercased().hasPrefix("http://") || template.lowercased().hasPrefix("https://") else {
                    throw SpecError(path: urlValue.path, message: "expected an http(s) URL template, got \(JSONValue.quote(environment.redact(template)))")
                }
                var headers: [String: String] = [:]
                for header in headerValues { headers[header.name] = try header.value.expanded(in: environment) }
                sinks.append(HTTPSink(name: name, urlTemplate: template, method: method, fileField: fileField, headers: headers,
                                      client: uploads(), retry: spec.retry))
            }
        }
        let filters = try spec.expandedFilters(in: environment)
        for (index, step) in filters.enumerated() {
            if case let .watermark(watermark) = step {
                let resolved = spec.resolvePath(watermark.image)
                // A FIFO or a device (`/dev/zero`) would block the run or never end.
                var info = stat()
                guard stat(resolved, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
                      FileManager.default.isReadableFile(atPath: resolved) else {
                    throw SpecError(path: "filters[\(index)].image", message: "cannot read watermark image \(resolved): not a readable regular file")
                }
                guard Int(info.st_size) <= spec.limits.maxBytes else {
                    throw SpecError(path: "filters[\(index)].image",
                                    message: "watermark image \(resolved) is \(info.st_size) bytes, over limits.maxBytes (\(spec.limits.maxBytes))")
                }
            }
        }
        let processor = ImageProcessor(filters: filters, output: spec.output, limits: spec.limits,
                                       baseDirectory: spec.baseDirectory, tuning: tuning)
        return BuiltPipeline(spec: spec, path: URL(fileURLWithPath: path).standardizedFileURL.path, feed: feed, fetcher: fetcher,
                             sinks: sinks, processor: processor, environment: environment, cancellation: cancellation)
    }

    /// The fetcher of a remote source (feed pages and images, through its disk cache when
    /// it has one); nil for a local source.
    static func makeFetcher(_ spec: PipelineSpec, environment: Environment, cancellation: CancellationFlag,
                            logger: Logger) throws -> RemoteFetcher? {
        guard let remote = spec.source.remote else { return nil }
        var cache: DiskCache?
        var revalidate = false
        if let cacheSpec = remote.cache {
            let directory = try cacheSpec.path.map { spec.resolvePath(try $0.expanded(in: environment)) }
                ?? URL(fileURLWithPath: ".imgpipe/cache").standardizedFileURL.path
            cache = try DiskCache(directory: directory, maxSize: cacheSpec.maxSize, unexpanded: environment.unexpanded,
                                  expanding: environment.expanding)
            revalidate = cacheSpec.revalidate
        }
        let client = HTTPClient(timeout: spec.limits.timeout, cancellation: cancellation)
        return RemoteFetcher(client: client, cache: cache, revalidate: revalidate, attempts: spec.retry.attempts,
                             backoff: spec.retry.backoff, maxBytes: spec.limits.maxBytes, logger: logger,
                             redact: environment.redact)
    }

    static func makeFeed(_ source: SourceSpec, spec: PipelineSpec, environment: Environment, fetcher: RemoteFetcher?,
                         notice: @escaping @Sendable (String) -> Void) throws -> any Feed {
        let feed: any Feed
        switch source {
        case let .directory(pathValue, recursive):
            let root = spec.resolvePath(try pathValue.expanded(in: environment))
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw SpecError(path: pathValue.path, message: "directory \(environment.redact(root)) does not exist")
            }
            return DirectoryFeed(root: root, recursive: recursive)
        case let .urlList(pathValue, _):
            feed = URLListFeed(path: spec.resolvePath(try pathValue.expanded(in: environment)))
        case let .jsonFeed(url, urlField, keyField, _):
            feed = JSONFeed(url: try url.expanded(in: environment), urlField: urlField, keyField: keyField, pages: fetcher!)
        case let .nasaImages(query, endpoint, mediaType, maxItems, _):
            feed = NASAImagesFeed(query: try query.expanded(in: environment), endpoint: try endpoint.expanded(in: environment),
                                  mediaType: mediaType, maxItems: maxItems, pages: fetcher!)
        case let .flickrSearch(text, apiKey, endpoint, perPage, maxItems, size, _):
            feed = FlickrSearchFeed(text: try text.expanded(in: environment), apiKey: try apiKey.expanded(in: environment),
                                    endpoint: try endpoint.expanded(in: environment), perPage: perPage, maxItems: maxItems,
                                    size: size, pages: fetcher!)
        }
        guard let fallback = source.remote?.fallback else { return feed }
        let fallbackFeed = try makeFeed(fallback, spec: spec, environment: environment, fetcher: fetcher, notice: notice)
        return FallbackFeed(primary: feed, fallback: fallbackFeed) { message in notice(environment.redact(message)) }
    }
}
