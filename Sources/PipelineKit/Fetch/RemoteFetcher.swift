import Foundation
import Logging

/// Which tier served an item's bytes.
public enum Tier: String, Sendable, Codable, CaseIterable {
    /// Downloaded now.
    case remote
    /// Read from the disk cache (a hit, a 304, or the server being unreachable).
    case cache
    /// Read from the source's `fallback` (the remote feed could not be listed).
    case fallback
    /// A local source (a directory).
    case local
}

/// Cache settings of a remote source.
public struct CachePolicy: Sendable, Equatable {
    public var directory: String
    /// Ask the server (`If-None-Match`/`If-Modified-Since`) before using a cached copy.
    public var revalidate: Bool
    public var maxSize: Int?
}

/// Feed pages and images over HTTP, through the disk cache: remote, else cache. With the
/// cache on and `revalidate` off, a cached URL is not requested at all, so a second run
/// downloads nothing; a failed request falls back to a cached copy when there is one.
public struct RemoteFetcher: Sendable {
    public let client: HTTPClient
    public let cache: DiskCache?
    public let revalidate: Bool
    public let attempts: Int
    public let backoff: Double
    public let maxBytes: Int
    /// The largest feed page read (the source's `maxPageBytes`); a larger page is not
    /// listed, the failure naming the setting.
    public var maxPageBytes = RemoteOptions.defaultMaxPageBytes
    /// Skip images whose answer carries an opt-out `X-Robots-Tag` (`respectOptOut`).
    public let respectOptOut: Bool
    /// The hosts' robots.txt, when the source has `"robots": true`.
    public let robots: RobotsPolicy?
    /// The User-Agent's product token, which `X-Robots-Tag` lines may be addressed to.
    let agent: String
    /// Which hosts answer: a dead host's items fail at once instead of one by one.
    public let hosts = HostHealth()
    /// Hosts that opted out of so many images that the others are not asked for (with
    /// `respectOptOut`).
    public var optOutHosts = HostOptOuts(after: RemoteOptions.defaultOptOutHostAfter)
    /// The bucket of an `s3` source: its items' `s3://bucket/key` addresses are fetched
    /// with a GET signed when it is sent, and cached under the address (no signature).
    public var objects: S3Client?
    package let logger: Logger
    /// Masks secrets in what is logged.
    package let redact: @Sendable (String) -> String

    public init(
        client: HTTPClient, cache: DiskCache?, revalidate: Bool, attempts: Int, backoff: Double, maxBytes: Int,
        respectOptOut: Bool = true, robots: Bool = false,
        logger: Logger = Logger(label: "imgpipe"), redact: @escaping @Sendable (String) -> String = { $0 }
    ) {
        self.respectOptOut = respectOptOut
        self.robots = robots ? RobotsPolicy(client: client, attempts: attempts, backoff: backoff) : nil
        agent = ImgpipeIdentity.productToken(of: client.userAgent)
        self.logger = logger
        self.redact = redact
        self.client = client
        self.cache = cache
        self.revalidate = revalidate
        self.attempts = attempts
        self.backoff = backoff
        self.maxBytes = maxBytes
    }

    /// A feed page's bytes and the tier that served them.
    public func page(_ address: String) throws -> (Data, Tier) {
        let (data, tier) = try fetchPage(address)
        logger.info("feed page", metadata: ["url": "\(redact(address))", "tier": "\(tier.rawValue)", "bytes": "\(data.count)"])
        return (data, tier)
    }

