import Foundation
import VipsKit

extension FilterStep {
    /// Whether the step can run on every frame of an animation (`FrameRoll`): geometry
    /// that does not look at the pixels, and colour work pixel by pixel. Not: steps that
    /// decide from the picture (`trim`, `normalize`, a crop by `attention` or `entropy`,
    /// which would also choose another window per frame), steps over a neighbourhood or
    /// the frame's shape (`blur`, `sharpen`, `median`, `pixelate`, `vignette`,
    /// `round-corners`), turns (`rotate`, a vertical `flip`) and the overlays.
    public var appliesToFrames: Bool {
        switch self {
        case .fill(_, _, let gravity, _), .cropAspect(_, _, let gravity, _):
            gravity == .focus || !gravity.isSmart
        case .flip(let horizontal): horizontal
        case .autorotate, .fit, .resize, .cropRect, .pad, .border, .adjust, .grayscale, .sepia, .invert, .posterize,
            .tint, .threshold:
            true
        case .rotate, .trim, .roundCorners, .normalize, .vignette, .blur, .sharpen, .pixelate, .median, .caption, .text,
            .watermark:
            false
        }
    }
}

/// The frames of an animation as libvips holds them, stacked top to bottom in one tall
/// picture, `pageHeight` rows each. Steps apply to all frames at once: a resize of the
/// whole stack (as libvips' own thumbnail resizes an animation: the kernel may reach a
/// row or two into the neighbouring frame), colour work on every pixel, and crops and pads
/// frame by frame. Nothing is computed here: the encoder reads the frames in order.
struct FrameRoll {
    var image: VipsImage
    var pageHeight: Int
    let count: Int

    /// Every frame resampled to `size`.
    func resized(to size: (width: Int, height: Int)) throws -> FrameRoll {
        guard size != (image.width, pageHeight) else { return self }
        // With alpha, resampled premultiplied (as the thumbnail of a still picture is): a
        // transparent pixel's colour must not bleed into its neighbours.
        let alpha = image.hasAlpha
        let source = alpha ? try image.premultiplied() : image
        // The stack's vertical scale is the frames' (the same ratio, reckoned on the whole).
        var resized = try source.resized(
            horizontal: Double(size.width) / Double(image.width), vertical: Double(size.height * count) / Double(image.height))
        if alpha { resized = try resized.unpremultiplied(like: image) }
        let height = size.height * count
        guard resized.height >= height else {
            throw FilterError("resizing \(count) frames to \(size.width)×\(size.height) made \(resized.height) rows")
        }
        if resized.height > height {
            resized = try resized.cropped(left: 0, top: 0, width: resized.width, height: height)
        }
        return FrameRoll(image: resized, pageHeight: size.height, count: count)
    }

    /// The same window of every frame: `width`×`height` from (`x`, `y`).
    func window(x: Int, y: Int, width: Int, height: Int) throws -> FrameRoll {
        guard (x, y, width, height) != (0, 0, image.width, pageHeight) else { return self }
        if y == 0, height == pageHeight {
            return FrameRoll(
                image: try image.cropped(left: x, top: 0, width: width, height: image.height), pageHeight: height,
                count: count)
        }
        let frames = try (0..<count).map { try image.cropped(left: x, top: $0 * pageHeight + y, width: width, height: height) }
        return FrameRoll(image: try VipsImage.stacked(frames), pageHeight: height, count: count)
    }

    /// The window of `size` placed by `gravity` (compass points and the centre) or, with
    /// `.focus`, centred on the item's point (the centre when it has none usable, noted).
    func window(_ size: (width: Int, height: Int), gravity: Gravity, focus: FocusPoint?, context: FilterContext) throws
        -> FrameRoll
    {
        let (w, h) = (min(size.width, image.width), min(size.height, pageHeight))
        // Nothing to crop: nothing to place (nor a point to read), as for a still picture.
        guard (w, h) != (image.width, pageHeight) else { return self }
        var origin = gravity.offset(width: w, height: h, fullWidth: image.width, fullHeight: pageHeight)
        if gravity == .focus, let focus {
            switch focus.resolved(with: context.fields) {
            case .point(let x, let y):
                origin = FocusPoint.window(width: w, height: h, fullWidth: image.width, fullHeight: pageHeight, x: x, y: y)
            case .unusable(let why):
                // By attention, each frame would get a window of its own.
                context.notes?.add(why + "; cropped at the centre instead")
            }
        }
        return try window(x: origin.x, y: origin.y, width: w, height: h)
    }

