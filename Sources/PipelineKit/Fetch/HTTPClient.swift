import CCurl
import Dispatch
import Foundation

/// What one HTTP exchange gave.
public struct HTTPResult: Sendable {
    public let status: Int
    /// Header names in lower case.
    public let headers: [String: String]
    /// The body, when it was kept in memory: always without a destination, and with one
    /// when it was no longer than `HTTPRequest.keepInMemory`.
    public let body: Data?
    /// Bytes received.
    public let bytes: Int
    /// Every value of each header, in the order received (names in lower case): a header
    /// sent more than once (`X-Robots-Tag`) keeps each line, where `headers` keeps the last.
    public var headerValues: [String: [String]] = [:]
    /// True when `HTTPRequest.refuseBody` turned the body down after the headers: the
    /// transfer was stopped and nothing of the body was received.
    public var bodyRefused = false
    /// Why `HTTPRequest.refuseRedirect` turned a redirect down: the transfer stopped at the
    /// redirect, and its target was not requested.
    public var redirectRefused: String?

    public var etag: String? { headers["etag"] }
    public var lastModified: String? { headers["last-modified"] }

    /// Turns 408, 429 and 5xx into a retryable failure (with the server's `Retry-After`).
    public func throwIfRetryableStatus() throws(HTTPFailure) {
        guard HTTPFailure.isRetryable(status: status) else { return }
        throw HTTPFailure(
            kind: .status, message: "HTTP \(status)", status: status,
            retryAfter: headers["retry-after"].flatMap(HTTPClient.retryAfterSeconds))
    }
}

/// Tries an operation again while its failure may pass: exponential backoff with jitter
/// (`backoff` × 2^(n−1) × 0.5…1.5), or the server's `Retry-After` (at most 60 s).
///
/// It waits on the calling thread (in steps, so that a stop ends the wait), so it is only
/// used where one thread does one thing in order: listing a feed's pages, a batching
/// sink's commit. Items' downloads and deliveries return "retry after N" to the runner
/// instead, which waits on a timer.
public struct RetryLoop: Sendable {
    public let attempts: Int
    public let backoff: Double
    public let isCancelled: @Sendable () -> Bool

    public init(attempts: Int, backoff: Double, isCancelled: @escaping @Sendable () -> Bool = { false }) {
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.isCancelled = isCancelled
    }

    /// Runs `body(attempt)` until it returns, throws a final failure, or attempts run out;
    /// the last failure's message says how many attempts were made.
    public func run<T>(_ body: (Int) throws(HTTPFailure) -> T) throws(HTTPFailure) -> T {
        var attempt = 1
        while true {
            do {
                return try body(attempt)
            } catch {
                if error.retryable, attempt < attempts, isCancelled() {
                    // Not a verdict on the item: the run is stopping. Left for resume.
                    throw HTTPFailure(
                        kind: .cancelled, message: "interrupted before retrying: \(error.message)",
                        status: error.status, retryAfter: nil)
                }
                guard error.retryable, attempt < attempts else {
                    throw HTTPFailure(
                        kind: error.kind, message: error.message + (attempt > 1 ? " (after \(attempt) attempts)" : ""),
                        status: error.status, retryAfter: error.retryAfter)
                }
                let until = Date().addingTimeInterval(error.retryDelay(attempt: attempt, backoff: backoff))
                while Date() < until, !isCancelled() { Thread.sleep(forTimeInterval: min(0.05, until.timeIntervalSinceNow)) }
                attempt += 1
            }
        }
    }
}

/// One request's description.
public struct HTTPRequest: Sendable {
    public var url: URL
    public var method = "GET"
    /// GET or HEAD: a read, which carries no body and may follow redirects.
    var isRead: Bool { method == "GET" || method == "HEAD" }
    public var headers: [String: String] = [:]
    public var body: Data?
    /// Where the body goes; nil keeps it in memory.
    public var destination: String?
    /// With a `destination`: a body of at most this many bytes is kept in memory as well
    /// (`HTTPResult.body`) and written to the file in one call once it is complete; a longer
    /// one goes to the file as it comes, and only the file has it. 0 keeps nothing.
    public var keepInMemory = 0
    public var maxBytes = Int.max
    /// What `maxBytes` is called in a failure's message.
    public var maxBytesName = "limits.maxBytes"
    /// Asked once the headers of a 2xx answer are in, before any of its body: true stops
    /// the transfer there (the result has `bodyRefused`), so a body that will not be used
    /// is not downloaded.
    public var refuseBody: (@Sendable (HTTPResult) -> Bool)?
    /// Asked with the absolute URL of each redirect of a read before it is followed: a
    /// reason stops the transfer there (the result has `redirectRefused`).
    public var refuseRedirect: (@Sendable (URL) -> String?)?
    /// The caller already waited for this request's turn at its host (`HostPacing`): the
    /// client does not reserve another.
    public var paced = false
    /// The path is sent as it is, its `.` and `..` segments too: an S3 key such as
    /// `a/../b.png` names an object of its own (libcurl would send `/b.png`, another object).
    public var pathAsIs = false

