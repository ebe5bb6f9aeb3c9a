import Foundation
import VipsKit

/// One sample's result in a dry-run.
public struct DryRunRow: Sendable, Codable {
    public let key: String
    public let inputWidth: Int?
    public let inputHeight: Int?
    public let inputBytes: Int
    public let outputWidth: Int?
    public let outputHeight: Int?
    public let outputBytes: Int?
    /// The preview written, relative to the output folder.
    public let output: String?
    public let milliseconds: Double
    /// `reason: message` when the sample failed.
    public let failure: String?
}

/// The filter chain alone, on local samples: previews into a folder, no network, no
/// sinks, no state file.
public struct DryRun: Sendable {
    public let spec: PipelineSpec
    public let samples: String
    public let outputDirectory: String
    public let limit: Int?

    public init(spec: PipelineSpec, samples: String, outputDirectory: String, limit: Int?) {
        self.spec = spec
        self.samples = samples
        self.outputDirectory = outputDirectory
        self.limit = limit
    }

    /// The samples folder a dry-run uses when none is given: the pipeline's own directory
    /// source when it has one and it exists, else `samples/` in the current directory.
    public static func defaultSamples(for spec: PipelineSpec, environment: Environment) -> String {
        if case let .directory(path, _) = spec.source, let expanded = try? path.expanded(in: environment) {
            let resolved = spec.resolvePath(expanded)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), isDirectory.boolValue {
                return resolved
            }
        }
        return URL(fileURLWithPath: "samples").standardizedFileURL.path
    }

    /// Processes each sample in order, one at a time (so times are comparable), calling
    /// `onRow` as each finishes.
    public func execute(onRow: (DryRunRow) -> Void = { _ in }) throws -> [DryRunRow] {
        try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        let processor = ImageProcessor(filters: spec.filters.map(\.step), output: spec.output, limits: spec.limits,
                                       baseDirectory: spec.baseDirectory)
        var rows: [DryRunRow] = []
        var index = 0
        let feed = DirectoryFeed(root: samples, recursive: true)
        try feed.list { item in
            if let limit, index >= limit { return false }
            index += 1
            let row = preview(item, index: index, processor: processor)
            rows.append(row)
            onRow(row)
            return true
        }
        VipsRuntime.endThreadWork()
        return rows
    }

    private func preview(_ item: FeedItem, index: Int, processor: ImageProcessor) -> DryRunRow {
        let inputBytes = (try? FileManager.default.attributesOfItem(atPath: item.location)[.size] as? Int) ?? 0
        let start = DispatchTime.now()
        let result = Result { () throws(ItemFailure) -> ProcessedImage in try processor.process(.file(item.location)) }
        let milliseconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000
        switch result {
        case let .success(image):
            let name = spec.output.name.render(key: item.key, index: index, format: spec.output.format,
                                               hash: String(image.sha256.prefix(16)))
            let url = URL(fileURLWithPath: outputDirectory).appendingPathComponent(name)
            do {
                try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
                try image.data.write(to: url, options: .atomic)
            } catch {
                return DryRunRow(key: item.key, inputWidth: image.inputWidth, inputHeight: image.inputHeight,
                                 inputBytes: inputBytes, outputWidth: nil, outputHeight: nil, outputBytes: nil,
                                 output: nil, milliseconds: milliseconds, failure: "encode: cannot write preview: \(error)")
            }
            return DryRunRow(key: item.key, inputWidth: image.inputWidth, inputHeight: image.inputHeight,
                             inputBytes: inputBytes, outputWidth: image.width, outputHeight: image.height,
                             outputBytes: image.data.count, output: name, milliseconds: milliseconds, failure: nil)
        case let .failure(failure):
            return DryRunRow(key: item.key, inputWidth: nil, inputHeight: nil, inputBytes: inputBytes,
                             outputWidth: nil, outputHeight: nil, outputBytes: nil, output: nil,
                             milliseconds: milliseconds, failure: failure.description)
        }
    }
}