    /// `step` on every frame; only steps that `appliesToFrames`.
    func applying(_ step: FilterStep, context: FilterContext) throws -> FrameRoll {
        let (width, height) = (image.width, pageHeight)
        switch step {
        case .autorotate:
            // Taken only for upright animations (`ImageProcessor.run`).
            return self
        case .fit(let w, let h, let enlarge):
            return try resized(to: BoxGeometry.fit(width: width, height: height, box: (w, h), enlarge: enlarge))
        case .resize(let w, let h, let scale):
            return try resized(to: BoxGeometry.resize(width: width, height: height, to: (w, h), scale: scale))
        case .fill(let w, let h, let gravity, let focus):
            let cover = BoxGeometry.cover(width: width, height: height, box: (w, h))
            return try resized(to: cover).window((w, h), gravity: gravity, focus: focus, context: context)
        case .cropRect(let x, let y, let w, let h):
            guard x < width, y < height else {
                throw FilterError("crop at (\(x), \(y)) lies outside the \(width)×\(height) image")
            }
            return try window(x: x, y: y, width: min(w, width - x), height: min(h, height - y))
        case .cropAspect(let aspectWidth, let aspectHeight, let gravity, let focus):
            let size = FilterStep.aspectWindow(aspectWidth / aspectHeight, width: width, height: height)
            return try window(size, gravity: gravity, focus: focus, context: context)
        case .pad(let top, let right, let bottom, let left, let colour):
            return try padded(top: top, right: right, bottom: bottom, left: left, colour: colour)
        case .border(let w, let colour):
            return try padded(top: w, right: w, bottom: w, left: w, colour: colour)
        case .flip(true), .adjust, .grayscale, .sepia, .invert, .posterize, .tint, .threshold:
            // Pixel by pixel (or row by row): the stack is done as one picture.
            return FrameRoll(image: try step.apply(to: image, context: context), pageHeight: pageHeight, count: count)
        default:
            throw FilterError("\(step.opName) cannot apply to each frame of an animation")
        }
    }

    private func padded(top: Int, right: Int, bottom: Int, left: Int, colour: Colour) throws -> FrameRoll {
        let frames = try (0..<count).map { index in
            try image.frame(index, height: pageHeight).padded(top: top, right: right, bottom: bottom, left: left, colour: colour)
        }
        return FrameRoll(image: try VipsImage.stacked(frames), pageHeight: pageHeight + top + bottom, count: count)
    }
}

extension OutputSpec {
    /// Why this output, whose steps (common and own, with their places in the pipeline
    /// file) are `steps`, makes an animated input from its first frame although its format
    /// could animate; nil when it keeps every frame, or when it would not animate anyway
    /// (`"animation": "first"`, or a format that cannot).
    package func firstFrameReason(steps: [(step: FilterStep, path: String)]) -> String? {
        guard keepsAnimation, formats.contains(where: OutputFormat.animating.contains) else { return nil }
        if bestOf != nil { return "\"format\": \"best\" chooses among still pictures" }
        // A quality target is met on the first frame; a budget would have the whole
        // animation encoded again at each quality it tries.
        if maxBytes != nil { return "maxBytes is a still picture's budget" }
        if let step = steps.first(where: { !$0.step.appliesToFrames }) {
            return "\(step.path) \(step.step.opName) cannot apply to each frame on its own"
        }
        return nil
    }

    /// Whether an animated input stays animated in this output.
    package func animates(steps: [(step: FilterStep, path: String)]) -> Bool {
        keepsAnimation && bestOf == nil && OutputFormat.animating.contains(format) && firstFrameReason(steps: steps) == nil
    }
}

extension PipelineSpec {
    /// What `validate` says of outputs that make an animated input from its first frame
    /// although their format could animate: which step or setting keeps them from it.
    public var firstFrameNotes: [String] {
        outputs.enumerated().compactMap { index, output in
            let path = document["outputs"] == nil ? "output" : "outputs[\(index)]"
            let steps =
                filters.enumerated().map { ($1.step, "filters[\($0)]") }
                + output.filters.enumerated().map { ($1.step, "\(path).filters[\($0)]") }
            guard let reason = output.firstFrameReason(steps: steps) else { return nil }
            return "\(path): an animated input becomes one frame, as \(reason) "
                + "(\"animation\": \"first\" on the output says so and quiets this)"
        }
    }
}

