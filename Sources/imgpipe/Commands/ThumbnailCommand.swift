import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

/// `imgpipe thumbnail DIR --fit 400x400 --to out/`: a run without writing a pipeline file.
///
/// The flags make a pipeline (autorotate, then fit or fill, then the output), which
/// `--print-pipeline` prints instead of running, ready to be saved and edited. To run it,
/// the same pipeline is written with absolute paths to `.imgpipe/thumbnail-<hash>.json`
/// beside the output folder (in the folder that holds it; the hash is of the pipeline, so
/// each set of flags has its own file and state file) and run like `imgpipe run` would,
/// its state file beside it. The same command again, from any folder, continues an
/// interrupted run of it, or else makes only what is new or changed since its last run
/// (`run --incremental`); `--new` makes everything again. `imgpipe status` and `resume`
/// take that file.
///
/// Not inside the output folder: a name made from a feed (`--name {key}`) may be any
/// path below the sink's folder, the state file, the cache and staged files included,
/// and the output folder is what gets published or copied on.
struct ThumbnailCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "thumbnail",
        abstract: "Make thumbnails of a folder (or a URL list) without a pipeline file.",
        discussion: """
            Examples: imgpipe thumbnail photos --fit 400x400 --to thumbs/ ; \
            imgpipe thumbnail urls.txt --fill 256 --format webp --to tiles/ ; \
            add --print-pipeline to see the equivalent pipeline file.
            """
    )

    @Argument(
        help: "A folder of images, or a URL list (.txt, .csv, .jsonl, optionally .gz).",
        completion: .file())
    var input: String

    @Option(help: ArgumentHelp("Fit inside this box, aspect kept (WxH, or N for a square).", valueName: "WxH"))
    var fit: String?

    @Option(help: ArgumentHelp("Cover this box and crop to exactly its size (WxH, or N).", valueName: "WxH"))
    var fill: String?

    @Option(help: "The folder the thumbnails are written to.", completion: .directory)
    var to = "thumbnails"

    @Option(help: "Output format: jpeg, png, webp, avif, tiff, gif, or best (the smallest of avif, webp, jpeg).")
    var format = "jpeg"

    @Option(help: "Encoder quality, 1-100 (the format's default otherwise).")
    var quality: Int?

    @Option(
        help: ArgumentHelp(
            "Output file names, as output.name: {stem}, {name}, {key}, {ext}, {index}, {hash}… "
                + "(default {stem}.{ext}: a URL's path below its host, a file's path in the folder).",
            valueName: "TEMPLATE"))
    var name: String?

    @Flag(help: "Print the equivalent pipeline file instead of running.")
    var printPipeline = false

    @Flag(help: "Make every thumbnail again, not only those of new or changed images.")
    var new = false

    @OptionGroup var workerOptions: WorkerOptions

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if fit != nil, fill != nil { throw ValidationError("give --fit or --fill, not both") }
        if let quality, !(1...100).contains(quality) { throw ValidationError("--quality must be from 1 to 100, got \(quality)") }
    }

    func run() throws {
        let box = try Self.box(fill ?? fit ?? "400x400", flag: fill != nil ? "--fill" : "--fit", bothSides: fill != nil)
        for (flag, path) in [("DIR", input), ("--to", to), ("--name", name ?? "")] where path.contains("${") {
            throw CommandError.usage(
                "\(flag) \(path): a path with ${ cannot be put in a pipeline file (it would read an environment variable)")
        }
        var isDirectory: ObjCBool = false
        // Before anything is written (the saved pipeline file would be left for nothing).
        guard FileManager.default.fileExists(atPath: input, isDirectory: &isDirectory) else {
            throw CommandError.usage("\(input): no such folder or URL list")
        }
        if !isDirectory.boolValue, !Self.isURLList(input) {
            throw CommandError.usage(
                "\(input) is a file: thumbnail takes a folder of images or a URL list (.txt, .csv, .jsonl, or .gz of one)")
        }
        // Absolute paths: the pipeline runs (and the printed one may be saved) anywhere.
        let absolute = { (path: String) in URL(fileURLWithPath: path).standardizedFileURL.path }
        let outputFolder = absolute(to)
        let text = pipeline(box: box, input: absolute(input), output: outputFolder)
        // Checked before anything is written: a fault names the flag, not a JSON path.
        do {
            _ = try PipelineSpec.decode(
                text: text, baseDirectory: FileManager.default.currentDirectoryPath, defaultName: "thumbnail")
        } catch let error as SpecError {
            let flag =
                ["output.quality": "--quality", "output.format": "--format", "output.name": "--name"][error.path] ?? error.path
            throw CommandError.usage("\(flag): \(error.message)")
        }
        if printPipeline {
            Console.out(text)
            return
        }
        let name = "thumbnail-\(sha256Hex(text).prefix(16)).json"
        let file = try save(text, as: name, besideOutput: outputFolder)
        let options = try PipelineOptions.parse(["--", Console.display(file)])
        let latest = RunStore.peekLatestRun(at: try options.stateFile())?.state
        let mode: RunMode
        var incremental = false
        if new {
            mode = .fresh(limit: nil, replaceUnfinished: true)
        } else if latest == .running || latest == .interrupted {
            mode = .resume(retryFailed: false)
        } else {
            // A run of these flags has finished: compare with it.
            incremental = latest != nil
            mode = .fresh(limit: nil, replaceUnfinished: false)
        }
        if incremental, !output.quiet, !output.json {
            Console.note("making only what is new or changed since the last run of this command (--new makes everything again)")
        }
        try RunSession(options: options, workers: workerOptions, quiet: output.quiet, json: output.json, incremental: incremental)
            .perform(mode)
    }

    /// Writes the pipeline to `.imgpipe/NAME` in the folder that holds `outputFolder` (made
    /// when missing); when that folder cannot be written, to `.imgpipe/NAME` in the current
    /// directory, as before, saying so. Returns the file's absolute path.
    private func save(_ text: String, as name: String, besideOutput outputFolder: String) throws -> String {
        let beside = URL(fileURLWithPath: (outputFolder as NSString).deletingLastPathComponent)
            .appendingPathComponent(".imgpipe").standardizedFileURL.path
        let here = URL(fileURLWithPath: ".imgpipe").standardizedFileURL.path
        var failure: Error?
        for folder in beside == here ? [here] : [beside, here] {
            let file = folder + "/" + name
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                try Data(text.utf8).write(to: URL(fileURLWithPath: file), options: .atomic)
            } catch {
                failure = failure ?? error
                continue
            }
            if folder != beside {
                Console.note(
                    "cannot keep this command's state beside \(Console.display(outputFolder)) (\(failure?.localizedDescription ?? "")): "
                        + "it is kept in \(Console.display(folder)), where only a run from this folder finds it")
            }
            return file
        }
        throw CommandError.failure(
            "cannot write \(Console.display(beside + "/" + name)): \(failure?.localizedDescription ?? "unknown error")")
    }

    static func isURLList(_ path: String) -> Bool { URLListFeed.format(ofName: path) != nil }

    /// The pipeline file the flags stand for, with `input` and `output` as given.
    func pipeline(box: (width: Int?, height: Int?), input: String, output: String) -> String {
        let source =
            Self.isURLList(input)
            ? #"{ "type": "url-list", "path": \#(quote(input)) }"#
            : #"{ "type": "directory", "path": \#(quote(input)) }"#
        let op = fill != nil ? "fill" : "fit"
        let sides = [box.width.map { #""width": \#($0)"# }, box.height.map { #""height": \#($0)"# }].compactMap { $0 }
        let encoding = (quality.map { #", "quality": \#($0)"# } ?? "") + (name.map { #", "name": \#(quote($0))"# } ?? "")
        return """
            {
              "version": 1,
              "name": "thumbnail",
              "source": \(source),
              "filters": [
                { "op": "autorotate" },
                { "op": "\(op)", \(sides.joined(separator: ", ")) }
              ],
              "output": { "format": \(quote(format))\(encoding), "strip": true },
              "sink": { "type": "directory", "path": \(quote(output)) }
            }
            """
    }

    private func quote(_ text: String) -> String { JSONValue.string(text).serialized() }

    /// `400x300`, `400` (a square), or for `--fit` one side only (`400x`, `x300`).
    static func box(_ text: String, flag: String, bothSides: Bool) throws -> (width: Int?, height: Int?) {
        let parts = text.lowercased().split(separator: "x", omittingEmptySubsequences: false).map(String.init)
        let sides = parts.map { $0.isEmpty ? nil : Int($0) }
        switch parts.count {
        case 1: if let side = sides[0], side > 0 { return (side, side) }
        case 2:
            let valid = zip(parts, sides).allSatisfy { part, side in part.isEmpty ? !bothSides : (side ?? 0) > 0 }
            if valid, sides[0] != nil || sides[1] != nil { return (sides[0], sides[1]) }
        default: break
        }
        let forms =
            bothSides
            ? "WIDTHxHEIGHT or a single size, such as 400x300 or 256"
            : "WIDTHxHEIGHT, a single size, or one side (400x, x300)"
        throw CommandError.usage("\(flag) expects \(forms); got \(JSONValue.string(text).serialized())")
    }
}