    public init(
        url: URL, method: String = "GET", headers: [String: String] = [:], body: Data? = nil,
        destination: String? = nil, maxBytes: Int = Int.max, maxBytesName: String = "limits.maxBytes"
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.destination = destination
        self.maxBytes = maxBytes
        self.maxBytesName = maxBytesName
    }
}

/// Why one exchange failed.
public struct HTTPFailure: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable { case network, timeout, truncated, status, tooLarge, redirects, scheme, cancelled, io, blocked }
    public let kind: Kind
    public let message: String
    public let status: Int?
    /// Seconds the server asked us to wait (`Retry-After`).
    public let retryAfter: Double?

    /// Network errors, timeouts, truncated bodies, local I/O errors (a full disk), 408, 429
    /// and 5xx may pass; the rest is final.
    public var retryable: Bool {
        switch kind {
        case .network, .timeout, .truncated, .io: true
        case .status: status.map(Self.isRetryable(status:)) ?? false
        case .tooLarge, .redirects, .scheme, .cancelled, .blocked: false
        }
    }

    /// The one retry rule for statuses: 408, 429 and 5xx may pass; every other is final.
    public static func isRetryable(status: Int) -> Bool {
        status == 408 || status == 429 || (500...599).contains(status)
    }

    /// Seconds to wait before attempt `attempt + 1`: the server's `Retry-After` (at most
    /// 60 s), else `backoff` × 2^(attempt−1) × a jitter of 0.5…1.5.
    public func retryDelay(attempt: Int, backoff: Double) -> Double {
        retryAfter.map { min($0, 60) } ?? RetryPolicy.delay(afterAttempt: attempt, backoff: backoff)
    }

    public var description: String { message }
}

/// HTTP through libcurl's easy API: one blocking transfer on the caller's thread, so the
/// number of transfers at once is the number of threads that call (`limits.downloads`,
/// `limits.uploads`). libcurl calls back into this client for every block it receives,
/// which is what makes the limits hold:
/// - `limits.maxBytes`: a `Content-Length` over it stops the transfer before the body, and
///   the body is cut at the first block past it; nothing past the limit is ever buffered,
///   so memory stays flat whatever the server sends;
/// - `limits.timeout`: connecting, and any stretch of that many seconds with less than one
///   byte, fails the transfer (`timed out`); the whole transfer has a deadline of 4 × that,
///   checked by the client itself on every callback, so a server that drips one byte a
///   second cannot hold an item;
/// - at most 5 redirects, only to `http`/`https`, and only for GET and HEAD (an upload
///   answered with a redirect fails: it was not stored); the pipeline's `userAgent` (by
///   default `ImgpipeIdentity.defaultUserAgent`) on every request;
/// - with `pacing`, each request waits for its host's turn (`limits.rate`) before it is
///   sent, and an answer of 429 or 503 slows its whole host down (`HostPacing`).
///
/// Easy handles are kept in a pool and reused, so connections to a host are kept alive.
// @unchecked because the pool holds libcurl handles (raw pointers, which `Mutex` cannot take
// in from a caller), guarded by `lock`; a handle is used by one thread at a time.
public final class HTTPClient: @unchecked Sendable {
    public static let maxRedirects = 5
    /// libcurl's receive buffer for downloads to a file, in bytes (one per pooled handle).
    static let receiveBuffer = 256 << 10

    /// The `User-Agent` of every request this client makes.
    public let userAgent: String

    /// Seconds without data (connecting included) before a transfer fails.
    public let timeout: Double
    /// Seconds a whole transfer may take.
    public var transferDeadline: Double { timeout * 4 }

    /// When aborted, transfers in progress stop within about a second.
    package let cancellation: CancellationFlag?
    /// Per-host request rate and back-off; nil paces nothing.
    public let pacing: HostPacing?
    /// The addresses it may connect to (checked as each connection opens).
    public let addresses: AddressPolicy
    private let lock = NSLock()
    private var idle: [UnsafeMutableRawPointer] = []

