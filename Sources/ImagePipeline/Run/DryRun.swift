import Foundation
import Logging
import PipelineKit
import VipsKit

/// One sample's result in a dry-run, for one pipeline.
public struct DryRunRow: Sendable, Codable {
    public let key: String
    /// The output this row shows (`default` for a pipeline with one).
    public var outputID = OutputSpec.defaultID
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
    /// The input's size turned upright (as the before picture shows it).
    public var uprightWidth: Int?
    public var uprightHeight: Int?
    /// The full-size input, relative to the output folder (a link from the contact sheet).
    public var source: String?
    /// The centre of the input at its natural pixel size (at most 256×256), relative to
    /// the output folder; or, when `cropIsWhole`, the whole input fitted in 256×256.
    public var crop: String?
    /// True when an output of the sample is not the whole input (a `fill`, `crop` or
    /// `pad` changed its shape): the centres of input and output are then other parts of
    /// the picture, so the input's crop shows all of it instead of its centre.
    public var cropIsWhole: Bool?
    /// SSIM of the output against the source resampled to the output's size; nil when the
    /// geometry differs (see `SourceSimilarity`) or the sample failed.
    public var ssim: Double?

    /// A sample that never reached the filter chain (its download failed).
    init(key: String, failure: String) {
        self.init(
            key: key, inputWidth: nil, inputHeight: nil, inputBytes: 0, outputWidth: nil, outputHeight: nil,
            outputBytes: nil, output: nil, milliseconds: 0, failure: failure)
    }

    init(
        key: String, inputWidth: Int?, inputHeight: Int?, inputBytes: Int, outputWidth: Int?, outputHeight: Int?,
        outputBytes: Int?, output: String?, milliseconds: Double, failure: String?, steps: [StepTiming] = []
    ) {
        self.key = key
        self.inputWidth = inputWidth
        self.inputHeight = inputHeight
        self.inputBytes = inputBytes
        self.outputWidth = outputWidth
        self.outputHeight = outputHeight
        self.outputBytes = outputBytes
        self.output = output
        self.milliseconds = milliseconds
        self.failure = failure
        self.steps = steps
    }
}

/// How long one step of a dry-run took.
public struct StepTiming: Sendable, Codable {
    public let op: String
    public let milliseconds: Double
}

/// The filter chain alone, on samples: previews into a folder, no sinks, no state file.
/// The network is used only to preview a remote feed's own items (`DryRunSamples.feed`).
///
/// With `other`, two pipelines (or two settings of one) run on the same samples: their
/// outputs go to `a/` and `b/` of the output folder and the contact sheet shows them side
/// by side, each with its bytes and SSIM against the source.
public struct DryRun: Sendable {
    public let spec: PipelineSpec
    /// The second pipeline of a comparison (`dry-run A.json B.json`), or nil.
    public let other: PipelineSpec?
    public let samples: DryRunSamples
    public let outputDirectory: String
    /// How many samples to take, spread across the source (`SampleSpread`); nil for all.
    public let limit: Int?
    /// Where `${NAME}` in filter strings (captions, text) and remote sources is read from.
    public let environment: Environment
    let logger: Logger
    /// Receives what a feed has to say while listing (falling back, for instance).
    let notice: @Sendable (String) -> Void

    public init(
        spec: PipelineSpec, other: PipelineSpec? = nil, samples: DryRunSamples, outputDirectory: String,
        limit: Int?, environment: Environment = Environment([:]), logger: Logger = Logger(label: "imgpipe"),
        notice: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.spec = spec
        self.other = other
        self.samples = samples
        self.outputDirectory = outputDirectory
        self.limit = limit
        self.environment = environment
        self.logger = logger
        self.notice = notice
    }