    private func fetchPage(_ address: String) throws -> (Data, Tier) {
        guard let url = URL(webAddress: address) else { throw FeedError("not a URL: \(address)") }
        let cached = cache?.pageEntry(for: address)
        if let cached, !revalidate, let data = cache?.page(at: cached) { return (data, .cache) }
        do {
            let cancellation = client.cancellation
            let request = HTTPRequest(
                url: url, headers: conditionalHeaders(cached), maxBytes: maxPageBytes,
                maxBytesName: "source.maxPageBytes")
            let result = try client.performWithRetries(
                request, attempts: attempts, backoff: backoff,
                isCancelled: { cancellation?.isCancelled ?? false })
            if result.status == 304, let cached, let data = cache?.page(at: cached) {
                return (data, .cache)
            }
            guard (200...299).contains(result.status), let body = result.body else {
                throw HTTPFailure(kind: .status, message: "HTTP \(result.status)", status: result.status, retryAfter: nil)
            }
            _ = try? cache?.storePage(url: address, data: body, etag: result.etag, lastModified: result.lastModified)
            return (body, .remote)
        } catch {
            // A copy of a page whose address is now refused is not served in its place.
            if (error as? HTTPFailure)?.kind != .blocked, let cached, let data = cache?.page(at: cached) {
                return (data, .cache)
            }
            throw FeedError("cannot fetch \(address): \(error)")
        }
    }

    /// What one download attempt came to.
    public enum ImageFetch: Sendable, Equatable {
        /// The image is at the destination, served by this tier; `body` is a copy of its
        /// bytes in memory when the download kept one (`keptInMemory`), so that they need
        /// not be read back from the file.
        case fetched(Tier, body: Data?)
        /// The attempt failed in a way that may pass: try again after this many seconds.
        case retry(after: Double)
        /// The image is not to be used (robots.txt, `X-Robots-Tag`); nothing was spooled.
        case skipped(ItemSkip)
        /// The host's turn (`limits.rate`, a `Retry-After` on the host) is this many
        /// seconds away: ask again then, as the same attempt, passing `reserved` (the turn
        /// is kept), instead of holding a download thread.
        case later(after: Double, reserved: Bool)
    }

    /// A downloaded image of at most this many bytes is kept in memory as well as written to
    /// its spool file, and handed on from there: with the run's items in flight (`limits`:
    /// downloads + 2 × workers + uploads), at most that many times this much memory.
    public static let keptInMemory = 2 << 20

    /// Waits shorter than this are slept through on the download thread; longer ones are
    /// handed back to the runner (`ImageFetch.later`).
    static let longestInlineWait = 0.05