    private static let globalSetUp: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    public init(
        timeout: Double, cancellation: CancellationFlag? = nil,
        userAgent: String = ImgpipeIdentity.defaultUserAgent, pacing: HostPacing? = nil,
        addresses: AddressPolicy = AddressPolicy()
    ) {
        _ = Self.globalSetUp
        self.addresses = addresses
        self.timeout = timeout
        self.userAgent = userAgent
        self.cancellation = cancellation
        self.pacing = pacing
    }

    deinit {
        for handle in idle { curl_easy_cleanup(handle) }
    }

    /// One exchange, no retries. Any status is returned; transport problems throw.
    public func perform(_ request: HTTPRequest) throws(HTTPFailure) -> HTTPResult {
        guard let scheme = request.url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw HTTPFailure(
                kind: .scheme, message: "only http and https URLs are fetched, got \(request.url.absoluteString)",
                status: nil, retryAfter: nil)
        }
        // `http://` alone, or `http:///x`: no host to ask, now or after a retry.
        guard let named = request.url.host, !named.isEmpty else {
            throw HTTPFailure(
                kind: .scheme, message: "a URL without a host: \(request.url.absoluteString)",
                status: nil, retryAfter: nil)
        }
        // The host as pacing counts it (scheme, name and port).
        let host = HostHealth.key(of: request.url)
        if let pacing {
            if !request.paced { try wait(pacing.reserve(host), for: request) }
            // A `Retry-After` that came while this request waited holds it too; after it, a
            // new turn.
            while case let pause = pacing.pause(of: host), pause > 0 {
                try wait(pause, for: request)
                try wait(pacing.reserve(host), for: request)
            }
        }
        guard let handle = takeHandle() else {
            throw HTTPFailure(kind: .network, message: "cannot start an HTTP transfer (libcurl)", status: nil, retryAfter: nil)
        }
        defer { returnHandle(handle) }
        let transfer = Transfer(
            maxBytes: request.maxBytes, named: request.maxBytesName, deadline: transferDeadline,
            cancellation: cancellation, refuseBody: request.refuseBody, addresses: addresses)
        if request.isRead, let refuseRedirect = request.refuseRedirect {
            transfer.refuseRedirect = refuseRedirect
            transfer.location = request.url.absoluteString
            transfer.handle = handle
        }
        if let destination = request.destination {
            transfer.keepLimit = max(0, request.keepInMemory)
            transfer.keeping = transfer.keepLimit > 0
            // Not O_TRUNC: a file there (a spool file reused) is written over
            // and, when it was longer, cut to the body's length after the transfer. ext4
            // writes a file emptied by a truncation to disk as soon as it is closed (its
            // `auto_da_alloc`), which a spool file that lives for seconds never needs.
            transfer.file = open(destination, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard transfer.file >= 0 else {
                throw HTTPFailure(
                    kind: .io, message: "cannot create \(destination): \(String(cString: strerror(errno)))",
                    status: nil, retryAfter: nil)
            }
            var info = stat()
            transfer.lengthBefore = fstat(transfer.file, &info) == 0 ? info.st_size : .max
        }
        defer { if transfer.file >= 0 { close(transfer.file) } }
        let code = withExtendedLifetime(transfer) { run(request, on: handle, transfer: transfer) }
        if transfer.file >= 0, transfer.failure == nil {
            // A whole body kept in memory goes to the file now, in one call (a failure to
            // write it is the transfer's `failure`, thrown below).
            if code == CURLE_OK, transfer.keeping, transfer.flushKept() { transfer.trimKept() }
            if transfer.failure == nil, transfer.lengthBefore > transfer.written,
                ftruncate(transfer.file, off_t(transfer.written)) != 0
            {
                throw HTTPFailure(
                    kind: .io, message: "cannot write the download: \(String(cString: strerror(errno)))",
                    status: nil, retryAfter: nil)
            }
        }
        var status = 0
        var redirects = 0
        _ = ip_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &status)
        _ = ip_curl_get_long(handle, CURLINFO_REDIRECT_COUNT, &redirects)
        if transfer.bodyRefused {
            return HTTPResult(
                status: transfer.status, headers: transfer.headers, body: nil, bytes: 0,
                headerValues: transfer.headerValues, bodyRefused: true)
        }
        if let refusal = transfer.redirectRefused {
            return HTTPResult(
                status: transfer.status, headers: transfer.headers, body: nil, bytes: 0,
                headerValues: transfer.headerValues, redirectRefused: refusal)
        }
        if let pacing, HostPacing.isOverload(status: status) {
            pacing.overloaded(
                host, status: status,
                retryAfter: transfer.headers["retry-after"].flatMap(Self.retryAfterSeconds))
        }
        if let failure = transfer.failure { throw failure }
        if code != CURLE_OK {
            throw failure(code, request: request, transfer: transfer, redirects: redirects, status: status)
        }
        if (300...399).contains(status), status != 304 {
            let message =
                request.isRead
                ? "more than \(Self.maxRedirects) redirects, or a redirect without a location"
                : "the server answered \(request.method) with a redirect (HTTP \(status)), which is not followed: nothing was stored"
            throw HTTPFailure(kind: .redirects, message: message, status: status, retryAfter: nil)
        }
        return HTTPResult(
            status: status, headers: transfer.headers,
            body: request.destination == nil || transfer.keeping ? transfer.data : nil, bytes: transfer.received,
            headerValues: transfer.headerValues)
    }

    /// Sleeps `seconds` (a host's turn), in steps. A run being stopped lets a waiting
    /// request go on within its grace period, as one in flight; when it is aborted the
    /// request fails as cancelled, unsent (no verdict on its item: left for resume).
    private func wait(_ seconds: Double, for request: HTTPRequest) throws(HTTPFailure) {
        let until = Date().addingTimeInterval(seconds)
        while case let left = until.timeIntervalSinceNow, left > 0 {
            if cancellation?.isAborted == true {
                throw HTTPFailure(
                    kind: .cancelled, message: "interrupted while waiting for \(request.url.host ?? "the host")'s turn",
                    status: nil, retryAfter: nil)
            }
            Thread.sleep(forTimeInterval: min(left, 0.25))
        }
    }

    /// `perform` with retries (backoff with jitter, `Retry-After` honoured up to 60 s) for
    /// failures that may pass, statuses 408/429/5xx included. Returns a final response
    /// (2xx, 304, or another status that is not retried) or throws the last failure.
    public func performWithRetries(
        _ request: HTTPRequest, attempts: Int, backoff: Double,
        isCancelled: @escaping @Sendable () -> Bool = { false }
    ) throws(HTTPFailure) -> HTTPResult {
        try RetryLoop(attempts: attempts, backoff: backoff, isCancelled: isCancelled).run { _ throws(HTTPFailure) in
            let result = try perform(request)
            try result.throwIfRetryableStatus()
            return result
        }
    }

    /// `Retry-After` as seconds: a number, or an HTTP date.
    static func retryAfterSeconds(_ value: String) -> Double? {
        if let seconds = Double(value.trimmingCharacters(in: .whitespaces)) { return max(0, seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: value).map { max(0, $0.timeIntervalSinceNow) }
    }

    // MARK: - one transfer

    /// Sets the handle up for `request` and runs the transfer to its end.
    private func run(_ request: HTTPRequest, on handle: UnsafeMutableRawPointer, transfer: Transfer) -> CURLcode {
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(to: 0)
        defer { errorBuffer.deallocate() }
        var headers: UnsafeMutablePointer<curl_slist>?
        // No `Expect: 100-continue` round trip before a body.
        headers = curl_slist_append(headers, "Expect:")
        // A body is sent through CURLOPT_POSTFIELDS, with which libcurl adds a form's
        // Content-Type: a body whose request names none goes without one.
        if !request.isRead, !request.headers.keys.contains(where: { $0.lowercased() == "content-type" }) {
            headers = curl_slist_append(headers, "Content-Type:")
        }
        for (name, value) in request.headers { headers = curl_slist_append(headers, "\(name): \(value)") }
        defer { curl_slist_free_all(headers) }

        _ = ip_curl_set_string(handle, CURLOPT_URL, request.url.absoluteString)
        _ = ip_curl_set_long(handle, CURLOPT_PATH_AS_IS, request.pathAsIs ? 1 : 0)
        _ = ip_curl_set_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = ip_curl_set_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        // No proxy from the environment (`http_proxy`, `ALL_PROXY`, …): through one, every
        // socket would be the proxy's, and `AddressPolicy` would never see the address a
        // feed names.
        _ = ip_curl_set_string(handle, CURLOPT_PROXY, "")
        // Redirects are followed for reads only: a redirected upload would be re-sent as a
        // GET (or a PUT without its body), and its headers (an API key) to another host.
        _ = ip_curl_set_long(handle, CURLOPT_FOLLOWLOCATION, request.isRead ? 1 : 0)
        _ = ip_curl_set_long(handle, CURLOPT_MAXREDIRS, Self.maxRedirects)
        _ = ip_curl_set_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = ip_curl_set_string(handle, CURLOPT_USERAGENT, userAgent)
        _ = ip_curl_set_headers(handle, headers)
        _ = ip_curl_set_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        let idleSeconds = max(1, Int(timeout.rounded(.up)))
        _ = ip_curl_set_long(handle, CURLOPT_CONNECTTIMEOUT_MS, max(1, Int(timeout * 1000)))
        _ = ip_curl_set_long(handle, CURLOPT_LOW_SPEED_LIMIT, 1)
        _ = ip_curl_set_long(handle, CURLOPT_LOW_SPEED_TIME, idleSeconds)
        // libcurl's own deadline, a little after ours (ours names the limit in its message).
        _ = ip_curl_set_long(handle, CURLOPT_TIMEOUT_MS, Int(transferDeadline * 1000) + 500)
        if request.maxBytes < Int.max {
            _ = ip_curl_set_offset(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxBytes))
        }
        if request.destination != nil {
            // An image in a few reads of the socket, not one per 16 KB (libcurl's default):
            // fewer system calls, and fewer wake-ups of this thread, which take the core
            // from pixel work.
            _ = ip_curl_set_long(handle, CURLOPT_BUFFERSIZE, Self.receiveBuffer)
        }
        _ = ip_curl_set_write_function(
            handle,
            { data, size, count, context in
                guard let data, let context else { return 0 }
                return Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue().receive(data, size * count)
            })
        _ = ip_curl_set_pointer(handle, CURLOPT_WRITEDATA, context)
        _ = ip_curl_set_header_function(
            handle,
            { data, size, count, context in
                guard let data, let context else { return 0 }
                return Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue().header(data, size * count)
            })
        _ = ip_curl_set_pointer(handle, CURLOPT_HEADERDATA, context)
        _ = ip_curl_set_long(handle, CURLOPT_NOPROGRESS, 0)
        _ = ip_curl_set_progress_function(
            handle,
            { context, _, _, _, _ in
                guard let context else { return 1 }
                return Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue().checkDeadline() ? 0 : 1
            })
        _ = ip_curl_set_pointer(handle, CURLOPT_XFERINFODATA, context)
        _ = ip_curl_set_opensocket_function(
            handle,
            { context, _, address in
                guard let context, let address else { return -1 }
                return Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue().openSocket(address)
            })
        _ = ip_curl_set_pointer(handle, CURLOPT_OPENSOCKETDATA, context)

        switch request.method {
        case "GET": _ = ip_curl_set_long(handle, CURLOPT_HTTPGET, 1)
        case "HEAD": _ = ip_curl_set_long(handle, CURLOPT_NOBODY, 1)
        default:
            if request.method != "POST" { _ = ip_curl_set_string(handle, CURLOPT_CUSTOMREQUEST, request.method) }
        }
        guard !request.isRead else {
            let code = curl_easy_perform(handle)
            transfer.errorText = String(cString: errorBuffer)
            return code
        }
        // A body (possibly empty) is sent from memory; libcurl does not copy it, so the
        // transfer runs inside the closure that keeps it alive.
        let body = request.body ?? Data()
        return body.withUnsafeBytes { raw -> CURLcode in
            _ = ip_curl_set_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(raw.count))
            _ = ip_curl_set_pointer(handle, CURLOPT_POSTFIELDS, raw.baseAddress ?? UnsafeRawPointer(errorBuffer))
            let code = curl_easy_perform(handle)
            transfer.errorText = String(cString: errorBuffer)
            return code
        }
    }

    /// The failure a libcurl result code stands for.
    private func failure(
        _ code: CURLcode, request: HTTPRequest, transfer: Transfer, redirects: Int,
        status: Int
    ) -> HTTPFailure {
        let host = request.url.host ?? "server"
        let detail = transfer.errorText.isEmpty ? String(cString: curl_easy_strerror(code)) : transfer.errorText
        let response = status > 0 ? status : nil
        if code == CURLE_COULDNT_CONNECT, let blocked = transfer.blocked, !transfer.connectedInHop {
            // Every address of the host (or of a redirect's) was refused: nothing was sent.
            return HTTPFailure(
                kind: .blocked, message: "\(host): not connecting: \(blocked)", status: response, retryAfter: nil)
        }
        switch code {
        case CURLE_OPERATION_TIMEDOUT:
            return HTTPFailure(kind: .timeout, message: "\(host): timed out (\(detail))", status: response, retryAfter: nil)
        case CURLE_PARTIAL_FILE:
            let expected = transfer.headers["content-length"].map { " of \($0)" } ?? ""
            return HTTPFailure(
                kind: .truncated, message: "\(host): truncated body (\(transfer.received)\(expected) bytes)",
                status: response, retryAfter: nil)
        case CURLE_TOO_MANY_REDIRECTS:
            return HTTPFailure(
                kind: .redirects, message: "more than \(Self.maxRedirects) redirects", status: response,
                retryAfter: nil)
        case CURLE_UNSUPPORTED_PROTOCOL where redirects > 0:
            return HTTPFailure(
                kind: .redirects, message: "a redirect to a URL that is not http(s)", status: response,
                retryAfter: nil)
        case CURLE_URL_MALFORMAT:
            // libcurl cannot read the URL: final, like a scheme it does not fetch.
            return HTTPFailure(
                kind: .scheme, message: "\(host): the URL cannot be read (\(detail))", status: response,
                retryAfter: nil)
        case CURLE_FILESIZE_EXCEEDED:
            let size = transfer.headers["content-length"].map { "of \($0) bytes " } ?? ""
            return HTTPFailure(
                kind: .tooLarge, message: "body \(size)is over \(request.maxBytesName) (\(request.maxBytes))",
                status: response, retryAfter: nil)
        default:
            return HTTPFailure(kind: .network, message: "\(host): \(detail)", status: response, retryAfter: nil)
        }
    }

    private func takeHandle() -> UnsafeMutableRawPointer? {
        if let handle = lock.withLock({ idle.popLast() }) { return handle }
        return curl_easy_init()
    }

    /// Back into the pool with its options cleared (its connections stay open).
    private func returnHandle(_ handle: UnsafeMutableRawPointer) {
        curl_easy_reset(handle)
        lock.withLock { idle.append(handle) }
    }
}

