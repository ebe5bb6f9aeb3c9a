import Synchronization

/// Set when a run is interrupted (retry loops stop waiting), and aborted when in-flight
/// work is abandoned (a second Ctrl-C, or the grace period over: transfers stop at once).
public final class CancellationFlag: Sendable {
    private let state = Mutex((cancelled: false, aborted: false))

    public init() {}

    public var isCancelled: Bool { state.withLock { $0.cancelled } }
    public var isAborted: Bool { state.withLock { $0.aborted } }

    public func cancel() { state.withLock { $0.cancelled = true } }

    public func abort() { state.withLock { $0 = (true, true) } }
}
