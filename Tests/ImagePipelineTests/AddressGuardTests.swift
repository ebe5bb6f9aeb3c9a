import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The address guard (`"network"`, `AddressPolicy`): which class each address is in, and on
/// the built binary that a refused address gets no connection, whether an item's URL, a
/// redirect or a sink's names it.
@Suite("Address guard", .serialized)
struct AddressGuardTests {
    let work: TemporaryDirectory
    let jpeg: Data

    init() throws {
        work = try TemporaryDirectory("imgpipe-guard")
        let path = work.url("fixture.jpg")
        try ImageFixtures.jpeg(at: path, width: 64, height: 48)
        jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
    }

    func imgpipe(_ arguments: String..., environment: [String: String] = [:]) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path, environment: environment)
    }

    // MARK: - the classifier, on literal addresses

    @Test(arguments: [
        ("127.0.0.1", ["loopback"]), ("127.255.0.9", ["loopback"]), ("0.0.0.0", ["loopback"]), ("::1", ["loopback"]),
        ("::", ["loopback"]), ("10.1.2.3", ["private"]), ("172.16.0.1", ["private"]), ("172.31.255.255", ["private"]),
        ("172.32.0.1", []), ("192.168.1.1", ["private"]), ("100.64.0.1", ["private"]), ("100.128.0.1", []),
        ("169.254.1.1", ["link-local"]), ("169.254.169.254", ["link-local", "metadata"]),
        ("169.254.170.2", ["link-local", "metadata"]), ("100.100.100.200", ["metadata", "private"]),
        ("fe80::1", ["link-local"]), ("fd00::1", ["private"]), ("fec0::1", ["private"]),
        ("fd00:ec2::254", ["metadata", "private"]), ("fd00:ec2::23", ["metadata", "private"]),
        ("168.63.129.16", ["metadata"]), ("192.0.0.192", ["metadata", "private"]), ("198.18.0.1", ["private"]),
        ("240.0.0.1", ["private"]), ("64:ff9b:1:a9fe:a9:fe00::", ["link-local", "metadata"]),
        // IPv6 forms that carry an IPv4 address are judged by it.
        ("::ffff:169.254.169.254", ["link-local", "metadata"]), ("::ffff:127.0.0.1", ["loopback"]),
        ("::ffff:10.0.0.1", ["private"]), ("::169.254.169.254", ["link-local", "metadata"]),
        ("::ffff:0:127.0.0.1", ["loopback"]), ("64:ff9b::a9fe:a9fe", ["link-local", "metadata"]),
        ("64:ff9b::7f00:1", ["loopback"]), ("64:ff9b:1:a00:0:100::", ["private"]),
        ("2002:a9fe:a9fe::1", ["link-local", "metadata"]),
        ("8.8.8.8", []), ("93.184.216.34", []), ("2001:db8::1", []), ("2606:4700::1111", []),
    ])
    func eachAddressIsInItsClasses(_ address: String, _ classes: [String]) throws {
        let parsed = try #require(IPAddress(address), "\(address)")
        #expect(parsed.classes.map(\.rawValue).sorted() == classes, "\(address)")
    }

    @Test func theDefaultPolicyRefusesMetadataAndLinkLocalOnly() throws {
        let policy = AddressPolicy()
        #expect(policy.refusal(of: IPAddress("169.254.169.254")!)?.contains("metadata address") == true)
        #expect(policy.refusal(of: IPAddress("64:ff9b::a9fe:a9fe")!)?.contains("metadata address") == true)
        #expect(policy.refusal(of: IPAddress("169.254.3.4")!)?.contains("link-local address") == true)
        #expect(policy.refusal(of: IPAddress("fe80::1")!) != nil)
        #expect(policy.refusal(of: IPAddress("127.0.0.1")!) == nil)
        #expect(policy.refusal(of: IPAddress("10.0.0.1")!) == nil)
        #expect(policy.refusal(of: IPAddress("8.8.8.8")!) == nil)
    }

    @Test func rangesDenyAndAllow() throws {
        let policy = AddressPolicy(
            deny: [.private], denyRanges: [AddressRange("203.0.113.0/24")!], allowRanges: [AddressRange("10.1.2.3")!])
        #expect(policy.refusal(of: IPAddress("10.1.2.3")!) == nil)
        #expect(policy.refusal(of: IPAddress("10.1.2.4")!)?.contains("private address") == true)
        #expect(policy.refusal(of: IPAddress("203.0.113.9")!)?.contains("203.0.113.0/24") == true)
        #expect(policy.refusal(of: IPAddress("::ffff:203.0.113.9")!)?.contains("203.0.113.0/24") == true)
        #expect(policy.refusal(of: IPAddress("203.0.114.9")!) == nil)
        #expect(AddressRange("fd00::/8")!.contains(IPAddress("fdab::1")!))
        #expect(!AddressRange("fd00::/8")!.contains(IPAddress("fe00::1")!))
        for bad in ["10.0.0.0/33", "fe80::/129", "10.0.0.0/", "example.com", "10.0.0.0/8/8", "", "10.0.0.0/-0", "10.0.0.0/+8"] {
            #expect(AddressRange(bad) == nil, "\(bad)")
        }
    }

    /// `deny` adds to what is always denied: a list of ranges alone does not open the
    /// metadata service, and only its own address in `allow` does (a wider range does not).
    @Test func metadataStaysDeniedUnlessItsOwnAddressIsAllowed() throws {
        let ranges = AddressPolicy(deny: [], denyRanges: [AddressRange("10.0.0.0/8")!])
        #expect(ranges.refusal(of: IPAddress("169.254.169.254")!) != nil)
        let wide = AddressPolicy(allowRanges: [AddressRange("169.254.0.0/16")!])
        #expect(wide.refusal(of: IPAddress("169.254.169.254")!)?.contains("metadata") == true)
        #expect(wide.refusal(of: IPAddress("169.254.1.2")!) == nil)
        let exact = AddressPolicy(allowRanges: [AddressRange("169.254.169.254")!])
        #expect(exact.refusal(of: IPAddress("169.254.169.254")!) == nil)
    }

    // MARK: - the built binary

    /// Items whose URL is on a denied address fail as `blocked-address`, naming the address
    /// and its class, and the server there sees no connection at all.
    @Test func anItemOnADeniedAddressGetsNoConnection() throws {
        let jpeg = self.jpeg
        let server = try TestHTTPServer { _ in .bytes(jpeg) }
        try work.write("\(server.baseURL)/a.jpg\n\(server.baseURL)/b.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "network": {"deny": ["loopback"]}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(server.connections == 0)
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.failuresByReason == ["blocked-address": 2])
        #expect(status.failures.allSatisfy { $0.message.contains("127.0.0.1 is a loopback address") }, "\(status.failures)")
        // Never worth a retry as it is: the advice says what to change.
        let text = try imgpipe("status", "pipe.json")
        #expect(text.stdout.contains("blocked-address (2"), "\(text.stdout)")
        #expect(text.stdout.contains("network.allow"), "\(text.stdout)")
    }

    /// An allowed host that redirects to a denied address: the first server answers, the
    /// second sees nothing. `allow` lets one address of a denied class through.
    @Test func aRedirectToADeniedAddressIsNotFollowed() throws {
        let jpeg = self.jpeg
        let inside = try TestHTTPServer(host: "127.0.0.2") { _ in .bytes(jpeg) }
        let outside = try TestHTTPServer { request in
            request.path == "/fine.jpg" ? .bytes(jpeg) : .status(302, headers: [("Location", "\(inside.baseURL)/secret.jpg")])
        }
        try work.write("\(outside.baseURL)/fine.jpg\n\(outside.baseURL)/moved.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "network": {"deny": ["loopback"], "allow": ["127.0.0.1"]}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(inside.connections == 0)
        #expect(outside.requests.map(\.path).sorted() == ["/fine.jpg", "/moved.jpg"])
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.done == 1 && status.failuresByReason == ["blocked-address": 1], "\(status.failures)")
        #expect(status.failures.first?.message.contains("127.0.0.2 is a loopback address") == true, "\(status.failures)")
    }

    /// A proxy in the environment is not used: through it, every connection would be the
    /// proxy's and the target's address never judged. The proxy sees nothing, and the
    /// item on a denied address still fails as `blocked-address`.
    @Test func aProxyInTheEnvironmentDoesNotCarryADeniedRequest() throws {
        let jpeg = self.jpeg
        let target = try TestHTTPServer(host: "127.0.0.2") { _ in .bytes(jpeg) }
        let proxy = try TestHTTPServer { _ in .bytes(jpeg) }
        try work.write("\(target.baseURL)/a.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "network": {"deny": ["127.0.0.2/32"]}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe(
            "run", "pipe.json",
            environment: ["http_proxy": proxy.baseURL, "HTTPS_PROXY": proxy.baseURL, "ALL_PROXY": proxy.baseURL])
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(proxy.connections == 0 && target.connections == 0)
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.failuresByReason == ["blocked-address": 1], "\(status.failures)")
    }

    /// With `"robots": true`, a host on a denied address is not a robots.txt that could not
    /// be read (a skip): its item fails as `blocked-address`, and the run exits 1.
    @Test func aDeniedHostIsNotARobotsSkip() throws {
        let jpeg = self.jpeg
        let server = try TestHTTPServer { _ in .bytes(jpeg) }
        try work.write("\(server.baseURL)/a.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false, "robots": true},
             "network": {"deny": ["loopback"]}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(server.connections == 0)
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.failuresByReason == ["blocked-address": 1] && status.skipped == 0, "\(status.skips)")
    }

    /// A sink's URL on a denied address: the item fails as `blocked-address` and the
    /// upload server receives nothing.
    @Test func anUploadToADeniedAddressIsNotSent() throws {
        let server = try UploadServer()
        try FileManager.default.createDirectory(atPath: work.url("in"), withIntermediateDirectories: true)
        try jpeg.write(to: URL(fileURLWithPath: work.url("in/photo.jpg")))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "network": {"deny": ["loopback"]},
             "sink": {"type": "http", "url": "\(server.baseURL)/put/{name}", "method": "PUT"}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(server.connections == 0 && server.uploads.isEmpty)
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.failuresByReason == ["blocked-address": 1], "\(status.failures)")
    }

    /// A policy that names an unknown class is refused when the file is read, at its path.
    @Test func anUnknownClassIsRefusedAtItsPath() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "."},
             "network": {"deny": ["metadata", "intranet"]}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let result = try imgpipe("validate", "pipe.json")
        #expect(result.status == 2)
        #expect(result.stderr.contains("network.deny[1]") && result.stderr.contains("\"link-local\""), "\(result.stderr)")
    }
}
