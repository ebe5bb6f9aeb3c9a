import Foundation
import PipelineKit
import Synchronization

/// Holds each item's `dedup` verdict until every item before it in feed order has had its
/// own (or has ended without one), so that the item kept of each group is the first in feed
/// order however the items' downloads and pixel work overlap.
///
/// An item enters when it starts towards the pixel stage (`enter`), arrives once its outputs
/// are staged (`arrive`), and its verdict runs when no item that entered before it is still
/// waiting for one. Items a run admits in feed order (`RunStages.produce`), so an item only
/// waits for items that hold a slot and move on: no thread waits, and no slot is taken by an
/// item that could not start.
///
/// In a shared run the items before it may be other workers': with a `floor`, the first
/// waiting item's verdict also waits until the floor says every item before it in the
/// whole run has had its verdict (`DedupFloor`). Verdicts run one at a time.
final class DedupGate: Sendable {
    private struct State {
        /// Items that entered and have had no verdict yet.
        var waiting: Set<Int> = []
        /// Items that arrived before their turn, with what to run then.
        var parked: [Int: @Sendable (Bool) -> Void] = [:]
        /// The item whose verdict is running (or whose floor is being asked): the next
        /// waits for it to pass.
        var running: Int?
        var shut = false
        /// The first item left for resume while the run stops (`abandon`): no item after it
        /// has its verdict in this session.
        var abandonedFrom: Int?

        /// Whether `seq` is past an item left for resume.
        func isAbandoned(_ seq: Int) -> Bool { abandonedFrom.map { seq > $0 } ?? false }

        /// The first waiting item, when it has arrived and no verdict is running: marked running.
        mutating func takeNext() -> Int? {
            guard running == nil, let first = waiting.min(), parked[first] != nil else { return nil }
            running = first
            return first
        }
    }

    private let state = Mutex(State())
    /// What says when the items of other workers before an item have had their verdicts;
    /// nil on one machine (every item before it is this run's, and entered here).
    let floor: (any DedupFloor)?

    init(floor: (any DedupFloor)? = nil) { self.floor = floor }

    /// An item that may reach the verdict started: the items after it wait for its verdict.
    func enter(_ seq: Int) {
        state.withLock { state in
            if !state.shut { state.waiting.insert(seq) }
        }
    }

    /// An item ended without a verdict (failed, skipped before its outputs were made): no
    /// longer waited for.
    func leave(_ seq: Int, key: String) {
        // An item skipped by its own verdict (a duplicate) is passed by it, not left.
        let entered = state.withLock { $0.running != seq && $0.waiting.remove(seq) != nil }
        if entered { floor?.left(seq, key: key) }
        advance()
    }

    /// Runs `body(true)` once every item that entered before `seq` has had its verdict or
    /// left (and, with a floor, every item of the run before it); at once when the item did
    /// not enter (an item made again, already judged). `body(false)` when the run stops
    /// first: the item is left as it was recorded. The body must end with `pass(seq)` after
    /// a verdict.
    func arrive(_ seq: Int, _ body: @escaping @Sendable (Bool) -> Void) {
        let now = state.withLock { state -> Bool? in
            if state.shut || state.isAbandoned(seq) { return false }
            guard state.waiting.contains(seq) else { return true }
            state.parked[seq] = body
            return nil
        }
        if let now { return body(now) }
        advance()
    }

    /// Whether `seq` comes after an item left for resume: its verdict is not for this
    /// session, so neither is its pixel work.
    func isAbandoned(_ seq: Int) -> Bool { state.withLock { $0.isAbandoned(seq) } }

    /// `seq` had its verdict: the next waiting item may have its own.
    func pass(_ seq: Int) {
        state.withLock { state in
            state.waiting.remove(seq)
            if state.running == seq { state.running = nil }
        }
        advance()
    }

    /// `seq` is left as recorded because the run is stopping (a first interrupt lets the
    /// items in flight finish): the items before it still have their verdicts, and every
    /// item after it is given `false`, so that a resume judges them after it, in feed order.
    func abandon(_ seq: Int) {
        let refused = state.withLock { state -> [@Sendable (Bool) -> Void] in
            // An item that never entered (made again, judged already) holds no one back.
            guard state.waiting.remove(seq) != nil else { return [] }
            state.abandonedFrom = min(state.abandonedFrom ?? seq, seq)
            let after = state.parked.keys.filter { state.isAbandoned($0) && $0 != state.running }
            let refused = after.compactMap { state.parked.removeValue(forKey: $0) }
            for later in after { state.waiting.remove(later) }
            return refused
        }
        for body in refused { DispatchQueue.global().async { body(false) } }
        advance()
    }

    /// The run is stopping: every item waiting for its turn is given `false`, and so is
    /// every item that arrives from now on.
    func shut() {
        let parked = state.withLock { state -> [@Sendable (Bool) -> Void] in
            state.shut = true
            state.waiting.removeAll()
            let waiting = state.parked.filter { $0.key != state.running }
            for seq in waiting.keys { state.parked.removeValue(forKey: seq) }
            return Array(waiting.values)
        }
        for body in parked { DispatchQueue.global().async { body(false) } }
    }

    /// Runs the first waiting item's verdict when it has arrived, no verdict is running, and
    /// the floor (if any) is clear below it; else, with a floor, watches it for that item.
    private func advance() {
        guard let next = state.withLock({ $0.takeNext() }) else { return }
        if let floor, !floor.isClear(below: next) {
            let refused = state.withLock { state -> (@Sendable (Bool) -> Void)? in
                if state.running == next { state.running = nil }
                // Stopped while the floor was asked (`shut` and `abandon` leave the running
                // item to this): refused now, not watched.
                guard state.shut || state.isAbandoned(next) else { return nil }
                state.waiting.remove(next)
                return state.parked.removeValue(forKey: next)
            }
            if let refused { return DispatchQueue.global().async { refused(false) } }
            floor.watch(next) { [self] in advance() }
            return
        }
        let body = state.withLock { state -> (@Sendable (Bool) -> Void)? in
            guard let body = state.parked.removeValue(forKey: next) else {
                // Given `false` meanwhile (the run stopping): nothing runs.
                if state.running == next { state.running = nil }
                return nil
            }
            return body
        }
        guard let body else { return advance() }
        let go = state.withLock { state -> Bool in
            let go = !state.shut && !state.isAbandoned(next)
            // Refused: no verdict comes to pass it.
            if !go, state.running == next { state.running = nil }
            return go
        }
        DispatchQueue.global().async { body(go) }
    }
}
