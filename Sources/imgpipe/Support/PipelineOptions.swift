import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

/// The pipeline file argument and `--state`, shared by the commands that take them.
struct PipelineOptions: ParsableArguments {
    @Argument(help: "The pipeline file (JSON).", completion: .file(extensions: ["json"]))
    var pipeline: String

    @Option(
        help:
            "The state file (default: .imgpipe/<pipeline file stem>.sqlite in the current directory, or beside the pipeline file when it is there), or a postgres:// URL (work, run, resume, status, export). Also IMGPIPE_STATE.",
        completion: .file(extensions: ["sqlite"]))
    var state: String?

    @OptionGroup var logging: LogOptions

    /// `--state`, else `IMGPIPE_STATE`, parsed (nil: neither is set).
    var stateLocation: StateLocation? { StateFiles.explicit(state).map(StateLocation.init) }

    /// The state file to use; refuses one that holds another pipeline's runs.
    func stateFile() throws -> String { try StateFiles.path(explicit: StateFiles.sqlite(state), pipeline: pipeline) }

    /// Loads and validates the pipeline file, reporting a fault and exiting 2; its state
    /// folder (where a cache without a `path` lives) is the state's.
    func loadSpec() throws -> PipelineSpec {
        var spec = try Self.loadSpec(pipeline)
        spec.stateFolder = StateFiles.folder(explicit: StateFiles.explicit(state), pipeline: pipeline)
        return spec
    }

    /// Loads and validates `path`, reporting a fault (`file: path: message`) and exiting 2.
    static func loadSpec(_ path: String) throws -> PipelineSpec {
        do {
            return try PipelineSpec.load(path: path)
        } catch {
            throw CommandError.usage("\(path): \(error)")
        }
    }

    /// Builds the pipeline for a run (expands `${…}`, resolves paths), exiting 2 on error.
    func build(
        _ spec: PipelineSpec, environment: Environment,
        notice: @escaping @Sendable (String) -> Void
    ) throws -> BuiltPipeline {
        do {
            return try BuiltPipeline.build(
                spec, path: pipeline, environment: environment, logger: logging.logger(), notice: notice)
        } catch {
            throw CommandError.usage("\(pipeline): \(environment.redact(String(describing: error)))")
        }
    }
}

