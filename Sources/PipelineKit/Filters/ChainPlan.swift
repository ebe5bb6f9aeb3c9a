import VipsKit

/// How a filter chain runs: a leading `autorotate`/`fit`/`fill` becomes one shrink-on-load
/// `vips_thumbnail` call, and the rest run one by one on its result.
struct ChainPlan: Sendable, Equatable {
    /// The resize done while loading, when the chain starts with `fit` or `fill`
    /// (optionally after `autorotate`).
    struct Thumbnail: Sendable, Equatable {
        enum Box: Sendable, Equatable {
            case fit(width: Int?, height: Int?, enlarge: Bool)
            case fill(width: Int, height: Int, gravity: Gravity, focus: FocusPoint?)
        }
        var autorotate: Bool
        var box: Box
    }

    var thumbnail: Thumbnail?
    var steps: [FilterStep]

    /// The ops the thumbnail step stands for, e.g. `autorotate+fit`.
    var thumbnailLabel: String {
        guard let thumbnail else { return "" }
        let box = if case .fit = thumbnail.box { "fit" } else { "fill" }
        return thumbnail.autorotate ? "autorotate+" + box : box
    }

    init(_ filters: [FilterStep]) {
        var rest = filters[...]
        var autorotate = false
        if rest.first == .autorotate, rest.count > 1 {
            switch rest.dropFirst().first {
            case .fit?, .fill?:
                autorotate = true
                rest = rest.dropFirst()
            default: break
            }
        }
        switch rest.first {
        case .fit(let width, let height, let enlarge)?:
            thumbnail = Thumbnail(autorotate: autorotate, box: .fit(width: width, height: height, enlarge: enlarge))
            rest = rest.dropFirst()
        case .fill(let width, let height, let gravity, let focus)?:
            thumbnail = Thumbnail(
                autorotate: autorotate, box: .fill(width: width, height: height, gravity: gravity, focus: focus))
            rest = rest.dropFirst()
        default:
            thumbnail = nil
        }
        steps = Array(rest)
    }
}

/// Sizes for `fit` and `fill`, shared by the fused and the step-by-step paths.
enum BoxGeometry {
    /// The size that fits inside the box, aspect kept (a missing side is unbounded).
    static func fit(width: Int, height: Int, box: (width: Int?, height: Int?), enlarge: Bool) -> (width: Int, height: Int) {
        var scale = Double.infinity
        if let w = box.width { scale = min(scale, Double(w) / Double(width)) }
        if let h = box.height { scale = min(scale, Double(h) / Double(height)) }
        if !enlarge { scale = min(scale, 1) }
        guard scale.isFinite else { return (width, height) }
        return (max(1, Int((Double(width) * scale).rounded())), max(1, Int((Double(height) * scale).rounded())))
    }

    /// The size `vips_thumbnail` (libvips 8.14) fits a JPEG or a PNG/GIF of `width`×`height`
    /// (as shown) into, when that makes it smaller. It reckons each side as `vips_resize`
    /// does, the side divided by the factor, which can round a half the other way than the
    /// side times the scale (432×243 into 200: 112 high, not 113); and when the reduction
    /// is 4× or more it decodes a JPEG at 1/2, 1/4 or 1/8 scale (leaving at least 2× for its
    /// resize), to ⌊w/k⌋×⌊h/k⌋, and fits that picture (1500×1000 into a height of 3: 4×3
    /// from 187×125, 5×3 from the input). Anything else (an enlargement; other formats,
    /// whose loaders shrink by their own rules): `fit`.
    static func thumbnailFit(
        width: Int, height: Int, box: (width: Int?, height: Int?), enlarge: Bool,
        jpeg: Bool
    ) -> (width: Int, height: Int) {
        guard let steps = thumbnailSteps(width: width, height: height, box: box, enlarge: enlarge, jpeg: jpeg) else {
            return fit(width: width, height: height, box: box, enlarge: enlarge)
        }
        return steps.size
    }

