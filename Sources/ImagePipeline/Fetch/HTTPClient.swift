import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What one HTTP exchange gave.
public struct HTTPResult: Sendable {
    public let status: Int
    /// Header names in lower case.
    public let headers: [String: String]
    /// The body, when it was kept in memory.
    public let body: Data?
    /// Bytes received.
    public let bytes: Int

    public var etag: String? { headers["etag"] }
    public var lastModified: String? { headers["last-modified"] }

    /// Turns 408, 429 and 5xx into a retryable failure (with the server's `Retry-After`).
    public func throwIfRetryableStatus() throws(HTTPFailure) {
        guard status == 408 || status == 429 || (500 ... 599).contains(status) else { return }
        throw HTTPFailure(kind: .status, message: "HTTP \(status)", status: status,
                          retryAfter: headers["retry-after"].flatMap(HTTPClient.retryAfterSeconds))
    }
}

/// Tries an operation again while its failure may pass: exponential backoff with jitter
/// (`backoff` × 2^(n−1) × 0.5…1.5), or the server's `Retry-After` (at most 60 s).
public struct RetryLoop: Sendable {
    public let attempts: Int
    public let backoff: Double
    public let isCancelled: @Sendable () -> Bool

    public init(attempts: Int, backoff: Double, isCancelled: @escaping @Sendable () -> Bool = { false }) {
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.isCancelled = isCancelled
    }

    /// Seconds to wait before the next attempt: the server's `Retry-After` (at most 60 s),
    /// else `backoff` × 2^(attempt−1) × a jitter of 0.5…1.5.
    public static func delay(after failure: HTTPFailure, attempt: Int, backoff: Double) -> Double {
        failure.retryAfter.map { min($0, 60) } ?? backoff * pow(2, Double(attempt - 1)) * Double.random(in: 0.5 ... 1.5)
    }

    /// Runs `body(attempt)` until it returns, throws a final failure, or attempts run out;
    /// the last failure's message says how many attempts were made.
    public func run<T>(attemptsMade: ((Int) -> Void)? = nil,
                       _ body: (Int) throws(HTTPFailure) -> T) throws(HTTPFailure) -> T {
        var attempt = 1
        while true {
            do {
                let value = try body(attempt)
                attemptsMade?(attempt)
                return value
            } catch {
                attemptsMade?(attempt)
                if error.retryable, attempt < attempts, isCancelled() {
                    // Not a verdict on the item: the run is stopping. Left for resume.
                    throw HTTPFailure(kind: .cancelled, message: "interrupted before retrying: \(error.message)",
                                      status: error.status, retryAfter: nil)
                }
                guard error.retryable, attempt < attempts else {
                    throw HTTPFailure(kind: error.kind, message: error.message + (attempt > 1 ? " (after \(attempt) attempts)" : ""),
                                      status: error.status, retryAfter: error.retryAfter)
                }
                Thread.sleep(forTimeInterval: Self.delay(after: error, attempt: attempt, backoff: backoff))
                attempt += 1
            }
        }
    }
}

/// One request's description.
public struct HTTPRequest: Sendable {
    public var url: URL
    public var method = "GET"
    public var headers: [String: String] = [:]
    public var body: Data?
    /// Where the body goes; nil keeps it in memory.
    public var destination: String?
    public var maxBytes = Int.max

    public init(url: URL, method: String = "GET", headers: [String: String] = [:], body: Data? = nil,
                destination: String? = nil, maxBytes: Int = Int.max) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.destination = destination
        self.maxBytes = maxBytes
    }
}

/// Why one exchange failed.
public struct HTTPFailure: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable { case network, timeout, truncated, status, tooLarge, redirects, scheme, cancelled }
    public let kind: Kind
    public let message: String
    public let status: Int?
    /// Seconds the server asked us to wait (`Retry-After`).
    public let retryAfter: Double?

    /// Network errors, timeouts, truncated bodies, 408, 429 and 5xx may pass; the rest is final.
    public var retryable: Bool {
        switch kind {
        case .network, .timeout, .truncated: true
        case .status: status.map { $0 == 408 || $0 == 429 || (500 ... 599).contains($0) } ?? false
        case .tooLarge, .redirects, .scheme, .cancelled: false
        }
    }

    public var description: String { message }
}

/// HTTP through URLSession (FoundationNetworking, on libcurl): a per-host connection
/// limit, an idle timeout and a total timeout, at most 5 redirects and only to http(s),
/// `limits.maxBytes` enforced while receiving (the transfer is cut), bodies streamed to a
/// file when asked, and a `User-Agent` naming imgpipe.
// @unchecked because per-task state is guarded by `lock`; URLSession is thread-safe.
public final class HTTPClient: NSObject, @unchecked Sendable {
    public static let userAgent = "imgpipe/0.1.0 (+batch image pipeline)"
    public static let maxRedirects = 5

    private var session: URLSession!
    private let lock = NSLock()
    private var tasks: [Int: TaskState] = [:]
    private let delegateQueue: OperationQueue

