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
    /// Milliseconds per step (a fused thumbnail counts as one step; `encode` last).
    public var steps: [StepTiming] = []
    /// The "before" picture written for the contact sheet, relative to the output folder.
    public var before: String?
    /// A picture of the output browsers can show (the output itself unless it is TIFF).
    public var display: String?
}

/// How long one step of a dry-run took.
public struct StepTiming: Sendable, Codable {
    public let op: String
    public let milliseconds: Double
}

/// The filter chain alone, on local samples: previews into a folder, no network, no
/// sinks, no state file.
public struct DryRun: Sendable {
    public let spec: PipelineSpec
    public let samples: String
    public let outputDirectory: String
    public let limit: Int?
    /// Where `${NAME}` in filter strings (captions, text) is read from.
    public let environment: Environment

    public init(spec: PipelineSpec, samples: String, outputDirectory: String, limit: Int?,
                environment: Environment = Environment([:])) {
        self.spec = spec
        self.samples = samples
        self.outputDirectory = outputDirectory
        self.limit = limit
        self.environment = environment
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
    /// `onRow` as each finishes, then writes `index.html`: a contact sheet that opens from
    /// disk, each sample before and after with sizes, bytes and time per step.
    public func execute(onRow: (DryRunRow) -> Void = { _ in }) throws -> [DryRunRow] {
        try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        let processor = ImageProcessor(filters: try spec.expandedFilters(in: environment), output: spec.output, limits: spec.limits,
                                       baseDirectory: spec.baseDirectory)
        var rows: [DryRunRow] = []
        var index = 0
        let feed = DirectoryFeed(root: samples, recursive: true)
        try feed.list { item in
            if let limit, index >= limit { return false }
            index += 1
            var row = preview(item, index: index, processor: processor)
            row.before = beforePicture(item)
            if let output = row.output { row.display = displayPicture(output) }
            rows.append(row)
            onRow(row)
            return true
        }
        VipsRuntime.endThreadWork()
        let html = ContactSheet(title: spec.name, filters: spec.filters.map(\.op), rows: rows).html
        try Data(html.utf8).write(to: URL(fileURLWithPath: outputDirectory).appendingPathComponent("index.html"),
                                  options: .atomic)
        return rows
    }

    /// The input, made viewable in a browser (8-bit sRGB PNG or JPEG, at most 1024 px).
    private func beforePicture(_ item: FeedItem) -> String? {
        var output = OutputSpec()
        let hasAlpha = (try? VipsImage.open(path: item.location).hasAlpha) ?? false
        output.format = hasAlpha ? .png : .jpeg
        output.quality = 90
        let processor = ImageProcessor(filters: [.autorotate, .fit(width: 1024, height: 1024, enlarge: false)], output: output,
                                       limits: spec.limits)
        guard let image = try? processor.process(.file(item.location)) else { return nil }
        let name = "before/" + SafePath.relative(item.key) + "." + output.format.fileExtension
        return write(image.data, to: name) ? name : nil
    }

    /// The output itself, or a PNG copy for formats browsers cannot show (TIFF).
    private func displayPicture(_ output: String) -> String {
        guard spec.output.format == .tiff else { return output }
        var png = OutputSpec()
        png.format = .png
        let processor = ImageProcessor(filters: [], output: png, limits: spec.limits)
        let path = URL(fileURLWithPath: outputDirectory).appendingPathComponent(output).path
        guard let image = try? processor.process(.file(path)) else { return output }
        let name = "display/" + output + ".png"
        return write(image.data, to: name) ? name : output
    }

    private func write(_ data: Data, to relative: String) -> Bool {
        let url = URL(fileURLWithPath: outputDirectory).appendingPathComponent(relative)
        do {
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: url, options: .atomic)
            return true
        } catch {
            return false
        }
    }

    private func preview(_ item: FeedItem, index: Int, processor: ImageProcessor) -> DryRunRow {
        let inputBytes = (try? FileManager.default.attributesOfItem(atPath: item.location)[.size] as? Int) ?? 0
        let start = DispatchTime.now()
        var steps: [StepTiming] = []
        let result = Result { () throws(ItemFailure) -> ProcessedImage in
            try processor.process(.file(item.location)) { op, ms in steps.append(StepTiming(op: op, milliseconds: ms)) }
        }
        let milliseconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000
        switch result {
        case let .success(image):
            let name = spec.output.name.render(key: item.nameKey, stem: item.nameStem, index: index, format: spec.output.format,
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
                             outputBytes: image.data.count, output: name, milliseconds: milliseconds, failure: nil,
                             steps: steps)
        case let .failure(failure):
            return DryRunRow(key: item.key, inputWidth: nil, inputHeight: nil, inputBytes: inputBytes,
                             outputWidth: nil, outputHeight: nil, outputBytes: nil, output: nil,
                             milliseconds: milliseconds, failure: failure.description)
        }
    }
}
