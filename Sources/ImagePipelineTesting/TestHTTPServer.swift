import Dispatch
import Foundation
import PipelineKit
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A small HTTP/1.1 server on 127.0.0.1 for tests, on plain sockets so that it can
/// misbehave on purpose: cut a body short, stall, lie about lengths. One request per
/// connection (`Connection: close`).
public final class TestHTTPServer: Sendable {
    public struct Request: Sendable {
        public let method: String
        /// Path and query, as sent (`/search?q=moon`).
        public let target: String
        /// Header names in lower case.
        public let headers: [String: String]
        public let body: Data
        /// When the request had been read.
        public var receivedAt = Date()
        /// The client's IPv4 address (which host sent it, when several reach the server).
        public var peer = ""

        public var path: String { String(target.split(separator: "?", maxSplits: 1).first ?? "") }

        public var query: [String: String] {
            guard let components = URLComponents(string: "http://x" + target) else { return [:] }
            var result: [String: String] = [:]
            for item in components.queryItems ?? [] { result[item.name] = item.value ?? "" }
            return result
        }
    }

    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: Data
        /// Sends this Content-Length instead of the body's (to simulate a truncated body).
        public var declaredLength: Int?
        /// Seconds to wait after the headers before the body.
        public var stall: Double = 0
        /// A body sent chunked, without a length, instead of `body`.
        public var stream: Stream?

        /// A hostile body. Each stops by itself (a bounded time or size), or when the
        /// client hangs up.
        public enum Stream: Sendable {
            /// One byte every `interval` seconds, for at most `seconds`.
            case drip(interval: Double, seconds: Double)
            /// 64 KiB chunks as fast as the client reads them, up to `bytes`.
            case flood(bytes: Int)
        }

        public init(
            status: Int = 200, headers: [(String, String)] = [], body: Data = Data(),
            declaredLength: Int? = nil, stall: Double = 0
        ) {
            self.status = status
            self.headers = headers
            self.body = body
            self.declaredLength = declaredLength
            self.stall = stall
        }

        public static func json(_ text: String, status: Int = 200) -> Response {
            Response(status: status, headers: [("Content-Type", "application/json")], body: Data(text.utf8))
        }

        public static func bytes(_ data: Data, type: String = "image/jpeg", headers: [(String, String)] = []) -> Response {
            Response(headers: [("Content-Type", type)] + headers, body: data)
        }

        public static func streamed(_ stream: Stream, type: String = "image/jpeg") -> Response {
            var response = Response(headers: [("Content-Type", type)])
            response.stream = stream
            return response
        }

