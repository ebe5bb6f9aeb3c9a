import Foundation

/// What the watchdog of a shared worker counts: how long the heartbeat under way has been
/// in its call, and how long since the last renewal landed, in time this process ran.
///
/// Each tick adds the time since the previous one, at most `longestStep`: a gap longer than
/// that is time the process did not run (a SIGSTOP, a suspended host) or a watchdog thread
/// kept off the CPU, and counts as `longestStep` only. So a worker paused for minutes does
/// not take its own pause for a hung call on waking (its next heartbeat finds which leases it
/// lost), and a watchdog that ticks late still fires: later, never not at all.
struct HeartbeatWatch {
    let lease: Double
    let longestStep: Double

    private var lastTick: Date?
    /// The heartbeat call being timed (nil: none under way), and its time so far.
    private var call: Int?
    private(set) var callTime = 0.0
    /// The renewal last seen, and the time counted since it.
    private var renewal: Date?
    private(set) var silentTime = 0.0

    init(lease: Double, longestStep: Double = 1) {
        self.lease = lease
        self.longestStep = longestStep
    }

    /// One tick at `now`: `call` is the heartbeat call under way (a number each call takes;
    /// nil between calls), `renewal` when the last renewal landed, `failing` whether the
    /// heartbeats are failing in a row. True when the worker must stop: a call hung for a
    /// lease, or no renewal for a lease while heartbeats fail.
    mutating func tick(now: Date, call: Int?, renewal: Date, failing: Bool) -> Bool {
        let step = lastTick.map { min(max(0, now.timeIntervalSince($0)), longestStep) } ?? 0
        lastTick = now
        if call != self.call {
            self.call = call
            callTime = 0
        } else if call != nil {
            callTime += step
        }
        if renewal != self.renewal {
            self.renewal = renewal
            silentTime = 0
        } else {
            silentTime += step
        }
        return callTime > lease || (failing && silentTime > lease)
    }
}
