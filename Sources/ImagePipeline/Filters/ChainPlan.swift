/// How a filter chain runs: a leading `autorotate`/`fit`/`fill` becomes one shrink-on-load
/// `vips_thumbnail` call, and the rest run one by one on its result.
struct ChainPlan: Sendable, Equatable {
    /// The resize done while loading, when the chain starts with `fit` or `fill`
    /// (optionally after `autorotate`).
    struct Thumbnail: Sendable, Equatable {
        enum Box: Sendable, Equatable {
            case fit(width: Int?, height: Int?, enlarge: Bool)
            case fill(width: Int, height: Int, gravity: Gravity)
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

    /// `fuse: false` runs every step on its own (for benchmarking the fusion).
    init(_ filters: [FilterStep], fuse: Bool = true) {
        guard fuse else {
            thumbnail = nil
            steps = filters
            return
        }
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
        case let .fit(width, height, enlarge)?:
            thumbnail = Thumbnail(autorotate: autorotate, box: .fit(width: width, height: height, enlarge: enlarge))
            rest = rest.dropFirst()
        case let .fill(width, height, gravity)?:
            thumbnail = Thumbnail(autorotate: autorotate, box: .fill(width: width, height: height, gravity: gravity))
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

    /// The smallest size, aspect kept, that covers the box (each side at least the box's).
    static func cover(width: Int, height: Int, box: (width: Int, height: Int)) -> (width: Int, height: Int) {
        let scale = max(Double(box.width) / Double(width), Double(box.height) / Double(height))
        return (max(box.width, Int((Double(width) * scale).rounded())),
                max(box.height, Int((Double(height) * scale).rounded())))
    }
}
