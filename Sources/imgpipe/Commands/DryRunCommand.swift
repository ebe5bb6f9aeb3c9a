import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct DryRunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dry-run",
        abstract: "Apply the filter chain to samples and write previews and a contact sheet; no sinks, no state file.",
        discussion: """
            With two pipeline files, both run on the same samples and the contact sheet shows them side by \
            side, with bytes and SSIM against the source per image. Samples come from --samples, else the \
            pipeline's own directory source, else samples/, else (or with --feed) the pipeline's own source \
            feed: the network is used only to preview a remote feed's items, through the pipeline's download \
            cache when it has one. 12 samples are taken (--limit N for N, --all for every one), spread across \
            folders, formats and sizes; from a remote feed, across its first 200 items (10 × N for more).
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
        help: "Preview items of the pipeline's own source, downloading those of a remote feed."
    )
    var feed = false

    @Option(help: "Where previews go (default: preview/<pipeline name>/, or preview/<A>-vs-<B>/).", completion: .directory)
    var out: String?

    @Option(parsing: .unconditional, help: "Take this many samples, spread across the source (default: 12).")
    var limit: Int?

    @Flag(help: "Take every image of the folder (every item of the feed).")
    var all = false

    @Flag(help: "Print the table as JSON.")
    var json = false

    func validate() throws {
        if pipelines.count > 2 {
            throw ValidationError("dry-run takes one pipeline file, or two to compare; got \(pipelines.count)")
        }
        if let limit, limit < 1 { throw ValidationError("--limit must be a positive integer, got \(limit)") }
        if feed, samples != nil { throw ValidationError("--samples and --feed cannot be used together") }
        if all, limit != nil { throw ValidationError("--limit and --all cannot be used together") }
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
            outputDirectory: outFolder, limit: all ? nil : limit ?? DryRunSamples.sampleSize, environment: environment,
            logger: logging.logger(),
            notice: { Console.note($0) })
        let labels = dryRun.columnLabels
        let table = labels.count == 1 ? Table.single : Table.blocks(labels, owners: dryRun.columnOwners)
        let results: [[DryRunRow]]
        // The header goes out with the first sample: a feed that cannot be listed is then an
        // error alone on the terminal, not under an empty table.
        var headed = json
        do {
            results = try dryRun.execute(
                onSelected: { selection in
                    guard selection.isPartial else { return }
                    if json { Console.note(Self.describe(selection)) } else { Console.out(Self.describe(selection)) }
                },
                onSample: { rows in
                    if !headed { Console.out(table.header) }
                    headed = true
                    if !json { Console.out(table.lines(rows)) }
                })
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
            Console.note(
                "no samples folder (\(Console.display(folder))); previewing items of the pipeline's \(spec.source.typeName) source"
            )
            return .feed
        }
        throw CommandError.usage(
            "samples folder \(Console.display(folder)) does not exist (give one with --samples, or preview the pipeline's own source with --feed)"
        )
    }

    /// What was taken of what, and how to take more: `previewing 12 of 304 images, spread
    /// over 5 folders and 3 formats; --limit N takes N, --all every one`.
    static func describe(_ selection: DryRunSelection) -> String {
        func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }
        let of = selection.window.map { "the first \($0) items listed" } ?? counted(selection.listed, "image")
        return "previewing \(selection.taken) of \(of), spread over \(counted(selection.folders, "folder")) and "
            + "\(counted(selection.formats, "format")); --limit N takes N, --all every one"
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

/// The printed table: a header, then the lines of each sample as it finishes: one line
/// with one pipeline's one output, else a block with a line per output (`out`), the sample's
/// key and input size on the first. Either stays about 100 characters wide however many
/// outputs and pipelines there are; `--json` has every field.
struct Table: Sendable {
    let columns: [(title: String, width: Int)]
    let cells: @Sendable ([DryRunRow]) -> [[String]]

    static let single = Table(columns: [("sample", 34), ("input", 12), ("output", 14), ("bytes", 20), ("ssim", 8), ("ms", 8)]) {
        rows in
        let row = rows[0]
        return [[row.key, input(row), row.failure ?? output(row), bytes(row), ssim(row), milliseconds(row)]]
    }

    /// A line per column of results (`labels`, each of the pipeline `owners` names), except
    /// that a pipeline whose outputs all failed for one reason has one line for them all,
    /// named by its letter (`A`, `B`), or `all` when there is one pipeline.
    static func blocks(_ labels: [String], owners: [Int]) -> Table {
        let width = max(5, labels.map(\.count).max() ?? 0) + 2
        return Table(
            columns: [("sample", 34), ("input", 12), ("out", width), ("output", 14), ("bytes", 20), ("ssim", 8), ("ms", 8)]
        ) { rows in
            var lines: [[String]] = []
            let pipelines = (owners.max() ?? 0) + 1
            for owner in 0..<pipelines {
                let columns = owners.indices.filter { owners[$0] == owner }
                let failures = Set(columns.map { rows[$0].failure })
                if columns.count > 1, failures.count == 1, let failure = failures.first ?? nil {
                    let row = rows[columns[0]]
                    lines.append([
                        "", "", pipelines == 1 ? "all" : ["A", "B"][owner], failure, bytes(row), "-", milliseconds(row),
                    ])
                    continue
                }
                for column in columns {
                    let row = rows[column]
                    lines.append(["", "", labels[column], row.failure ?? output(row), bytes(row), ssim(row), milliseconds(row)])
                }
            }
            lines[0][0] = rows[0].key
            lines[0][1] = input(rows[0])
            return lines
        }
    }

    var header: String { Self.row(columns.map(\.title), widths: columns.map(\.width)) }

    func lines(_ rows: [DryRunRow]) -> String {
        cells(rows).map { Self.row($0, widths: columns.map(\.width)) }.joined(separator: "\n")
    }

    /// Cells padded to their column's width (the last one is not padded); a longer cell
    /// is followed by one space, except a sample's key, which is shortened in its middle
    /// (`http://127.0.0.1:8080/…/main.jpg`): its start and its file name tell it apart.
    static func row(_ cells: [String], widths: [Int]) -> String {
        zip(cells, widths).enumerated().map { index, pair in
            var (cell, width) = (pair.0.printable, pair.1)
            if index == 0, cell.count >= width, width > 8 {
                let head = (width - 2) / 2
                cell = cell.prefix(head) + "…" + cell.suffix(width - 2 - head)
            }
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

    /// `before → after`, or the input's bytes alone when there is no output.
    private static func bytes(_ row: DryRunRow) -> String {
        row.outputBytes.map { "\(row.inputBytes) → \($0)" } ?? "\(row.inputBytes)"
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
