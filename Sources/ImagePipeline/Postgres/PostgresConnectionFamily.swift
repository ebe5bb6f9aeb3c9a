import PipelineKit
import Synchronization

/// A worker's connections (one per thread, `SharedRun.sibling()`), given up together:
/// `abandon()` gives up every one made so far, and one added after is given up at once.
final class PostgresConnectionFamily: Sendable {
    private let state: Mutex<(members: [PostgresConnection], abandoned: Bool)>

    init(_ first: PostgresConnection) { state = Mutex(([first], false)) }

    func add(_ connection: PostgresConnection) {
        let abandoned = state.withLock { state in
            state.members.append(connection)
            return state.abandoned
        }
        if abandoned { connection.abandon() }
    }

    func abandon() {
        let members = state.withLock { state in
            state.abandoned = true
            return state.members
        }
        for member in members { member.abandon() }
    }
}
