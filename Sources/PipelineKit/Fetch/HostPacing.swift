import Foundation
import Synchronization

/// How fast each host is asked: `limits.rate` requests per second per host (with a burst of
/// `limits.burst`), and slower for a while after the host says it is overloaded.
///
/// One per run, shared by every request of it (feed pages, robots.txt, images, uploads),
/// keyed by origin (scheme, host and port). Requests are given start times a rate apart
/// (a reservation: a request asking while others wait gets the next free time, so any
/// number of threads together keep the rate).
///
/// Back-off: an answer of 429 or 503 halves the host's rate (from the configured rate, or
/// for an unlimited host from the rate it was being asked at), at most once a second so
/// that the answers to requests already in flight count once; a `Retry-After` holds every
/// request to the host until then (at most `maxPause` seconds), not only the item's own.
/// The rate then recovers by a quarter every `recoveryStep` seconds without another such
/// answer, up to the configured rate (an unlimited host is unlimited again once it is back
/// at twice the rate that was throttled).
public final class HostPacing: Sendable {
    /// The configured rate (requests per second per host); nil is unlimited.
    public let rate: Double?
    /// Requests that may start at once after a quiet spell.
    public let burst: Int
    /// The slowest a host is ever asked after back-offs, in requests per second.
    public static let minimumRate = 0.2
    /// The longest a host-wide `Retry-After` is honoured, in seconds.
    public static let maxPause = 300.0
    public let recoveryStep: Double
    /// Told (once per change) when a host is slowed down: a line for the log.
    let onSlowDown: (@Sendable (String) -> Void)?

    private struct Host {
        /// The theoretical arrival time of the next request (GCRA), seconds since the
        /// reference date.
        var nextStart = 0.0
        /// No request starts before this (a `Retry-After`).
        var pausedUntil = 0.0
        /// The rate in force after back-offs; nil when it is `rate` (or unlimited).
        var slowed: Double?
        /// Above this an unlimited host is unlimited again.
        var ceiling = 0.0
        var lastChange = 0.0
        /// Start times of the latest requests, to tell the rate an unlimited host had.
        var recent: [Double] = []
    }

    private let hosts = Mutex<[String: Host]>([:])

    /// The default burst for a rate: one second's worth, between 1 and 5 requests.
    public static func defaultBurst(for rate: Double) -> Int {
        max(1, min(5, Int(rate.rounded(.up))))
    }

    public init(
        rate: Double? = nil, burst: Int? = nil, recoveryStep: Double = 5,
        onSlowDown: (@Sendable (String) -> Void)? = nil
    ) {
        self.rate = rate.flatMap { $0 > 0 ? $0 : nil }
        self.burst = max(1, burst ?? self.rate.map(Self.defaultBurst) ?? 1)
        self.recoveryStep = recoveryStep
        self.onSlowDown = onSlowDown
    }

    /// Reserves the next start time for a request to `host`: the seconds to wait before
    /// sending it (0: at once).
    public func reserve(_ host: String, now: Date = Date()) -> Double {
        let time = now.timeIntervalSinceReferenceDate
        return hosts.withLock { all in
            var state = all[host] ?? Host()
            recover(&state, at: time)
            var start = max(time, state.pausedUntil)
            if let current = state.slowed ?? rate {
                let interval = 1 / current
                let tolerance = Double(burst - 1) * interval
                start = max(start, state.nextStart - tolerance)
                state.nextStart = max(state.nextStart, start) + interval
            }
            state.recent.append(start)
            if state.recent.count > 32 { state.recent.removeFirst(state.recent.count - 32) }
            all[host] = state
            return start - time
        }
    }

    /// Seconds until a `Retry-After` on `host` ends (0 when none holds it).
    public func pause(of host: String, now: Date = Date()) -> Double {
        let time = now.timeIntervalSinceReferenceDate
        return hosts.withLock { max(0, ($0[host]?.pausedUntil ?? 0) - time) }
    }

    /// Whether an answer with this status slows its host down.
    public static func isOverload(status: Int) -> Bool { status == 429 || status == 503 }

    /// `host` answered 429 or 503 (with `retryAfter` seconds, if it said).
    public func overloaded(_ host: String, status: Int, retryAfter: Double?, now: Date = Date()) {
        let time = now.timeIntervalSinceReferenceDate
        let note: String? = hosts.withLock { all in
            var state = all[host] ?? Host()
            var changes: [String] = []
            if let retryAfter, retryAfter > 0 {
                let until = time + min(retryAfter, Self.maxPause)
                if until > state.pausedUntil + 1 {
                    changes.append("holding its requests for \(Self.seconds(until - time)) s (Retry-After)")
                }
                state.pausedUntil = max(state.pausedUntil, until)
            }
            if time - state.lastChange >= 1 || state.slowed == nil {
                let before = state.slowed ?? rate ?? observedRate(state, at: time)
                if state.slowed == nil, rate == nil { state.ceiling = 2 * before }
                let after = max(Self.minimumRate, before / 2)
                if after < before || state.slowed == nil {
                    state.slowed = after
                    state.lastChange = time
                    // Nothing starts at the old pace: the next request is an interval away.
                    state.nextStart = max(state.nextStart, time + 1 / after)
                    changes.append("at most \(Self.seconds(after)) requests/s")
                }
            }
            all[host] = state
            return changes.isEmpty ? nil : "\(host) answered HTTP \(status): " + changes.joined(separator: ", ")
        }
        if let note { onSlowDown?(note) }
    }

    /// The rate in force for `host` now (nil: unlimited), after recovery.
    public func currentRate(_ host: String, now: Date = Date()) -> Double? {
        let time = now.timeIntervalSinceReferenceDate
        return hosts.withLock { all in
            guard var state = all[host] else { return rate }
            recover(&state, at: time)
            all[host] = state
            return state.slowed ?? rate
        }
    }

    /// Each host asked so far: the rate in force (nil: unlimited), whether back-offs slowed
    /// it, whether a `Retry-After` holds it now (for `--metrics`).
    public func snapshot(now: Date = Date()) -> [(host: String, rate: Double?, slowed: Bool, held: Bool)] {
        let time = now.timeIntervalSinceReferenceDate
        return hosts.withLock { all in
            all.keys.sorted().map { host in
                var state = all[host] ?? Host()
                recover(&state, at: time)
                all[host] = state
                return (host, state.slowed ?? rate, state.slowed != nil, state.pausedUntil > time)
            }
        }
    }

    /// Steps a slowed host's rate back up, a quarter per quiet `recoveryStep`.
    private func recover(_ state: inout Host, at time: Double) {
        guard var slowed = state.slowed else { return }
        let steps = Int((time - state.lastChange) / recoveryStep)
        guard steps > 0 else { return }
        for _ in 0..<min(steps, 64) { slowed *= 1.25 }
        state.lastChange += Double(steps) * recoveryStep
        let limit = rate ?? state.ceiling
        state.slowed = slowed >= limit ? nil : slowed
    }

    /// Requests per second over the latest starts (at least 1: a host asked once or twice
    /// and already overloaded is asked once a second at most, then halved).
    private func observedRate(_ state: Host, at time: Double) -> Double {
        guard state.recent.count >= 2, let first = state.recent.first else { return 1 }
        let span = max(time - first, 0.1)
        return max(1, Double(state.recent.count) / span)
    }

    private static func seconds(_ value: Double) -> String {
        value >= 10 ? String(Int(value.rounded())) : String(format: "%.1f", value)
    }
}
