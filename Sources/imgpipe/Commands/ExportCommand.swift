import ArgumentParser
import Foundation
import ImagePipeline
import ParquetKit
import PipelineKit

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write one record per item of a run: status, failure, metadata, outputs and deliveries.",
        discussion: """
            JSON Lines by default (one object per item, in feed order), CSV with fixed \
            columns, or Parquet with CSV's columns typed (to a file: -o; see docs/export.md). Streamed: memory stays flat however many items the run \
            has. The latest run unless --run N. With -o the file appears whole or not at all.
            """
    )

    @OptionGroup var options: PipelineOptions

    @Option(name: .customLong("run"), help: ArgumentHelp("Export run number N instead of the latest.", valueName: "N"))
    var runNumber: Int64?

    @Option(help: "jsonl, csv or parquet (parquet needs -o FILE).")
    var format: ExportFormat = .jsonl

    @Option(help: ArgumentHelp("Only items with this status: done, failed or skipped.", valueName: "status"))
    var only: String?

    @Option(
        name: [.customShort("o"), .customLong("output")], help: "Write to this file instead of standard output.",
        completion: .file())
    var output: String?

    func validate() throws {
        if let only, !["done", "failed", "skipped"].contains(only) {
            throw ValidationError("--only takes done, failed or skipped, got \(JSONValue.string(only).serialized())")
        }
        if format == .parquet, output == nil {
            throw ValidationError("--format parquet writes a file, not standard output: give it with -o FILE")
        }
    }

    func run() throws {
        if case .postgres(let url)? = options.stateLocation { return try exportShared(url: url) }
        let stateFile = try options.stateFile()
        guard FileManager.default.fileExists(atPath: stateFile) else {
            if StateFiles.explicit(options.state) == nil,
                let shared = SharedStateNote.message(pipeline: options.pipeline, doing: "to export it")
            {
                throw CommandError.usage("\(StateFiles.missing(explicit: nil, pipeline: options.pipeline)); \(shared)")
            }
            throw CommandError.usage(
                "\(StateFiles.missing(explicit: options.state, pipeline: options.pipeline)): nothing to export")
        }
        try StateFiles.refuseEmpty(stateFile)
        let place = "state file \(Console.display(stateFile))"
        try export(masking: { $0 }) {
            (
                try RunStore(path: stateFile),
                { number in number.map { "\(place) has no run #\($0) (see imgpipe status --runs)" } ?? "\(place) has no runs" }
            )
        }
    }

    /// A run shared through PostgreSQL: its items from the database, with the outputs and
    /// deliveries each worker copied there; sinks and outputs named by the pipeline file.
    private func exportShared(url: String) throws {
        let spec = try options.loadSpec()
        try export(masking: { StateLocation.masking(in: $0, url: url) }) {
            (
                SharedExport(connection: try PostgresConnection(url: url), pipeline: spec),
                { number in
                    StateLocation.postgres(url: url).displayed + " has no run" + (number.map { " #\($0)" } ?? "")
                        + " of pipeline \(spec.name)"
                }
            )
        }
    }

    /// The one path of both: the run asked for (or the latest) from `open`'s source, and
    /// each record written as `format` says. `open` also gives the message for a run the
    /// source does not have (nil: the latest).
    private func export(
        masking: @escaping (String) -> String,
        open: () throws -> (source: any ExportSource, missing: (Int64?) -> String)
    ) throws {
        let environment = Environment()
        try writingInPlace(environment: environment, masking: masking) { partial in
            let (source, missing) = try open()
            guard let run = try source.exportedRun(number: runNumber) else { throw CommandError.usage(missing(runNumber)) }
            let only = only.flatMap(ItemStatus.init(rawValue:))
            if format == .parquet, let partial {
                // Row groups are written as they fill.
                let writer = try ParquetWriter(
                    path: partial, columns: ExportFormat.parquetColumns(sinks: run.sinks, outputs: run.outputs))
                try source.exportRecords(of: run, only: only) { record in
                    try writer.append(
                        ExportFormat.parquetRow(record, sinks: run.sinks, outputs: run.outputs, redact: environment.redact))
                }
                try writer.finish(sync: true)
                return
            }
            let sink = try OutputStream(path: partial)
            if let header = format.header(sinks: run.sinks, outputs: run.outputs) { sink.write(header) }
            try source.exportRecords(of: run, only: only) { record in
                sink.write(format.line(record, sinks: run.sinks, outputs: run.outputs, redact: environment.redact))
            }
            try sink.close()
        }
    }

    /// Runs `body` with standard output (nil), or with `-o` the path of a `.partial` file,
    /// renamed into place once `body` is done (removed when it fails): the file appears
    /// whole or not at all. A failure other than a `CommandError` is told masked.
    private func writingInPlace(
        environment: Environment, masking: (String) -> String, _ body: (String?) throws -> Void
    ) throws {
        let partial = output.map { $0 + ".partial" }
        do {
            try body(partial)
            if let partial, let output, rename(partial, output) != 0 {
                throw CommandError.failure("cannot write \(output): \(String(cString: strerror(errno)))")
            }
        } catch let error as CommandError {
            if let partial { unlink(partial) }
            throw error
        } catch {
            if let partial { unlink(partial) }
            throw CommandError.failure(masking(environment.redact(String(describing: error))))
        }
    }
}

extension ExportFormat: ExpressibleByArgument {}

/// Lines to standard output or a file, written in 64 KiB blocks.
private final class OutputStream {
    private let handle: FileHandle
    private let ownsHandle: Bool
    private var buffer = Data()

    init(path: String?) throws {
        if let path {
            // Opened in place: FileManager's `createFile` writes a temporary file beside it first.
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else {
                throw CommandError.failure("cannot write \(path): \(String(cString: strerror(errno)))")
            }
            handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
            ownsHandle = true
        } else {
            handle = FileHandle.standardOutput
            ownsHandle = false
        }
        buffer.reserveCapacity(1 << 16)
    }

    func write(_ line: String) {
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 { flush() }
    }

    private func flush() {
        handle.write(buffer)
        buffer.removeAll(keepingCapacity: true)
    }

    func close() throws {
        flush()
        if ownsHandle {
            try handle.synchronize()
            try handle.close()
        }
    }
}
