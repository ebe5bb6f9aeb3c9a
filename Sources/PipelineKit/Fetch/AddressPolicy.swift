import Foundation

/// Which addresses imgpipe may connect to (`"network": {"deny": […], "allow": […]}` in the
/// pipeline file). A feed is untrusted: an entry, a redirect or an upload service's answer
/// can point at a cloud metadata endpoint or a service inside the network. The policy is
/// checked on every connection libcurl opens, after DNS resolution (`HTTPClient`), so a
/// name that resolves to a denied address, a redirect to one and a name whose address
/// changed since it was first asked (DNS rebinding) are all refused before a socket exists.
///
/// Always denied: `link-local` and `metadata`. Neither is ever an image host, and both are
/// where a cloud machine's credentials are served; `deny` adds to them (a list that names
/// ranges only must not open the metadata service), and only `allow` lets an address of
/// theirs through: a link-local one by any range, a metadata one only by its own address.
/// `private` and `loopback` are allowed unless denied: teams fetch from servers inside
/// their network, and upload to them; a pipeline that reads feeds from strangers should
/// deny them too.
public struct AddressPolicy: Sendable, Equatable {
    /// A class of addresses a policy names.
    public enum AddressClass: String, Sendable, CaseIterable, Comparable {
        /// 127.0.0.0/8, ::1, and the unspecified 0.0.0.0/8 and ::, which reach this machine.
        case loopback
        /// 10/8, 172.16/12, 192.168/16, 100.64/10 (carrier-grade NAT), 192.0.0.0/24,
        /// 198.18/15 and 240/4 (which clusters use for pods and services), fc00::/7, fec0::/10.
        case `private`
        /// 169.254/16 and fe80::/10.
        case linkLocal = "link-local"
        /// The cloud instance metadata services: 169.254.169.254 (AWS, GCP, Azure, OpenStack
        /// and others), 169.254.170.2 and 169.254.170.23 (AWS containers), 100.100.100.200
        /// (Alibaba), 168.63.129.16 (Azure's WireServer), 192.0.0.192 (Oracle's), and
        /// fd00:ec2::/32 (AWS over IPv6).
        case metadata

        public static func < (left: Self, right: Self) -> Bool { left.rawValue < right.rawValue }
    }

    /// Classes refused.
    public var deny: Set<AddressClass>
    /// Ranges refused, whatever their class.
    public var denyRanges: [AddressRange]
    /// Ranges allowed even when their class is denied (an internal image server).
    public var allowRanges: [AddressRange]

    public static let defaultDeny: Set<AddressClass> = [.linkLocal, .metadata]

    public init(deny: Set<AddressClass> = defaultDeny, denyRanges: [AddressRange] = [], allowRanges: [AddressRange] = []) {
        self.deny = deny.union(Self.defaultDeny)
        self.denyRanges = denyRanges
        self.allowRanges = allowRanges
    }

    /// Why `address` is refused ("169.254.169.254 is a metadata address"), or nil.
    public func refusal(of address: IPAddress) -> String? {
        let classes = address.classes
        // A metadata service passes only when `allow` names its very address.
        let allowed = allowRanges.contains {
            $0.contains(address) && (!classes.contains(.metadata) || $0.isSingleAddress)
        }
        if allowed { return nil }
        if let range = denyRanges.first(where: { $0.contains(address) }) {
            return "\(address) is in \(range), which \"network\".\"deny\" names"
        }
        let denied = classes.intersection(deny)
        guard let shown = denied.sorted().first(where: { $0 == .metadata }) ?? denied.sorted().first else { return nil }
        return "\(address) is a \(shown.rawValue) address, which \"network\".\"deny\" refuses"
    }
}

