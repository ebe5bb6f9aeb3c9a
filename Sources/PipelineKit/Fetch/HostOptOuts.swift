import Foundation
import Synchronization

/// Hosts that opted their images out (`X-Robots-Tag: noai`, `noimageai`, `noml`, `none`,
/// `noindex`) again and again. After `after` opt-out answers from one host in a run, its
/// other images are not asked for: each is skipped as `host-opt-out`, naming the host and
/// the last answer. A host that says it once means that image; one that says it to every
/// image means all of them, and asking on costs it a request per image for nothing.
/// Counted per process (each worker of a shared run counts its own).
public final class HostOptOuts: Sendable {
    /// Opt-out answers from a host before its other images are skipped; 0: never.
    public let after: Int
    private let hosts = Mutex<[String: (count: Int, last: String)]>([:])

    public init(after: Int) {
        self.after = after
    }

    /// One opt-out answer (or cached answer) from `host`, with its `X-Robots-Tag` line.
    public func sighted(_ host: String, line: String) {
        guard after > 0 else { return }
        hosts.withLock { all in
            let count = (all[host]?.count ?? 0) + 1
            all[host] = (count, line)
        }
    }

    /// The skip of an image of `host` not asked for, once the host has opted out `after`
    /// times; nil while it has not.
    public func skip(_ host: String) -> ItemSkip? {
        guard after > 0, let seen = hosts.withLock({ $0[host] }), seen.count >= after else { return nil }
        return ItemSkip(
            .hostOptOut,
            "\(host) opted \(seen.count) of its images out (last: X-Robots-Tag: \(seen.last)); its other images are not asked for"
        )
    }
}
