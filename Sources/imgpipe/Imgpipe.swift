import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit
import VipsKit

/// Exit codes (docs/cli.md, "Exit codes"): 0 every item done or skipped; 1 finished with failed items; 2
/// usage or invalid pipeline; 130 interrupted (state saved).
enum Exit {
    static let failedItems = ExitCode(1)
    static let usage = ExitCode(2)
    static let interrupted = ExitCode(130)
}

@main
struct Imgpipe: ParsableCommand {
    static let version = ImgpipeIdentity.version

    static let configuration = CommandConfiguration(
        commandName: "imgpipe",
        abstract: "Run batch image pipelines: a feed of images, a chain of libvips filters, and sinks.",
        discussion:
            "Exit codes: 0 every item done or skipped, 1 some items failed, 2 usage or invalid pipeline, 130 interrupted.",
        version: version,
        subcommands: [
            RunCommand.self, ResumeCommand.self, WorkCommand.self, DryRunCommand.self, StatusCommand.self,
            ValidateCommand.self, ExportCommand.self, PlanCommand.self, ThumbnailCommand.self, InitCommand.self,
            FiltersCommand.self,
            SchemaCommand.self, CacheCommand.self,
        ]
    )

    /// Where `run`, `resume` and `work` make items' pixels: in helper processes of this
    /// binary (`PixelHelper`), unless `IMGPIPE_PIXEL_HELPERS=0` keeps them on the pixel
    /// workers' threads in this process (one process to debug or profile; docs/performance.md).
    static let pixelHelper: PixelHelperLaunch? =
        ProcessInfo.processInfo.environment["IMGPIPE_PIXEL_HELPERS"] == "0" ? nil : .thisExecutable

    /// Parses and runs, mapping argument errors to exit code 2 rather than 64.
    static func main() {
        // Two glibc malloc arenas instead of 8 per core: measured 3 % faster and 6 % less
        // RSS with libvips workers (bench/RESULTS.md, tuning log). MALLOC_ARENA_MAX wins.
        if ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil {
            VipsRuntime.limitMallocArenas(2)
        }
        // A run's pixel helper (started with the run's process id), set up as the run is.
        let arguments = CommandLine.arguments
        if arguments.count == 3, arguments[1] == PixelHelper.argument, let parent = pid_t(arguments[2]) {
            PixelHelper.serve(parent: parent)
        }
        LogOptions.bootstrap()
        do {
            try refuseUnknownCommand(Array(CommandLine.arguments.dropFirst()))
            var command = try parseAsRoot(retryFailedWithValue(Array(CommandLine.arguments.dropFirst())))
            try LogOptions.refuseMisspeltVariable()
            try command.run()
        } catch let error as CommandError {
            Console.error(error.message)
            Foundation.exit(error.exitCode.rawValue)
        } catch {
            let code = exitCode(for: error)
            if code == .success { exit(withError: error) }  // --help, --version
            // ArgumentParser's usage errors exit 64 (EX_USAGE); ours is 2. Its "Error: "
            // becomes the "error: " of every other message.
            var message = fullMessage(for: error)
            if message.hasPrefix("Error: ") { message = "error: " + message.dropFirst(7) }
            if !message.isEmpty { FileHandle.standardError.write(Data((message + "\n").utf8)) }
            Foundation.exit(code.rawValue == 64 ? 2 : code.rawValue)
        }
    }

    /// `resume --retry-failed=REASON,…` as `--retry-failed --retry-failed-reasons REASON,…`:
    /// ArgumentParser has no option whose value may be left out, and a bare `--retry-failed`
    /// keeps meaning every failed item.
    static func retryFailedWithValue(_ arguments: [String]) -> [String] {
        guard arguments.first == "resume" else { return arguments }
        let prefix = "--retry-failed="
        return arguments.flatMap { argument in
            argument.hasPrefix(prefix)
                ? ["--retry-failed", "--retry-failed-reasons", String(argument.dropFirst(prefix.count))] : [argument]
        }
    }

    /// A first word that is not an option must name a command: `imgpipe frobnicate
    /// --help` is an error naming the word (with the nearest command), not the root help.
    static func refuseUnknownCommand(_ arguments: [String]) throws {
        guard var word = arguments.first, !word.hasPrefix("-") else { return }
        let names = configuration.subcommands.map { $0._commandName } + ["help"]
        if word == "help" {
            // `imgpipe help run` names a command too.
            guard let topic = arguments.dropFirst().first, !topic.hasPrefix("-") else { return }
            word = topic
        }
        guard !names.contains(word) else { return }
        let hint =
            Spelling.closest(to: word, in: names, distance: max(2, word.count / 3)).map { " (did you mean `\($0)`?)" } ?? ""
        throw CommandError.usage("unknown command `\(word)`\(hint); the commands are \(names.dropLast().joined(separator: ", "))")
    }
}