    /// The samples folder a dry-run uses when none is given: the pipeline's own directory
    /// source when it has one and it exists, else `samples/` in the current directory.
    public static func defaultSamples(for spec: PipelineSpec, environment: Environment) -> String {
        if let path = spec.source.parameters.localFolder?.path, let expanded = try? path.expanded(in: environment) {
            let resolved = spec.resolvePath(expanded)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), isDirectory.boolValue {
                return resolved
            }
        }
        return URL(fileURLWithPath: "samples").standardizedFileURL.path
    }

    /// The contact sheet's path.
    public var indexPath: String { URL(fileURLWithPath: outputDirectory).appendingPathComponent("index.html").path }

    /// Processes each sample in order, one at a time (so times are comparable), by each
    /// pipeline, calling `onSelected` once the sample is chosen (not with `limit` nil) and
    /// `onSample` with its rows (one per pipeline) as each finishes, then writes
    /// `index.html` (`ContactSheet`). Returns every sample's rows in listing order.
    public func execute(
        onSelected: (DryRunSelection) -> Void = { _ in }, onSample: ([DryRunRow]) -> Void = { _ in }
    ) throws -> [[DryRunRow]] {
        let pipelines = [spec] + (other.map { [$0] } ?? [])
        let folders = other == nil ? [""] : ["a/", "b/"]
        // The run's own processor, with the checks `run` makes of its filters (variables,
        // watermarks, output sizes) before any sample, naming which pipeline is at fault.
        let processors = try pipelines.enumerated().map { index, spec in
            do {
                return try BuiltPipeline.processor(for: spec, environment: environment)
            } catch {
                throw DryRunError(pipeline: index, fault: error)
            }
        }
        try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        var results: [[DryRunRow]] = []
        // Each pipeline's preview names, as a run claims output names: a later sample whose
        // name is taken fails as its item would, instead of writing over the first's preview.
        var claimed = pipelines.map { _ in [String: String]() }
        var index = 0
        try samples.list(
            spec: spec, environment: environment, count: limit, downloads: outputDirectory + "/source",
            previews: outputDirectory, logger: logger, notice: notice, selected: onSelected
        ) { sample in
            index += 1
            guard let path = sample.path else {
                let rows = pipelines.map { _ in DryRunRow(key: sample.item.key, failure: sample.failure ?? "download: failed") }
                results.append(rows)
                onSample(rows)
                return true
            }
            var source = SourcePictures(self, sample: sample, path: path)
            var rows: [DryRunRow] = []
            for (number, pipeline) in pipelines.enumerated() {
                let made = preview(
                    sample.item, path: path, index: index, spec: pipeline, processor: processors[number],
                    folder: folders[number], claimed: &claimed[number])
                for (outputIndex, var row) in made.enumerated() {
                    if let output = row.output {
                        let settings = processors[number].settings
                        let plan = settings.outputs[outputIndex]
                        row.display = displayPicture(output, format: plan.spec.format)
                        row.ssim = SourceSimilarity.score(
                            output: url(output).path, source: path,
                            autorotate: (settings.filters + plan.filters).contains(.autorotate))
                    }
                    rows.append(row)
                }
            }
            source.makeCrop(self, sample: sample, path: path, rows: rows)
            for index in rows.indices { source.describe(&rows[index]) }
            results.append(rows)
            onSample(rows)
            return true
        }
        VipsRuntime.endThreadWork()
        let sheet = ContactSheet(
            titles: pipelines.map(\.name), labels: columnLabels, owners: columnOwners,
            chains: pipelines.flatMap { spec in spec.outputs.map { (spec.filters + $0.filters).map(\.op) } },
            samples: results)
        try Data(sheet.html.utf8).write(to: URL(fileURLWithPath: indexPath), options: .atomic)
        return results
    }

    /// The name of each column of results (a sample's rows): `after` for one pipeline with
    /// one output; the output ids for one pipeline with several; `A` and `B` for two
    /// pipelines with one output each, else `A w320`, `B w320`, ….
    public var columnLabels: [String] {
        let pipelines = [spec] + (other.map { [$0] } ?? [])
        if pipelines.count == 1 { return spec.outputs.count == 1 ? ["after"] : spec.outputs.map(\.id) }
        return zip(["A", "B"], pipelines).flatMap { letter, pipeline in
            pipeline.outputs.count == 1 ? [letter] : pipeline.outputs.map { "\(letter) \($0.id)" }
        }
    }

    /// The pipeline of each column of results: 0 for the first, 1 for the one compared.
    public var columnOwners: [Int] {
        ([spec] + (other.map { [$0] } ?? [])).enumerated().flatMap { index, spec in spec.outputs.map { _ in index } }
    }

    /// What the contact sheet shows of one sample's input, shared by every pipeline's row:
    /// its upright size, a viewable before picture, its 100 % crop and a link to the file.
    private struct SourcePictures {
        var before: String?
        var crop: String?
        var cropIsWhole = false
        var link: String
        var upright: (width: Int, height: Int)?

        init(_ dryRun: DryRun, sample: DryRunSamples.Sample, path: String) {
            link = dryRun.relativeLink(to: path)
            let header = try? VipsImage.open(path: path)
            if let header { upright = header.uprightSize }
            let format: OutputFormat = header?.hasAlpha == true ? .png : .jpeg
            before = dryRun.picture(
                of: path, filters: [.autorotate, .fit(width: 1024, height: 1024, enlarge: false)],
                format: format, name: "before/" + sample.fileKey + "." + format.fileExtension)
        }

        /// The 100 % crop: the centre of the input, unless an output shows another part of
        /// it (its shape is not the input's), when the crop is the whole input, small.
        mutating func makeCrop(_ dryRun: DryRun, sample: DryRunSamples.Sample, path: String, rows: [DryRunRow]) {
            guard let upright else { return }
            cropIsWhole = rows.contains { row in
                guard let width = row.outputWidth, let height = row.outputHeight else { return false }
                return !SourceSimilarity.sameAspect(source: upright, output: (width, height))
            }
            let width = min(upright.width, 256)
            let height = min(upright.height, 256)
            let region: FilterStep =
                cropIsWhole
                ? .fit(width: 256, height: 256, enlarge: false)
                : .cropRect(x: (upright.width - width) / 2, y: (upright.height - height) / 2, width: width, height: height)
            crop = dryRun.picture(
                of: path, filters: [.autorotate, region], format: .png, name: "crop/" + sample.fileKey + ".png")
        }

        func describe(_ row: inout DryRunRow) {
            row.before = before
            row.crop = crop
            row.cropIsWhole = cropIsWhole ? true : nil
            row.source = link
            row.uprightWidth = upright?.width
            row.uprightHeight = upright?.height
        }
    }

    /// `filters` applied to the file at `path`, written as `name` in the output folder;
    /// nil when it cannot be made.
    private func picture(of path: String, filters: [FilterStep], format: OutputFormat, name: String) -> String? {
        var output = OutputSpec()
        output.format = format
        output.quality = 90
        let processor = ImageProcessor(filters: filters, output: output, limits: spec.limits)
        guard let image = try? processor.process(.file(path)), (try? write(image.data, to: name)) != nil else { return nil }
        return name
    }

    /// The output itself, or a PNG copy for formats browsers cannot show (TIFF).
    private func displayPicture(_ output: String, format: OutputFormat) -> String {
        guard format == .tiff else { return output }
        return picture(of: url(output).path, filters: [], format: .png, name: "display/" + output + ".png") ?? output
    }

    /// `path` relative to the output folder, percent-encoding left to the sheet.
    private func relativeLink(to path: String) -> String {
        let target = URL(fileURLWithPath: path).standardizedFileURL.pathComponents
        let base = URL(fileURLWithPath: outputDirectory).standardizedFileURL.pathComponents
        let common = zip(target, base).prefix { $0 == $1 }.count
        return (Array(repeating: "..", count: base.count - common) + target[common...]).joined(separator: "/")
    }

    private func url(_ relative: String) -> URL {
        URL(fileURLWithPath: outputDirectory).appendingPathComponent(relative)
    }

    private func write(_ data: Data, to relative: String) throws {
        let url = url(relative)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: url, options: .atomic)
    }

    /// One row per output of `spec`. The input is processed once for every output (as a
    /// run does); each row has the whole time and the steps up to its own encoding.
    private func preview(
        _ item: FeedItem, path: String, index: Int, spec: PipelineSpec, processor: ImageProcessor,
        folder: String, claimed: inout [String: String]
    ) -> [DryRunRow] {
        let inputBytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        let start = DispatchTime.now()
        var steps: [StepTiming] = []
        let result = Result { () throws(ItemFailure) -> [ProcessedImage] in
            try processor.processOutputs(
                .file(path),
                fields: ItemFields(
                    key: item.key, stem: item.nameStem,
                    metadata: item.metadata)
            ) { op, ms in
                steps.append(StepTiming(op: op, milliseconds: ms))
            }
        }
        let milliseconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000
        let images: [ProcessedImage]
        switch result {
        case .success(let made):
            images = made
            for note in made.first?.notes ?? [] { notice("item \"\(item.key.printable)\": \(note)") }
        case .failure(let failure):
            return spec.outputs.map { output in
                var row = DryRunRow(
                    key: item.key, inputWidth: nil, inputHeight: nil, inputBytes: inputBytes,
                    outputWidth: nil, outputHeight: nil, outputBytes: nil, output: nil,
                    milliseconds: milliseconds, failure: failure.description)
                row.outputID = output.id
                return row
            }
        }
        return zip(spec.outputs, images).map { output, image in
            var fileName = output.fileName(key: item.nameKey, stem: item.nameStem, index: index, made: image)
            var name = folder + fileName
            var row: DryRunRow
            if claimed[name].map({ $0 != item.key }) == true, !output.name.dependsOnOutput {
                // As a run does: the name made from the item's unique stem.
                let unique = output.fileName(
                    key: item.nameKey, stem: NameTemplate.uniqueStem(item.nameStem, key: item.key), index: index, made: image)
                if claimed[folder + unique] == nil {
                    fileName = unique
                    name = folder + unique
                }
            }
            if let owner = claimed[name], owner != item.key {
                row = DryRunRow(
                    key: item.key, inputWidth: image.inputWidth, inputHeight: image.inputHeight,
                    inputBytes: inputBytes, outputWidth: nil, outputHeight: nil, outputBytes: nil, output: nil,
                    milliseconds: milliseconds, failure: RunStore.nameTaken(fileName, by: owner).description)
                row.outputID = output.id
                return row
            }
            claimed[name] = item.key
            do {
                try write(image.data, to: name)
                row = DryRunRow(
                    key: item.key, inputWidth: image.inputWidth, inputHeight: image.inputHeight,
                    inputBytes: inputBytes, outputWidth: image.width, outputHeight: image.height,
                    outputBytes: image.data.count, output: name, milliseconds: milliseconds, failure: nil,
                    steps: Self.steps(steps, upTo: output.id, of: spec.outputs.count))
            } catch {
                row = DryRunRow(
                    key: item.key, inputWidth: image.inputWidth, inputHeight: image.inputHeight,
                    inputBytes: inputBytes, outputWidth: nil, outputHeight: nil, outputBytes: nil,
                    output: nil, milliseconds: milliseconds, failure: "encode: cannot write preview: \(error)")
            }
            row.outputID = output.id
            return row
        }
    }

    /// The steps that made one output: everything when there is one; with several, the
    /// shared steps and that output's own (named `<id>: <op>` by the processor), unprefixed.
    static func steps(_ all: [StepTiming], upTo output: String, of count: Int) -> [StepTiming] {
        guard count > 1 else { return all }
        return all.compactMap { step in
            guard let colon = step.op.range(of: ": ") else { return step }
            guard step.op[..<colon.lowerBound] == output else { return nil }
            return StepTiming(op: String(step.op[colon.upperBound...]), milliseconds: step.milliseconds)
        }
    }
}

/// A fault of one of a dry-run's pipelines (0: the first, 1: the one compared with it)
/// found before any sample.
public struct DryRunError: Error {
    public let pipeline: Int
    public let fault: any Error
}
