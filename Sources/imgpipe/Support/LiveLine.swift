import Foundation
import Logging
import Synchronization

/// The terminal's live progress line, seen from output that does not go through the
/// reporter: a log event clears the line before it is written (the next report draws it
/// again), so `-v` lines never land on the end of the bar.
enum LiveLine {
    /// Set by the reporter that owns the line while a run shows it.
    private static let clearer = Mutex<(@Sendable () -> Void)?>(nil)

    static func owned(by clear: @escaping @Sendable () -> Void) { clearer.withLock { $0 = clear } }

    static func released() { clearer.withLock { $0 = nil } }

    static func clearForOtherOutput() {
        let clear = clearer.withLock { $0 }
        clear?()
    }
}

/// swift-log's standard-error handler, clearing the live line before each event.
struct LiveLineAwareLogHandler: LogHandler {
    var inner: StreamLogHandler

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        LiveLine.clearForOtherOutput()
        inner.log(event: event)
    }
}
