import Foundation
import PipelineKit

/// A network namespace joined to this machine by a veth pair of its own, for a test that
/// runs a process as if on another machine and then cuts the wire to it.
///
/// The pair is a /30 of 10.231.0.0/16 picked from the test process's pid: the machine's
/// end (`hostAddress`) is a local address, so a server of the test's bound to it is
/// reachable from both sides; the namespace's end (`innerAddress`) has no other route, so
/// a process in there reaches nothing but that /30. Names carry the pid too, and whatever
/// an earlier run left under them is removed first. `remove()` (also at `deinit`) deletes
/// the namespace and the pair.
public final class NetworkLink: Sendable {
    public let namespace: String
    /// The machine's end of the pair, the one `cut()` takes down.
    public let hostInterface: String
    public let hostAddress: String
    public let innerAddress: String
    /// The pair's /30, in CIDR notation.
    public let subnet: String

    /// Whether this machine lets a test make one: root, `ip`, network namespaces and veth.
    public static let available: Bool = {
        guard getuid() == 0, ip != nil, let probe = try? NetworkLink(tag: "ipp") else { return false }
        probe.remove()
        return true
    }()

    /// `ip` (iproute2), where Debian puts it.
    public static let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    public convenience init() throws { try self.init(tag: "ipc") }

    private init(tag: String) throws {
        let pid = Int(getpid())
        namespace = "imgpipe-\(tag)-\(pid)"
        // At most 15 characters, the kernel's limit on an interface name.
        hostInterface = "\(tag)\(pid % 10_000_000)h"
        let innerInterface = "\(tag)\(pid % 10_000_000)n"
        let slot = (pid % 16384) * 4
        let base = "10.231.\(slot / 256)."
        hostAddress = base + "\(slot % 256 + 1)"
        innerAddress = base + "\(slot % 256 + 2)"
        subnet = base + "\(slot % 256)/30"
        remove()
        do {
            try Self.run(["netns", "add", namespace])
            try Self.run(["link", "add", hostInterface, "type", "veth", "peer", "name", innerInterface])
            try Self.run(["link", "set", innerInterface, "netns", namespace])
            try Self.run(["addr", "add", hostAddress + "/30", "dev", hostInterface])
            try Self.run(["-n", namespace, "addr", "add", innerAddress + "/30", "dev", innerInterface])
            try Self.run(["-n", namespace, "link", "set", "lo", "up"])
            try Self.run(["-n", namespace, "link", "set", innerInterface, "up"])
            try Self.run(["link", "set", hostInterface, "up"])
        } catch {
            remove()
            throw error
        }
    }

    deinit { remove() }

    /// The command line that runs `arguments` inside the namespace.
    public func inside(_ arguments: [String]) -> (executable: String, arguments: [String]) {
        (Self.ip ?? "ip", ["netns", "exec", namespace] + arguments)
    }

    /// Takes the machine's end down: packets from the namespace go nowhere, without an
    /// answer (the namespace's end keeps its address and route, its carrier gone).
    public func cut() throws { try Self.run(["link", "set", hostInterface, "down"]) }

    /// Brings the machine's end up again.
    public func restore() throws { try Self.run(["link", "set", hostInterface, "up"]) }

    /// Deletes the namespace and the pair (either may be gone already).
    public func remove() {
        _ = try? Self.run(["netns", "delete", namespace], quiet: true)
        _ = try? Self.run(["link", "delete", hostInterface], quiet: true)
    }

    private static func run(_ arguments: [String], quiet: Bool = false) throws {
        guard let ip else { throw LinkError("`ip` (iproute2) is not installed") }
        let result = try ImgpipeBinary.launch(executable: ip, arguments, in: "/").wait()
        if result.status != 0, !quiet {
            throw LinkError("ip \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
        }
    }

    public struct LinkError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