    /// One attempt at an image: downloads it to `destination` (or links it from the cache)
    /// and says which tier served it, or asks to be tried again later (the caller waits
    /// without holding a thread). Final failures are `ItemFailure`s: `limit` for an
    /// oversized body, `decode` for a body that is not an image (an HTML error page),
    /// `download` otherwise; a cached copy is used instead when there is one.
    ///
    /// Before anything else, a host's robots.txt (with `robots`) may refuse the URL; then
    /// an opt-out `X-Robots-Tag` (with `respectOptOut`) skips the image: on a download, as
    /// soon as the headers are in (its body is not downloaded); on a cached copy, from the
    /// lines kept with it.
    ///
    /// With `limits.rate` or a host that said it is overloaded, the request waits for its
    /// host's turn first (`later`); `reserved` says a turn was already given to it.
    ///
    /// Without a cache the download is written beside `destination` and renamed there once
    /// complete: into `writingOver` when given (a file of an ended item, written over and
    /// renamed away from its name), else into `destination` + `partialSuffix`.
    public func image(
        _ address: String, to destination: String, attempt: Int,
        reserved: Bool = false, writingOver reused: String? = nil
    ) throws(ItemFailure) -> ImageFetch {
        guard let url = URL(webAddress: address) else { throw ItemFailure(.download, "not a URL: \(redact(address))") }
        switch robots?.verdict(for: url) ?? .allowed {
        case .allowed: break
        case .refused(let skip): return .skipped(skip)
        // The run is stopping: asked again (and given back for resume) like a retry.
        case .undecided: return .retry(after: 0)
        }
        // A host that opted out of image after image is not asked for this one.
        let origin = HostHealth.key(of: url)
        if respectOptOut, let skip = optOutHosts.skip(origin) { return .skipped(skip) }
        let cached = cache?.entry(for: address)
        if let cached, !revalidate, let served = fromCache(cached, at: destination, origin: origin) { return served }
        let temporary = cache?.temporaryFile() ?? reused ?? destination + Self.partialSuffix
        let result: HTTPResult
        var request = HTTPRequest(url: url, headers: conditionalHeaders(cached), destination: temporary, maxBytes: maxBytes)
        if url.scheme == "s3" {
            guard let objects, let key = objects.key(of: address) else {
                throw ItemFailure(.download, "not an object of the source's bucket: \(address)")
            }
            request = objects.getRequest(key: key, headers: request.headers, destination: temporary, maxBytes: maxBytes)
        }
        request.keepInMemory = Self.keptInMemory
        if respectOptOut {
            // The same rule as for the finished answer (and a cached copy) below.
            request.refuseBody = { [self] answer in optOut(answer.headerValues["x-robots-tag"]) != nil }
        }
        if let robots, let origin = RobotsPolicy.origin(of: url) {
            // A redirect within the host is checked against the same robots.txt before it
            // is followed (one to another host is not: docs/polite.md, "robots.txt").
            request.refuseRedirect = { target in
                guard RobotsPolicy.origin(of: target) == origin,
                    case .refused(let skip) = robots.verdict(for: target)
                else { return nil }
                return "redirected to \(RobotsPolicy.pathAndQuery(of: target)): " + skip.message
            }
        }
        // The host the request goes to (an object's endpoint, not its `s3://bucket`), as
        // the client's pacing counts it.
        let host = HostHealth.key(of: request.url)
        if case .refuse(let message) = hosts.admit(host) {
            if let cached, let served = fromCache(cached, at: destination, origin: origin) { return served }
            throw ItemFailure(.download, message)
        }
        if let pacing = client.pacing {
            if reserved {
                // A `Retry-After` came since the turn was given: a new turn after it.
                let pause = pacing.pause(of: host)
                if pause > 0 { return .later(after: pause, reserved: false) }
            } else {
                let wait = pacing.reserve(host)
                if wait > Self.longestInlineWait { return .later(after: wait, reserved: true) }
                if wait > 0 { Thread.sleep(forTimeInterval: wait) }
            }
            request.paced = true
        }
        do {
            let performed = Result { () throws(HTTPFailure) -> HTTPResult in try client.perform(request) }
            switch performed {
            case .success: hosts.answered(host)
            case .failure(let error) where error.status == nil && (error.kind == .network || error.kind == .timeout):
                hosts.failed(host, error.message)
            case .failure: break
            }
            result = try performed.get()
            try result.throwIfRetryableStatus()
        } catch {
            unlink(temporary)
            if error.retryable, attempt < attempts {
                return .retry(after: error.retryDelay(attempt: attempt, backoff: backoff))
            }
            // A copy made before the address was refused is not served in its place.
            if error.kind != .blocked, let cached, let served = fromCache(cached, at: destination, origin: origin) {
                return served
            }
            // The URL asked for, unless the message already names it.
            let named = error.kind == .io || error.kind == .tooLarge || error.message.contains(url.absoluteString)
            let asked = named ? "" : ", asking for \(shown(url, address))"
            throw ItemFailure(
                error.kind == .tooLarge ? .limit : error.kind == .io ? .io : error.kind == .blocked ? .blockedAddress : .download,
                error.message + asked + (attempt > 1 ? " (after \(attempt) attempts)" : ""), httpStatus: error.status)
        }
        if let refusal = result.redirectRefused {
            unlink(temporary)
            return .skipped(ItemSkip(.robots, refusal))
        }
        let robotsTag = result.headerValues["x-robots-tag"]
        // Only an answer with the image speaks for it: error pages often carry `noindex`.
        if (200...299).contains(result.status), let skip = optOut(robotsTag, at: origin) {
            unlink(temporary)
            return .skipped(skip)
        }
        if result.status == 304, var cached {
            // A 304 may restate the header; if it does not, the lines kept with the copy hold.
            if let robotsTag { cached.robotsTag = robotsTag }
            if let served = fromCache(cached, at: destination, origin: origin) {
                unlink(temporary)
                return served
            }
        }
        guard (200...299).contains(result.status) else {
            unlink(temporary)
            if let cached, let served = fromCache(cached, at: destination, origin: origin) { return served }
            throw ItemFailure(.download, "HTTP \(result.status) from \(shown(url, address))", httpStatus: result.status)
        }
        let head = Array(
            result.body?.prefix(64)
                ?? (FileHandle(forReadingAtPath: temporary).flatMap { try? $0.read(upToCount: 64) }) ?? Data())
        if case .accepted = ImageFormat.sniff(head) {
        } else {
            unlink(temporary)
            let what: String
            switch ImageFormat.sniff(head) {
            case .refused(let name): what = name
            default: what = head.isEmpty ? "an empty body" : "an unrecognised format"
            }
            throw ItemFailure(
                .decode, "not an image: the server sent \(what) (Content-Type \(result.headers["content-type"] ?? "none"))",
                httpStatus: result.status)
        }
        if let cache {
            // Into the spool first, then into the cache: an eviction right after storing
            // (an image larger than maxSize, other downloads) cannot take it from the item.
            guard Self.place(temporary, at: destination) else {
                unlink(temporary)
                throw ItemFailure(.io, "cannot spool \(address)")
            }
            do {
                try cache.store(
                    url: address, file: temporary, etag: result.etag, lastModified: result.lastModified,
                    robotsTag: robotsTag)
            } catch {
                unlink(temporary)  // the item has its copy; only the cache misses it
            }
        } else if rename(temporary, destination) != 0 {
            unlink(temporary)
            throw ItemFailure(.io, "cannot spool \(address): \(String(cString: strerror(errno)))")
        }
        return .fetched(.remote, body: result.body)
    }