/// An IPv4 or IPv6 address, as the 16 bytes of its IPv6 form (an IPv4 address mapped:
/// `::ffff:a.b.c.d`).
public struct IPAddress: Sendable, Equatable, CustomStringConvertible {
    public let bytes: [UInt8]
    /// `::ffff:0:0/96`, before an IPv4 address in its IPv6 form.
    static let mappedPrefix: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]

    public init?(bytes: [UInt8]) {
        switch bytes.count {
        case 4: self.bytes = Self.mappedPrefix + bytes
        case 16: self.bytes = bytes
        default: return nil
        }
    }

    /// A literal: `192.0.2.1`, `2001:db8::1`, `::ffff:192.0.2.1`.
    public init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            self.init(bytes: withUnsafeBytes(of: &v4) { Array($0) })
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            self.init(bytes: withUnsafeBytes(of: &v6) { Array($0) })
        } else {
            return nil
        }
    }

    /// The IPv4 address this one is or carries: an IPv4-mapped (`::ffff:0:0/96`),
    /// IPv4-compatible (`::/96`), IPv4-translated (`::ffff:0:0:0/96`) or NAT64
    /// (`64:ff9b::/96`, and the local-use `64:ff9b:1::/48`) address is judged by its IPv4 address, as is a
    /// 6to4 one (`2002::/16`, the IPv4 address in its bytes 2 to 5).
    public var ipv4: [UInt8]? {
        let head = bytes.prefix(12)
        if head.elementsEqual(Self.mappedPrefix) { return Array(bytes.suffix(4)) }
        if head.elementsEqual([0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0]) { return Array(bytes.suffix(4)) }
        if head.elementsEqual([0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0]) { return Array(bytes.suffix(4)) }
        // The local-use prefix is a /48: the IPv4 address is in bytes 6–7 and 9–10 (RFC 6052).
        if bytes.prefix(6).elementsEqual([0, 0x64, 0xFF, 0x9B, 0, 1]) { return [bytes[6], bytes[7], bytes[9], bytes[10]] }
        if bytes[0] == 0x20, bytes[1] == 0x02 { return Array(bytes[2..<6]) }
        // `::a.b.c.d`, but not `::` and `::1`, which are IPv6's own.
        if head.allSatisfy({ $0 == 0 }), bytes[12] != 0 || bytes[13] != 0 || bytes[14] != 0 || bytes[15] > 1 {
            return Array(bytes.suffix(4))
        }
        return nil
    }

    /// The classes the address is in (a metadata address is link-local too).
    public var classes: Set<AddressPolicy.AddressClass> {
        if let v4 = ipv4 { return Self.classes(ofIPv4: v4) }
        var found: Set<AddressPolicy.AddressClass> = []
        if bytes.allSatisfy({ $0 == 0 }) || bytes.prefix(15).allSatisfy({ $0 == 0 }) && bytes[15] == 1 {
            found.insert(.loopback)
        }
        if bytes[0] == 0xFE, bytes[1] & 0xC0 == 0x80 { found.insert(.linkLocal) }
        if bytes[0] & 0xFE == 0xFC || bytes[0] == 0xFE && bytes[1] & 0xC0 == 0xC0 { found.insert(.private) }
        // fd00:ec2::/32 (AWS: the instance metadata service at ::254, EKS Pod Identity at ::23)
        if bytes.prefix(4).elementsEqual([0xFD, 0, 0x0E, 0xC2]) { found.insert(.metadata) }
        return found
    }

    static func classes(ofIPv4 v4: [UInt8]) -> Set<AddressPolicy.AddressClass> {
        var found: Set<AddressPolicy.AddressClass> = []
        if v4[0] == 127 || v4[0] == 0 { found.insert(.loopback) }
        if v4[0] == 10 || v4[0] == 172 && v4[1] & 0xF0 == 16 || v4[0] == 192 && v4[1] == 168
            || v4[0] == 100 && v4[1] & 0xC0 == 64 || v4[0] == 192 && v4[1] == 0 && v4[2] == 0
            || v4[0] == 198 && v4[1] & 0xFE == 18 || v4[0] & 0xF0 == 240
        {
            found.insert(.private)
        }
        if v4[0] == 169, v4[1] == 254 { found.insert(.linkLocal) }
        let metadata: [[UInt8]] = [
            [169, 254, 169, 254], [169, 254, 170, 2], [169, 254, 170, 23], [100, 100, 100, 200], [168, 63, 129, 16],
            [192, 0, 0, 192],
        ]
        if metadata.contains(v4) { found.insert(.metadata) }
        return found
    }

    public var description: String {
        if bytes.prefix(12).elementsEqual(Self.mappedPrefix) {
            return bytes.suffix(4).map(String.init).joined(separator: ".")
        }
        var address = in6_addr()
        withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: bytes) }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return "?" }
        return String(cString: text)
    }
}

