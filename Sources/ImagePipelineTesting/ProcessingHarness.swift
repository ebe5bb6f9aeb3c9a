import Foundation
import ImagePipeline
import PipelineKit
import VipsKit

/// Runs filter chains through `ImageProcessor` and decodes what comes out.
public struct ProcessingHarness: Sendable {
    public let baseDirectory: String

    public init(baseDirectory: String = "/") {
        self.baseDirectory = baseDirectory
    }

    public func processor(_ filters: [FilterStep], format: OutputFormat = .png, limits: Limits = Limits()) -> ImageProcessor {
        var output = OutputSpec()
        output.format = format
        return ImageProcessor(filters: filters, output: output, limits: limits, baseDirectory: baseDirectory)
    }

    /// The chain's output, decoded.
    public func run(_ filters: [FilterStep], on path: String, format: OutputFormat = .png) throws -> Pixels {
        let result = try processor(filters, format: format).process(.file(path))
        let pixels = try VipsImage.open(data: result.data).pixels()
        VipsRuntime.endThreadWork()
        return pixels
    }

    /// The chain's failure, or nil when it succeeded.
    public func failure(_ filters: [FilterStep], on path: String, limits: Limits = Limits()) -> ItemFailure? {
        do {
            _ = try processor(filters, limits: limits).process(.file(path))
            VipsRuntime.endThreadWork()
            return nil
        } catch {
            return error
        }
    }
}

extension Pixels {
    /// Mean of each band over a rectangle (the whole image by default).
    public func means(x: Int = 0, y: Int = 0, width w: Int? = nil, height h: Int? = nil) -> [Double] {
        (0..<bands).map { mean(band: $0, x: x, y: y, width: w, height: h) }
    }

    /// Mean absolute difference between horizontally adjacent samples: edge energy.
    public var edgeEnergy: Double {
        var total = 0
        for y in 0..<height {
            for x in 1..<width {
                for band in 0..<min(bands, 3) {
                    total += abs(Int(samples[(y * width + x) * bands + band]) - Int(samples[(y * width + x - 1) * bands + band]))
                }
            }
        }
        return Double(total) / Double(max(1, height * (width - 1) * min(bands, 3)))
    }

    /// The largest per-sample difference from `other` over rows `rows` (same size images).
    public func maxDifference(from other: Pixels, rows: Range<Int>) -> Int {
        var worst = 0
        for y in rows {
            for x in 0..<min(width, other.width) {
                for band in 0..<min(bands, other.bands, 3) {
                    worst = max(worst, abs(Int(self[x, y][band]) - Int(other[x, y][band])))
                }
            }
        }
        return worst
    }
}
