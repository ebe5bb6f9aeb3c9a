/// The largest picture a filter chain can have made so far, side by side, as far as the
/// chain alone says (nil: any size): a `fit` or `fill` sets it, a `pad` grows it, a `resize`
/// by scale or a free rotation loses it. What `validate` knows of sizes without an image.
package struct SizeBound: Equatable {
    package var width: Int?
    package var height: Int?

    package static let any = SizeBound(width: nil, height: nil)

    /// The bound of what `step` makes of a picture within this one.
    package func after(_ step: FilterStep) -> SizeBound {
        func plus(_ side: Int?, _ more: Int) -> Int? { side.map { $0 + more } }
        switch step {
        case .autorotate:
            // A quarter turn may swap the sides.
            guard let width, let height else { return .any }
            return SizeBound(width: max(width, height), height: max(width, height))
        case .fit(let boxWidth, let boxHeight, let enlarge):
            // Inside the box; a side the box leaves open grows only when enlarging.
            func side(_ box: Int?, _ bound: Int?) -> Int? {
                guard let box else { return enlarge ? nil : bound }
                return enlarge ? box : min(box, bound ?? box)
            }
            return SizeBound(width: side(boxWidth, width), height: side(boxHeight, height))
        case .fill(let boxWidth, let boxHeight, _, _):
            return SizeBound(width: boxWidth, height: boxHeight)
        case .resize(let boxWidth, let boxHeight, let scale):
            return scale == nil ? SizeBound(width: boxWidth, height: boxHeight) : .any
        case .cropRect(_, _, let cropWidth, let cropHeight):
            return SizeBound(width: min(cropWidth, width ?? cropWidth), height: min(cropHeight, height ?? cropHeight))
        case .rotate(let degrees, _):
            var turn = degrees.truncatingRemainder(dividingBy: 360)
            if turn < 0 { turn += 360 }
            if turn == 0 || turn == 180 { return self }
            return turn == 90 || turn == 270 ? SizeBound(width: height, height: width) : .any
        case .pad(let top, let right, let bottom, let left, _):
            return SizeBound(width: plus(width, left + right), height: plus(height, top + bottom))
        case .border(let borderWidth, _):
            return SizeBound(width: plus(width, 2 * borderWidth), height: plus(height, 2 * borderWidth))
        case .cropAspect, .trim, .flip, .roundCorners, .adjust, .grayscale, .sepia, .invert, .posterize, .vignette, .tint,
            .normalize, .threshold, .blur, .sharpen, .pixelate, .median, .caption, .text, .watermark:
            return self
        }
    }

    /// Why `step` cannot work on any picture within this bound, or nil: a `text` whose
    /// margin is as large as the side its gravity pushes it against lies wholly outside
    /// every such picture (it would fail each item).
    package func fault(of step: FilterStep) -> String? {
        guard case .text(let overlay) = step else { return nil }
        let name = overlay.gravity.rawValue
        let vertical = name.hasPrefix("north") || name.hasPrefix("south")
        let horizontal = name.hasSuffix("east") || name.hasSuffix("west")
        for (pushed, side, bound) in [(vertical, "high", height), (horizontal, "wide", width)] {
            guard pushed, let bound, overlay.margin >= bound else { continue }
            return "margin \(overlay.margin) from the \(name) edge puts the text wholly outside the picture, which the "
                + "filters before it make at most \(bound) pixels \(side); make the margin smaller than \(bound)"
        }
        return nil
    }

    /// The faults of a chain of steps, each at its path in the pipeline file.
    package static func faults(of chain: [(step: FilterStep, path: String)]) -> [(path: String, message: String)] {
        var bound = SizeBound.any
        var faults: [(path: String, message: String)] = []
        for (step, path) in chain {
            if let fault = bound.fault(of: step) { faults.append((path, fault)) }
            bound = bound.after(step)
        }
        return faults
    }
}