        public static func status(_ code: Int, headers: [(String, String)] = []) -> Response {
            Response(status: code, headers: headers, body: Data("status \(code)".utf8))
        }
    }

    public typealias Handler = @Sendable (Request) -> Response

    public let port: Int
    private let listener: Int32
    private let handler: Handler
    private let state = Mutex((recorded: [Request](), accepted: 0, stopped: false))
    private let acceptEnded = DispatchSemaphore(value: 0)

    /// The loopback address it listens on (`127.0.0.1` unless another was asked for: a
    /// second address stands for another host, e.g. one a hostile feed names).
    public let host: String

    /// Binds to a free port of `host` (a loopback address, or another local one) and starts
    /// serving.
    public init(host: String = "127.0.0.1", handler: @escaping Handler) throws {
        self.host = host
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ServerError("socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr(host)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 512) == 0 else {
            close(fd)
            throw ServerError("bind/listen: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = fd
        let thread = Thread { [self] in
            acceptLoop()
            acceptEnded.signal()
        }
        thread.name = "test-http.accept"
        thread.start()
    }

    deinit { stop() }

    public var baseURL: String { "http://\(host):\(port)" }

    /// Every request received so far.
    public var requests: [Request] { state.withLock { $0.recorded } }

    public func requests(to path: String) -> [Request] { requests.filter { $0.path == path } }

    /// Connections accepted so far (with or without a request on them).
    public var connections: Int { state.withLock { $0.accepted } }

    public func stop() {
        let wasRunning = state.withLock { state in
            defer { state.stopped = true }
            return !state.stopped
        }
        if wasRunning {
            // Closed only once the accept thread is out: closed under it, the descriptor's
            // number could be reused (the next test's listener, on a loaded machine) before
            // the thread first calls `accept`, which would then take that socket's clients.
            shutdown(listener, Int32(SHUT_RDWR))
            acceptEnded.wait()
            close(listener)
        }
    }

    private func acceptLoop() {
        while true {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let client = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(listener, $0, &length) }
            }
            if client < 0 {
                if state.withLock({ $0.stopped }) { return }
                if errno == EINTR { continue }
                return
            }
            state.withLock { $0.accepted += 1 }
            // A thread per connection: a handler that stalls must not hold up the others
            // (Dispatch's pool is only a few threads wide on a 2-core machine).
            let peer = String(cString: inet_ntoa(address.sin_addr))
            let worker = Thread { [self] in serve(client, from: peer) }
            worker.stackSize = 1 << 20
            worker.start()
        }
    }

    private func serve(_ fd: Int32, from peer: String) {
        defer { close(fd) }
        var noSigPipe: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &noSigPipe, socklen_t(MemoryLayout<Int32>.size))
        guard var request = readRequest(fd) else { return }
        request.peer = peer
        state.withLock { $0.recorded.append(request) }
        let response = handler(request)
        var head = "HTTP/1.1 \(response.status) \(Self.reason(response.status))\r\n"
        var hasLength = false
        for (name, value) in response.headers {
            if name.lowercased() == "content-length" { hasLength = true }
            head += "\(name): \(value)\r\n"
        }
        if response.stream != nil {
            head += "Transfer-Encoding: chunked\r\n"
        } else if !hasLength {
            head += "Content-Length: \(response.declaredLength ?? response.body.count)\r\n"
        }
        head += "Connection: close\r\n\r\n"
        guard send(fd, Data(head.utf8)) else { return }
        if let stream = response.stream { return sendStream(stream, to: fd) }
        if response.stall > 0 { Thread.sleep(forTimeInterval: response.stall) }
        if request.method != "HEAD", !response.body.isEmpty { _ = send(fd, response.body) }
    }

    private func sendStream(_ stream: Response.Stream, to fd: Int32) {
        func chunk(_ bytes: Data) -> Bool {
            send(fd, Data(String(bytes.count, radix: 16).utf8 + [13, 10]) + bytes + Data([13, 10]))
        }
        switch stream {
        case .drip(let interval, let seconds):
            let end = Date().addingTimeInterval(seconds)
            var next: [UInt8] = [0xFF, 0xD8, 0xFF]
            while Date() < end, chunk(Data([next.isEmpty ? 0 : next.removeFirst()])) {
                Thread.sleep(forTimeInterval: interval)
            }
        case .flood(let bytes):
            var block = Data(count: 65536)
            block[0] = 0xFF
            block[1] = 0xD8
            block[2] = 0xFF
            var sent = 0
            while sent < bytes, chunk(block) { sent += block.count }
        }
    }

    private func send(_ fd: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
    }

    private func readRequest(_ fd: Int32) -> Request? {
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        var headerEnd: Int?
        while headerEnd == nil {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { return nil }
            buffer += chunk[0..<count]
            if let range = buffer.firstRange(of: [13, 10, 13, 10]) { headerEnd = range.upperBound }
            if buffer.count > 1 << 20 { return nil }
        }
        let head = String(decoding: buffer[0..<headerEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        guard !lines.isEmpty else { return nil }
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(buffer[headerEnd!...])
        let expected = Int(headers["content-length"] ?? "0") ?? 0
        while body.count < expected {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { break }
            body += chunk[0..<count]
        }
        return Request(method: String(requestLine[0]), target: String(requestLine[1]), headers: headers, body: Data(body))
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 304: "Not Modified"
        case 301, 302: "Found"
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 408: "Request Timeout"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

public struct ServerError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
