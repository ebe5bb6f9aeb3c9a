import Dispatch
import Foundation

/// The single writer of a run's state changes. Changes are queued from any thread and
/// committed in batches (group commit: everything queued while one transaction runs goes
/// into the next), then each change's completion runs on the writer's queue. A stage
/// hands an item on only from that completion, so every transition is durable before
/// the next stage starts.
// @unchecked because `pending` and `scheduled` are guarded by `lock`.
final class StoreWriter: @unchecked Sendable {
    typealias Completion = @Sendable (ChangeOutcome) -> Void

    private let store: any RunStateStore
    private let runId: Int64
    private let queue = DispatchQueue(label: "imgpipe.store-writer", qos: .userInitiated)
    private let lock = NSLock()
    private var pending: [(StoreChange, Completion)] = []
    private var scheduled = false
    private let maxBatch = 1000
    private let onError: @Sendable (any Error) -> Void

    private let redact: @Sendable (String) -> String

    /// `redact` masks secrets in every message and URL before it reaches the state file.
    init(store: any RunStateStore, runId: Int64, redact: @escaping @Sendable (String) -> String = { $0 },
         onError: @escaping @Sendable (any Error) -> Void) {
        self.store = store
        self.runId = runId
        self.redact = redact
        self.onError = onError
    }

    private func redacted(_ change: StoreChange) -> StoreChange {
        func clean(_ failure: ItemFailure) -> ItemFailure {
            ItemFailure(failure.reason, redact(failure.message), httpStatus: failure.httpStatus)
        }
        switch change {
        case let .failed(key, failure, attempts):
            return .failed(key: key, failure: clean(failure), attempts: attempts)
        case let .skipped(key, skip):
            return .skipped(key: key, skip: ItemSkip(skip.reason, redact(skip.message)))
        case let .deliveryFailed(key, output, sink, failure, attempts):
            return .deliveryFailed(key: key, output: output, sink: sink, failure: clean(failure), attempts: attempts)
        case let .delivered(key, output, sink, remoteURL, httpStatus, attempts):
            return .delivered(key: key, output: output, sink: sink, remoteURL: remoteURL.map(redact), httpStatus: httpStatus,
                              attempts: attempts)
        default:
            return change
        }
    }

    func submit(_ change: StoreChange, completion: @escaping Completion) {
        let change = redacted(change)
        let schedule: Bool = lock.withLock {
            pending.append((change, completion))
            if scheduled { return false }
            scheduled = true
            return true
        }
        if schedule { queue.async { self.flush() } }
    }

    /// Waits until everything submitted so far is written.
    func drain() {
        queue.sync {}
        while lock.withLock({ !pending.isEmpty || scheduled }) {
            queue.sync {}
        }
    }

    private func flush() {
        while true {
            let batch: [(StoreChange, Completion)] = lock.withLock {
                if pending.isEmpty {
                    scheduled = false
                    return []
                }
                let taken = Array(pending.prefix(maxBatch))
                pending.removeFirst(taken.count)
                return taken
            }
            if batch.isEmpty { return }
            let outcomes: [ChangeOutcome]
            do {
                outcomes = try store.apply(batch.map(\.0), runId: runId)
            } catch {
                onError(error)
                let failure = ItemFailure(.io, "cannot write the state file: \(error)")
                outcomes = Array(repeating: .failed(failure), count: batch.count)
            }
            for (entry, outcome) in zip(batch, outcomes) {
                entry.1(outcome)
            }
        }
    }
}
