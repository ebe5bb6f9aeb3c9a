import Foundation
@testable import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

/// How several outputs of one item are made from one load: a derived output decoded again
/// at a JPEG scale, or halved from a larger output, still comes out as the output made on
/// its own would, checked on decoded pixels.
@Suite("Shared load")
struct SharedLoadTests {
    let directory: TemporaryDirectory

    init() throws { directory = try TemporaryDirectory("imgpipe-shared-load") }

    static let boxes: [FilterStep] = [
        .fit(width: 1280, height: 1280, enlarge: false),
        .fit(width: 640, height: 640, enlarge: false),
        .fit(width: 320, height: 320, enlarge: false),
        .fill(width: 150, height: 150, gravity: .centre),
    ]

    /// Each output of a several-output processor beside the same output made alone, as
    /// decoded PNGs.
    func outputs(of path: String, autorotate: Bool) throws -> [(several: VipsImage, alone: VipsImage)] {
        let lead: [FilterStep] = autorotate ? [.autorotate] : []
        let plans = Self.boxes.enumerated().map { index, box in
            var spec = OutputSpec()
            spec.id = "o\(index)"
            spec.format = .png
            return OutputPlan(spec, filters: lead + [box])
        }
        let several = try ImageProcessor(filters: [], outputs: plans, limits: Limits()).processOutputs(.file(path))
        defer { VipsRuntime.endThreadWork() }
        return try zip(plans, several).map { plan, made in
            let alone = try ImageProcessor(filters: plan.filters, output: plan.spec, limits: Limits()).process(.file(path))
            return (try VipsImage.open(data: made.data), try VipsImage.open(data: alone.data))
        }
    }

    @Test("derived outputs match each output alone", arguments: [
        // 640 and 320 decoded again at 1/2 and 1/4 scale.
        (1280, 960, nil),
        // The same with an EXIF quarter turn: decoded again, then turned upright.
        (1280, 960, 6),
        // 640 halved from the 1280 load, 320 halved from 640.
        (1600, 1200, nil),
        // Odd sizes: the halving leaves out the last column and row.
        (1282, 962, nil),
        (1001, 751, nil),
    ] as [(Int, Int, Int?)])
    func derivedOutputsMatchEachOutputAlone(width: Int, height: Int, orientation: Int?) throws {
        var photo = try ImageFixtures.photo(width: width, height: height, seed: width)
        if let orientation { photo = try photo.settingOrientation(orientation) }
        let path = directory.url("photo-\(width)x\(height)-\(orientation ?? 1).jpg")
        try ImageFixtures.write(photo, to: path)
        for (index, pair) in try outputs(of: path, autorotate: orientation != nil).enumerated() {
            #expect((pair.several.width, pair.several.height) == (pair.alone.width, pair.alone.height),
                    "output \(index): \(pair.several.width)×\(pair.several.height), alone \(pair.alone.width)×\(pair.alone.height)")
            let similarity = try pair.several.structuralSimilarity(to: pair.alone)
            #expect(similarity > 0.97, "output \(index): SSIM \(similarity)")
        }
    }

    @Test func aQuarterTurnedInputComesOutUpright() throws {
        // Left half black, right half white before the turn; orientation 6 turns it a
        // quarter clockwise for display, so the top becomes black and the bottom white.
        var bytes = [UInt8](repeating: 0, count: 1280 * 960 * 3)
        for y in 0 ..< 960 { for x in 640 ..< 1280 { for band in 0 ..< 3 { bytes[(y * 1280 + x) * 3 + band] = 255 } } }
        let image = try VipsImage.fromPixels(bytes, width: 1280, height: 960, bands: 3).labelled(.srgb).settingOrientation(6)
        let path = directory.url("turned.jpg")
        try ImageFixtures.write(image, to: path)
        let made = try outputs(of: path, autorotate: true)
        // The 320 output (1/4 scale decode: 240×320 upright) is black on top, white below.
        let pixels = try made[2].several.pixels()
        #expect((pixels.width, pixels.height) == (240, 320))
        #expect(pixels.means(y: 0, height: 100)[0] < 30)
        #expect(pixels.means(y: 220, height: 100)[0] > 225)
    }

    @Test func jpegScaleIsTheFactorThatDecodesStraightToTheGoal() {
        #expect(SharedLoad.jpegScale(from: (1280, 960), to: (640, 480)) == 2)
        #expect(SharedLoad.jpegScale(from: (1280, 960), to: (320, 240)) == 4)
        #expect(SharedLoad.jpegScale(from: (1024, 768), to: (128, 96)) == 8)
        // libjpeg rounds up: 1281 px at 1/2 scale is 641 px.
        #expect(SharedLoad.jpegScale(from: (1281, 961), to: (641, 481)) == 2)
        #expect(SharedLoad.jpegScale(from: (1281, 961), to: (640, 480)) == nil)
        #expect(SharedLoad.jpegScale(from: (1600, 1200), to: (640, 480)) == nil)
    }

    @Test func halvingAveragesEachTwoByTwoBlock() throws {
        // 5×3, one band: the last column and row are left out.
        let samples: [UInt8] = [
            10, 20, 30, 40, 250,
            50, 60, 70, 80, 250,
            250, 250, 250, 250, 250,
        ]
        let halved = try VipsImage.fromPixels(samples, width: 5, height: 3, bands: 1).halved().pixels()
        #expect((halved.width, halved.height) == (2, 1))
        #expect(halved.samples == [35, 55])
    }
}
