import ArgumentParser
import Foundation
import ImagePipeline

struct DryRunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dry-run",
        abstract: "Apply the filter chain to samples and write previews and a contact sheet; no sinks, no state file.",
        discussion: """
            With two pipeline files, both run on the same samples and the contact sheet shows them side by \
            side, with bytes and SSIM against the source per image. Samples come from --samples, else the \
            pipeline's own directory source, else samples/, else (or with --feed) the first items of the \
            pipeline's own source feed: the network is used only to preview a remote feed's items, through \
            the pipeline's download cache when it has one.
            """
    )

    @Argument(
        help: ArgumentHelp(
            "The pipeline file (JSON); give a second one to compare the two on the same samples.",
            valueName: "pipeline"),
        completion: .file(extensions: ["json"]))
    var pipelines: [String]

    @Option(
        help: "Folder of sample images (default: the pipeline's own directory source, else samples/, else its feed).",
        completion: .directory)
    var samples: String?

    @Flag(
        help: "Preview the first items of the pipeline's own source (--limit, 12 by default), downloading those of a remote feed."
    )
    var feed = false

    @Option(help: "Where previews go (default: preview/<pipeline name>/, or preview/<A>-vs-<B>/).", completion: .directory)
    var out: String?

    @Option(parsing: .unconditional, help: "Use at most this many samples.")
    var limit: Int?

    @Flag(help: "Print the table as JSON.")
    var json = false

    func validate() throws {
        if pipelines.count > 2 {
            throw ValidationError("dry-run takes one pipeline file, or two to compare; got \(pipelines.count)")
        }
        if let limit, limit < 1 { throw ValidationError("--limit must be a positive integer, got \(limit)") }
        if feed, samples != nil { throw ValidationError("--samples and --feed cannot be used together") }
    }

    @OptionGroup var logging: LogOptions

    func run() throws {
        // A dry-run of the feed reads and fills the cache the pipeline's runs use, beside its state.
        let specs = try pipelines.map { path in
            var spec = try PipelineOptions.loadSpec(path)
            spec.stateFolder = StateFiles.folder(explicit: StateFiles.explicit(nil), pipeline: path)
            return spec
        }
        let environment = Environment()
        let source = try sampleSource(specs[0], environment: environment)
        let name = specs.map { SafeName.component($0.name) }.joined(separator: "-vs-")
        let outFolder = URL(fileURLWithPath: out ?? "preview/\(name)").standardizedFileURL.path
        // Previews written over the samples would replace the originals (and be scored
        // against themselves). A previews folder inside the samples folder is fine: it is
        // never listed.
        if case .folder(let folder) = source {
            let (samplesPath, outPath) = (Console.realPath(folder), Console.realPath(outFolder))
            if samplesPath == outPath || samplesPath.hasPrefix(outPath + "/") {
                throw CommandError.usage(
                    "--out \(Console.display(outFolder)) would hold the samples folder \(Console.display(folder)), "
                        + "and previews would overwrite the originals: give another --out")
            }
        }
        let dryRun = DryRun(
            spec: specs[0], other: specs.count > 1 ? specs[1] : nil, samples: source,
            outputDirectory: outFolder, limit: limit, environment: environment, logger: logging.logger(),
            notice: { Console.note($0) })
        let labels = dryRun.columnLabels
        let table =
            labels.count == 1
            ? Table.single : specs.count == 2 && labels == ["A", "B"] ? Table.comparison : Table.columns(labels)
        let results: [[DryRunRow]]
        // The header goes out with the first sample: a feed that cannot be listed is then an
        // error alone on the terminal, not under an empty table.
        var headed = json
        do {
            results = try dryRun.execute { rows in
                if !headed { Console.out(table.header) }
                headed = true
                if !json { Console.out(table.line(rows)) }
            }
        } catch let error as DryRunError {
            throw CommandError.usage("\(pipelines[error.pipeline]): \(environment.redact(String(describing: error.fault)))")
        } catch let error as SpecError {
            throw CommandError.usage("\(pipelines[0]): \(environment.redact(String(describing: error)))")
        } catch let error as FeedError {
            throw CommandError.failure("cannot list the feed of \(pipelines[0]): \(environment.redact(error.description))")
        }
        if json {
            if labels.count == 1 {
                Console.json(results.map { $0[0] })
            } else if labels == ["A", "B"] {
                Console.json(results.map { Comparison(key: $0[0].key, a: $0[0], b: $0[1]) })
            } else {
                // Several outputs: each sample's rows by column (`w320`, or `A w320` when compared).
                Console.json(
                    results.map { rows in Columns(key: rows[0].key, columns: Dictionary(uniqueKeysWithValues: zip(labels, rows)))
                    })
            }
        } else {
            let failed = results.filter { rows in rows.contains { $0.failure != nil } }.count
            Console.out(
                "\(results.count - failed) sample(s) previewed in \(Console.display(outFolder))"
                    + (failed > 0 ? ", \(failed) sample(s) failed" : ""))
            Console.out("contact sheet: \(Console.display(dryRun.indexPath))")
        }
        if results.contains(where: { rows in rows.contains { $0.failure != nil } }) { throw Exit.failedItems }
    }

    /// `--feed`, else `--samples`, else the pipeline's own directory source or `samples/`,
    /// else the pipeline's own remote feed; a local-only situation without samples is an
    /// error naming the folder.
    private func sampleSource(_ spec: PipelineSpec, environment: Environment) throws -> DryRunSamples {
        if feed { return .feed }
        let folder =
            samples.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            ?? DryRun.defaultSamples(for: spec, environment: environment)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue {
            return .folder(folder)
        }
        if samples == nil, spec.source.remote != nil {
            let count = limit ?? DryRunSamples.feedLimit
            Console.note(
                "no samples folder (\(Console.display(folder))); previewing the first \(count) item(s) of the pipeline's \(spec.source.typeName) source"
            )
            return .feed
        }
        throw CommandError.usage(
            "samples folder \(Console.display(folder)) does not exist (give one with --samples, or preview the pipeline's own source with --feed)"
        )
    }

    /// One sample of a comparison, as `--json` prints it.
    private struct Comparison: Encodable {
        let key: String
        let a: DryRunRow
        let b: DryRunRow
    }

    /// One sample of pipelines with several outputs, as `--json` prints it.
    private struct Columns: Encodable {
        let key: String
        let columns: [String: DryRunRow]
    }
}

