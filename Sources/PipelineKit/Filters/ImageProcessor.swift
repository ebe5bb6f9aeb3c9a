import Foundation
import Synchronization
import VipsKit

/// What a pipeline item is read from.
public enum ImageInput: Sendable {
    case file(String)
    case data(Data)
}

/// An encoded output and what it took to make it.
public struct ProcessedImage: Sendable {
    /// The output's id (`OutputSpec.id`).
    public var output = OutputSpec.defaultID
    public let data: Data
    public let width: Int
    public let height: Int
    public let inputWidth: Int
    public let inputHeight: Int
    public let inputFormat: ImageFormat
    /// Lower-case hex SHA-256 of `data`.
    public let sha256: String
    /// The input as read: its size and the SHA-256 of its bytes (what a run records of its source).
    public let inputBytes: Int
    public let inputSHA256: String
    /// The quality a search chose (`OutputSpec.searchesQuality`); nil for a fixed one.
    public let choice: QualityChoice?
    /// The format `"best"` chose; nil: the output's own.
    public let format: OutputFormat?
    /// What making the item had to say, such as a focus point it could not use (on the
    /// item's first output only).
    public var notes: [String] = []
    /// What the output looks like (`ImageFingerprint`), on the item's first output only;
    /// nil when it could not be read back.
    public var fingerprint: ImageFingerprint?

    package init(
        output: String = OutputSpec.defaultID, data: Data, width: Int, height: Int, inputWidth: Int, inputHeight: Int,
        inputFormat: ImageFormat, sha256: String, inputBytes: Int, inputSHA256: String, choice: QualityChoice? = nil,
        format: OutputFormat? = nil
    ) {
        self.choice = choice
        self.format = format
        self.output = output
        self.data = data
        self.width = width
        self.height = height
        self.inputWidth = inputWidth
        self.inputHeight = inputHeight
        self.inputFormat = inputFormat
        self.sha256 = sha256
        self.inputBytes = inputBytes
        self.inputSHA256 = inputSHA256
    }
}

/// What `ImageProcessor.processOrSkip` came to: an output, or a skip (an input outside the
/// pipeline's `accept` rules), which is not a failure.
public enum ProcessOutcome: Sendable {
    /// Every output of the item, in the pipeline's order.
    case processed([ProcessedImage])
    case skipped(ItemSkip)
}

/// One output as the processor makes it: its spec and its own filter steps, which run
/// after the common ones.
public struct OutputPlan: Sendable, Equatable, Codable {
    public let spec: OutputSpec
    public let filters: [FilterStep]
    /// Where the output is written in the pipeline file (`output`, `outputs[1]`), which a
    /// failure of one of its own filters names; nil: `output` when it is the only one,
    /// else `outputs[i]`.
    public let path: String?

    /// The spec's own filters as the file wrote them are left out of `spec`: the plan holds
    /// them expanded and checked, as `filters`, and a helper process is sent only those.
    public init(_ spec: OutputSpec, filters: [FilterStep] = [], path: String? = nil) {
        var spec = spec
        spec.filters = []
        self.spec = spec
        self.filters = filters
        self.path = path
    }
}

/// What an `ImageProcessor` is made of, resolved: the common filter steps and each
/// output's with their `${…}` expanded and their watermarks checked, the limits, the
/// folder watermark paths are relative to, and the `accept` rules. Codable, so that another
/// process can make the same processor from it: nothing is decoded, expanded or checked
/// twice.
public struct ProcessorSettings: Sendable, Equatable, Codable {
    public let filters: [FilterStep]
    public let outputs: [OutputPlan]
    public let limits: Limits
    public let baseDirectory: String
    public let accept: AcceptRules
    /// The member of an item's metadata `{caption}` in a text reads (the source's
    /// `captionField`; nil: `{caption}` is empty).
    public var captionField: String?

    public init(
        filters: [FilterStep], outputs: [OutputPlan], limits: Limits, baseDirectory: String, accept: AcceptRules,
        captionField: String? = nil
    ) {
        self.filters = filters
        self.outputs = outputs
        self.limits = limits
        self.baseDirectory = baseDirectory
        self.accept = accept
        self.captionField = captionField
    }
}

