import Synchronization

/// A `Mutex` that can be shared by reference: state captured by escaping closures (server
/// handlers, threads) or held by two objects at once. `Synchronization.Mutex` is a
/// non-copyable value, so it can live in a class's stored property but cannot be captured
/// by an escaping closure or handed to a second owner; this class is that owner.
public final class LockedBox<Value>: Sendable {
    private let mutex: Mutex<Value>

    public init(_ value: consuming sending Value) { mutex = Mutex(value) }

    /// Runs `body` with the value, the lock held for the whole call (not reentrant).
    public func withLock<Result, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try mutex.withLock(body)
    }
}
