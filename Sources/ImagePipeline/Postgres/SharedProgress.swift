import Foundation
import PipelineKit
import Synchronization

/// A shared run's progress as each of its workers shows it: the whole run's counts, read
/// from the chunks' counters (the items every worker ended, and the items listed so far:
/// the total, exact once the feed is listed to its end), at the rate the whole run went
/// since this worker first read them, so that the ETA is the run's. A worker's own share
/// (the items it was given, a few chunks at a time) said nothing of the run: `76/104+`
/// over a feed of 304.
final class SharedProgress: Sendable {
    private struct Reading {
        let counts: SharedRun.Counts
        let at: Date
    }

    let runId: Int64
    /// Seconds between readings.
    let interval: Double
    private let readings = Mutex<(first: Reading?, last: Reading?)>((nil, nil))

    init(runId: Int64, interval: Double = 1) {
        self.runId = runId
        self.interval = interval
    }

    /// True when the last reading is older than `interval` (or there is none).
    var isDue: Bool { readings.withLock { $0.last.map { Date().timeIntervalSince($0.at) >= interval } ?? true } }

    func record(_ counts: SharedRun.Counts, at date: Date = Date()) {
        readings.withLock {
            let reading = Reading(counts: counts, at: date)
            $0.last = reading
            if $0.first == nil { $0.first = reading }
        }
    }

    /// The run's progress from the last reading; `local` (this worker's) before the first.
    func progress(else local: RunProgress) -> RunProgress { current ?? local }

    /// The run's progress from the last reading; nil before the first.
    var current: RunProgress? {
        guard let (first, last) = readings.withLock({ state in state.first.map { ($0, state.last ?? $0) } }) else {
            return nil
        }
        let counts = last.counts
        func ended(_ counts: SharedRun.Counts) -> Int { counts.done + counts.failed + counts.skipped }
        return RunProgress(
            runId: runId, total: counts.feedComplete ? .exact(counts.items) : .atLeast(counts.items),
            done: counts.done, failed: counts.failed, finishedThisSession: max(0, ended(counts) - ended(first.counts)),
            elapsed: last.at.timeIntervalSince(first.at), skipped: counts.skipped)
    }
}

/// The reporter of a worker's runner: its progress told for the whole run
/// (`SharedProgress`), everything else passed on as it is.
struct SharedProgressReporter: RunReporter {
    let base: any RunReporter
    let shared: SharedProgress

    func progress(_ progress: RunProgress) { base.progress(shared.progress(else: progress)) }
    func itemFailed(key: String, failure: ItemFailure) { base.itemFailed(key: key, failure: failure) }
    func itemSettled(key: String, outcome: ItemOutcome) { base.itemSettled(key: key, outcome: outcome) }
    func notice(_ message: String) { base.notice(message) }
    func info(_ message: String) { base.info(message) }
}