/// A range of addresses written as a CIDR block (`10.1.2.0/24`, `fd00::/8`) or one address.
public struct AddressRange: Sendable, Equatable, CustomStringConvertible {
    package let base: IPAddress
    /// Leading bits of the 16-byte form that must match.
    let bits: Int
    /// Written as an IPv4 range.
    let isV4: Bool
    public let description: String

    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard (1...2).contains(parts.count), let base = IPAddress(parts[0]) else { return nil }
        let isV4 = !parts[0].contains(":")
        let width = isV4 ? 32 : 128
        guard parts.count == 1 || !parts[1].isEmpty && parts[1].allSatisfy({ ("0"..."9").contains($0) }),
            let prefix = parts.count == 2 ? Int(parts[1]) : width, (0...width).contains(prefix)
        else { return nil }
        self.base = base
        self.isV4 = isV4
        bits = isV4 ? 96 + prefix : prefix
        description = text
    }

    /// One address (a /32 or /128, or written without a prefix).
    var isSingleAddress: Bool { bits == 128 }

    /// Whether `address` is in the range. An IPv4 range also holds the IPv4 address an IPv6
    /// one carries (`IPAddress.ipv4`).
    public func contains(_ address: IPAddress) -> Bool {
        if matches(address.bytes) { return true }
        if isV4, let v4 = address.ipv4, let mapped = IPAddress(bytes: v4) { return matches(mapped.bytes) }
        return false
    }

    private func matches(_ bytes: [UInt8]) -> Bool {
        var left = bits
        for index in 0..<16 where left > 0 {
            let take = min(8, left)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
            if bytes[index] & mask != base.bytes[index] & mask { return false }
            left -= take
        }
        return true
    }
}

extension AddressPolicy {
    /// `"network": {"deny": ["private", "loopback", "10.0.0.0/8"], "allow": ["10.1.2.3"]}`:
    /// `deny` adds classes or ranges to the ones always denied; `allow` lets ranges through
    /// that `deny` would refuse (a metadata address only by its own).
    package init(node: SpecNode) throws {
        let object = try node.object(allowing: ["deny", "allow"])
        var classes = Self.defaultDeny
        var ranges: [AddressRange] = []
        let named = AddressClass.allCases.map { JSONValue.quote($0.rawValue) }.joined(separator: ", ")
        if let list = object.member("deny") {
            for entry in try list.array() {
                let text = try entry.nonEmptyString()
                if let kind = AddressClass(rawValue: text) {
                    classes.insert(kind)
                } else if let range = AddressRange(text) {
                    ranges.append(range)
                } else {
                    throw entry.expected("one of \(named), or an address range such as \"10.0.0.0/8\"")
                }
            }
        }
        let allowed = try object.optional("allow", default: []) { list in
            try list.array().map { entry -> AddressRange in
                guard let range = AddressRange(try entry.nonEmptyString()) else {
                    throw entry.expected("an address or address range such as \"10.1.2.3\" or \"10.1.0.0/16\"")
                }
                return range
            }
        }
        self.init(deny: classes, denyRanges: ranges, allowRanges: allowed)
    }
}