extension ImageProcessor {
    /// Output `index`'s steps as written (the common `filters`, then its own), with their
    /// places in the pipeline file.
    static func writtenSteps(of index: Int, filters: [FilterStep], outputs: [OutputPlan]) -> [(step: FilterStep, path: String)] {
        let output = outputs[index]
        let path = output.path ?? (outputs.count == 1 ? "output" : "outputs[\(index)]")
        return filters.enumerated().map { ($1, "filters[\($0)]") }
            + output.filters.enumerated().map { ($1, "\(path).filters[\($0)]") }
    }

    /// An animated GIF or WebP of `pages` frames, for a pipeline where some output keeps
    /// animations: each output's whole chain (the common steps, then its own) runs on every
    /// frame (on the first only, for an output that does not animate) and the frames are
    /// joined again, with the input's delays and loop count. The frames are read in order
    /// as the encoder asks for them, never all held: the input is opened anew for each
    /// output (a sequential read goes through once).
    func runFrames(
        data: Data, header: VipsImage, format: ImageFormat, pages: Int, context: FilterContext,
        timing: ((String, Double) -> Void)?
    ) throws(ItemFailure) -> ProcessOutcome {
        guard pages <= limits.maxFrames else {
            throw ItemFailure(.limit, "the animation has \(pages) frames, over limits.maxFrames (\(limits.maxFrames))")
        }
        // libvips holds the frames as one stack: one its loader could not open is refused
        // here, as a limit, before it is asked to.
        try Self.checkStack(rows: header.height * pages, of: "the animation's \(pages) frames of \(header.height) rows")
        // Every frame as the loader gives it (a GIF's fill its screen), its size checked
        // before any is decoded; the first output reads it, the others open it anew (a
        // sequential read goes through once).
        let opened: VipsImage
        do {
            opened = try VipsImage.openFrames(data: data, failOn: format.failOn)
        } catch {
            throw ItemFailure(.decode, "cannot read \(format.rawValue) frames: \(Self.text(error))")
        }
        let (frameWidth, frameHeight) = (opened.width, opened.pageHeight)
        guard frameHeight > 0, opened.height == frameHeight * pages else {
            throw ItemFailure(
                .decode,
                "cannot decode \(format.rawValue): its \(pages) frames do not stack (\(opened.height) rows, "
                    + "frames \(frameHeight) rows high)")
        }
        try checkFrames(width: frameWidth, height: frameHeight, count: pages, made: "the animation is")
        let delays = Self.delays(opened.frameDelays, count: pages)
        let loop = opened.loopCount
        let inputSHA256 = sha256Hex(data)
        var images: [ProcessedImage] = []
        for (index, output) in outputs.enumerated() {
            let started = DispatchTime.now()
            let named = outputs.count > 1 ? " (output \(output.spec.id))" : ""
            let animated = animates[index]
            let picture: VipsImage
            let frameSize: (width: Int, height: Int)
            // An animation's quality is chosen on its first frame (`searched`), then set.
            var encoding = output.spec
            var searched: QualityChoice?
            do {
                let all = index == 0 ? opened : try VipsImage.openFrames(data: data, failOn: format.failOn)
                if animated {
                    let (prepared, pageHeight) = try madeFrames(index, from: all, pages: pages, context: context)
                    frameSize = (prepared.width, pageHeight)
                    // The encoder's bound is on each frame, not on the stack.
                    try Self.checkEncodable(
                        try prepared.frame(0, height: pageHeight), as: output.spec.format,
                        output: outputs.count > 1 ? output.spec.id : nil)
                    picture = try prepared.labelledAsFrames(pageHeight: pageHeight, delays: delays, loop: loop)
                    if output.spec.ssimTarget != nil {
                        // The quality is chosen on the first frame, made from a stack of its
                        // own (the one above is read once, by the encoder), and every frame
                        // is encoded at it.
                        let again = try VipsImage.openFrames(data: data, failOn: format.failOn)
                        let (stack, height) = try madeFrames(index, from: again, pages: pages, context: context)
                        let found = try QualitySearch(output: output.spec).encode(try stack.frame(0, height: height))
                        searched = found.choice
                        encoding.quality = found.choice.quality
                        encoding.ssimTarget = nil
                    }
                } else {
                    // The first frame through the chain, as a still input would go.
                    var frame = try all.frame(0, height: frameHeight)
                    for (step, path) in Self.writtenSteps(of: index, filters: settings.filters, outputs: outputs) {
                        frame = try checkedSize(applying(step, at: path, to: frame, context: context), after: step)
                    }
                    frame = try prepareForOutput(
                        frame, colourManaged: false, format: output.spec.bestOf == nil ? output.spec.format : .png)
                    if output.spec.bestOf == nil {
                        try Self.checkEncodable(frame, as: output.spec.format, output: outputs.count > 1 ? output.spec.id : nil)
                    }
                    frameSize = (frame.width, frame.height)
                    picture = frame
                }
            } catch let failure as ItemFailure {
                throw failure
            } catch {
                if let damage = inputDamage(StepFailure.cause(of: error), data: data, format: format) {
                    throw ItemFailure(.decode, "cannot decode \(format.rawValue): \(damage)")
                }
                throw ItemFailure(.process, Self.text(error) + (error is StepFailure ? "" : named))
            }
            let (encoded, choice, chosen) = try encodeOutput(picture, encoding, data: data, format: format)
            if let timing {
                let frames = animated ? pages : 1
                let label = (outputs.count > 1 ? "\(output.spec.id): " : "") + "\(frames) frame\(frames == 1 ? "" : "s")"
                timing(label, Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000)
            }
            images.append(
                ProcessedImage(
                    output: output.spec.id, data: encoded, width: frameSize.width, height: frameSize.height,
                    inputWidth: header.width, inputHeight: header.height, inputFormat: format, sha256: sha256Hex(encoded),
                    inputBytes: data.count, inputSHA256: inputSHA256, choice: searched ?? choice, format: chosen))
        }
        images[0].notes = context.notes?.all ?? []
        images[0].fingerprint = try? ImageFingerprint.of(images[0])
        return .processed(images)
    }

