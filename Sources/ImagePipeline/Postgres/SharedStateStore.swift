import Foundation
import PipelineKit
import Synchronization

/// One worker's part of a run shared through PostgreSQL, as its runner sees it: the
/// second `RunStateStore` (the first is the state file, `RunStore`).
///
/// What is this machine's stays on this machine, in a journal of the worker's own (a
/// state file, `journal`): where each item's input was spooled and its outputs staged,
/// which deliveries are left. What the whole run must agree on goes to the shared database:
/// - each output name, claimed run-wide (`SharedRun.claimNames`) ahead for a whole chunk
///   (`claimAhead`), or else as the change naming it is applied, before the journal sees
///   it: a name another item of the run holds, on any worker, fails the item here as the
///   state file would;
/// - each item's end (done, failed, skipped) as the journal records it, queued and written
///   every 0.1 s by the worker's recorder thread (`flush`), fenced by the lease of the
///   chunk the item was claimed in, with its outputs and deliveries for `export`. A chunk
///   whose items have all ended is marked done.
///
/// The runner cannot tell it from the state file: `apply` answers with the same outcomes.
/// Messages come in redacted: the run's `StoreWriter` masks every change before `apply`.
final class SharedStateStore: RunStateStore, Sendable {
    /// The worker's journal: this machine's part of each item.
    let journal: RunStore
    private let ledger: ChunkLedger
    /// Used by the writer (`apply`) and the producer (`claimAhead`): one at a time.
    private let names: Mutex<SharedRun>
    private let queue = Mutex<[(chunk: SharedRun.Chunk, key: String, outcome: SharedRun.Outcome)]>([])
    /// The journal's run and its outputs' formats, read once.
    private let local = Mutex<(run: Int64, formats: [String: String])?>(nil)
    private let counts = Mutex<(done: Int, failed: Int, skipped: Int, unrecorded: Int)>((0, 0, 0, 0))
    /// Names this worker has claimed for a key (name and key joined by NUL): a name given
    /// at insert is not claimed again when the item is processed. Emptied at 100,000.
    private let claimed = Mutex<Set<String>>([])
    /// Names found held by another key when a chunk's names were claimed ahead (name and
    /// key joined by NUL → the holder), for its items' inserts.
    private let refused = Mutex<[String: String]>([:])
    /// The pipeline's outputs, whose names known before making are claimed ahead, a chunk at a time.
    private let outputs: [OutputSpec]
    /// Items whose failure this worker wrote to the shared database. Given this worker again
    /// as pending, such an item was put back by `resume --retry-failed`: it is tried again,
    /// not failed again from the journal (`knownHere`).
    private let recordedFailures = Mutex<Set<String>>([])

    /// `names` is a connection of the worker's own for the name claims (`SharedRun.sibling`).
    init(journal: RunStore, ledger: ChunkLedger, names: SharedRun, outputs: [OutputSpec] = []) {
        self.outputs = outputs
        self.journal = journal
        self.ledger = ledger
        self.names = Mutex(names)
    }

    // MARK: - RunStateStore

    var path: String { journal.path }

    func begin(_ mode: RunMode, _ identity: RunIdentity) throws -> RunStart { try journal.begin(mode, identity) }

    func setState(_ state: RunRecord.State, runId: Int64, addingElapsed elapsed: Double) throws {
        try journal.setState(state, runId: runId, addingElapsed: elapsed)
    }

    func apply(_ changes: [StoreChange], runId: Int64, now: Date) throws -> [ChangeOutcome] {
        // The journal refuses a name another key holds in the run as it refuses one of its
        // own items' names: the item fails.
        let outcomes = try journal.apply(changes, runId: runId, now: now, namesHeldElsewhere: claimNames(in: changes))
        for (change, outcome) in zip(changes, outcomes) {
            if let end = Self.end(of: change, outcome) { ended(key: end.key, outcome: end.outcome) }
        }
        return outcomes
    }

    func counts(runId: Int64) throws -> ItemCounts { try journal.counts(runId: runId) }
    /// The worker's own part: `SharedWorker` reports the whole run from the database.
    func report(runId: Int64) throws -> StatusReport { try journal.report(runId: runId) }
    func item(runId: Int64, key: String) throws -> ItemRecord? { try journal.item(runId: runId, key: key) }
    func unfinishedItems(runId: Int64, after seq: Int, limit: Int) throws -> [ItemRecord] {
        try journal.unfinishedItems(runId: runId, after: seq, limit: limit)
    }
    func lastSeq(runId: Int64) throws -> Int { try journal.lastSeq(runId: runId) }
    func lastKey(runId: Int64) throws -> String? { try journal.lastKey(runId: runId) }
    func markListingCut(runId: Int64, _ cut: Bool) throws { try journal.markListingCut(runId: runId, cut) }
    func stagedOutputs(runId: Int64, key: String) throws -> [StagedOutput] { try journal.stagedOutputs(runId: runId, key: key) }
    func source(runId: Int64, key: String) throws -> SourceStamp? { try journal.source(runId: runId, key: key) }
    func fingerprint(runId: Int64, key: String) throws -> ImageFingerprint? { try journal.fingerprint(runId: runId, key: key) }
    func pendingDeliveries(runId: Int64, key: String) throws -> [(output: String, sink: String)] {
        try journal.pendingDeliveries(runId: runId, key: key)
    }

