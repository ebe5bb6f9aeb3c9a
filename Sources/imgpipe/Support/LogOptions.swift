import ArgumentParser
import Foundation
import ImagePipeline
import Logging
import PipelineKit

/// `--log-level` / `--verbose`, and `IMGPIPE_LOG`: what the library logs (retries and
/// their reasons, slow items, feed pages, sessions) goes to standard error, each event with
/// its item key, stage, attempt, sink or host as metadata. Off (`warning`) by default.
struct LogOptions: ParsableArguments {
    @Flag(name: [.customShort("v"), .long], help: "Log retries, slow items and feed pages to standard error (--log-level info).")
    var verbose = false

    @Option(
        help: ArgumentHelp(
            "Log level: trace, debug, info, notice, warning, error, critical (default: $IMGPIPE_LOG, else warning).",
            valueName: "level"))
    var logLevel: String?

    func validate() throws {
        let levels = Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")
        if let logLevel, Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("--log-level must be one of \(levels), got \(logLevel)")
        }
    }

    /// `IMGPIPE_LOG` is refused like `--log-level`, by every command (those that log nothing
    /// too, as `status`): a misspelt level is never silently the default.
    static func refuseMisspeltVariable(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        guard let variable = environment["IMGPIPE_LOG"], !variable.isEmpty,
            Logger.Level(rawValue: variable.lowercased()) == nil
        else { return }
        let levels = Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")
        throw CommandError.usage("IMGPIPE_LOG must be one of \(levels), got \(variable)")
    }

    /// The logger the library is given (the process-wide handler is set up in `main`).
    func logger(environment: [String: String] = ProcessInfo.processInfo.environment) -> Logger {
        var logger = Logger(label: "imgpipe")
        logger.logLevel =
            logLevel.flatMap(Logger.Level.init(rawValue:))
            ?? (verbose ? .info : nil)
            ?? environment["IMGPIPE_LOG"].flatMap { Logger.Level(rawValue: $0.lowercased()) }
            ?? .warning
        return logger
    }

    /// Once per process, before any logger is made: everything to standard error (standard
    /// output carries `--json` summaries and reports).
    static func bootstrap() {
        LoggingSystem.bootstrap { label in LiveLineAwareLogHandler(inner: StreamLogHandler.standardError(label: label)) }
    }
}

/// `-j`/`--workers`: the pipeline's `limits.workers` for this command only (it does not
/// change outputs, so a run may be resumed with another value).
struct WorkerOptions: ParsableArguments {
    @Option(
        name: [.customShort("j", allowingJoined: true), .long], parsing: .unconditional,
        help: "Pixel workers for this command (overrides limits.workers; 0 = one per core).")
    var workers: Int?

    func validate() throws {
        if let workers, workers < 0 { throw ValidationError("--workers must be 0 (one per core) or more, got \(workers)") }
    }

    func apply(to spec: inout PipelineSpec) {
        if let workers { spec.limits.workers = workers }
    }
}

/// `--quiet` and `--json`, for the commands that work on items (`run`, `resume`, `work`).
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print nothing but errors.")
    var quiet = false

    @Flag(help: "Print a machine-readable summary on standard output.")
    var json = false
}
