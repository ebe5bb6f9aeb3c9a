import CProcess
import Foundation
import PipelineKit
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The address `--metrics` names: `HOST:PORT`, `[IPv6]:PORT`, or a bare `PORT` / `:PORT`,
/// which is 127.0.0.1 (loopback unless a host is named). HOST is an IP address, or
/// `localhost` (127.0.0.1): no name is looked up.
public struct MetricsAddress: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `--metrics`'s value; the error says what is wrong with it.
    public init(parsing text: String) throws(MetricsEndpointError) {
        var host = "127.0.0.1"
        var portText = text
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw MetricsEndpointError("--metrics \(text): expected [IPv6 address]:PORT")
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = String(text[text.index(close, offsetBy: 2)...])
        } else if let colon = text.lastIndex(of: ":") {
            if colon != text.startIndex { host = String(text[..<colon]) }
            portText = String(text[text.index(after: colon)...])
        }
        guard let port = UInt16(portText), port > 0 else {
            throw MetricsEndpointError("--metrics \(text): expected PORT, :PORT or HOST:PORT with a port from 1 to 65535")
        }
        guard !host.isEmpty, !host.contains(":") || text.hasPrefix("[") else {
            throw MetricsEndpointError("--metrics \(text): expected HOST:PORT (an IPv6 address in brackets: [::1]:PORT)")
        }
        self.init(host: host == "localhost" ? "127.0.0.1" : host, port: port)
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

public struct MetricsEndpointError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A tiny HTTP/1.0 server for `GET /metrics`, on a thread of its own: one connection at a
/// time, each read with a short timeout, answered and closed. Other paths get 404, other
/// methods 405. The run never waits for it: a scrape reads the metrics under their own
/// locks, for as long as it takes to copy them.
public final class MetricsEndpoint: Sendable {
    public let address: MetricsAddress
    private let metrics: RunMetrics
    private let socket: Int32
    private let stopped = Mutex(false)
    private let ended = DispatchSemaphore(value: 0)

    /// Binds `address` exactly and starts serving; a port in use (or a host that is no
    /// address of this machine) is an error naming the address.
    public init(address: MetricsAddress, metrics: RunMetrics) throws(MetricsEndpointError) {
        self.address = address
        self.metrics = metrics
        var hints = addrinfo()
        hints.ai_socktype = ip_stream_socket_type()
        hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST
        var found: UnsafeMutablePointer<addrinfo>?
        let looked = getaddrinfo(address.host, String(address.port), &hints, &found)
        guard looked == 0, let info = found else {
            throw MetricsEndpointError(
                "--metrics \(address): \(address.host) is not an IP address (\(String(cString: gai_strerror(looked))))")
        }
        defer { freeaddrinfo(found) }
        let fd = ip_stream_socket(info.pointee.ai_family)
        guard fd >= 0 else { throw MetricsEndpointError("--metrics \(address): socket: \(String(cString: strerror(errno)))") }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw MetricsEndpointError("--metrics: cannot listen on \(address): \(reason)")
        }
        socket = fd
        let thread = Thread { [self] in
            serve()
            ended.signal()
        }
        thread.name = "imgpipe.metrics"
        thread.start()
    }

    /// Stops accepting and waits for the thread (at most the poll interval plus a request).
    public func stop() {
        let first = stopped.withLock { was in
            defer { was = true }
            return !was
        }
        guard first else { return }
        ended.wait()
        close(socket)
    }

    private func serve() {
        var poller = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        while !stopped.withLock({ $0 }) {
            guard poll(&poller, 1, 100) > 0 else { continue }
            let client = accept(socket, nil, nil)
            guard client >= 0 else {
                // Out of descriptors (or a client gone before its accept): not a busy loop.
                usleep(50_000)
                continue
            }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            answer(client)
            close(client)
        }
    }

    /// How long one client has, from its accept to the end of the answer: the server answers
    /// one client at a time, so a client that trickles its request (a byte a second) must not
    /// hold the next scrape, or the command's end (`stop` waits for the thread), longer.
    static let clientSeconds = 2.0

    private func answer(_ client: Int32) {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(Self.clientSeconds * 1e9)
        /// Milliseconds left before the deadline (0: none).
        func left() -> Int32 {
            let now = DispatchTime.now().uptimeNanoseconds
            return now >= deadline ? 0 : Int32((deadline - now) / 1_000_000)
        }
        var timeout = timeval(tv_sec: Int(Self.clientSeconds), tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // The request line and headers: up to 8 KiB, to the blank line, within the deadline.
        var request: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        var waiting = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
        while request.count < 8192 {
            let wait = left()
            guard wait > 0, poll(&waiting, 1, wait) > 0 else { return }
            let got = chunk.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if got <= 0 { break }
            request += chunk[0..<got]
            if request.count >= 4, request.suffix(4) == [13, 10, 13, 10] || request.suffix(2) == [10, 10] { break }
        }
        let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self).split(separator: " ")
        guard line.count >= 2 else {
            return respond(client, 400, "Bad Request", "a request line: GET /metrics HTTP/1.1\n", deadline: deadline)
        }
        let path = line[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        guard path == "/metrics" else {
            return respond(client, 404, "Not Found", "only /metrics is served here\n", deadline: deadline)
        }
        guard line[0] == "GET" || line[0] == "HEAD" else {
            return respond(client, 405, "Method Not Allowed", "GET /metrics\n", extra: "Allow: GET, HEAD\r\n", deadline: deadline)
        }
        respond(
            client, 200, "OK", metrics.exposition(), type: "text/plain; version=0.0.4; charset=utf-8", head: line[0] == "HEAD",
            deadline: deadline)
    }

    private func respond(
        _ client: Int32, _ status: Int, _ reason: String, _ body: String, type: String = "text/plain; charset=utf-8",
        extra: String = "", head: Bool = false, deadline: UInt64
    ) {
        let bytes = Array(body.utf8)
        let header =
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(bytes.count)\r\n"
            + extra + "Connection: close\r\n\r\n"
        var out = Array(header.utf8)
        if !head { out += bytes }
        var sent = 0
        while sent < out.count {
            let wrote = out[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // A client that does not read is left at the deadline (SO_SNDTIMEO ends each send).
            if wrote <= 0 || DispatchTime.now().uptimeNanoseconds >= deadline { return }
            sent += wrote
        }
    }
}