    /// Deliveries start only while the item's chunk is held (`ChunkLedger.deliveryGate`): a
    /// worker stopped past its lease (SIGSTOP, a frozen VM) delivers nothing, on waking, of
    /// the chunks another worker has taken over; its items are left as they stand here.
    func deliveryGate(key: String) -> DeliveryGate { ledger.deliveryGate(key) }

    func takeBack(key: String) -> Bool { ledger.takeBack(key) }

    // MARK: - names

    /// Claims in the shared database every name `changes` give (those known before
    /// processing at insert, the others when processed); returns those another key holds.
    private func claimNames(in changes: [StoreChange]) throws -> [String: String] {
        var wanted: [(name: String, key: String)] = []
        for change in changes {
            switch change {
            case .insert(let item): wanted += item.outputs.compactMap { $0.name.map { ($0, item.key) } }
            case .processed(let key, let outputs, _, _, _): wanted += outputs.map { ($0.name, key) }
            default: break
            }
        }
        let known = claimed.withLock { $0 }
        let heldElsewhere = refused.withLock { $0 }
        var taken: [String: String] = [:]
        var asked: [(name: String, key: String)] = []
        for claim in wanted {
            let pair = claim.name + "\u{0}" + claim.key
            if let holder = heldElsewhere[pair] {
                taken[claim.name] = holder
            } else if !known.contains(pair) {
                asked.append(claim)
            }
        }
        taken.merge(try ask(asked)) { first, _ in first }
        // An item one of whose names another key holds takes the names of its unique stem
        // (`NewItem.uniqueStem`), claimed now: the journal's insert gives them to it.
        var unique: [(name: String, key: String)] = []
        for change in changes {
            guard case .insert(let item) = change,
                item.outputs.contains(where: { $0.name.flatMap { taken[$0] }.map { $0 != item.key } == true })
            else { continue }
            unique += item.outputs.compactMap { $0.uniqueName.map { ($0, item.key) } }
        }
        guard !unique.isEmpty else { return taken }
        return taken.merging(try ask(unique)) { first, _ in first }
    }

    /// Claims `wanted` in the database and remembers the names now this worker's.
    private func ask(_ wanted: [(name: String, key: String)]) throws -> [String: String] {
        guard !wanted.isEmpty else { return [:] }
        let taken = try names.withLock { try $0.claimNames(wanted) }
        claimed.withLock { set in
            if set.count > 100_000 { set.removeAll() }
            for claim in wanted where taken[claim.name] == nil { set.insert(claim.name + "\u{0}" + claim.key) }
        }
        return taken
    }

    /// Claims ahead, in one statement, the names a chunk's items will be given at insert
    /// (those known before making), so that their inserts need no round trip; a name held
    /// by another key is remembered and fails its item at insert. A failure here is left to
    /// the inserts, which claim for themselves.
    func claimAhead(_ items: [FeedItem]) {
        var wanted: [(name: String, key: String)] = []
        for item in items {
            guard let index = item.position else { continue }
            for output in outputs {
                if let name = output.fileNameBeforeMaking(key: item.nameKey, stem: item.nameStem, index: index) {
                    wanted.append((name, item.key))
                }
            }
        }
        guard let taken = try? ask(wanted), !taken.isEmpty else { return }
        refused.withLock { refused in
            for claim in wanted {
                if let holder = taken[claim.name], holder != claim.key { refused[claim.name + "\u{0}" + claim.key] = holder }
            }
        }
    }

    // MARK: - ends

    /// The end of an item a change made, as the journal recorded it: done on its last
    /// delivery, failed (a refused name, a stage's failure, a sink's refusal), or skipped.
    static func end(of change: StoreChange, _ outcome: ChangeOutcome) -> (key: String, outcome: ItemOutcome)? {
        switch (change, outcome) {
        case (.insert(let item), .failed(let failure)): (item.key, .failed(failure))
        case (.processed(let key, _, _, _, _), .failed(let failure)): (key, .failed(failure))
        case (.delivered(let key, _, _, _, _, _), .completed): (key, .done)
        case (.deliveryFailed(let key, _, _, _, _), .failed(let failure)): (key, .failed(failure))
        case (.failed(let key, let failure, _), .applied): (key, .failed(failure))
        case (.skipped(let key, let skip), .applied): (key, .skipped(skip))
        default: nil
        }
    }

    /// The journal's run and the formats of its outputs.
    private func localRun() throws -> (run: Int64, formats: [String: String])? {
        if let known = local.withLock({ $0 }) { return known }
        guard let run = try journal.latestRun() else { return nil }
        let found = (run.id, RunStore.outputFormats(ofDocument: run.document))
        local.withLock { $0 = found }
        return found
    }

