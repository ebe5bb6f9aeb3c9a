import Foundation
import Logging
import PipelineKit
import Synchronization

/// The terminal's live progress line, seen from output that does not go through the
/// reporter: a log event clears the line before it is written (the next report draws it
/// again), so `-v` lines never land on the end of the bar.
enum LiveLine {
    /// Runs a write of other output: clears the line, then writes, under the owner's lock,
    /// so that no redraw of the bar can come between the two.
    typealias Writer = @Sendable (_ write: () -> Void) -> Void

    /// Set by the reporter that owns the line while a run shows it.
    private static let owner = Mutex<Writer?>(nil)

    static func owned(by writer: @escaping Writer) { owner.withLock { $0 = writer } }

    static func released() { owner.withLock { $0 = nil } }

    /// `write` with the live line out of its way.
    static func writeOther(_ write: () -> Void) {
        if let writer = owner.withLock({ $0 }) { writer(write) } else { write() }
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
        LiveLine.writeOther { inner.log(event: event) }
    }
}
