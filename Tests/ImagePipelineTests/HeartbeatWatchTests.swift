import Foundation
import Testing

@testable import ImagePipeline

/// The shared worker's watchdog on a made-up clock: a pause is not a hang, a hang is found
/// even by a watchdog that ticks late, and a call timed from before a pause is not either.
@Suite("Heartbeat watch")
struct HeartbeatWatchTests {
    let lease = 10.0
    let start = Date(timeIntervalSinceReferenceDate: 1_000_000)

    /// Ticks every `every` seconds from `from` to `to` with the given call and renewal;
    /// returns the time of the first tick that says stop, if any.
    func ticks(
        _ watch: inout HeartbeatWatch, from: Double, to: Double, every: Double, call: Int?, renewal: Date,
        failing: Bool = false
    ) -> Double? {
        var time = from
        while time <= to {
            if watch.tick(now: start.addingTimeInterval(time), call: call, renewal: renewal, failing: failing) {
                return time
            }
            time += every
        }
        return nil
    }

    /// A call under way when the process stopped for 100 s is not taken for a hung one on
    /// waking; the same call still hung a lease later (in time the process ran) is.
    @Test func aPauseIsNotAHangButAHangAfterItIs() {
        var watch = HeartbeatWatch(lease: lease)
        let fired1 = ticks(&watch, from: 0, to: 2, every: 0.25, call: 1, renewal: start)
        #expect(fired1 == nil)
        // Stopped from t = 2 to t = 102: one tick on waking counts one second.
        let stop2 = watch.tick(now: start.addingTimeInterval(102), call: 1, renewal: start, failing: false)
        #expect(!stop2)
        #expect(watch.callTime <= 3.01)
        let fired = ticks(&watch, from: 102.25, to: 130, every: 0.25, call: 1, renewal: start)
        #expect(fired != nil && fired! > 102 + lease - 3.5 && fired! <= 102 + lease, "\(String(describing: fired))")
    }

    /// Before, a tick late by more than a second restarted the call's time, so a watchdog
    /// kept off the CPU (every tick 1.5 s late) never fired on a call that hung for good.
    @Test func aLateWatchdogStillFindsAHungCall() {
        var watch = HeartbeatWatch(lease: lease)
        let fired = ticks(&watch, from: 0, to: 60, every: 1.5, call: 7, renewal: start)
        #expect(fired != nil && fired! <= lease * 1.5 + 1.5, "\(String(describing: fired))")
    }

    /// A heartbeat that stopped before it said its call began: on waking, the watchdog sees
    /// the call begin then, and times it from there.
    @Test func aCallThatBeginsOnWakingIsTimedFromThen() {
        var watch = HeartbeatWatch(lease: lease)
        let fired3 = ticks(&watch, from: 0, to: 5, every: 0.25, call: nil, renewal: start)
        #expect(fired3 == nil)
        let fired4 = ticks(&watch, from: 300, to: 300 + lease - 1, every: 0.25, call: 2, renewal: start)
        #expect(fired4 == nil)
    }

    /// Heartbeats failing in a row stop the worker once no renewal has landed for a lease (in
    /// time the process ran), not at once after a pause; a renewal starts the count again.
    @Test func failingHeartbeatsStopTheWorkerAfterALeaseOfRunning() {
        var watch = HeartbeatWatch(lease: lease)
        let fired5 = ticks(&watch, from: 0, to: 8, every: 0.25, call: nil, renewal: start, failing: true)
        #expect(fired5 == nil)
        let stop6 = watch.tick(now: start.addingTimeInterval(200), call: nil, renewal: start, failing: true)
        #expect(!stop6)
        let renewed = start.addingTimeInterval(201)
        let fired7 = ticks(&watch, from: 201, to: 201 + lease - 1, every: 0.25, call: nil, renewal: renewed, failing: true)
        #expect(fired7 == nil)
        let fired = ticks(&watch, from: 201 + lease, to: 240, every: 0.25, call: nil, renewal: renewed, failing: true)
        #expect(fired != nil && fired! <= 201 + lease + 0.5, "\(String(describing: fired))")
        // Not failing: silence alone never stops it (its heartbeat is just slow).
        var quiet = HeartbeatWatch(lease: lease)
        let fired8 = ticks(&quiet, from: 0, to: 100, every: 0.25, call: nil, renewal: start)
        #expect(fired8 == nil)
    }
}