/// The printed table: a header, then one line per sample as it finishes.
struct Table: Sendable {
    let columns: [(title: String, width: Int)]
    let cells: @Sendable ([DryRunRow]) -> [String]

    static let single = Table(columns: [("sample", 34), ("input", 12), ("output", 14), ("bytes", 20), ("ssim", 8), ("ms", 8)]) {
        rows in
        let row = rows[0]
        return [
            row.key, input(row), row.failure ?? output(row),
            row.outputBytes.map { "\(row.inputBytes) → \($0)" } ?? "\(row.inputBytes)", ssim(row), milliseconds(row),
        ]
    }

    static let comparison = Table(columns: [
        ("sample", 34), ("input", 12), ("bytes", 10),
        ("A output", 14), ("A bytes", 10), ("A ssim", 8), ("A ms", 8),
        ("B output", 14), ("B bytes", 10), ("B ssim", 8), ("B ms", 8),
    ]) { rows in
        [rows[0].key, input(rows[0]), "\(rows[0].inputBytes)"]
            + rows.flatMap { row in
                [row.failure ?? output(row), row.outputBytes.map(String.init) ?? "-", ssim(row), milliseconds(row)]
            }
    }

    /// One group of columns per output (and pipeline), named by `labels`.
    static func columns(_ labels: [String]) -> Table {
        Table(
            columns: [("sample", 34), ("input", 12), ("bytes", 10)]
                + labels.flatMap { label in
                    [("\(label) output", 14), ("\(label) bytes", 10), ("\(label) ssim", 8)]
                } + [("ms", 8)]
        ) { rows in
            [rows[0].key, input(rows[0]), "\(rows[0].inputBytes)"]
                + rows.flatMap { row in
                    [row.failure ?? output(row), row.outputBytes.map(String.init) ?? "-", ssim(row)]
                } + [milliseconds(rows[0])]
        }
    }

    var header: String { Self.row(columns.map(\.title), widths: columns.map(\.width)) }

    func line(_ rows: [DryRunRow]) -> String { Self.row(cells(rows), widths: columns.map(\.width)) }

    /// Cells padded to their column's width (the last one is not padded); a longer cell
    /// is followed by one space.
    static func row(_ cells: [String], widths: [Int]) -> String {
        zip(cells, widths).enumerated().map { index, pair in
            let (cell, width) = (pair.0.printable, pair.1)
            if index == cells.count - 1 { return cell }
            return cell.count >= width ? cell + " " : cell + String(repeating: " ", count: width - cell.count)
        }.joined()
    }

    private static func input(_ row: DryRunRow) -> String {
        row.inputWidth.map { "\($0)×\(row.inputHeight ?? 0)" } ?? "-"
    }

    private static func output(_ row: DryRunRow) -> String {
        row.outputWidth.map { "\($0)×\(row.outputHeight ?? 0)" } ?? "-"
    }

    private static func ssim(_ row: DryRunRow) -> String {
        row.ssim.map { String(format: "%.4f", $0) } ?? "-"
    }

    private static func milliseconds(_ row: DryRunRow) -> String {
        row.failure == nil || row.milliseconds > 0 ? String(format: "%.1f", row.milliseconds) : "-"
    }
}

enum SafeName {
    /// One path component made of the name's letters, digits, `-`, `_` and `.`.
    static func component(_ name: String) -> String {
        let mapped = String(name.map { $0.isLetter || $0.isNumber || "-_.".contains($0) ? $0 : "-" })
        return mapped.isEmpty || mapped.allSatisfy({ $0 == "." }) ? "pipeline" : mapped
    }
}
