import ArgumentParser
import Foundation
import ImagePipeline

struct DryRunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dry-run",
        abstract: "Apply the filter chain to local samples and write previews; no network, no sinks, no state file."
    )

    @Argument(help: "The pipeline file (JSON).", completion: .file(extensions: ["json"]))
    var pipeline: String

    @Option(help: "Folder of sample images (default: the pipeline's own directory source, else samples/).",
            completion: .directory)
    var samples: String?

    @Option(help: "Where previews go (default: preview/<pipeline name>/).", completion: .directory)
    var out: String?

    @Option(parsing: .unconditional, help: "Use at most this many samples.")
    var limit: Int?

    @Flag(help: "Print the table as JSON.")
    var json = false

    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be a positive integer, got \(limit)") }
    }

    func run() throws {
        let spec = try PipelineOptions.loadSpec(pipeline)
        let environment = Environment()
        let samplesFolder = samples.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
            ?? DryRun.defaultSamples(for: spec, environment: environment)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: samplesFolder, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw CommandError.usage("samples folder \(Console.display(samplesFolder)) does not exist (give one with --samples)")
        }
        let outFolder = URL(fileURLWithPath: out ?? "preview/\(SafeName.component(spec.name))").standardizedFileURL.path
        do {
            _ = try spec.expandedFilters(in: environment) // an unset ${NAME} stops before any work
        } catch {
            throw CommandError.usage("\(pipeline): \(environment.redact(String(describing: error)))")
        }
        let dryRun = DryRun(spec: spec, samples: samplesFolder, outputDirectory: outFolder, limit: limit,
                            environment: environment)

        if !json {
            Console.out(Table.row(["sample", "input", "output", "bytes", "ms"]))
        }
        let rows = try dryRun.execute { row in
            guard !json else { return }
            let input = row.inputWidth.map { "\($0)×\(row.inputHeight ?? 0)" } ?? "-"
            let output = row.failure ?? row.outputWidth.map { "\($0)×\(row.outputHeight ?? 0)" } ?? "-"
            let bytes = row.outputBytes.map { "\(row.inputBytes) → \($0)" } ?? "\(row.inputBytes)"
            Console.out(Table.row([row.key, input, output, bytes, String(format: "%.1f", row.milliseconds)]))
        }
        if json {
            Console.json(rows)
        } else {
            let failed = rows.filter { $0.failure != nil }.count
            Console.out("\(rows.count - failed) preview(s) in \(Console.display(outFolder))"
                        + (failed > 0 ? ", \(failed) sample(s) failed" : ""))
        }
        if rows.contains(where: { $0.failure != nil }) { throw Exit.failedItems }
    }
}

enum Table {
    static let widths = [34, 12, 14, 20, 8]

    static func row(_ cells: [String]) -> String {
        zip(cells, widths).enumerated().map { index, pair in
            let (cell, width) = pair
            if index == cells.count - 1 { return cell }
            return cell.count >= width ? cell + " " : cell + String(repeating: " ", count: width - cell.count)
        }.joined()
    }
}

enum SafeName {
    /// One path component made of the name's letters, digits, `-`, `_` and `.`.
    static func component(_ name: String) -> String {
        let mapped = String(name.map { $0.isLetter || $0.isNumber || "-_.".contains($0) ? $0 : "-" })
        return mapped.isEmpty || mapped.allSatisfy({ $0 == "." }) ? "pipeline" : mapped
    }
}