    /// The URL asked for, as a message shows it: as it was sent (escapes and all), or as
    /// written with its secrets masked when it holds one (a secret sent percent-encoded
    /// would not be recognised in the sent form).
    private func shown(_ url: URL, _ address: String) -> String {
        let masked = redact(address)
        return masked == address ? url.absoluteString : masked
    }

    /// What a half-written download's name ends with, beside its destination.
    public static let partialSuffix = ".part"

    /// Whether `image` writes a download beside its destination (no cache: with one, it
    /// goes through a file of the cache's), so that it can write over a file given to it.
    public var writesBeside: Bool { cache == nil }

    /// The skip an opt-out `X-Robots-Tag` calls for, when `respectOptOut` is on.
    func optOut(_ lines: [String]?) -> ItemSkip? {
        optOutLine(lines).map { ItemSkip(.optOut, "X-Robots-Tag: \($0)") }
    }

    /// The `X-Robots-Tag` line that opts an image out, when `respectOptOut` heeds one.
    private func optOutLine(_ lines: [String]?) -> String? {
        guard respectOptOut, let lines else { return nil }
        return RobotsTag.optOut(in: lines, agent: agent)?.line
    }

    /// `optOut(lines)`, counted against the image's host, `origin` (`optOutHosts`).
    private func optOut(_ lines: [String]?, at origin: String) -> ItemSkip? {
        guard let line = optOutLine(lines) else { return nil }
        optOutHosts.sighted(origin, line: line)
        return ItemSkip(.optOut, "X-Robots-Tag: \(line)")
    }

    /// A cached copy at `destination`, or its skip; nil when it cannot be placed.
    private func fromCache(_ cached: DiskCache.Entry, at destination: String, origin: String) -> ImageFetch? {
        if let skip = optOut(cached.robotsTag, at: origin) { return .skipped(skip) }
        return Self.place(cached.path, at: destination) ? .fetched(.cache, body: nil) : nil
    }

    private func conditionalHeaders(_ cached: DiskCache.Entry?) -> [String: String] {
        guard revalidate, let cached else { return [:] }
        var headers: [String: String] = [:]
        if let etag = cached.etag { headers["If-None-Match"] = etag }
        if let lastModified = cached.lastModified { headers["If-Modified-Since"] = lastModified }
        return headers
    }

    /// Hard-links (or copies, across file systems) a cached body to `destination`.
    package static func place(_ source: String, at destination: String) -> Bool {
        unlink(destination)
        if link(source, destination) == 0 { return true }
        return (try? FileManager.default.copyItem(atPath: source, toPath: destination)) != nil
    }
}
