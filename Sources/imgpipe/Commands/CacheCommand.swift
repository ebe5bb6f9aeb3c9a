import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct CacheCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cache",
        abstract: "Show the download cache (entries, bytes, bound) or clear it.",
        discussion: """
            The cache is the pipeline's `source.cache.path`, else `cache` beside the pipeline's \
            state file (.imgpipe/cache in the current directory, or beside the pipeline file when \
            its state file is there); without a pipeline file, .imgpipe/cache. It is bounded by `source.cache.maxSize` (1 GiB unless set): the least \
            recently used entries go first.
            """
    )

    @Argument(help: "The pipeline file whose cache to show (default: .imgpipe/cache).", completion: .file(extensions: ["json"]))
    var pipeline: String?

    @Option(
        help: "The pipeline's state file, whose folder holds its cache (as for run). Also IMGPIPE_STATE.",
        completion: .file(extensions: ["sqlite"]))
    var state: String?

    @Flag(help: "Remove every cached entry.")
    var clear = false

    func run() throws {
        var directory = CacheSpec.defaultDirectory()
        var bound: Int? = CacheSpec.defaultMaxSize
        if let pipeline {
            var spec = try PipelineOptions.loadSpec(pipeline)
            spec.stateFolder = StateFiles.folder(explicit: StateFiles.explicit(state), pipeline: pipeline)
            guard let cache = spec.source.remote?.cache else {
                return Console.out("\(pipeline): its source keeps no cache")
            }
            do {
                directory = try cache.directory(in: spec, environment: Environment())
            } catch {
                throw CommandError.usage("\(pipeline): \(error)")
            }
            bound = cache.maxSize
        }
        guard FileManager.default.fileExists(atPath: directory) else {
            return Console.out("no cache at \(Console.display(directory))")
        }
        let cache: DiskCache
        do {
            cache = try DiskCache(directory: directory, maxSize: bound)
        } catch {
            throw CommandError.failure("cannot open the cache at \(Console.display(directory)): \(error)")
        }
        let (entries, bytes) = cache.contents()
        if clear {
            do { try cache.clear() } catch {
                throw CommandError.failure("cannot clear \(Console.display(directory)): \(error)")
            }
            return Console.out("cleared \(Console.display(directory)): \(entries) entries, \(Self.megabytes(bytes)) freed")
        }
        Console.out(
            "cache \(Console.display(directory)): \(entries) entries, \(Self.megabytes(bytes))"
                + (bound.map { " of at most \(Self.megabytes($0))" } ?? ""))
    }

    static func megabytes(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1_048_576) }
}