    /// `timeout`: seconds without data (connect included) and, ×4, for the whole exchange.
    public init(connectionsPerHost: Int, timeout: Double) {
        delegateQueue = OperationQueue()
        delegateQueue.maxConcurrentOperationCount = 1
        super.init()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = max(1, connectionsPerHost)
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout * 4
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpAdditionalHeaders = ["User-Agent": Self.userAgent]
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: delegateQueue)
    }

    /// One exchange, no retries. Any status is returned; transport problems throw.
    public func perform(_ request: HTTPRequest) throws(HTTPFailure) -> HTTPResult {
        guard let scheme = request.url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw HTTPFailure(kind: .scheme, message: "only http and https URLs are fetched, got \(request.url.absoluteString)",
                              status: nil, retryAfter: nil)
        }
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let state = TaskState(request: request)
        if let destination = request.destination {
            FileManager.default.createFile(atPath: destination, contents: nil)
            state.file = FileHandle(forWritingAtPath: destination)
        }
        let task = session.dataTask(with: urlRequest)
        lock.withLock { tasks[task.taskIdentifier] = state }
        task.resume()
        state.done.wait()
        lock.withLock { _ = tasks.removeValue(forKey: task.taskIdentifier) }
        try? state.file?.close()
        if let failure = state.failure { throw failure }
        guard let response = state.response else {
            throw HTTPFailure(kind: .network, message: "no response from \(request.url.host ?? "server")", status: nil, retryAfter: nil)
        }
        var headers: [String: String] = [:]
        for (key, value) in response.allHeaderFields {
            if let key = key as? String, let value = value as? String { headers[key.lowercased()] = value }
        }
        if (300 ... 399).contains(response.statusCode), response.statusCode != 304 {
            throw HTTPFailure(kind: .redirects, message: "more than \(Self.maxRedirects) redirects, or a redirect to a non-http URL",
                              status: response.statusCode, retryAfter: nil)
        }
        if (200 ... 299).contains(response.statusCode), request.method != "HEAD",
           let expected = headers["content-length"].flatMap(Int.init), state.received < expected {
            throw HTTPFailure(kind: .truncated, message: "truncated body: \(state.received) of \(expected) bytes",
                              status: response.statusCode, retryAfter: nil)
        }
        return HTTPResult(status: response.statusCode, headers: headers,
                          body: request.destination == nil ? state.data : nil, bytes: state.received)
    }

    /// `perform` with retries (backoff with jitter, `Retry-After` honoured up to 60 s) for
    /// failures that may pass, statuses 408/429/5xx included. Returns a final response
    /// (2xx, 304, or another status that is not retried) or throws the last failure.
    public func performWithRetries(_ request: HTTPRequest, attempts: Int, backoff: Double,
                                   isCancelled: @escaping @Sendable () -> Bool = { false },
                                   attemptsMade: ((Int) -> Void)? = nil) throws(HTTPFailure) -> HTTPResult {
        try RetryLoop(attempts: attempts, backoff: backoff, isCancelled: isCancelled).run(attemptsMade: attemptsMade) { _ throws(HTTPFailure) in
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

    fileprivate func state(of task: URLSessionTask) -> TaskState? {
        lock.withLock { tasks[task.taskIdentifier] }
    }
}

/// The progress of one task, filled in by the delegate.
// @unchecked because the delegate queue is serial and `done` orders the last write
// before the waiting reader.
private final class TaskState: @unchecked Sendable {
    let request: HTTPRequest
    var file: FileHandle?
    var data = Data()
    var received = 0
    var response: HTTPURLResponse?
    var failure: HTTPFailure?
    var redirects = 0
    let done = DispatchSemaphore(value: 0)

    init(request: HTTPRequest) { self.request = request }
}

extension HTTPClient: URLSessionDataDelegate {
    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                           completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
        guard let state = state(of: dataTask) else { return completionHandler(.cancel) }
        state.response = response as? HTTPURLResponse
        if response.expectedContentLength > Int64(state.request.maxBytes) {
            state.failure = HTTPFailure(kind: .tooLarge, message: "body of \(response.expectedContentLength) bytes is over limits.maxBytes (\(state.request.maxBytes))",
                                        status: state.response?.statusCode, retryAfter: nil)
            completionHandler(.cancel)
            dataTask.cancel() // FoundationNetworking may ignore .cancel here: make sure the transfer stops.
            return
        }
        completionHandler(.allow)
    }

    public func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let state = state(of: dataTask), state.failure == nil else { return }
        state.received += data.count
        if state.received > state.request.maxBytes {
            state.failure = HTTPFailure(kind: .tooLarge, message: "body is over limits.maxBytes (\(state.request.maxBytes) bytes); transfer cut",
                                        status: state.response?.statusCode, retryAfter: nil)
            dataTask.cancel()
            return
        }
        if let file = state.file { file.write(data) } else { state.data.append(data) }
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                           newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        guard let state = state(of: task) else { return completionHandler(nil) }
        state.redirects += 1
        let scheme = request.url?.scheme?.lowercased()
        guard state.redirects <= HTTPClient.maxRedirects, scheme == "http" || scheme == "https" else {
            return completionHandler(nil)
        }
        completionHandler(request)
    }

    public func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let state = state(of: task) else { return }
        if let error, state.failure == nil {
            let nsError = error as NSError
            let kind: HTTPFailure.Kind
            let text = nsError.localizedDescription
            switch nsError.code {
            case NSURLErrorTimedOut: kind = .timeout
            case NSURLErrorNetworkConnectionLost: kind = .truncated
            default: kind = text.contains("transfer closed") || text.contains("remaining to read") ? .truncated : .network
            }
            let what = kind == .timeout ? "timed out"
                : kind == .truncated ? "truncated body (\(text))" : text
            state.failure = HTTPFailure(kind: kind, message: "\(task.originalRequest?.url?.host ?? "server"): \(what)",
                                        status: state.response?.statusCode, retryAfter: nil)
        }
        state.done.signal()
    }
}
