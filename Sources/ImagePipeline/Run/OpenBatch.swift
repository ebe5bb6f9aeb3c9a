import Foundation
import PipelineKit
import Synchronization

/// The items one sink holds in its open batch, each with the settlement of its item, so
/// that the runner can record them when the batch commits.
///
/// A sink that takes items whole (`Sink.takesWholeItems`) is handed one item at a time:
/// what it holds and what is registered here change together, under one lock, so a commit
/// never returns a receipt for an item the runner has not registered yet. An `OutputSink`
/// holds nothing, and is handed its outputs concurrently, as `limits.uploads` allows.
final class OpenBatch: Sendable {
    struct Entry: Sendable {
        let item: BatchItem
        let settlement: Settlement
    }

    /// How a commit ended, for each item it held.
    enum Commit: Sendable {
        case delivered([String: DeliveryReceipt])
        case failed(DeliveryFailure)
        /// Not delivered, and no longer held: left pending (another worker's item now).
        case dropped
    }

    let sink: any Sink
    private let held = Mutex<[Entry]>([])
    /// Whether an item's delivery may go out now (`RunStateStore.deliveryGate`).
    private let gate: @Sendable (String) -> DeliveryGate
    /// Whether the run stops at once (a second Ctrl-C).
    private let isAborted: @Sendable () -> Bool

    init(
        _ sink: any Sink, gate: @escaping @Sendable (String) -> DeliveryGate = { _ in .go },
        isAborted: @escaping @Sendable () -> Bool = { false }
    ) {
        self.sink = sink
        self.gate = gate
        self.isAborted = isAborted
    }

    /// Hands `item` to the sink. An item it holds is registered with `settlement`, and
    /// `onHold` runs before anything else can reach the batch; when the sink says the batch
    /// is full, it is committed there and then (see `commit`), before another item comes in.
    /// nil when `refusing` says the item is not to be handed over (asked under the batch's
    /// lock, so that an item `withdraw` takes out after the answer was "no" cannot come in).
    func accept(
        _ item: BatchItem, attempt: Int, _ settlement: Settlement, refusing: (BatchItem) -> Bool = { _ in false },
        onHold: () -> Void, record: ([Entry], Commit) -> Void
    ) throws(DeliveryFailure) -> Acceptance? {
        guard sink.takesWholeItems else {
            let outcome = try sink.accept(item, attempt: attempt)
            guard case .held = outcome else { return outcome }
            // Only a sink handed one item at a time can hold one (see the type's comment).
            throw DeliveryFailure(
                ItemFailure(.upload, "sink \(sink.name) held an output but does not take items whole"), attempts: attempt)
        }
        let outcome = held.withLock { held -> Result<Acceptance, DeliveryFailure>? in
            if refusing(item) { return nil }
            let outcome = Result { () throws(DeliveryFailure) in try sink.accept(item, attempt: attempt) }
            if case .success(.held(let full)) = outcome {
                held.append(Entry(item: item, settlement: settlement))
                onHold()
                if full { commit(&held, record) }
            }
            return outcome
        }
        return try outcome?.get()
    }

    /// Commits the open batch (nothing held: nothing to do) and hands what became of it, with
    /// the items it held, to `record`, still under the lock: the next batch's items are
    /// recorded after this one's.
    func commit(_ record: ([Entry], Commit) -> Void) {
        held.withLock { commit(&$0, record) }
    }

    private func commit(_ held: inout [Entry], _ record: ([Entry], Commit) -> Void) {
        guard !held.isEmpty else { return }
        guard regate(&held, record) else { return commit(&held, record) }
        let entries = held
        held.removeAll()
        do throws(DeliveryFailure) {
            record(entries, .delivered(try sink.commit()))
        } catch {
            record(entries, .failed(error))
        }
    }

    /// Asks the gate of every held item, as a delivery's attempt does: true when each may go.
    /// A worker stopped past its lease holds items another worker has taken since: a batch
    /// holding one would deliver it twice, so the sink drops the batch, those items are
    /// left pending (`dropped`), and the others are handed to the sink again, into a new
    /// batch (false: `held` is that batch). While the worker cannot tell yet (`wait`: its
    /// last heartbeat is too old), it asks again, as a delivery's attempt does, until the run
    /// stops at once: the batch is then dropped, its items left pending.
    private func regate(_ held: inout [Entry], _ record: ([Entry], Commit) -> Void) -> Bool {
        var gates = held.map { gate($0.item.key) }
        while gates.contains(.wait), !isAborted() {
            usleep(100_000)
            gates = held.map { gate($0.item.key) }
        }
        guard !isAborted() else {
            // Stopping at once: nothing more is committed.
            let entries = held
            held.removeAll()
            sink.discard()
            for entry in entries { record([entry], .dropped) }
            return false
        }
        guard gates.contains(where: { $0 != .go }) else { return true }
        let entries = held
        held.removeAll()
        sink.discard()
        for (entry, gate) in zip(entries, gates) {
            guard gate == .go else {
                record([entry], .dropped)
                continue
            }
            switch Result(catching: { () throws(DeliveryFailure) in try sink.accept(entry.item, attempt: 1) }) {
            case .success(.held): held.append(entry)
            case .success(.delivered(let receipt)): record([entry], .delivered([entry.item.key: receipt]))
            case .success(.retry(_, let failure)): record([entry], .failed(DeliveryFailure(failure)))
            case .failure(let failure): record([entry], .failed(failure))
            }
        }
        return false
    }

    /// Takes the held items of `keys` that `take` accepts out of the open batch (as the sink
    /// takes them out of its own); returns those taken out.
    func withdraw(_ keys: Set<String>, where take: (Entry) -> Bool) -> [Entry] {
        held.withLock { held in
            let wanted = Set(held.filter { keys.contains($0.item.key) && take($0) }.map(\.item.key))
            guard !wanted.isEmpty else { return [] }
            let taken = sink.withdraw(wanted)
            let out = held.filter { taken.contains($0.item.key) }
            held.removeAll { taken.contains($0.item.key) }
            return out
        }
    }

    /// Drops the open batch (the run stops at once); returns the items it held.
    func discard() -> [Entry] {
        held.withLock { held in
            defer { held.removeAll() }
            if !held.isEmpty { sink.discard() }
            return held
        }
    }
}

/// How a feed that waits for work to end elsewhere (a shared run's chunks) has the runner
/// commit what its sinks hold (`PipelineRunner.Options.batchFlush`): a worker whose last
/// items sit in a batch that is not full would otherwise wait for its own chunks forever.
/// The runner commits once nothing else of its session is at work (each item ended or
/// held), so a feed may ask as often as it waits.
public final class BatchFlush: Sendable {
    private let action = Mutex<(@Sendable () -> Void)?>(nil)

    public init() {}

    /// What `flush` does: the running session's commit of its open batches (nil: nothing).
    func register(_ body: (@Sendable () -> Void)?) {
        action.withLock { $0 = body }
    }

    /// Commits every sink's open batch, if a session is running; nothing held, nothing done.
    public func flush() {
        action.withLock { $0 }?()
    }
}
