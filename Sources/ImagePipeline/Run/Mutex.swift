import Foundation

/// A value that one thread at a time may read or change, through `withLock`. The value
/// cannot be reached any other way, so the compiler checks that every access is locked.
// @unchecked because `value` is only touched with `lock` held.
public final class Mutex<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