/// Runs a filter chain on one image and encodes the result: limits checked from the
/// header before any decoding, format by magic bytes, everything else by libvips.
///
/// Thread-safe: one processor serves every worker. Each call must run on a thread that
/// calls `VipsRuntime.endThreadWork()` when its job ends.
///
/// Several outputs: the input is decoded once and the common chain runs once; its result
/// is kept in memory and each output's own steps run on it. When there are no common
/// steps and every output starts with `fit` or `fill` (after the same `autorotate`, or
/// none), the input is shrunk while loading to the largest size any output needs, and each
/// output's resize is made from that or from a larger output (`SharedLoad`), or, for a
/// JPEG whose output is exactly 1/2, 1/4 or 1/8 of it, by decoding it again at that scale.
/// Each output but the last is encoded on `encoders` (when a thread of it is free) while
/// the worker goes on to make the next one; outputs that come out the same (the same
/// picture, no steps of their own, the same encoding: two widths above a small input's
/// own) are encoded once.
public struct ImageProcessor: Sendable {
    /// What it was made from: a pixel helper makes the same processor from it.
    public let settings: ProcessorSettings
    let plan: ChainPlan
    /// Every output, in the pipeline's order.
    public let outputs: [OutputPlan]
    /// Each output's steps as they run after the common chain (after a shared load: after
    /// the output's own resize).
    let outputSteps: [[FilterStep]]
    /// Where each of `plan.steps` is written in the pipeline file (`filters[1]`,
    /// `outputs[0].filters[2]`), for the failures of its step.
    let planPaths: [String]
    /// The same for each of `outputSteps`.
    let outputStepPaths: [[String]]
    /// The shrink-on-load shared by every output, when the chain allows it.
    let sharedLoad: SharedLoad?
    /// Whether each output keeps an animated input animated (`OutputSpec.animates`).
    let animates: [Bool]
    public let limits: Limits
    /// Checked by `processOrSkip` before any pixel is decoded.
    public let accept: AcceptRules
    let context: FilterContext

    /// Encodes an item's outputs but its last, while the item's worker makes the next one,
    /// when one of its threads is free (else the worker encodes the output itself): as
    /// many threads as cores, started at the first item with several outputs and kept for
    /// the process (libvips' per-thread state freed after each encode). Within one
    /// item the outputs are independent once made; encoding one alongside the next keeps
    /// both cores busy where a worker alone would leave gaps (libvips hands each picture
    /// to its own thread and back). `bench/outputs.sh` measured it in RESULTS.md.
    static let encoders = BoundedExecutor(label: "imgpipe.encode", width: ProcessInfo.processInfo.activeProcessorCount) {
        VipsRuntime.endThreadWork()
    }

    /// `baseDirectory` is the pipeline file's folder (watermark paths are relative to it).
    public init(
        filters: [FilterStep], output: OutputSpec, limits: Limits, baseDirectory: String = "/",
        accept: AcceptRules = AcceptRules()
    ) {
        self.init(
            filters: filters, outputs: [OutputPlan(output)], limits: limits, baseDirectory: baseDirectory,
            accept: accept)
    }

    public init(
        filters: [FilterStep], outputs: [OutputPlan], limits: Limits, baseDirectory: String = "/",
        accept: AcceptRules = AcceptRules()
    ) {
        self.init(
            ProcessorSettings(filters: filters, outputs: outputs, limits: limits, baseDirectory: baseDirectory, accept: accept))
    }

    public init(_ settings: ProcessorSettings) {
        let (filters, outputs, baseDirectory) = (settings.filters, settings.outputs, settings.baseDirectory)
        self.settings = settings
        precondition(!outputs.isEmpty, "a pipeline has at least one output")
        if outputs.count == 1 {
            // One output: its steps simply follow the common ones (one chain, fused as usual).
            plan = ChainPlan(filters + outputs[0].filters)
            outputSteps = [[]]
            sharedLoad = nil
        } else if filters.isEmpty, let shared = SharedLoad(outputs.map { ChainPlan($0.filters) }) {
            plan = ChainPlan([])
            outputSteps = shared.steps
            sharedLoad = shared
        } else {
            plan = ChainPlan(filters)
            outputSteps = outputs.map(\.filters)
            sharedLoad = nil
        }
        // A plan's steps are what is left of its filters once a leading resize is fused into
        // the load: the last ones, whose paths are the last of the filters' paths.
        let common = filters.indices.map { "filters[\($0)]" }
        let own = outputs.enumerated().map { index, output in
            let path = output.path ?? (outputs.count == 1 ? "output" : "outputs[\(index)]")
            return output.filters.indices.map { "\(path).filters[\($0)]" }
        }
        planPaths = Array((outputs.count == 1 ? common + own[0] : common).suffix(plan.steps.count))
        outputStepPaths =
            outputs.count == 1 ? [[]] : zip(outputSteps, own).map { steps, paths in Array(paths.suffix(steps.count)) }
        self.outputs = outputs
        limits = settings.limits
        accept = settings.accept
        context = FilterContext(baseDirectory: baseDirectory)
        animates = outputs.indices.map { index in
            outputs[index].spec.animates(steps: Self.writtenSteps(of: index, filters: filters, outputs: outputs))
        }
    }

    /// `process`, with the `accept` rules checked first: from the bytes (size, format by
    /// magic bytes) before libvips sees them, then from the header (the size of the picture
    /// as shown) before any pixel is decoded. An input outside them is `.skipped`.
    public func processOrSkip(
        _ input: ImageInput, fields: ItemFields? = nil,
        timing: ((String, Double) -> Void)? = nil
    ) throws(ItemFailure) -> ProcessOutcome {
        try run(input, fields: fields, timing: timing, screening: true)
    }