    /// How `vips_thumbnail` (libvips 8.14) makes a reduction of a JPEG or a PNG/GIF of
    /// `width`×`height` (as shown) to fit the box: the loader's shrink (`loadShrink`, 1, 2,
    /// 4 or 8, a JPEG's DCT scaling), then `vips_resize` of the loaded picture by
    /// `horizontal` and `vertical` factors (1 or more), to `size`. nil when the thumbnail
    /// does not reduce both ways (an enlargement, a size already inside the box).
    static func thumbnailSteps(
        width: Int, height: Int, box: (width: Int?, height: Int?), enlarge: Bool,
        jpeg: Bool
    ) -> (loadShrink: Int, horizontal: Double, vertical: Double, size: (width: Int, height: Int))? {
        let unbounded = 10_000_000  // what the thumbnail is given for a missing side
        let (w, h) = (Double(min(box.width ?? unbounded, unbounded)), Double(min(box.height ?? unbounded, unbounded)))
        // libvips' `calculate_shrink` for a fit: the larger factor both ways, at least 1
        // unless enlarging, at most the side itself.
        func shrinks(_ width: Int, _ height: Int) -> (Double, Double) {
            var shrink = max(Double(width) / w, Double(height) / h)
            if !enlarge { shrink = max(1, shrink) }
            return (min(shrink, Double(width)), min(shrink, Double(height)))
        }
        let (h0, v0) = shrinks(width, height)
        guard h0 > 1, v0 > 1 else { return nil }
        let common = min(h0, v0)
        let k = !jpeg ? 1 : common >= 16 ? 8 : common >= 8 ? 4 : common >= 4 ? 2 : 1
        let (loadedWidth, loadedHeight) = (width / k, height / k)
        guard loadedWidth > 0, loadedHeight > 0 else { return nil }
        // The resize from the loaded picture, as `vips_resize` reckons its output size.
        let (hs, vs) = shrinks(loadedWidth, loadedHeight)
        func reduced(_ length: Int, _ shrink: Double) -> Int {
            let scale = 1 / shrink
            return scale < 1 ? max(1, Int(Double(length) / (1 / scale) + 0.5)) : length
        }
        return (k, hs, vs, (reduced(loadedWidth, hs), reduced(loadedHeight, vs)))
    }

    /// The smallest size, aspect kept, that covers the box (each side at least the box's).
    static func cover(width: Int, height: Int, box: (width: Int, height: Int)) -> (width: Int, height: Int) {
        let scale = max(Double(box.width) / Double(width), Double(box.height) / Double(height))
        return (
            max(box.width, Int((Double(width) * scale).rounded())),
            max(box.height, Int((Double(height) * scale).rounded()))
        )
    }
}

/// The one shrink-on-load of several outputs that each start with `fit` or `fill` (after
/// the same `autorotate`, or none) and share no common steps: the input is loaded once, at
/// the size the largest output needs, and each output's own `fit`/`fill` is a plain resize
/// (`resize`) from the closest larger picture already made, followed by the rest of its
/// steps (`steps`).
struct SharedLoad: Sendable {
    let autorotate: Bool
    /// Each output's leading `fit` or `fill`.
    let boxes: [ChainPlan.Thumbnail.Box]
    /// Each output's steps after its resize.
    let steps: [[FilterStep]]

    /// nil when some output does not start with `fit`/`fill`, or they differ in `autorotate`.
    init?(_ plans: [ChainPlan]) {
        let thumbnails = plans.compactMap(\.thumbnail)
        guard thumbnails.count == plans.count, let first = thumbnails.first,
            thumbnails.allSatisfy({ $0.autorotate == first.autorotate })
        else { return nil }
        autorotate = first.autorotate
        boxes = thumbnails.map(\.box)
        steps = plans.map(\.steps)
    }

    /// The op output `index`'s resize stands for (`fit` or `fill`), for timings.
    func label(of index: Int) -> String {
        if case .fit = boxes[index] { return "fit" }
        return "fill"
    }