    /// Whether the journal already has `key`. When the item has ended there, its end is
    /// queued again, for the chunk the ledger now holds it under; when it is still under
    /// way, it ends by itself. False when the journal never had it.
    func knownHere(_ key: String) -> Bool {
        // Dropped when its chunk was lost (`deliveryGate`): the runner let it go, and takes
        // it back where it stood when given it again (`takeBack`).
        if ledger.wasDropped(key) { return false }
        guard let run = try? localRun()?.run, let item = try? journal.item(runId: run, key: key) else { return false }
        let outcome: ItemOutcome
        switch item.status {
        case .done: outcome = .done
        case .failed:
            // Its failure reached the database, which now has it pending again: a retry
            // (`resume --retry-failed`). Put back in the journal and taken up by the runner.
            if recordedFailures.withLock({ $0.remove(key) != nil }),
                (try? journal.requeueFailed(runId: run, key: key)) == 1
            {
                ledger.giveBack(key)
                return false
            }
            outcome = .failed(ItemFailure(item.reason ?? .process, item.message ?? ""))
        case .skipped: outcome = .skipped(ItemSkip(item.skipReason ?? .format, item.message ?? ""))
        default: return true
        }
        ended(key: key, outcome: outcome)
        return true
    }

    /// Queues an item's end for the shared database, once per claim of its chunk (an item
    /// refused by two sinks ends once).
    private func ended(key: String, outcome: ItemOutcome) {
        guard let place = ledger.end(key) else { return }
        let recorded: SharedRun.Outcome
        switch outcome {
        case .done: recorded = .init(seq: place.seq, status: .done)
        case .failed(let failure):
            recorded = .init(seq: place.seq, status: .failed, reason: failure.reason.rawValue, message: failure.message)
        case .skipped(let skip):
            recorded = .init(seq: place.seq, status: .skipped, reason: skip.reason.rawValue, message: skip.message)
        }
        queue.withLock { $0.append((place.chunk, key, recorded)) }
        ledger.queued(place.chunk)
    }

    /// Writes the queued ends, chunk by chunk, and marks done the chunks whose items have
    /// all ended. A chunk whose lease was lost is dropped: its items are another worker's now.
    func flush(using shared: SharedRun) throws {
        let pending = queue.withLock { queue in
            defer { queue.removeAll() }
            return queue
        }
        // By claim: ends queued under a claim since lost go to the database under that
        // claim, which refuses them; the chunk's new claim's ends are written under it.
        let byChunk = Dictionary(grouping: pending, by: \.chunk)
            .sorted { ($0.key.id, $0.key.token) < ($1.key.id, $1.key.token) }
        for (index, (chunk, entries)) in byChunk.enumerated() {
            do {
                // Each item's outputs and deliveries go with its end, for `export`.
                let local = try localRun()
                let outcomes = entries.map { entry -> SharedRun.Outcome in
                    var record: ExportRecord?
                    if let local {
                        try? journal.exportRecords(runId: local.run, key: entry.key, formats: local.formats) { record = $0 }
                    }
                    return entry.outcome.with(record)
                }
                try shared.record(outcomes, in: chunk)
            } catch SharedRun.SharedRunError.leaseLost {
                ledger.markLost(chunk)
                counts.withLock { $0.unrecorded += entries.count }
                continue
            } catch {
                // Not written: this chunk's ends and the ones after it are kept for the next
                // flush (the fenced write only moves items from pending: writing again is safe).
                queue.withLock { $0.insert(contentsOf: byChunk[index...].flatMap(\.value), at: 0) }
                throw error
            }
            recordedFailures.withLock { failures in
                for entry in entries where entry.outcome.status == .failed { failures.insert(entry.key) }
            }
            counts.withLock { counts in
                for entry in entries {
                    switch entry.outcome.status {
                    case .done: counts.done += 1
                    case .failed: counts.failed += 1
                    case .skipped: counts.skipped += 1
                    }
                }
            }
            _ = ledger.settled(entries.count, of: chunk)
        }
        // Chunks whose items have all ended (in this flush or an earlier one, a chunk given
        // out in full since) are marked done once every end is written: a failure here
        // then leaves no end unwritten, and the next flush tries the marking again.
        for chunk in ledger.unfinished() where ledger.settled(0, of: chunk) != nil {
            try complete(chunk, using: shared)
        }
    }

    /// Marks a chunk done; a lease lost meanwhile leaves it to its new holder.
    private func complete(_ chunk: SharedRun.Chunk, using shared: SharedRun) throws {
        do {
            if try shared.complete(chunk) { ledger.finished(chunk) }
        } catch SharedRun.SharedRunError.leaseLost {
            ledger.markLost(chunk)
        }
    }

    /// The items this worker ended and recorded, and those whose chunk it lost first.
    func tally() -> (done: Int, failed: Int, skipped: Int, unrecorded: Int) { counts.withLock { $0 } }
}
