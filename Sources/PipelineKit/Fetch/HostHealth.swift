import Foundation
import Synchronization

/// Which hosts answer. After `threshold` connection-level failures in a row (no answer at
/// all: a name that does not resolve, a refused connection, a connect or idle timeout) a
/// host is *tripped*: its other items fail at once with reason `download` and a message
/// that starts with `hostUnreachable`, instead of each waiting out its timeouts and
/// retries. After `pause` seconds one request is let through as a probe: an answer of any
/// kind (even a 404) closes the breaker, another connection failure trips it again.
/// `resume` tries such items again.
public final class HostHealth: Sendable {
    /// The start of the message of an item set aside because its host was tripped.
    public static let hostUnreachable = "host unreachable"

    public let threshold: Int
    public let pause: Double

    private struct Host {
        var failures = 0
        var trippedUntil: Date?
        var probing = false
        var lastError = ""
    }

    private let hosts = Mutex<[String: Host]>([:])

    public init(threshold: Int = 5, pause: Double = 30) {
        self.threshold = threshold
        self.pause = pause
    }

    /// What a request to `host` may do now.
    public enum Admission: Equatable {
        case go
        /// The host is tripped: fail at once with this message.
        case refuse(String)
    }

    public func admit(_ host: String, now: Date = Date()) -> Admission {
        hosts.withLock { all in
            guard var state = all[host], let until = state.trippedUntil else { return .go }
            if now >= until, !state.probing {
                state.probing = true
                all[host] = state
                return .go
            }
            return .refuse(
                "\(Self.hostUnreachable): \(host) failed \(state.failures) times in a row without answering "
                    + "(last: \(state.lastError)); it is tried again later, and `imgpipe resume` retries its items")
        }
    }

    /// The host answered (whatever the status): it is healthy.
    public func answered(_ host: String) {
        hosts.withLock { $0[host] = nil }
    }

    /// A connection-level failure.
    public func failed(_ host: String, _ error: String, now: Date = Date()) {
        hosts.withLock { all in
            var state = all[host] ?? Host()
            state.failures += 1
            state.lastError = error
            if state.failures >= threshold || state.probing {
                state.trippedUntil = now.addingTimeInterval(pause)
                state.probing = false
            }
            all[host] = state
        }
    }

    /// Hosts whose breaker is open (tripped, or letting one probe through), for `--metrics`.
    public func openBreakers() -> Int {
        hosts.withLock { all in all.values.filter { $0.trippedUntil != nil }.count }
    }

    /// The key of a URL's host: its origin (scheme, host and port, as robots.txt scopes it).
    package static func key(of url: URL) -> String {
        RobotsPolicy.origin(of: url) ?? url.absoluteString
    }
}