/// The state of one transfer, filled in by libcurl's callbacks on the transfer's thread.
private final class Transfer {
    let maxBytes: Int
    let maxBytesName: String
    let deadlineSeconds: Double
    let deadline: UInt64
    let cancellation: CancellationFlag?
    let refuseBody: (@Sendable (HTTPResult) -> Bool)?
    var file: Int32 = -1
    /// The body as received: without a `file`, or while `keeping`.
    var data = Data()
    /// With a `file`: the body is kept in `data` (and written to the file at its end), until
    /// it grows past `keepLimit`.
    var keeping = false
    var keepLimit = 0
    /// `data` was given the room of the body's `Content-Length` at once.
    var sized = false
    var received = 0
    /// Bytes of the body written to `file`.
    var written = 0
    /// The length of `file` when it was opened: what is written over it is cut to the
    /// body's length only when it was longer.
    var lengthBefore: off_t = 0
    /// Headers of the last response (a redirect's are replaced by the next response's).
    var headers: [String: String] = [:]
    var headerValues: [String: [String]] = [:]
    var status = 0
    var bodyRefused = false
    /// With `refuseRedirect`: the URL of the response being read (the request's, then each
    /// redirect's target in turn).
    var refuseRedirect: (@Sendable (URL) -> String?)?
    var location: String?
    /// The `Location` of the response being read that libcurl follows, as its bytes: the
    /// first that is not empty, of a line that starts `Location:` (no space before the
    /// colon), taken as they are.
    var firstLocation: [UInt8]?
    var redirectRefused: String?
    /// With `refuseRedirect`: the transfer's handle, for the status as libcurl read it.
    var handle: UnsafeMutableRawPointer?
    /// The next line is a response's first (its status line).
    var atResponseStart = true
    var failure: HTTPFailure?
    var errorText = ""
    /// The addresses the transfer may connect to.
    let addresses: AddressPolicy
    /// Why the last address refused since the last response began was refused.
    var blocked: String?
    /// A socket was opened since the last response began (for this request, or for the
    /// redirect being followed): a failure to connect is then not the policy's doing alone.
    var connectedInHop = false