    /// Processes one input; every failure is an `ItemFailure` with its reason. `fields`
    /// fill `{key}`, `{stem}` and `{meta.…}` in caption and text filters.
    ///
    /// With `timing`, each step's pixels are computed as soon as it is applied, and the
    /// step's label (`autorotate+fit` for a fused thumbnail, `encode` last) and its
    /// milliseconds are reported: slower and heavier, for dry-runs only.
    public func process(
        _ input: ImageInput, fields: ItemFields? = nil,
        timing: ((String, Double) -> Void)? = nil
    ) throws(ItemFailure) -> ProcessedImage {
        try processOutputs(input, fields: fields, timing: timing)[0]
    }

    /// `process` for every output, in the pipeline's order.
    public func processOutputs(
        _ input: ImageInput, fields: ItemFields? = nil,
        timing: ((String, Double) -> Void)? = nil
    ) throws(ItemFailure) -> [ProcessedImage] {
        switch try run(input, fields: fields, timing: timing, screening: false) {
        case .processed(let images): return images
        // Not screened, so never skipped; kept an error rather than a trap all the same.
        case .skipped(let skip): throw ItemFailure(.process, "unexpected skip: \(skip)")
        }
    }

    private func run(
        _ input: ImageInput, fields: ItemFields?, timing: ((String, Double) -> Void)?,
        screening: Bool
    ) throws(ItemFailure) -> ProcessOutcome {
        var context = self.context
        context.fields = fields
        context.fields?.captionField = settings.captionField
        let notes = ItemNotes()
        context.notes = notes
        // Files are read into memory (within limits.maxBytes) and decoded from there: libvips
        // then picks its loader from the bytes in memory instead of opening the file once
        // per loader it tries.
        let data = try bytes(of: input)
        let format = try checkBytes(data)
        if screening, let skip = accept.screen(bytes: data.count, format: format) { return .skipped(skip) }
        let header: VipsImage
        do {
            try VipsRuntime.setUp()
            header = try VipsImage.open(data: data, failOn: format.failOn)
        } catch {
            throw ItemFailure(.decode, "cannot read \(format.rawValue) header: \(Self.text(error))")
        }
        let pixels = header.width * header.height
        if pixels > limits.maxPixels {
            throw ItemFailure(
                .limit,
                "image is \(header.width)×\(header.height) (\(Self.megapixels(pixels))), over limits.maxPixels (\(Self.megapixels(limits.maxPixels)))"
            )
        }
        if screening, let skip = accept.screen(shown: header.uprightSize) {
            return .skipped(skip)
        }

        // An animation turned by its EXIF orientation (rare) is made from its first frame.
        if animates.contains(true), format == .gif || format == .webp, header.pageCount > 1, header.orientation == 1 {
            return try runFrames(
                data: data, header: header, format: format, pages: header.pageCount, context: context, timing: timing)
        }
        var image: VipsImage
        var colourManaged = false
        var clock = DispatchTime.now()
        func lap(_ label: String, _ made: VipsImage) throws -> VipsImage {
            guard let timing else { return made }
            let computed = try made.materialized()
            let now = DispatchTime.now()
            timing(label, Double(now.uptimeNanoseconds - clock.uptimeNanoseconds) / 1_000_000)
            clock = now
            return computed
        }
        // The input's size as the chain sees it (upright when it autorotates).
        let inputSize = sharedLoad?.autorotate == true ? header.uprightSize : (header.width, header.height)
        // Each output's size, as it would have it alone (after a shared load).
        let targets = sharedLoad?.targets(from: inputSize, format: format) ?? []
        let load = sharedLoad.map { $0.thumbnail(for: inputSize, targets: targets) } ?? plan.thumbnail
        if let thumbnail = load {
            do {
                (image, colourManaged) = try runThumbnail(
                    thumbnail, data: data, header: header, format: format, context: context)
                image = try lap(sharedLoad == nil ? plan.thumbnailLabel : "load", image)
            } catch {
                throw ItemFailure(.decode, "cannot decode \(format.rawValue): \(Self.text(error))")
            }
        } else {
            image = header
        }
        do {
            for (index, step) in plan.steps.enumerated() {
                let path = Self.path(of: index, in: planPaths)
                image = try lap(step.opName, try checkedSize(applying(step, at: path, to: image, context: context), after: step))
            }
            // Several outputs read the common result: computed once, kept in memory.
            if outputs.count > 1 { image = try image.materialized() }
        } catch let failure as ItemFailure {
            throw failure
        } catch {
            if let damage = inputDamage(StepFailure.cause(of: error), data: data, format: format) {
                throw ItemFailure(.decode, "cannot decode \(format.rawValue): \(damage)")
            }
            throw ItemFailure(.process, Self.text(error))
        }
        let inputSHA256 = sha256Hex(data)
        // The encoded outputs; encodes handed to `encoders` fill theirs in.
        let encodings = EncodedOutputs(count: outputs.count)
        // Waits for the encodes handed off (also when a later output fails).
        defer { encodings.wait() }
        // Each output's picture before its own steps, for outputs that come out the same.
        var pictures: [(image: VipsImage, index: Int)] = []
        // After a shared load, outputs go largest first, and each output's resize starts from
        // the smallest resize already made that is at least as large (640 from 1280, not from
        // the load): resampling the smaller image costs less.
        var resized: [VipsImage] = []
        let order =
            sharedLoad == nil
            ? Array(outputs.indices)
            : outputs.indices.sorted { targets[$0].width * targets[$0].height > targets[$1].width * targets[$1].height }
        do throws(ItemFailure) {
            for index in order {
                let output = outputs[index]
                var made = image
                do {
                    // With several outputs, each output's own steps are named `<id>: <op>`.
                    let prefix = outputs.count > 1 ? "\(output.spec.id): " : ""
                    if let sharedLoad {
                        // The output's own fit/fill, from the closest larger resize; its size is
                        // reckoned from the input, as the output alone would have it.
                        let goal = targets[index]
                        let from =
                            resized.filter { $0.width >= goal.width && $0.height >= goal.height }
                            .min { $0.width * $0.height < $1.width * $1.height } ?? image
                        made = try lap(
                            prefix + sharedLoad.label(of: index),
                            try sharedLoad.resize(from, to: goal, for: index, context: context))
                        // Only a fit keeps the whole picture (a fill has been cropped).
                        if sharedLoad.keepsWholePicture(index), index != order.last {
                            made = try made.materialized()
                            resized.append(made)
                        }
                    }
                    // The same picture, with no steps of its own, as an earlier output that is
                    // encoded the same way: its bytes are this output's too.
                    if outputSteps[index].isEmpty,
                        let twin = pictures.first(where: {
                            $0.image === made && outputSteps[$0.index].isEmpty
                                && Self.encodeAlike(outputs[$0.index].spec, output.spec)
                        })
                    {
                        encodings.copy(twin.index, to: index, id: output.spec.id)
                        continue
                    }
                    pictures.append((made, index))
                    for (stepIndex, step) in outputSteps[index].enumerated() {
                        let path = Self.path(of: stepIndex, in: outputStepPaths[index])
                        made = try lap(
                            prefix + step.opName,
                            try checkedSize(applying(step, at: path, to: made, context: context), after: step))
                    }
                    // `"best"`: prepared as for a format with alpha; each candidate without
                    // it flattens its own copy (`encodeBest`).
                    made = try prepareForOutput(
                        made, colourManaged: colourManaged, format: output.spec.bestOf == nil ? output.spec.format : .png)
                    if output.spec.bestOf == nil {
                        try Self.checkEncodable(made, as: output.spec.format, output: outputs.count > 1 ? output.spec.id : nil)
                    }
                } catch let failure as ItemFailure {
                    throw failure
                } catch {
                    if let damage = inputDamage(StepFailure.cause(of: error), data: data, format: format) {
                        throw ItemFailure(.decode, "cannot decode \(format.rawValue): \(damage)")
                    }
                    // A step's failure names its output already (`outputs[1].filters[0]`).
                    let named = outputs.count > 1 && !(error is StepFailure)
                    throw ItemFailure(.process, Self.text(error) + (named ? " (output \(output.spec.id))" : ""))
                }
                let encode = { @Sendable [made] () throws(ItemFailure) -> ProcessedImage in
                    let (encoded, choice, chosen) = try encodeOutput(made, output.spec, data: data, format: format)
                    return ProcessedImage(
                        output: output.spec.id, data: encoded, width: made.width, height: made.height,
                        inputWidth: header.width, inputHeight: header.height,
                        inputFormat: format, sha256: sha256Hex(encoded),
                        inputBytes: data.count, inputSHA256: inputSHA256, choice: choice, format: chosen)
                }
                // Encoded on `encoders` while this worker makes the next output, when one of
                // its threads is free (with more workers than cores, often none is: the
                // worker encodes it itself, as it would have to wait for it anyway).
                if timing == nil, index != order.last, encodings.start(index, on: Self.encoders, encode) {
                    continue
                }
                let result = Result(catching: encode)
                encodings.set(index, result)
                // A failure ends the item here (the catch below picks an earlier one first).
                _ = try result.get()
                if let timing {
                    let label = outputs.count > 1 ? "\(output.spec.id): encode" : "encode"
                    let now = DispatchTime.now()
                    timing(label, Double(now.uptimeNanoseconds - clock.uptimeNanoseconds) / 1_000_000)
                    clock = now
                }
            }
        } catch {
            // An encode handed off earlier that failed is the item's failure, as it would
            // have been had it been encoded in turn.
            throw encodings.firstFailure() ?? error
        }
        var images = try encodings.all()
        images[0].notes = notes.all
        images[0].fingerprint = try? ImageFingerprint.of(images[0])
        return .processed(images)
    }

