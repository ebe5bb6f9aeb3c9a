import Foundation
import PipelineKit

/// The run-wide memory budget (`limits.memory`) that items' pixel work is admitted against,
/// by their `MemoryEstimate`: an item whose estimate does not fit beside those admitted
/// waits until they release theirs, so N workers never hold N worst cases at once.
///
/// Admission is first come, first served: a large item is not passed over for ever by
/// smaller ones; those behind it wait too. An item alone always fits (one over the whole
/// budget is failed before it asks, `limit`), so the budget never deadlocks.
// @unchecked because `inUse`, `queue` and `next` are guarded by `condition` (an item waits
// on it for its turn: `Mutex` has no wait).
final class MemoryBudget: @unchecked Sendable {
    /// The budget in bytes.
    let bytes: Int
    private let condition = NSCondition()
    private var inUse = 0
    /// Tickets of the items waiting, in order of arrival.
    private var queue: [UInt64] = []
    private var next: UInt64 = 0

    init(bytes: Int) {
        self.bytes = bytes
    }

    /// Waits until `need` bytes fit beside what is admitted (at most `bytes`: the caller
    /// fails larger items), and takes them; false (nothing taken) once `stop` says the run
    /// is stopping, which is asked every 0.1 s while waiting.
    func admit(_ need: Int, unless stop: () -> Bool) -> Bool {
        let need = min(need, bytes)
        condition.lock()
        defer { condition.unlock() }
        let ticket = next
        next += 1
        queue.append(ticket)
        defer { condition.broadcast() }
        while queue.first != ticket || inUse + need > bytes {
            if stop() {
                queue.removeAll { $0 == ticket }
                return false
            }
            condition.wait(until: Date().addingTimeInterval(0.1))
        }
        queue.removeFirst()
        inUse += need
        return true
    }

    /// Gives back what `admit` took.
    func release(_ need: Int) {
        condition.lock()
        inUse -= min(need, bytes)
        condition.broadcast()
        condition.unlock()
    }

    /// Bytes admitted now (for tests).
    var admitted: Int {
        condition.lock()
        defer { condition.unlock() }
        return inUse
    }

    /// Items waiting for their turn now (for tests).
    var waiting: Int {
        condition.lock()
        defer { condition.unlock() }
        return queue.count
    }
}
