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
    }

    let sink: any Sink
    private let held = Mutex<[Entry]>([])

    init(_ sink: any Sink) { self.sink = sink }

    /// Hands `item` to the sink. An item it holds is registered with `settlement`, and
    /// `onHold` runs before anything else can reach the batch; when the sink says the batch
    /// is full, it is committed there and then (see `commit`), before another item comes in.
    func accept(
        _ item: BatchItem, attempt: Int, _ settlement: Settlement, onHold: () -> Void,
        record: ([Entry], Commit) -> Void
    ) throws(DeliveryFailure) -> Acceptance {
        guard sink.takesWholeItems else {
            let outcome = try sink.accept(item, attempt: attempt)
            guard case .held = outcome else { return outcome }
            // Only a sink handed one item at a time can hold one (see the type's comment).
            throw DeliveryFailure(
                ItemFailure(.upload, "sink \(sink.name) held an output but does not take items whole"), attempts: attempt)
        }
        let outcome = held.withLock { held in
            let outcome = Result { () throws(DeliveryFailure) in try sink.accept(item, attempt: attempt) }
            if case .success(.held(let full)) = outcome {
                held.append(Entry(item: item, settlement: settlement))
                onHold()
                if full { commit(&held, record) }
            }
            return outcome
        }
        return try outcome.get()
    }

    /// Commits the open batch (nothing held: nothing to do) and hands what became of it, with
    /// the items it held, to `record`, still under the lock: the next batch's items are
    /// recorded after this one's.
    func commit(_ record: ([Entry], Commit) -> Void) {
        held.withLock { commit(&$0, record) }
    }

    private func commit(_ held: inout [Entry], _ record: ([Entry], Commit) -> Void) {
        guard !held.isEmpty else { return }
        let entries = held
        held.removeAll()
        do throws(DeliveryFailure) {
            record(entries, .delivered(try sink.commit()))
        } catch {
            record(entries, .failed(error))
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
