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
final class DedupGate: Sendable {
    private struct State {
        /// Items that entered and have had no verdict yet.
        var waiting: Set<Int> = []
        /// Items that arrived before their turn, with what to run then.
        var parked: [Int: @Sendable (Bool) -> Void] = [:]
        var shut = false
        /// The first item left for resume while the run stops (`abandon`): no item after it
        /// has its verdict in this session.
        var abandonedFrom: Int?

        /// Whether `seq` is past an item left for resume.
        func isAbandoned(_ seq: Int) -> Bool { abandonedFrom.map { seq > $0 } ?? false }

        /// The first waiting item's body, when it has arrived: taken out to be run.
        mutating func takeNext() -> (@Sendable (Bool) -> Void)? {
            guard let first = waiting.min() else { return nil }
            return parked.removeValue(forKey: first)
        }
    }

    private let state = Mutex(State())

    /// An item that may reach the verdict started: the items after it wait for its verdict.
    func enter(_ seq: Int) {
        state.withLock { state in
            if !state.shut { state.waiting.insert(seq) }
        }
    }

    /// An item ended without a verdict (failed, skipped before its outputs were made): no
    /// longer waited for.
    func leave(_ seq: Int) {
        run(
            state.withLock { state in
                state.waiting.remove(seq)
                return state.takeNext()
            })
    }

    /// Runs `body(true)` once every item that entered before `seq` has had its verdict or
    /// left; at once when the item did not enter (an item made again, already judged).
    /// `body(false)` when the run stops first: the item is left as it was recorded. The body
    /// must end with `pass(seq)` after a verdict.
    func arrive(_ seq: Int, _ body: @escaping @Sendable (Bool) -> Void) {
        let now = state.withLock { state -> Bool? in
            if state.shut || state.isAbandoned(seq) { return false }
            guard state.waiting.contains(seq), state.waiting.min() != seq else { return true }
            state.parked[seq] = body
            return nil
        }
        if let now { body(now) }
    }

    /// Whether `seq` comes after an item left for resume: its verdict is not for this
    /// session, so neither is its pixel work.
    func isAbandoned(_ seq: Int) -> Bool { state.withLock { $0.isAbandoned(seq) } }

    /// `seq` had its verdict: the next waiting item may have its own.
    func pass(_ seq: Int) { leave(seq) }

    /// `seq` is left as recorded because the run is stopping (a first interrupt lets the
    /// items in flight finish): the items before it still have their verdicts, and every
    /// item after it is given `false`, so that a resume judges them after it, in feed order.
    func abandon(_ seq: Int) {
        let (refused, next) = state.withLock { state -> ([@Sendable (Bool) -> Void], (@Sendable (Bool) -> Void)?) in
            // An item that never entered (made again, judged already) holds no one back.
            guard state.waiting.remove(seq) != nil else { return ([], nil) }
            state.abandonedFrom = min(state.abandonedFrom ?? seq, seq)
            let after = state.parked.keys.filter(state.isAbandoned)
            let refused = after.compactMap { state.parked.removeValue(forKey: $0) }
            for later in after { state.waiting.remove(later) }
            return (refused, state.takeNext())
        }
        for body in refused { DispatchQueue.global().async { body(false) } }
        run(next)
    }

    /// The run is stopping: every item waiting for its turn is given `false`, and so is
    /// every item that arrives from now on.
    func shut() {
        let parked = state.withLock { state -> [@Sendable (Bool) -> Void] in
            state.shut = true
            state.waiting.removeAll()
            defer { state.parked.removeAll() }
            return Array(state.parked.values)
        }
        for body in parked { DispatchQueue.global().async { body(false) } }
    }

    private func run(_ body: (@Sendable (Bool) -> Void)?) {
        guard let body else { return }
        DispatchQueue.global().async { body(true) }
    }
}
