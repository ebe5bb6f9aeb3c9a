import Foundation

/// The environment `${NAME}` references are read from, and the secrets that came from it.
///
/// Every value read through `value(of:)` is remembered, and `redact(_:)` replaces it with
/// `***` in any text bound for a log, the state file or an error message.
// @unchecked because the set of secrets is guarded by `lock`.
public final class Environment: @unchecked Sendable {
    private let variables: [String: String]
    private let lock = NSLock()
    private var secrets: Set<String> = []

    public init(_ variables: [String: String] = ProcessInfo.processInfo.environment) {
        self.variables = variables
    }

    public func value(of name: String) -> String? {
        guard let value = variables[name] else { return nil }
        if !value.isEmpty {
            lock.withLock { _ = secrets.insert(value) }
        }
        return value
    }

    /// `text` with every expanded value replaced by `***`, longest first.
    public func redact(_ text: String) -> String {
        let known = lock.withLock { secrets.sorted { $0.count > $1.count } }
        var out = text
        for secret in known where secret.count >= 3 {
            out = out.replacingOccurrences(of: secret, with: "***")
        }
        return out
    }
}