/// Where a pipeline's state file is when `--state` is not given.
///
/// The default is `.imgpipe/<pipeline file stem>.sqlite` in the current directory: that is
/// where `run` creates it. A command run from another folder (`imgpipe status
/// jobs/mixed.json` after `cd jobs && imgpipe run mixed.json`) finds it beside the pipeline
/// file instead: the current directory is looked at first, then the pipeline file's folder,
/// and the first that exists is used. Only `run` creates a state file; `resume` and
/// `status` say where they looked when there is none.
///
/// A default state file is named after the pipeline file's stem, so `a/p.json` and
/// `b/p.json` run from one folder would share `.imgpipe/p.sqlite`: a state file whose runs
/// belong to another pipeline file is passed over, and when it is the only one found the
/// command refuses (exit 2) rather than resume, show or add to the other pipeline's run.
/// `--state` names a file explicitly and is taken as it is.
enum StateFiles {
    /// `--state` as given, else `IMGPIPE_STATE` when it is set and not empty.
    static func explicit(_ option: String?) -> String? {
        option ?? ProcessInfo.processInfo.environment["IMGPIPE_STATE"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The explicit state, refused when it is a PostgreSQL URL: the commands that call this
    /// read and write a SQLite state file (`work`, `run`, `resume`, `status` and `export`
    /// take either, and look at the URL before they get here).
    static func sqlite(_ option: String?) throws -> String? {
        guard let given = explicit(option) else { return nil }
        if case .postgres(let url) = StateLocation(given) {
            throw CommandError.usage(
                "\(StateLocation.postgres(url: url).displayed): this command needs a SQLite state file; "
                    + "a run shared through PostgreSQL is taken by `imgpipe work`, `run`, `resume`, `status` "
                    + "and `export`")
        }
        return given
    }

    /// `explicit`, else the first existing candidate that belongs to `pipeline`, else the
    /// current directory's default.
    static func path(explicit: String?, pipeline: String?) throws -> String {
        if let explicit { return URL(fileURLWithPath: explicit).standardizedFileURL.path }
        let places = candidates(pipeline: pipeline)
        let existing = places.filter { FileManager.default.fileExists(atPath: $0) }
        guard let pipeline, !existing.isEmpty else { return existing.first ?? places[0] }
        var others: [(String, String)] = []
        for place in existing {
            guard let owner = owner(of: place), !sameFile(owner, pipeline) else { return place }
            others.append((place, owner))
        }
        let (place, owner) = others[0]
        throw CommandError.usage(
            "state file \(Console.display(place)) holds the runs of \(Console.display(owner)), "
                + "not of \(pipeline); run this from \(pipeline)'s folder, or give it a state file "
                + "of its own with --state")
    }

    /// The pipeline file of the latest run in `stateFile` (nil when it has none or cannot be read).
    static func owner(of stateFile: String) -> String? {
        RunStore.peekLatestRun(at: stateFile)?.pipelinePath
    }

    static func sameFile(_ a: String, _ b: String) -> Bool {
        Console.realPath(a) == Console.realPath(b)
    }

    /// The folder of a pipeline's state, where its cache lives when the file names no
    /// `path` for it: the folder of the SQLite state file (the explicit one, else the
    /// default one `path` finds). For a state in PostgreSQL, the folder where the default
    /// state file would be.
    static func folder(explicit: String?, pipeline: String?) -> String {
        var file: String?
        if let explicit, case .sqlite = StateLocation(explicit) {
            file = URL(fileURLWithPath: explicit).standardizedFileURL.path
        } else {
            // A state file of another pipeline here is refused by the command later, naming it.
            file = try? path(explicit: nil, pipeline: pipeline)
        }
        return ((file ?? candidates(pipeline: pipeline)[0]) as NSString).deletingLastPathComponent
    }

    /// The places looked at, in order, without repeats. A pipeline file kept in a folder
    /// named `.imgpipe` (as `thumbnail` keeps the pipelines it makes) has its state file
    /// beside it, wherever the command is run from.
    static func candidates(pipeline: String?) -> [String] {
        let stem = pipeline.map { URL(fileURLWithPath: $0).deletingPathExtension().lastPathComponent } ?? "imgpipe"
        if let pipeline {
            let folder = URL(fileURLWithPath: pipeline).standardizedFileURL.deletingLastPathComponent()
            if folder.lastPathComponent == ".imgpipe" {
                return [folder.appendingPathComponent("\(stem).sqlite").standardizedFileURL.path]
            }
        }
        var places = [URL(fileURLWithPath: ".imgpipe/\(stem).sqlite").standardizedFileURL.path]
        if let pipeline {
            let beside = URL(fileURLWithPath: pipeline).deletingLastPathComponent()
                .appendingPathComponent(".imgpipe/\(stem).sqlite").standardizedFileURL.path
            if beside != places[0] { places.append(beside) }
        }
        return places
    }

    /// "no state file at A (nor at B)", for a command that needs one.
    /// Refuses an empty file given as a state file to a command that only reads it
    /// (`status`, `export`): opening it would write a new database into it.
    static func refuseEmpty(_ stateFile: String) throws {
        let size = (try? FileManager.default.attributesOfItem(atPath: stateFile)[.size] as? Int) ?? nil
        if size == 0 { throw CommandError.usage("state file \(Console.display(stateFile)) is empty: it has no runs") }
    }

    static func missing(explicit: String?, pipeline: String?) -> String {
        let places = explicit.map { [URL(fileURLWithPath: $0).standardizedFileURL.path] } ?? candidates(pipeline: pipeline)
        return "no state file at " + places.map(Console.display).joined(separator: " nor at ")
    }
}

/// Writing to the terminal.
enum Console {
    static func error(_ message: String) {
        let label = TerminalStyle.paint("error:", .red, when: TerminalStyle.onStandardError)
        FileHandle.standardError.write(Data("\(label) \(message.printableLines)\n".utf8))
    }

    static func note(_ message: String) {
        FileHandle.standardError.write(Data("note: \(message.printableLines)\n".utf8))
    }

    static func warning(_ message: String) {
        let label = TerminalStyle.paint("warning:", .yellow, when: TerminalStyle.onStandardError)
        FileHandle.standardError.write(Data("\(label) \(message.printableLines)\n".utf8))
    }

    /// Ends the live line, prints `message` on standard error and exits at once with `code`
    /// (no cleanup: for a process that cannot wait for work it has abandoned).
    static func exitNow(_ code: Int32, reporter: ConsoleReporter, saying message: String) -> Never {
        reporter.endLine()
        FileHandle.standardError.write(Data((message + "\n").utf8))
        _exit(code)
    }

    /// A line (or lines) on standard output, with control characters other than line feeds
    /// shown as escapes: text from a feed never drives the terminal.
    static func out(_ message: String) {
        FileHandle.standardOutput.write(Data((message.printableLines + "\n").utf8))
    }

    /// A line on standard output made of parts, each made printable and then painted in its
    /// colour, if any, when standard output is a terminal that takes colour.
    static func out(parts: [(text: String, colour: TerminalStyle.Colour?)]) {
        let line = parts.map { part in
            part.colour.map { TerminalStyle.paint(part.text.printableLines, $0, when: TerminalStyle.onStandardOutput) }
                ?? part.text.printableLines
        }
        FileHandle.standardOutput.write(Data((line.joined() + "\n").utf8))
    }

    static func json<T: Encodable>(_ value: T) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        if let data = try? encoder.encode(value) { FileHandle.standardOutput.write(data + Data("\n".utf8)) }
    }

    /// `path` absolute, with `.`, `..` and symbolic links resolved: one name per file.
    static func realPath(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
    }

    /// A path relative to the current directory when it lies below it.
    static func display(_ path: String) -> String {
        let cwd = FileManager.default.currentDirectoryPath + "/"
        return path.hasPrefix(cwd) ? String(path.dropFirst(cwd.count)) : path
    }
}
