import Foundation
import PipelineKit

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback address where nothing listens: a socket bound to a free port and never put
/// in the listening state, so every connection to it is refused at once. Unlike a stopped
/// `TestHTTPServer`, the port stays taken while this object lives: a server another test
/// starts at the same moment cannot be given it and answer in its place.
public final class RefusingPort: Sendable {
    private let socket: Int32
    public let port: Int

    /// With `acceptingSilently`, the socket listens but nothing ever reads from it: the
    /// kernel completes each connection (up to a backlog of 1024) and no answer ever comes
    /// — a host that accepts connections and never answers.
    public init(acceptingSilently: Bool = false) throws {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ServerError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw ServerError("bind: \(String(cString: strerror(errno)))")
        }
        if acceptingSilently, listen(fd, 1024) != 0 {
            close(fd)
            throw ServerError("listen: \(String(cString: strerror(errno)))")
        }
        socket = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(socket) }

    public var baseURL: String { "http://127.0.0.1:\(port)" }
}