    /// Output `index`'s chain (the common steps, then its own) on every frame of `all`,
    /// prepared for its format: the stack and the height of its frames.
    private func madeFrames(
        _ index: Int, from all: VipsImage, pages: Int, context: FilterContext
    ) throws -> (VipsImage, pageHeight: Int) {
        var roll = FrameRoll(image: all, pageHeight: all.pageHeight, count: pages)
        for (step, path) in Self.writtenSteps(of: index, filters: settings.filters, outputs: outputs) {
            do {
                roll = try roll.applying(step, context: context)
            } catch {
                throw StepFailure(path: path, op: step.opName, width: roll.image.width, height: roll.pageHeight, cause: error)
            }
            try checkFrames(width: roll.image.width, height: roll.pageHeight, count: pages, made: "\(step.opName) makes")
        }
        return (try prepareForOutput(roll.image, colourManaged: false, format: outputs[index].spec.format), roll.pageHeight)
    }

    /// The most rows libvips 8.14 holds in one picture (`VIPS_MAX_COORD`): the stack of an
    /// animation's frames must fit in it.
    static let largestStack = 10_000_000

    /// A stack of `rows` rows (`what`: its frames): a `limit` failure past `largestStack`.
    static func checkStack(rows: Int, of what: String) throws(ItemFailure) {
        guard rows > largestStack else { return }
        throw ItemFailure(
            .limit, "\(what) stack \(rows) rows high, over the \(largestStack) rows libvips holds in one picture")
    }

    /// `count` frames of `width`×`height` (what the input is, or what a step `made`): a
    /// `limit` failure when together they pass `maxPixels`, or their stack libvips' bound.
    func checkFrames(width: Int, height: Int, count: Int, made: String) throws(ItemFailure) {
        let (frame, overflow) = width.multipliedReportingOverflow(by: height)
        let (pixels, overflowAll) = frame.multipliedReportingOverflow(by: count)
        if overflow || overflowAll || pixels > limits.maxPixels {
            throw ItemFailure(
                .limit,
                "\(made) \(count) frames of \(width)×\(height)"
                    + (overflow || overflowAll ? "" : " (\(Self.megapixels(pixels)))")
                    + ", over limits.maxPixels (\(Self.megapixels(limits.maxPixels)))")
        }
        try Self.checkStack(rows: height * count, of: "\(made) \(count) frames of \(width)×\(height), which")
    }

    /// One delay (milliseconds) per frame: the file's, the last repeated for frames it
    /// gives none (100 ms when it gives none at all), extra ones left out.
    static func delays(_ given: [Int], count: Int) -> [Int] {
        (0..<count).map { given.indices.contains($0) ? given[$0] : given.last ?? 100 }
    }

}