    init(
        maxBytes: Int, named name: String, deadline: Double, cancellation: CancellationFlag?,
        refuseBody: (@Sendable (HTTPResult) -> Bool)?, addresses: AddressPolicy
    ) {
        self.addresses = addresses
        self.cancellation = cancellation
        self.refuseBody = refuseBody
        self.maxBytes = maxBytes
        maxBytesName = name
        deadlineSeconds = deadline
        self.deadline = DispatchTime.now().uptimeNanoseconds + UInt64(deadline * 1_000_000_000)
    }

    /// libcurl's socket for one address it is about to connect to, or -1 (`CURL_SOCKET_BAD`)
    /// when the policy refuses the address: libcurl tries the host's next address, if any.
    /// Sockets are made close-on-exec: the pixel helpers this process starts hold none.
    func openSocket(_ address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
        let family = address.pointee.family
        let raw = ip_curl_sockaddr_address(address)
        var ip: IPAddress?
        if family == AF_INET, address.pointee.addrlen >= MemoryLayout<sockaddr_in>.size, let raw {
            var v4 = raw.load(as: sockaddr_in.self).sin_addr
            ip = IPAddress(bytes: withUnsafeBytes(of: &v4) { Array($0) })
        } else if family == AF_INET6, address.pointee.addrlen >= MemoryLayout<sockaddr_in6>.size, let raw {
            var v6 = raw.load(as: sockaddr_in6.self).sin6_addr
            ip = IPAddress(bytes: withUnsafeBytes(of: &v6) { Array($0) })
        }
        guard let ip else {
            blocked = "an address of family \(family), which imgpipe does not connect to"
            return -1
        }
        if let refusal = addresses.refusal(of: ip) {
            blocked = refusal
            return -1
        }
        connectedInHop = true
        return socket(family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
    }

    /// A block of the body; returning less than `count` stops the transfer.
    func receive(_ bytes: UnsafeMutablePointer<CChar>, _ count: Int) -> Int {
        received += count
        if received > maxBytes {
            failure = HTTPFailure(
                kind: .tooLarge, message: "body is over \(maxBytesName) (\(maxBytes) bytes); transfer cut",
                status: status, retryAfter: nil)
            return 0
        }
        if file < 0 || (keeping && received <= keepLimit) {
            data.append(UnsafeRawPointer(bytes).assumingMemoryBound(to: UInt8.self), count: count)
            return count
        }
        if keeping {
            // Past what is kept in memory: the part kept goes to the file, and the rest as
            // it comes.
            keeping = false
            guard flushKept() else { return 0 }
            data = Data()
        }
        return writeToFile(bytes, count) ? count : 0
    }

    /// Writes the body kept in memory to the file (after a complete transfer); false, with
    /// the failure, when it cannot be written.
    func flushKept() -> Bool {
        data.isEmpty || data.withUnsafeBytes { writeToFile($0.baseAddress!, $0.count) }
    }

    /// A body that came without its length grew in steps, with room to spare: it is kept in
    /// an allocation of its own size, so that the items waiting hold only their bytes.
    func trimKept() {
        guard !sized, !data.isEmpty else { return }
        data = data.withUnsafeBytes { Data(bytes: $0.baseAddress!, count: $0.count) }
    }

    /// Appends to `file`; false, with the failure, when the disk refuses.
    private func writeToFile(_ bytes: UnsafeRawPointer, _ count: Int) -> Bool {
        var offset = 0
        while offset < count {
            let written = write(file, bytes + offset, count - offset)
            if written < 0, errno == EINTR { continue }
            guard written > 0 else {
                failure = HTTPFailure(
                    kind: .io, message: "cannot write the download: \(String(cString: strerror(errno)))",
                    status: status, retryAfter: nil)
                return false
            }
            offset += written
        }
        self.written += count
        return true
    }

    /// One header line (status lines included).
    func header(_ bytes: UnsafeMutablePointer<CChar>, _ count: Int) -> Int {
        // Read as bytes: with Foundation's trimming and Unicode lowercasing, this took
        // more instructions per download than the rest of the transfer's own code.
        let line = UnsafeRawBufferPointer(start: bytes, count: count)
        // libcurl ends a response's headers at a line that starts with CR or LF (`\rjunk`
        // included), and reads the next line as a status line.
        let ends = line.first == 0x0D || line.first == 0x0A
        let startsResponse = atResponseStart
        atResponseStart = ends
        if startsResponse, line.starts(with: "HTTP/".utf8) {
            // A redirect's target, if one is followed, is a new hop: its addresses are judged anew.
            connectedInHop = false
            blocked = nil
            headers = [:]
            headerValues = [:]
            firstLocation = nil
            status = Self.statusCode(line)
        } else if !ends, let colon = line.firstIndex(of: UInt8(ascii: ":")) {
            let name = String(decoding: Self.trimmed(line[..<colon]).map(Self.asciiLowercased), as: UTF8.self)
            let value = String(decoding: Self.trimmed(line[(colon + 1)...]), as: UTF8.self)
            headers[name] = value
            headerValues[name, default: []].append(value)
            // `Location:` at the very start of the line, as libcurl matches it, and its value as
            // libcurl copies it: from the first non-space to the first CR or LF.
            if name == "location", firstLocation == nil, colon == line.startIndex + 8 {
                let rest = line[(colon + 1)...].drop { $0 == 0x20 || (0x09...0x0D).contains($0) }
                let value = Array(Self.trimmed(rest.prefix { $0 != 0x0D && $0 != 0x0A }))
                if !value.isEmpty { firstLocation = value }
            }
            if keeping, name == "content-length", (200...299).contains(status), let length = Int(value),
                (0...keepLimit).contains(length)
            {
                // The body kept in one allocation, not grown block by block.
                data.reserveCapacity(length)
                sized = true
            }
        } else if ends, let refuseRedirect, let current = location, let target = firstLocation,
            (300...399).contains(libcurlStatus ?? status)
        {
            // The end of a redirect's headers: libcurl follows it next (a 304 with a location
            // too), unless it is refused here. Its target as libcurl resolves it: one libcurl
            // cannot resolve is not followed, and fails as it did.
            guard
                let resolved = current.withCString({ base in
                    (target.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer {
                        ip_curl_resolve_redirect(base, $0.baseAddress)
                    }
                })
            else { return count }
            defer { curl_free(resolved) }
            let next = String(cString: resolved)
            guard let url = URL(string: next) else {
                redirectRefused = "a redirect to \(next), which cannot be checked against robots.txt"
                return 0
            }
            if let reason = refuseRedirect(url) {
                redirectRefused = reason
                return 0
            }
            location = next
        } else if ends, (200...299).contains(status),
            let refuseBody,
            refuseBody(HTTPResult(status: status, headers: headers, body: nil, bytes: 0, headerValues: headerValues))
        {
            // The end of a final answer's headers: its body is not wanted. Returning less
            // than `count` makes libcurl stop the transfer here.
            bodyRefused = true
            return 0
        }
        return count
    }

    /// The status of the response being read as libcurl read it (it decides whether a
    /// redirect is followed), when the handle is at hand.
    var libcurlStatus: Int? {
        guard let handle else { return nil }
        var code = 0
        return ip_curl_get_long(handle, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK ? code : nil
    }

    /// The status code of a status line (`HTTP/1.1 200 OK`): the digits after its first
    /// space; 0 when there are none.
    static func statusCode(_ line: UnsafeRawBufferPointer) -> Int {
        guard let space = line.firstIndex(of: UInt8(ascii: " ")) else { return 0 }
        // More than one space before the code reads as libcurl reads it (`sscanf`'s `%3d`).
        let digits = line[(space + 1)...].drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        var code = 0
        for byte in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte), code < 1000 else { break }
            code = code * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return code
    }

    /// `bytes` without the spaces, tabs and line ends around them.
    static func trimmed(_ bytes: Slice<UnsafeRawBufferPointer>) -> Slice<UnsafeRawBufferPointer> {
        func blank(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
        var start = bytes.startIndex
        var end = bytes.endIndex
        while start < end, blank(bytes[start]) { start += 1 }
        while end > start, blank(bytes[end - 1]) { end -= 1 }
        return bytes[start..<end]
    }

    static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
    }

    /// False once the whole-transfer deadline has passed or the run abandons its work
    /// (libcurl then stops the transfer).
    func checkDeadline() -> Bool {
        if cancellation?.isAborted == true {
            failure = HTTPFailure(kind: .cancelled, message: "interrupted", status: nil, retryAfter: nil)
            return false
        }
        guard DispatchTime.now().uptimeNanoseconds > deadline else { return true }
        failure = HTTPFailure(
            kind: .timeout,
            message: String(
                format: "timed out: the transfer took longer than %g s (4 × limits.timeout)",
                deadlineSeconds),
            status: status > 0 ? status : nil, retryAfter: nil)
        return false
    }
}
