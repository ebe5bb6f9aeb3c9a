extension PipelineSpec {
    /// Filter `index` with `${NAME}` expanded in every string a filter takes (caption and
    /// text lines, fonts, the watermark's path), as in the rest of the file; an unset
    /// variable is an error naming it and where it is used (`filters[2].top`).
    public func expandedFilter(at index: Int, in environment: Environment) throws -> FilterStep {
        try Self.expanded(filters[index], path: "filters[\(index)]", in: environment)
    }

    /// `filter` (found at `path`, e.g. `outputs[1].filters[0]`) with `${NAME}` expanded.
    package static func expanded(_ filter: FilterSpec, path: String, in environment: Environment) throws -> FilterStep {
        func expand(_ text: String, _ key: String) throws -> String {
            guard EnvString.needsExpansion(text) else { return text }
            return try EnvString(raw: text, path: "\(path).\(key)").expanded(in: environment)
        }
        switch filter.step {
        case .caption(var caption):
            caption.top = try caption.top.map { try expand($0, "top") }
            caption.bottom = try caption.bottom.map { try expand($0, "bottom") }
            caption.font = try expand(caption.font, "font")
            return .caption(caption)
        case .text(var overlay):
            overlay.text = try expand(overlay.text, "text")
            overlay.font = try expand(overlay.font, "font")
            return .text(overlay)
        case .watermark(var watermark):
            watermark.image = try expand(watermark.image, "image")
            return .watermark(watermark)
        case let step:
            return step
        }
    }
}
