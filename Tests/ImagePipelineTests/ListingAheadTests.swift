import Foundation
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// `ListingAhead`, the listing `plan` runs on a thread of its own: every item in order,
/// the listing's error after the items before it, and a caller that stops stops it.
@Suite("a listing on a thread of its own")
struct ListingAheadTests {
    /// Lists `count` items, then fails with `error` when given; counts what it listed.
    struct NumberedFeed: Feed {
        let count: Int
        var error: String?
        let listed = LockedBox(0)

        func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
            throws
        {
            expect?(.counted(count))
            for index in 0..<count {
                listed.withLock { $0 += 1 }
                guard try body(FeedItem(key: "item-\(index)", location: "/nowhere/\(index).jpg")) else { return }
            }
            if let error { throw FeedError(error) }
        }
    }

    @Test func everyItemComesInTheFeedsOrder() throws {
        // More than the batches that may wait, and a last batch that is not full.
        let count = ListingAhead.batch * (ListingAhead.depth + 3) + 7
        var keys: [String] = []
        try ListingAhead.list(NumberedFeed(count: count)) { keys.append($0.key) }
        #expect(keys == (0..<count).map { "item-\($0)" })
    }

    /// `expecting` hears the feed's count before its first item; answered false, the
    /// listing ends there, and the caller sees an end with nothing listed. Answered true,
    /// every item comes.
    @Test func aCountAnsweredNoEndsTheListingBeforeItsFirstItem() throws {
        for goOn in [false, true] {
            let feed = NumberedFeed(count: 5000)
            let heard = LockedBox<[Int]>([])
            var keys = 0
            try ListingAhead.list(
                feed,
                expecting: { count in
                    heard.withLock { $0.append(count.items) }
                    return goOn
                }
            ) { _ in keys += 1 }
            #expect(heard.withLock { $0 } == [5000])
            #expect(keys == (goOn ? 5000 : 0) && feed.listed.withLock { $0 } == (goOn ? 5000 : 1), "go on: \(goOn)")
        }
    }

    @Test func theListingsErrorComesAfterTheItemsBeforeIt() throws {
        var keys: [String] = []
        #expect(throws: FeedError.self) {
            try ListingAhead.list(NumberedFeed(count: 1000, error: "the folder went away")) { keys.append($0.key) }
        }
        #expect(keys.count == 1000 && keys.last == "item-999")
    }

    /// The caller's error ends the call, and the lister with it: it lists at most the
    /// batches that may wait beyond the one being looked at, not the whole feed. The caller
    /// stops once the lister is waiting for room (every place taken): the handoff must then
    /// be let go as it was made (libdispatch trapped on a semaphore freed below its start).
    @Test func aCallerThatStopsStopsTheListing() throws {
        struct Enough: Error {}
        for _ in 1...20 {
            let feed = NumberedFeed(count: 1_000_000)
            let full = ListingAhead.batch * (ListingAhead.depth + 2)
            #expect(throws: Enough.self) {
                try ListingAhead.list(feed) { _ in
                    // A guard, not a timing: the lister fills every place within a moment.
                    let deadline = Date().addingTimeInterval(30)
                    while feed.listed.withLock({ $0 }) < full, Date() < deadline { usleep(1000) }
                    throw Enough()
                }
            }
            let listed = feed.listed.withLock { $0 }
            #expect(listed >= full && listed <= ListingAhead.batch * (ListingAhead.depth + 3), "\(listed) listed")
        }
    }

    @Test func anEmptyFeedAndAnErrorBeforeAnyItemEndAtOnce() throws {
        var keys: [String] = []
        try ListingAhead.list(NumberedFeed(count: 0)) { keys.append($0.key) }
        #expect(keys.isEmpty)
        #expect(throws: FeedError.self) {
            try ListingAhead.list(NumberedFeed(count: 0, error: "no such folder")) { keys.append($0.key) }
        }
        #expect(keys.isEmpty)
    }
}
