import Dispatch
import Foundation
import PipelineKit
import Synchronization

/// The single writer of a run's state changes. Changes are queued from any thread and
/// committed in batches (group commit: everything queued while one transaction runs goes
/// into the next), then each change's completion runs on the writer's queue. A stage
/// hands an item on only from that completion, so every transition is durable before
/// the next stage starts.
///
/// While `linger` says so, commits are spaced at least `commitGap` apart (5 ms): what comes
/// in meanwhile waits and goes into the next commit together. A run of 200 images a
/// second makes some 700 changes a second; committed one by one, each is a transaction of its
/// own that writes the same few pages of the WAL again and wakes this queue again
/// (bench/RESULTS.md, ninth session: work A wrote 30 % fewer WAL pages). Each of an item's
/// four changes may wait, so the wait is for when it costs nothing: the runner lingers only
/// while every pixel thread has four items queued behind the one it works on. With few items
/// in flight (small `limits`, a slow origin or sink) an item's commits are what its slot
/// waits for, `linger` is false, and every commit goes as soon as the last one ended (a
/// reviewer measured 2000 small URLs with one download, one worker and one upload 40–57 %
/// slower when commits always waited). The condition is asked again every 5 ms of a longer
/// wait. Inserts of items `run --incremental` carries over whole wait whatever `linger` says:
/// nothing but the listing waits on them, and it goes on meanwhile. Committed one by one
/// (the listing reads the state between two, so each commit found one item queued), a
/// re-run that changed nothing wrote 47 pages per item.
final class StoreWriter: Sendable {
    typealias Completion = @Sendable (ChangeOutcome) -> Void
    typealias GroupCompletion = @Sendable ([ChangeOutcome]) -> Void

    private let store: any RunStateStore
    private let runId: Int64
    private let queue = DispatchQueue(label: "imgpipe.store-writer", qos: .userInitiated)
    private struct State {
        /// Changes waiting, in groups that each go into one transaction whole.
        var pending: [(changes: [StoreChange], completion: GroupCompletion)] = []
        var scheduled = false
        /// When the last commit ended (uptime nanoseconds; 0: none yet). Set on `queue` only.
        var lastCommit: UInt64 = 0
    }
    private let state = Mutex(State())
    private let maxBatch = 1000
    private let onError: @Sendable (any Error) -> Void
    /// The least time from the end of one commit to the start of the next, in nanoseconds.
    private let commitGap: UInt64
    /// Whether a commit may wait for `commitGap` now.
    private let linger: @Sendable () -> Bool

    /// 5 ms: past it, fewer commits saved little and added to each item's time in flight
    /// (bench/RESULTS.md, ninth session).
    static let defaultCommitGap: Double = 0.005

    private let redact: @Sendable (String) -> String

    /// `redact` masks secrets in every message and URL before it reaches the state file;
    /// `commitGap` is in seconds (0 or more).
    init(
        store: any RunStateStore, runId: Int64, redact: @escaping @Sendable (String) -> String = { $0 },
        commitGap: Double = StoreWriter.defaultCommitGap, linger: @escaping @Sendable () -> Bool = { true },
        onError: @escaping @Sendable (any Error) -> Void
    ) {
        self.linger = linger
        self.store = store
        self.runId = runId
        self.redact = redact
        self.commitGap = UInt64(commitGap * 1e9)
        self.onError = onError
    }

    private func redacted(_ change: StoreChange) -> StoreChange {
        func clean(_ failure: ItemFailure) -> ItemFailure {
            ItemFailure(failure.reason, redact(failure.message), httpStatus: failure.httpStatus)
        }
        switch change {
        case .failed(let key, let failure, let attempts):
            return .failed(key: key, failure: clean(failure), attempts: attempts)
        case .skipped(let key, var skip):
            skip.message = redact(skip.message)
            return .skipped(key: key, skip: skip)
        case .deliveryFailed(let key, let output, let sink, let failure, let attempts):
            return .deliveryFailed(key: key, output: output, sink: sink, failure: clean(failure), attempts: attempts)
        case .delivered(let key, let output, let sink, let remoteURL, let httpStatus, let attempts):
            return .delivered(
                key: key, output: output, sink: sink, remoteURL: remoteURL.map(redact), httpStatus: httpStatus,
                attempts: attempts)
        default:
            return change
        }
    }

    func submit(_ change: StoreChange, completion: @escaping Completion) {
        submit([change]) { outcomes in completion(outcomes[0]) }
    }

    /// Queues `changes` to be written in one transaction, all or none of them (a batch's
    /// deliveries: a kill leaves every one of them undone, or none); `completion` gets
    /// their outcomes in order.
    func submit(_ changes: [StoreChange], completion: @escaping GroupCompletion) {
        guard !changes.isEmpty else { return completion([]) }
        let changes = changes.map(redacted)
        let schedule: Bool = state.withLock { state in
            state.pending.append((changes, completion))
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        if schedule { queue.async { self.flush() } }
    }

    /// Waits until everything submitted so far is written.
    func drain() {
        queue.sync {}
        while state.withLock({ !$0.pending.isEmpty || $0.scheduled }) {
            queue.sync {}
        }
    }

    private func flush() {
        while true {
            let idle: Bool = state.withLock { state in
                if state.pending.isEmpty { state.scheduled = false }
                return state.pending.isEmpty
            }
            if idle { return }
            while true {
                let (last, carriedOnly) = state.withLock { state in
                    (state.lastCommit, state.pending.allSatisfy { $0.changes.allSatisfy(\.isCarriedInsert) })
                }
                let since = DispatchTime.now().uptimeNanoseconds - last
                guard since < commitGap, carriedOnly || linger() else { break }
                usleep(useconds_t(min(commitGap - since, 5_000_000) / 1000))
            }
            // Only this queue takes from `pending`: it holds what it held, and what came since.
            // Whole groups, up to `maxBatch` changes (a larger group goes alone).
            let batch: [(changes: [StoreChange], completion: GroupCompletion)] = state.withLock { state in
                var count = 0
                let taken = state.pending.prefix { group in
                    defer { count += group.changes.count }
                    return count == 0 || count + group.changes.count <= maxBatch
                }
                state.pending.removeFirst(taken.count)
                return Array(taken)
            }
            let changes = batch.flatMap(\.changes)
            var outcomes: ArraySlice<ChangeOutcome>
            do {
                outcomes = try store.apply(changes, runId: runId)[...]
            } catch {
                onError(error)
                let failure = ItemFailure(.io, "cannot write the state file: \(error)")
                outcomes = Array(repeating: .failed(failure), count: changes.count)[...]
            }
            let ended = DispatchTime.now().uptimeNanoseconds
            state.withLock { $0.lastCommit = ended }
            for group in batch {
                group.completion(Array(outcomes.prefix(group.changes.count)))
                outcomes = outcomes.dropFirst(group.changes.count)
            }
        }
    }
}
