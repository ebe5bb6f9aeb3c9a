import Foundation
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// A worker's bookkeeping of its claims (`ChunkLedger`) and its loop threads (`LoopThread`),
/// without a database.
@Suite("A worker's claims and loops")
struct ChunkLedgerTests {
    @Test func aChunkClaimedAgainIsNotLostThroughAnAnswerAboutItsOldClaim() {
        // A worker stalled past its lease; its chunk was rescued and the worker claimed it
        // again. Its heartbeat (which still listed the old claim) or a write refused under
        // the old claim says "lost": that is the old claim's, not the new one's, which the
        // worker goes on with, records under and marks done.
        let ledger = ChunkLedger()
        let old = SharedRun.Chunk(id: 4, token: 10, firstSeq: 0, lastSeq: 1, items: 2)
        let again = SharedRun.Chunk(id: 4, token: 11, firstSeq: 0, lastSeq: 1, items: 2)
        let items = (0..<2).map { SharedRun.Item(seq: Int64($0), item: FeedItem(key: "k\($0)", location: "in/\($0).jpg")) }
        ledger.add(old, items: items)
        ledger.add(again, items: items)
        ledger.allGiven(again)
        ledger.markLost(old)
        #expect(ledger.unfinished() == [again], "the new claim is held")
        #expect(ledger.end("k0")?.chunk == again && ledger.end("k1")?.chunk == again)
        #expect(ledger.settled(2, of: old) == nil, "ends counted under the old claim are not the new one's")
        #expect(ledger.settled(2, of: again) == again, "every item of the new claim ended")
        ledger.finished(old)
        #expect(ledger.unfinished() == [again], "finishing the old claim leaves the new one")
        ledger.finished(again)
        #expect(ledger.unfinished().isEmpty)
    }

    /// The recorder is woken when a claim's last end is in its queue, not when the end is
    /// taken (a flush woken then would not find it), and when the claim is all given after
    /// its ends were queued; the claimer is woken once per chunk this worker finishes, and
    /// not for a claim it no longer holds.
    @Test func theRecorderAndTheClaimerAreWokenWhenTheirWorkIsThere() {
        let ledger = ChunkLedger()
        func pending(_ semaphore: DispatchSemaphore) -> Int {
            var count = 0
            while semaphore.wait(timeout: .now()) == .success { count += 1 }
            return count
        }
        let chunk = SharedRun.Chunk(id: 1, token: 20, firstSeq: 0, lastSeq: 1, items: 2)
        ledger.add(chunk, items: (0..<2).map { SharedRun.Item(seq: Int64($0), item: FeedItem(key: "a\($0)", location: "x")) })
        ledger.allGiven(chunk)
        #expect(ledger.end("a0")?.chunk == chunk)
        ledger.queued(chunk)
        #expect(ledger.end("a1")?.chunk == chunk)
        #expect(pending(ledger.claimEnded) == 0, "the last end is taken, not yet queued")
        ledger.queued(chunk)
        #expect(pending(ledger.claimEnded) == 1)
        // Ends queued before the claim was all given (a short chunk, fast items).
        let quick = SharedRun.Chunk(id: 2, token: 21, firstSeq: 2, lastSeq: 2, items: 1)
        ledger.add(quick, items: [SharedRun.Item(seq: 2, item: FeedItem(key: "b", location: "x"))])
        _ = ledger.end("b")
        ledger.queued(quick)
        #expect(pending(ledger.claimEnded) == 0)
        ledger.allGiven(quick)
        #expect(pending(ledger.claimEnded) == 1)
        ledger.finished(chunk)
        ledger.finished(chunk)
        ledger.finished(quick)
        // The claimer, busy while these finished, asks once: the signals are forgotten first.
        var asked = 0
        ledger.freshly { asked += 1 }
        #expect(asked == 1 && pending(ledger.chunkFinished) == 0, "the two finishes were forgotten before the question")
        let late = SharedRun.Chunk(id: 3, token: 22, firstSeq: 3, lastSeq: 3, items: 1)
        ledger.add(late, items: [SharedRun.Item(seq: 3, item: FeedItem(key: "c", location: "x"))])
        ledger.finished(late)
        #expect(pending(ledger.chunkFinished) == 1, "a chunk finished after the question still wakes the wait")
    }

    /// A `LoopThread` runs its body at once when woken, and `stop` returns however many
    /// wake-ups are still pending.
    @Test func aLoopThreadRunsWhenWokenAndStopsWithWakeUpsPending() {
        let wake = DispatchSemaphore(value: 0)
        let ran = DispatchSemaphore(value: 0)
        let loop = LoopThread(name: "test.loop", every: 3600, wake: wake) {
            ran.signal()
        }
        #expect(ran.wait(timeout: .now() + 30) == .success, "the first round runs at start")
        wake.signal()
        #expect(ran.wait(timeout: .now() + 30) == .success, "a wake-up runs a round long before the hour")
        // Wake-ups still pending do not keep it going: stop returns (it joins the thread, so
        // no round can run after it).
        for _ in 0..<5 { wake.signal() }
        loop.stop()
    }
}