    /// The input's bytes; a file is read whole, after its size is checked against
    /// `limits.maxBytes`.
    private func bytes(of input: ImageInput) throws(ItemFailure) -> Data {
        let path: String
        switch input {
        case .data(let data): return data
        case .file(let file): path = file
        }
        // Non-blocking, so that a FIFO in a source folder cannot hold a worker; only
        // regular files are read (not a FIFO, a device such as /dev/zero, a socket).
        // (A location in `LocalPath`'s `file:` form is a name that is not UTF-8: opened by its bytes.)
        let fd = LocalPath.withCPath(path) { open($0, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
        guard fd >= 0 else { throw ItemFailure(.download, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw ItemFailure(.download, "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw ItemFailure(.download, "\(path) is not a regular file") }
        let size = Int(info.st_size)
        if size > limits.maxBytes {
            throw ItemFailure(.limit, "file is \(size) bytes, over limits.maxBytes (\(limits.maxBytes))")
        }
        var data = Data(count: size)
        let count = data.withUnsafeMutableBytes { raw -> Int in
            var offset = 0
            while offset < size {
                let got = read(fd, raw.baseAddress! + offset, size - offset)
                if got < 0, errno == EINTR { continue }
                if got <= 0 { break }
                offset += got
            }
            return offset
        }
        guard count == size else { throw ItemFailure(.download, "cannot read \(path): short read (\(count) of \(size) bytes)") }
        return data
    }

    /// Size limits, the magic-byte check and the container's structure, before libvips
    /// sees the input.
    private func checkBytes(_ data: Data) throws(ItemFailure) -> ImageFormat {
        let size = data.count
        let head = Array(data.prefix(64))
        if size == 0 { throw ItemFailure(.decode, "empty file (0 bytes)") }
        if size > limits.maxBytes {
            throw ItemFailure(.limit, "file is \(size) bytes, over limits.maxBytes (\(limits.maxBytes))")
        }
        switch ImageFormat.sniff(head) {
        case .accepted(let format):
            try ImageStructure.check(data, format: format)
            return format
        case .refused(let name): throw ItemFailure(.decode, "\(name) input is not accepted (untrusted or unsupported format)")
        case .unknown: throw ItemFailure(.decode, "not an image: unrecognised format")
        }
    }

    /// The fused shrink-on-load step: `vips_thumbnail`, or for a JPEG's `fit` with no
    /// profile to apply and nothing to turn, the same load and size with imgpipe's own
    /// resize (`reducedJPEG`). Returns the image and whether it was already converted to
    /// sRGB through its ICC profile.
    private func runThumbnail(
        _ thumbnail: ChainPlan.Thumbnail, data: Data, header: VipsImage,
        format: ImageFormat, context: FilterContext
    ) throws -> (VipsImage, Bool) {
        var colour = ColourManagement.none
        if header.isCMYK {
            colour = ColourManagement(importProfile: header.hasICCProfile ? nil : "cmyk", exportProfile: "srgb")
        } else if header.hasICCProfile, !header.isGrey {
            colour = ColourManagement(exportProfile: "srgb")
        }
        let maxSide = 10_000_000
        var width: Int
        var height: Int
        var size = ThumbnailSize.down
        var crop = Interesting.none
        var finalCrop: (width: Int, height: Int, gravity: Gravity, focus: FocusPoint?)?
        switch thumbnail.box {
        case .fit(let w, let h, let enlarge):
            width = min(w ?? maxSide, maxSide)
            height = min(h ?? maxSide, maxSide)
            size = enlarge ? .both : .down
        case .fill(let w, let h, let gravity, let focus):
            switch gravity {
            case .centre, .attention, .entropy:
                (width, height) = (min(w, maxSide), min(h, maxSide))
                size = .both
                crop = gravity == .centre ? .centre : gravity == .attention ? .attention : .entropy
            default:
                let source = thumbnail.autorotate ? header.uprightSize : (header.width, header.height)
                (width, height) = BoxGeometry.cover(width: source.0, height: source.1, box: (w, h))
                size = .force
                finalCrop = (w, h, gravity, focus)
            }
        }
        if format == .jpeg, colour.importProfile == nil, colour.exportProfile == nil,
            case .fit(let w, let h, let enlarge) = thumbnail.box,
            !thumbnail.autorotate || header.orientation == 1,
            let image = try Self.reducedJPEG(data: data, header: header, box: (w, h), enlarge: enlarge)
        {
            return (image, false)
        }
        var image = try VipsImage.thumbnail(
            data: data, width: width, height: height, size: size,
            autorotate: thumbnail.autorotate, crop: crop, colour: colour,
            failOn: format.failOn)
        if let finalCrop {
            image = try image.cropped(
                to: (finalCrop.width, finalCrop.height), gravity: finalCrop.gravity, focus: finalCrop.focus, context: context)
        }
        return (image, colour.exportProfile != nil)
    }

    /// A JPEG fitted into a box as `vips_thumbnail` fits it (the same DCT-scaled load and
    /// output size), with the resize done by imgpipe's own vector code
    /// (`reducedInMemory`: libvips' lanczos3 samples, about a quarter of its time). The load
    /// and the resized picture are held whole, where the thumbnail streams them a few rows
    /// at a time: only a fit whose two pictures together take at most
    /// `MemoryEstimate.perItem` (16 MiB, the part of every item's estimate that no decoder
    /// claims) takes this path, so the memory budget holds whatever the estimate makes of
    /// the load. nil for any other, and when the fit is not a reduction that code makes as
    /// libvips would.
    static func reducedJPEG(
        data: Data, header: VipsImage, box: (width: Int?, height: Int?), enlarge: Bool
    ) throws -> VipsImage? {
        guard
            let steps = BoxGeometry.thumbnailSteps(
                width: header.width, height: header.height, box: box, enlarge: enlarge, jpeg: true),
            header.bands == 1 || header.bands == 3, steps.horizontal > 1, steps.vertical > 1
        else { return nil }
        // libjpeg's scaled sides, rounded up (libvips then cuts the load to the sides rounded down).
        let k = steps.loadShrink
        let (loadWidth, loadHeight) = ((header.width + k - 1) / k, (header.height + k - 1) / k)
        let held = (loadWidth * loadHeight + steps.size.width * steps.size.height) * header.bands
        guard held <= MemoryEstimate.perItem,
            VipsImage.reducesAsLibvips(
                width: header.width / k, height: header.height / k, horizontal: steps.horizontal,
                vertical: steps.vertical)
        else { return nil }
        let loaded = try VipsImage.open(jpeg: data, shrink: steps.loadShrink, failOn: ImageFormat.jpeg.failOn)
            .materialized()
        let reduced = try loaded.reducedInMemory(horizontal: 1 / steps.horizontal, vertical: 1 / steps.vertical)
        guard reduced.width == steps.size.width, reduced.height == steps.size.height else { return nil }
        return reduced
    }

    /// 8-bit sRGB (or 8-bit grey for greyscale), alpha kept only where the format has it
    /// (JPEG output is flattened onto white).
    /// The path of step `index` (`planPaths`, `outputStepPaths`); a step the paths do not
    /// reach is still run, named by its number alone.
    static func path(of index: Int, in paths: [String]) -> String {
        paths.indices.contains(index) ? paths[index] : "step \(index + 1)"
    }

    /// `step` applied to `image`; a failure (libvips', or the step's own `FilterError`) is
    /// a `StepFailure` naming the step by `path` and the size of the picture it was given:
    /// libvips' text names its own operation (`embed: bad dimensions`), which is not the
    /// filter the pipeline file has.
    func applying(_ step: FilterStep, at path: String, to image: VipsImage, context: FilterContext) throws -> VipsImage {
        do {
            return try step.apply(to: image, context: context)
        } catch let failure as ItemFailure {
            throw failure
        } catch {
            throw StepFailure(path: path, op: step.opName, width: image.width, height: image.height, cause: error)
        }
    }

    /// `image`, the result of `step`, unless it is over `limits.maxPixels` (a `limit`
    /// failure). libvips builds an image's pipeline before computing a pixel, so a step that
    /// would make gigapixels (`border` 100000) is stopped before any memory or time goes.
    func checkedSize(_ image: VipsImage, after step: FilterStep) throws -> VipsImage {
        try checkSize(width: image.width, height: image.height, after: step)
        return image
    }

    /// `step` made a `width`×`height` picture (or frame): a `limit` failure over `maxPixels`.
    func checkSize(width: Int, height: Int, after step: FilterStep) throws {
        let (pixels, overflow) = width.multipliedReportingOverflow(by: height)
        guard overflow || pixels > limits.maxPixels else { return }
        throw ItemFailure(
            .limit,
            "\(step.opName) makes \(width)×\(height)"
                + (overflow ? "" : " (\(Self.megapixels(pixels)))")
                + ", over limits.maxPixels (\(Self.megapixels(limits.maxPixels)))")
    }

    /// The largest side JPEG (libjpeg's 65500) and GIF (65535) hold: a larger picture fails
    /// as `encode`, named, before the encoder is asked (libjpeg's own refusal read as damage
    /// in a JPEG input, `decode`). WebP's encoder says "too large" itself, as `encode`.
    static func checkEncodable(_ image: VipsImage, as format: OutputFormat, output: String?) throws {
        let largest: Int? =
            switch format {
            case .jpeg: 65500
            case .gif: 65535
            case .png, .webp, .avif, .tiff: nil
            }
        guard let largest, max(image.width, image.height) > largest else { return }
        throw ItemFailure(
            .encode,
            "\(format.rawValue) holds at most \(largest) pixels a side; the picture is "
                + "\(image.width)×\(image.height)" + (output.map { " (output \($0))" } ?? ""))
    }

    func prepareForOutput(_ image: VipsImage, colourManaged: Bool, format: OutputFormat) throws -> VipsImage {
        var prepared =
            image.isGrey && !image.isCMYK
            ? try image.toGrey()
            : try image.toSRGB(useEmbeddedProfile: !colourManaged)
        if !format.keepsAlpha {
            prepared = try prepared.flattened()
        }
        return prepared
    }

    /// Whether two outputs' pictures, alike, come out as the same bytes: the same encoding,
    /// and the same quality search and choice of formats if any.
    static func encodeAlike(_ a: OutputSpec, _ b: OutputSpec) -> Bool {
        // Each format's own settings (`lossless`, `compression`, …), not only the first's.
        func encodings(_ spec: OutputSpec) -> [Encoding] {
            spec.formats.map { format in
                var one = spec
                one.format = format
                return encoding(of: one)
            }
        }
        // The first encoding holds the format: equal encodings are of the same formats.
        return a.bestOf == b.bestOf && encodings(a) == encodings(b)
            && a.ssimTarget == b.ssimTarget && a.maxBytes == b.maxBytes
            && (!a.searchesQuality || a.minQuality == b.minQuality)
    }

    /// `"format": "best"`: `image` (prepared with its alpha, if any) encoded in each of the
    /// output's formats that keeps the alpha it has (JPEG flattens its own copy when there
    /// is none), each at its own quality when the output searches one, and the smallest
    /// kept (the first listed of equal sizes), one that reaches the SSIM target before one
    /// that falls short of it. A format that cannot hold the picture, whose encoder fails,
    /// or whose smallest result is over `maxBytes`, is passed over; when every one is, the
    /// first one's failure is the item's.
    static func encodeBest(_ image: VipsImage, _ output: OutputSpec) throws -> (Data, QualityChoice?, OutputFormat) {
        var best: (data: Data, choice: QualityChoice?, format: OutputFormat, reached: Bool)?
        var firstFailure: ItemFailure?
        // Every candidate reads these pixels: computed once.
        let image = try image.materialized()
        for candidate in output.formats where !image.hasAlpha || candidate.keepsAlpha {
            var spec = output
            spec.format = candidate
            spec.bestOf = nil
            do {
                try checkEncodable(image, as: candidate, output: nil)
                let picture = candidate.keepsAlpha ? image : try image.flattened()
                let made = try encodeOne(picture, spec)
                // PNG is lossless: it reaches any target.
                let reached = output.ssimTarget.map { target in made.choice.map { ($0.ssim ?? 0) >= target } ?? true } ?? true
                let better = best.map { reached != $0.reached ? reached : made.data.count < $0.data.count } ?? true
                if better { best = (made.data, made.choice, candidate, reached) }
            } catch {
                let failure = error as? ItemFailure ?? ItemFailure(.encode, text(error))
                firstFailure = firstFailure ?? ItemFailure(failure.reason, "\(candidate.rawValue): " + failure.message)
            }
        }
        guard let best else {
            throw firstFailure ?? ItemFailure(.encode, "no format of \(output.formats.map(\.rawValue)) keeps the picture")
        }
        return (best.data, best.choice, best.format)
    }

    /// `picture` encoded as `output` says (`encodeBest` or `encodeOne`); a failure names the
    /// output when there are several, and one of the input's damage (its pixels are computed
    /// while encoding) is `decode`.
    func encodeOutput(
        _ picture: VipsImage, _ output: OutputSpec, data: Data, format: ImageFormat
    ) throws(ItemFailure) -> (Data, QualityChoice?, OutputFormat?) {
        let named = outputs.count > 1 ? " (output \(output.id))" : ""
        do {
            if output.bestOf != nil { return try Self.encodeBest(picture, output) }
            let (encoded, choice) = try Self.encodeOne(picture, output)
            return (encoded, choice, nil)
        } catch let failure as ItemFailure {
            throw ItemFailure(failure.reason, failure.message + named)
        } catch {
            if let damage = inputDamage(error, data: data, format: format) {
                throw ItemFailure(.decode, "cannot decode \(format.rawValue): \(damage)")
            }
            throw ItemFailure(.encode, Self.text(error) + named)
        }
    }

    /// `image` encoded in the output's one format: at the quality its search chooses when it
    /// has one and the format has a quality (PNG has none: held to `maxBytes` as it comes
    /// out), else at its settings.
    static func encodeOne(_ image: VipsImage, _ output: OutputSpec) throws -> (data: Data, choice: QualityChoice?) {
        if output.searchesQuality, output.format != .png {
            let found = try QualitySearch(output: output).encode(image)
            return (found.data, found.choice)
        }
        let data = try image.encoded(encoding(of: output))
        if let budget = output.maxBytes, data.count > budget {
            throw ItemFailure(.limit, "the output is \(data.count) bytes as png, over maxBytes \(budget)")
        }
        return (data, nil)
    }

    package static func encoding(of output: OutputSpec) -> Encoding {
        switch output.format {
        case .jpeg: .jpeg(quality: output.quality, progressive: output.progressive, strip: output.strip)
        case .png: .png(compression: output.compression, strip: output.strip)
        case .webp: .webp(quality: output.quality, lossless: output.lossless, effort: min(output.effort, 6), strip: output.strip)
        case .avif: .avif(quality: output.quality, effort: output.effort, strip: output.strip)
        case .tiff: .tiff(strip: output.strip)
        case .gif: .gif(strip: output.strip)
        }
    }

    /// What is wrong with the input, when a failure after the header came from it, or nil
    /// when the input is sound (the failure is the filter's or the encoder's).
    ///
    /// libvips computes pixels late, so a damaged input fails inside a filter or the
    /// encoder. The error text usually names the loader (`VipsError.kind`), but libvips'
    /// error buffer is shared by every thread and another worker may have taken the text:
    /// then the input alone is decoded once more, in full, and only its own failure counts.
    func inputDamage(_ error: any Error, data: Data, format: ImageFormat) -> String? {
        if Self.isDecodeError(error) { return Self.text(error) }
        do {
            _ = try VipsImage.open(data: data, failOn: format.failOn).materialized()
            return nil
        } catch {
            return Self.isDecodeError(error) ? Self.text(error) : "the input does not decode (\(Self.text(error)))"
        }
    }

    /// A libvips failure that came from a loader (pixels are computed late, so a damaged
    /// input can fail in a filter or in the encoder); classified once, in VipsKit.
    static func isDecodeError(_ error: any Error) -> Bool {
        (error as? VipsError)?.kind == .decode
    }

    package static func text(_ error: any Error) -> String {
        if let error = error as? VipsError { return error.message }
        return String(describing: error)
    }

    /// A pixel count as people read it: `24 MP`, `2.5 MP`, and below 0.1 MP the pixels
    /// themselves (`3120 pixels`), where `0.0 MP` over a limit of `0.0 MP` said nothing.
    package static func megapixels(_ pixels: Int) -> String {
        let mp = Double(pixels) / 1_000_000
        if pixels < 100_000 { return "\(pixels) pixels" }
        return mp >= 10 ? "\(Int(mp.rounded())) MP" : String(format: "%.1f MP", mp)
    }
}

/// An item's encoded outputs as they come in, some from `ImageProcessor.encoders`.
private final class EncodedOutputs: Sendable {
    private struct State {
        var results: [Result<ProcessedImage, ItemFailure>?]
        /// Outputs in the order they were made, which decides whose failure is reported.
        var started: [Int] = []
        /// Outputs whose bytes are another's: (from, to, id).
        var copies: [(from: Int, to: Int, id: String)] = []
    }
    private let state: Mutex<State>
    private let group = DispatchGroup()

    init(count: Int) { state = Mutex(State(results: Array(repeating: nil, count: count))) }

    /// Runs `encode` for output `index` on `executor` if one of its threads is free;
    /// returns false, doing nothing, if none is.
    func start(_ index: Int, on executor: BoundedExecutor, _ encode: @escaping @Sendable () throws(ItemFailure) -> ProcessedImage)
        -> Bool
    {
        group.enter()
        let queued = executor.submitIfIdle { [self] in
            let result = Result(catching: encode)
            state.withLock { $0.results[index] = result }
            group.leave()
        }
        if queued { state.withLock { $0.started.append(index) } } else { group.leave() }
        return queued
    }

    func set(_ index: Int, _ result: Result<ProcessedImage, ItemFailure>) {
        state.withLock { state in
            state.started.append(index)
            state.results[index] = result
        }
    }

    /// Output `index` is output `from`'s bytes, under its own id.
    func copy(_ from: Int, to index: Int, id: String) {
        state.withLock { $0.copies.append((from, index, id)) }
    }

    /// Waits for every encode started.
    func wait() { group.wait() }

    /// The failure of the earliest output made that failed, once every encode has ended.
    func firstFailure() -> ItemFailure? {
        wait()
        return state.withLock { state in
            for index in state.started { if case .failure(let failure)? = state.results[index] { return failure } }
            return nil
        }
    }

    /// Every output, in the pipeline's order; the first failure (in the order made) instead.
    func all() throws(ItemFailure) -> [ProcessedImage] {
        if let failure = firstFailure() { throw failure }
        return state.withLock { state in
            for copy in state.copies {
                if case .success(var image)? = state.results[copy.from] {
                    image.output = copy.id
                    state.results[copy.to] = .success(image)
                }
            }
            return state.results.compactMap { try? $0?.get() }
        }
    }
}
