import Foundation
import PipelineKit
import VipsKit

/// How like its source an output is: SSIM of the output against the source resampled to
/// the output's size, for the dry-run's contact sheet and table.
///
/// The source is read with `vips_thumbnail` forced to exactly the output's width and height
/// (shrink-on-load, turned upright first when the chain has `autorotate`), so the score
/// judges what the chain and the encoder did at the output's own resolution, not the
/// resize itself. It is only meaningful when the output is a resampled version of the
/// whole source: when the aspect ratios differ (a `fill` or `crop`, `pad`, a rotation by
/// other than a right angle), there is no score. Changes that keep the geometry
/// (captions, colour, a watermark, a quarter turn of a square image) are scored like
/// damage, which is what they are to SSIM.
enum SourceSimilarity {
    /// The largest difference in aspect ratio still taken as the same picture: rounding
    /// of either side by up to a pixel, plus 1 %.
    static func sameAspect(source: (width: Int, height: Int), output: (width: Int, height: Int)) -> Bool {
        guard source.width > 0, source.height > 0, output.width > 0, output.height > 0 else { return false }
        let scale = Double(output.width) / Double(source.width)
        let expectedHeight = Double(source.height) * scale
        return abs(expectedHeight - Double(output.height)) <= 1 + 0.01 * expectedHeight
    }

    /// SSIM of the picture at `output` against the one at `source`, or nil when the
    /// geometry differs (see above) or either cannot be read. `source` is given with its
    /// upright size when `autorotate` is set.
    static func score(output: String, source: String, autorotate: Bool) -> Double? {
        do {
            let after = try VipsImage.open(path: output)
            var before = try VipsImage.open(path: source)
            let size = autorotate ? before.uprightSize : (before.width, before.height)
            guard sameAspect(source: size, output: (after.width, after.height)) else { return nil }
            before = try VipsImage.thumbnail(
                path: source, width: after.width, height: after.height, size: .force,
                autorotate: autorotate)
            return try after.structuralSimilarity(to: before)
        } catch {
            return nil
        }
    }
}
