import Foundation
import PipelineKit

/// What changes while a run session goes on: how many items hold a slot, the counts shown
/// by progress lines, whether the producer has finished, whether the run was interrupted.
///
/// A plain value, held by the runner in a `Mutex`. Each method is one event and returns
/// what the caller must do next, so the rules can be tested without threads (as in
/// Hummingbird's state machines).
struct RunState: Sendable {
    /// Items in flight at most: a slot is taken when an item is admitted and given back
    /// when it is finished or set aside.
    let capacity: Int
    private(set) var inFlight = 0
    /// Items held in sinks' open batches, which gave their slot back (`setAside`).
    private(set) var heldInBatches = 0
    /// Items waiting for their `dedup` verdict in a shared run, which gave their slot back
    /// (`park`): the items before them may be other workers', or not admitted yet.
    private(set) var parked = 0
    private(set) var counts: ItemCounts
    /// Items this session ended, by how.
    private(set) var endedThisSession = (done: 0, skipped: 0, failed: 0)
    var finishedThisSession: Int { endedThisSession.done + endedThisSession.skipped + endedThisSession.failed }
    /// Items of this run, counted against `--limit`: those recorded before this session
    /// and those listed since, less duplicates.
    private(set) var admitted = 0
    /// The run's `--limit`, which caps the total.
    let itemLimit: Int?
    /// What the feed said it would list in this pass, once it said so.
    private(set) var expected: FeedCount?
    /// Items the feed has listed in this pass: new ones, ones the run already had,
    /// repeated keys. The feed has yet to list `expected` less these.
    private(set) var listedThisPass = 0
    /// Of those, the ones not admitted (the run had them, or their key came before).
    private(set) var passedOverThisPass = 0
    /// Items the run had before this session: a feed listed again lists them again.
    let knownAtStart: Int
    private(set) var producerFinished = false
    private(set) var listing = true
    /// The feed was listed to its end (or to the run's limit) in this session or before.
    private(set) var feedComplete: Bool
    private(set) var listingError: String?
    /// When the first interrupt came; nil while the run goes on.
    private(set) var interruptedAt: Date?
    /// A second interrupt, or the grace period over: in-flight work is abandoned.
    private(set) var aborted = false
    private var reportedDuplicates: Set<String> = []
    private var signalledDone = false

    init(capacity: Int, counts: ItemCounts, feedComplete: Bool, itemLimit: Int? = nil) {
        self.capacity = max(1, capacity)
        self.counts = counts
        self.feedComplete = feedComplete
        self.itemLimit = itemLimit
        admitted = counts.total
        knownAtStart = counts.total
    }

    var isCancelled: Bool { interruptedAt != nil }

    // MARK: - slots

    enum AdmitAction: Equatable {
        /// A slot was taken: start the item.
        case start
        /// Every slot is taken: wait for one to be given back, then ask again.
        case wait
        /// The run was interrupted: admit nothing more.
        case stop
    }

    /// With `beyond`, that many slots past `capacity` may be taken (an item that needs no
    /// stage, done once its insert is written: `RunStages.carriedAhead`).
    mutating func admit(beyond: Int = 0) -> AdmitAction {
        if isCancelled { return .stop }
        guard inFlight < capacity + beyond else { return .wait }
        inFlight += 1
        return .start
    }

    enum ReleaseAction: Equatable {
        case none
        /// The producer has finished and no item is in flight: the session is over.
        case allDone
    }

    /// A slot given back without a verdict (a duplicate, an item left for resume).
    mutating func release() -> ReleaseAction {
        inFlight -= 1
        return checkDone()
    }

    /// Every delivery an item still waits for is held in sinks' open batches
    /// (`Settlement.hold`): it gives its slot back without a verdict, and ends when the last
    /// of those batches commits. The session is over when the
    /// producer has finished and no item holds a slot: the runner then commits what the
    /// sinks hold before it writes the run's state.
    mutating func setAside() -> ReleaseAction {
        heldInBatches += 1
        return release()
    }

    /// An item of a shared run waits for its `dedup` verdict without its slot: the item
    /// it waits for may need one (a chunk this worker claims after it, rescued from a
    /// worker that stopped). The session is not over while it waits.
    mutating func park() -> ReleaseAction {
        parked += 1
        return release()
    }

    /// A parked item's verdict comes: it holds a slot again, which its end gives back.
    mutating func unpark() {
        parked -= 1
        inFlight += 1
    }

    /// An item set aside comes to its end (its batch committed, failed or was dropped): it
    /// holds a slot again, which its end gives back.
    mutating func takeUpSetAside() {
        heldInBatches -= 1
        inFlight += 1
    }

    /// An item reached `done` (no failure) or `failed`, and gives its slot back.
    mutating func finish(failed: Bool) -> ReleaseAction {
        if failed {
            counts.failed += 1
            endedThisSession.failed += 1
        } else {
            counts.done += 1
            endedThisSession.done += 1
        }
        return release()
    }

    /// An item was skipped (terminal, like done), and gives its slot back.
    mutating func skip() -> ReleaseAction {
        counts.skipped += 1
        endedThisSession.skipped += 1
        return release()
    }

    mutating func producerDone() -> ReleaseAction {
        producerFinished = true
        listing = false
        return checkDone()
    }

    private mutating func checkDone() -> ReleaseAction {
        guard producerFinished, inFlight == 0, parked == 0, !signalledDone else { return .none }
        signalledDone = true
        return .allDone
    }

    // MARK: - listing

