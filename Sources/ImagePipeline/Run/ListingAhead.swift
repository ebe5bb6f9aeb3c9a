import Dispatch
import Foundation
import PipelineKit
import Synchronization

/// A feed listed on a thread of its own while its items are looked at on the caller's:
/// `plan` compares each item with the state file as the next ones are listed (on two
/// cores, a listing of a million files overlaps their comparison). Items come to `body`
/// in the feed's order, in batches of `batch` handed over with at most `depth` waiting.
enum ListingAhead {
    static let batch = 512
    static let depth = 4

    /// Calls `body` with each item of `feed`, in order; rethrows the listing's error after
    /// the items listed before it, or `body`'s (the listing then stops when its batch is
    /// full, up to `batch` items later). `expect`, on the listing's thread, is told the
    /// feed's count when the feed gives one (`Feed.list`); when it answers false the
    /// listing ends there, before its next item.
    static func list(
        _ feed: any Feed, expecting expect: (@Sendable (FeedCount) -> Bool)? = nil, _ body: (FeedItem) throws -> Void
    ) throws {
        let handoff = Handoff()
        let done = DispatchSemaphore(value: 0)
        let lister = Thread {
            defer { done.signal() }
            var pending: [FeedItem] = []
            pending.reserveCapacity(batch)
            var failure: (any Error)?
            var goOn = true
            do {
                try feed.list(after: nil, expecting: expect.map { expect in { goOn = expect($0) && goOn } }) { item in
                    guard goOn else { return false }
                    pending.append(item)
                    guard pending.count == batch else { return true }
                    defer { pending.removeAll(keepingCapacity: true) }
                    return handoff.put(pending)
                }
            } catch {
                failure = error
            }
            // The items listed before the end (or the error) come first.
            if !pending.isEmpty { _ = handoff.put(pending) }
            handoff.finish(failure)
        }
        lister.name = "imgpipe-listing"
        lister.start()
        // However this ends, the lister is let go and waited for.
        defer {
            handoff.abandon()
            done.wait()
        }
        while let items = try handoff.take() {
            for item in items { try body(item) }
        }
    }

    /// Batches from the lister to the caller.
    private final class Handoff: Sendable {
        private struct State {
            var batches: [[FeedItem]] = []
            var ended = false
            var error: (any Error)?
            var abandoned = false
        }

        private let state = Mutex(State())
        /// A batch (or the end) is there to take.
        private let ready = DispatchSemaphore(value: 0)
        /// Room for one more batch: made empty and given `depth` places, since libdispatch
        /// traps when a semaphore is freed below the value it was made with (a caller that
        /// stopped leaves it so).
        private let room = DispatchSemaphore(value: 0)

        init() {
            for _ in 0..<ListingAhead.depth { room.signal() }
        }

        /// Hands `items` over, waiting for room; false once the caller has stopped taking.
        func put(_ items: [FeedItem]) -> Bool {
            room.wait()
            let taken = state.withLock { state in
                guard !state.abandoned else { return false }
                state.batches.append(items)
                return true
            }
            if taken { ready.signal() }
            return taken
        }

        /// The listing ended, with `error` when it failed.
        func finish(_ error: (any Error)?) {
            state.withLock {
                $0.ended = true
                $0.error = error
            }
            ready.signal()
        }

        /// The next batch; nil at the end; the listing's error once the batches before it
        /// were taken.
        func take() throws -> [FeedItem]? {
            while true {
                ready.wait()
                let next: Result<[FeedItem]?, any Error>? = state.withLock { state in
                    if !state.batches.isEmpty { return .success(state.batches.removeFirst()) }
                    guard state.ended else { return nil }
                    if let error = state.error { return .failure(error) }
                    return .success(nil)
                }
                guard let next else { continue }
                if case .success(.some) = next { room.signal() }
                return try next.get()
            }
        }

        /// The caller takes no more: a lister waiting for room goes on, and stops.
        func abandon() {
            state.withLock { $0.abandoned = true }
            room.signal()
        }
    }
}