    /// Output `index`'s own resize made from `source` (the load, or a larger resize of the
    /// same picture): to `size` (its `target` from the input), then a fill's crop.
    ///
    /// A reduction by 2× or more starts with a box shrink by its whole part (each k×k block
    /// averaged), and lanczos3 does only the rest, as a JPEG's shrink-on-load (DCT scaling)
    /// and the thumbnail's reduce would. Each factor of 2 is `halved`, and the rest a
    /// lanczos3 `resizedExactly`: for an 8-bit picture in memory, as the load and the larger
    /// outputs are here, both are imgpipe's own vector code (CResample), at an eighth and a
    /// quarter of libvips 8.14's cost; this made decoding a JPEG again at 1/2 or 1/4 scale for
    /// a smaller output (libjpeg's DCT scaling, 2.5 ms per megapixel of the input) dearer
    /// than halving (about 0.6 ms per megapixel read), so that is no longer done (measured
    /// in `bench/outputs.sh`, bench/RESULTS.md). (An odd last row or column is left out,
    /// as libvips' own shrink-on-load does: on a grid of 4-px lines, 1601 or 803 px wide,
    /// the smaller outputs came out closer to the output made alone than with `shrunk`,
    /// whose last block takes the odd row or column: SSIM 0.77–0.98 against 0.71–0.90.)
    func resize(
        _ source: VipsImage, to size: (width: Int, height: Int), for index: Int, context: FilterContext
    ) throws -> VipsImage {
        let original = source
        var source = source
        var whole = min(source.width / max(1, size.width), source.height / max(1, size.height))
        // With alpha, the resample is done premultiplied, as vips_thumbnail does.
        let premultiplied = source.hasAlpha && (source.width, source.height) != size
        if premultiplied { source = try source.premultiplied() }
        while whole >= 2, whole.isMultiple(of: 2) {
            source = try source.halved()
            whole /= 2
        }
        if whole >= 2 { source = try source.shrunk(by: whole) }
        var resized = try source.resizedExactly(to: size, ownCode: true)
        if premultiplied { resized = try resized.unpremultiplied(like: original) }
        guard case .fill(let w, let h, let gravity, let focus) = boxes[index] else { return resized }
        return try resized.cropped(to: (w, h), gravity: gravity, focus: focus, context: context)
    }

    /// Whether output `index`'s resize keeps the whole picture (a `fit`; a `fill` crops).
    func keepsWholePicture(_ index: Int) -> Bool {
        if case .fit = boxes[index] { return true }
        return false
    }

    /// The size each output's own `fit` or `fill` resizes an input of `size` (as shown) and
    /// `format` to (a fill: before its crop): the size the output alone would have, reckoned
    /// as its own `vips_thumbnail` does for the formats `BoxGeometry.thumbnailFit` knows.
    func targets(from size: (width: Int, height: Int), format: ImageFormat) -> [(width: Int, height: Int)] {
        boxes.map { box in
            switch box {
            case .fit(let w, let h, let enlarge) where format == .jpeg || format == .png || format == .gif:
                BoxGeometry.thumbnailFit(
                    width: size.width, height: size.height, box: (w, h), enlarge: enlarge, jpeg: format == .jpeg)
            case .fit(let w, let h, let enlarge):
                BoxGeometry.fit(width: size.width, height: size.height, box: (w, h), enlarge: enlarge)
            case .fill(let w, let h, _, _): BoxGeometry.cover(width: size.width, height: size.height, box: (w, h))
            }
        }
    }

    /// The load for an input of this size (as shown, upright), whose outputs' `targets` are
    /// given. When one output's `fit`
    /// needs at least what every other output needs, the load is that output's own
    /// shrink-on-load (its pixels are then exactly what it would be on its own, and its
    /// resize does nothing). Otherwise a fit into the largest size any output needs, never
    /// larger than the input, with 2 pixels to spare, so that each output's own resize
    /// comes out at the size it would have on its own.
    func thumbnail(for size: (width: Int, height: Int), targets: [(width: Int, height: Int)]) -> ChainPlan.Thumbnail {
        // What each output needs of the input: its target, never more than the input.
        let needs = targets.map { (width: min($0.width, size.width), height: min($0.height, size.height)) }
        for (index, box) in boxes.enumerated() {
            guard case .fit(let w, let h, _) = box,
                needs.allSatisfy({ $0.width <= needs[index].width && $0.height <= needs[index].height })
            else { continue }
            return ChainPlan.Thumbnail(autorotate: autorotate, box: .fit(width: w, height: h, enlarge: false))
        }
        let width = needs.map(\.width).max().map { $0 + 2 } ?? 1
        let height = needs.map(\.height).max().map { $0 + 2 } ?? 1
        return ChainPlan.Thumbnail(autorotate: autorotate, box: .fit(width: width, height: height, enlarge: false))
    }
}