    /// True while `--limit` leaves room for one more item of the feed.
    func hasRoom(limit: Int?) -> Bool { limit.map { admitted < $0 } ?? true }

    /// A new item of the feed was admitted.
    mutating func listed() {
        admitted += 1
        listedThisPass += 1
    }

    /// The feed listed an item that is not admitted: the run has it already, or its key
    /// came before in this pass.
    mutating func passedOver() {
        listedThisPass += 1
        passedOverThisPass += 1
    }

    /// The feed said how many items it will list in this pass.
    mutating func expect(_ count: FeedCount) { expected = count }

    /// The insert of a listed item was committed.
    mutating func inserted() {
        counts.total += 1
        counts.pending += 1
    }

    /// The insert found the item refused (its output name was taken): it failed at once.
    mutating func insertFailed() -> ReleaseAction {
        counts.total += 1
        return finish(failed: true)
    }

    /// An item counted as failed was put back to pending (an output name it failed for
    /// was given up by a skipped item). True when it takes a slot and starts now (the slot
    /// may go past `capacity` for a moment); false when the run is stopping. Its failure,
    /// if this session's, stays among the items this session finished (it was one).
    mutating func revived(seq: Int) -> Bool {
        counts.failed = max(0, counts.failed - 1)
        revivedItems.insert(seq)
        if isCancelled || !claimStart(seq: seq) { return false }
        inFlight += 1
        return true
    }

    /// Items of the state file under way in this session, and the items put back to pending
    /// in it. A resume's producer, paging unfinished items, and `revived` may both come to an
    /// item put back to pending: the one that claims it starts it. An item that ends gives
    /// its claim back, so that it can be put back and started again.
    private var underWay = SeqSet()
    private var revivedItems = SeqSet()

    /// True when `seq` was not under way: the caller starts the item.
    mutating func claimStart(seq: Int) -> Bool { underWay.insert(seq) }

    /// The item ended (done, failed, skipped): it may be claimed again.
    mutating func ended(seq: Int) { underWay.remove(seq) }

    /// True when the item was put back to pending in this session: a page that read it
    /// before may hold a status it no longer has.
    func wasRevived(seq: Int) -> Bool { revivedItems.contains(seq) }

    /// The insert found the key already in the run: not a new item.
    mutating func duplicate() -> ReleaseAction {
        admitted -= 1
        return release()
    }

    /// True the first time a key is reported as a duplicate.
    mutating func reportDuplicate(_ key: String) -> Bool { reportedDuplicates.insert(key).inserted }

    mutating func markFeedComplete() { feedComplete = true }

    mutating func listingFailed(_ message: String) { listingError = message }

    // MARK: - stopping

    enum InterruptAction: Equatable {
        /// The first interrupt: stop admitting, let in-flight items finish.
        case drain
        /// Already stopping: abandon in-flight work now.
        case abort
        case none
    }

    mutating func interrupt(now: Bool, at date: Date) -> InterruptAction {
        if interruptedAt == nil {
            interruptedAt = date
            if now {
                aborted = true
                return .abort
            }
            return .drain
        }
        guard now, !aborted else { return .none }
        aborted = true
        return .abort
    }

    /// When in-flight items stop being waited for.
    func graceDeadline(_ grace: Double) -> Date? {
        guard let interruptedAt else { return nil }
        return aborted ? interruptedAt : interruptedAt.addingTimeInterval(grace)
    }

    /// The run's items once the feed is listed: exact when listing is over or the feed
    /// counted its items, an estimate when a remote API reported a number, else at least
    /// the items listed so far. While listing it is the items admitted plus what the feed
    /// still promises: what it has yet to list, less the items of the run it has yet to
    /// list again (a resumed run's feed lists its known items again, and they are passed
    /// over). `--limit` caps it.
    var total: RunProgress.Total {
        if feedComplete || !listing { return .exact(admitted) }
        guard let expected else { return .atLeast(admitted) }
        let toList = expected.items - listedThisPass
        let knownToList = max(0, knownAtStart - passedOverThisPass)
        let count = min(admitted + max(0, toList - knownToList), itemLimit ?? .max)
        return expected.kind == .estimate ? .estimate(count) : .exact(count)
    }

    func progress(runId: Int64, elapsed: Double) -> RunProgress {
        RunProgress(
            runId: runId, total: total, done: counts.done, failed: counts.failed,
            finishedThisSession: finishedThisSession, elapsed: elapsed, skipped: counts.skipped)
    }
}

/// A set of item `seq`s, a bit each (a resume of a million items takes 125 KB). A negative
/// `seq` (none) is never in it, and inserts as new.
struct SeqSet: Sendable {
    private var words: [UInt64] = []

    func contains(_ seq: Int) -> Bool {
        seq >= 0 && seq / 64 < words.count && words[seq / 64] & Self.bit(seq) != 0
    }

    /// True when `seq` was not in the set.
    @discardableResult
    mutating func insert(_ seq: Int) -> Bool {
        guard seq >= 0 else { return true }
        if contains(seq) { return false }
        if seq / 64 >= words.count { words += Array(repeating: 0, count: seq / 64 - words.count + 1) }
        words[seq / 64] |= Self.bit(seq)
        return true
    }

    mutating func remove(_ seq: Int) {
        guard contains(seq) else { return }
        words[seq / 64] &= ~Self.bit(seq)
    }

    private static func bit(_ seq: Int) -> UInt64 { 1 << UInt64(seq % 64) }
}
