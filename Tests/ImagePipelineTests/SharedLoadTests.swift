import Foundation
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// How several outputs of one item are made from one load: a derived output, halved and
/// reduced from a larger output, still comes out as the output made on its own (which
/// libvips shrinks on load) would, checked on decoded pixels.
@Suite("Shared load")
struct SharedLoadTests {
    let directory: TemporaryDirectory

    init() throws { directory = try TemporaryDirectory("imgpipe-shared-load") }

    /// Fits into 1280, 640 and 320 px and a 150×150 fill.
    static let webSizes: [FilterStep] = [
        .fit(width: 1280, height: 1280, enlarge: false),
        .fit(width: 640, height: 640, enlarge: false),
        .fit(width: 320, height: 320, enlarge: false),
        .fill(width: 150, height: 150, gravity: .centre, focus: nil),
    ]

    /// Each output of a several-output processor beside the same output made alone, as
    /// decoded PNGs.
    func outputs(
        of path: String, boxes: [FilterStep] = webSizes,
        autorotate: Bool
    ) throws -> [(several: VipsImage, alone: VipsImage)] {
        let lead: [FilterStep] = autorotate ? [.autorotate] : []
        let plans = boxes.enumerated().map { index, box in
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

    static func fits(_ widths: Int...) -> [FilterStep] {
        widths.map { .fit(width: $0, height: $0, enlarge: false) }
    }

    @Test(
        "derived outputs match each output alone",
        arguments: [
            // 640 halved from the 1280 load, which the 640 alone decodes at 1/2 scale.
            (1280, 960, nil, webSizes),
            // The same with an EXIF quarter turn.
            (1280, 960, 6, webSizes),
            // 640 halved from the 1280 load, 320 halved from 640.
            (1600, 1200, nil, webSizes),
            (1282, 962, nil, webSizes),
            (1001, 751, nil, webSizes),
            // Odd sides: not halved (which would drop the odd row and column), so no drift.
            (1601, 1201, nil, fits(1601, 801, 400, 200)),
            (1281, 961, nil, fits(1281, 641, 320)),
            (1281, 961, 6, fits(1281, 641, 320)),
            (8200, 64, nil, fits(8200, 4100, 2050, 1025)),
            // Reduced 16× and more: alone, the output is fitted from the JPEG decoded at 1/8
            // scale, 187×125, and comes out 4×3 (5×3 from the input's own sides).
            (
                1500, 1000, nil,
                [
                    .fit(width: 1280, height: 1280, enlarge: false), .fit(width: nil, height: 3, enlarge: false),
                    .fit(width: nil, height: 17, enlarge: false), .fit(width: 33, height: nil, enlarge: false),
                ]
            ),
            (
                1499, 1003, 6,
                [
                    .fit(width: 1280, height: 1280, enlarge: false), .fit(width: nil, height: 3, enlarge: false),
                    .fit(width: 7, height: 7, enlarge: false),
                ]
            ),
            // A half reckoned as libvips does, the side divided by the factor: 432×243 into 200
            // is 200×112 (243 ÷ 2.16 = 112.4999…), not 200×113 (243 × 200/432 = 112.5).
            (432, 243, nil, fits(432, 200, 100)),
        ] as [(Int, Int, Int?, [FilterStep])])
    func derivedOutputsMatchEachOutputAlone(width: Int, height: Int, orientation: Int?, boxes: [FilterStep]) throws {
        var photo = try ImageFixtures.photo(width: width, height: height, seed: width)
        if let orientation { photo = try photo.settingOrientation(orientation) }
        let path = directory.url("photo-\(width)x\(height)-\(orientation ?? 1).jpg")
        try ImageFixtures.write(photo, to: path)
        for (index, pair) in try outputs(of: path, boxes: boxes, autorotate: orientation != nil).enumerated() {
            #expect(
                (pair.several.width, pair.several.height) == (pair.alone.width, pair.alone.height),
                "output \(index): \(pair.several.width)×\(pair.several.height), alone \(pair.alone.width)×\(pair.alone.height)")
            let similarity = try pair.several.structuralSimilarity(to: pair.alone)
            #expect(similarity > 0.97, "output \(index): SSIM \(similarity)")
        }
    }

    /// Black lines 4 px wide every 64 px on grey: a shift of a fraction of a pixel, or
    /// blurred edges, show in the SSIM (a smooth photo would hide them).
    static func grid(width: Int, height: Int) throws -> VipsImage {
        var bytes = [UInt8](repeating: 200, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width where x % 64 < 4 || y % 64 < 4 {
                for band in 0..<3 { bytes[(y * width + x) * 3 + band] = 0 }
            }
        }
        return try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb)
    }

    /// The half-size output of a JPEG whose sides are not multiples of 2 (1281 px → 641)
    /// is a lanczos3 reduction of the load by just under 2, not a halving (which would drop
    /// the last row and column and put the lines off their place): the lines stay where the
    /// output made alone has them.
    @Test(arguments: [(1601, 1201), (1281, 961), (1282, 961)])
    func linesOfAnOddSizedJPEGStayInPlace(width: Int, height: Int) throws {
        let path = directory.url("grid-\(width)x\(height).jpg")
        try ImageFixtures.write(try Self.grid(width: width, height: height), to: path + "[Q=95,subsample_mode=off]")
        let half = try outputs(of: path, boxes: Self.fits(width, (width + 1) / 2), autorotate: false)[1]
        #expect((half.several.width, half.several.height) == (half.alone.width, half.alone.height))
        let similarity = try half.several.structuralSimilarity(to: half.alone)
        #expect(similarity > 0.99, "SSIM \(similarity)")
    }

    /// An RGBA picture, opaque white on the left and transparent red on the right: its
    /// smaller outputs, halved and resampled from the larger, are resampled premultiplied
    /// (as vips_thumbnail does alone), so the semi-transparent edge stays white: neither the
    /// hidden red nor the black the load leaves under transparent pixels shows in it.
    @Test func theColourUnderTransparentPixelsDoesNotShowInTheEdges() throws {
        let (width, height) = (401, 300)
        var bytes = [UInt8](repeating: 0, count: width * height * 4)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * 4
                if x < 201 {
                    (bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]) = (255, 255, 255, 255)
                } else {
                    (bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]) = (255, 0, 0, 0)
                }
            }
        }
        let path = directory.url("edge.png")
        try ImageFixtures.write(try VipsImage.fromPixels(bytes, width: width, height: height, bands: 4).labelled(.srgb), to: path)
        for (index, pair) in try outputs(of: path, boxes: Self.fits(401, 150, 75), autorotate: false).enumerated() {
            for (name, image) in [("several", pair.several), ("alone", pair.alone)] {
                let pixels = try image.pixels()
                var darkest = 255
                for y in 0..<pixels.height {
                    for x in 0..<pixels.width where pixels[x, y][3] > 8 {
                        darkest = min(darkest, Int(pixels[x, y].prefix(3).min() ?? 0))
                    }
                }
                #expect(darkest > 224, "output \(index), \(name): a visible pixel has a band at \(darkest)")
            }
        }
    }

    /// A JPEG with a side shorter than the scale libvips would decode it at: its outputs
    /// come out as they do alone.
    @Test(arguments: [(1280, 1, [1280, 640]), (2, 3, [2, 1]), (4, 4, [4, 1]), (3, 1200, [1200, 300])])
    func aJPEGThinnerThanTheScaleIsMadeAsAlone(width: Int, height: Int, widths: [Int]) throws {
        let path = directory.url("thin-\(width)x\(height).jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: width, height: height), to: path)
        let boxes = widths.map { FilterStep.fit(width: $0, height: $0, enlarge: false) }
        for pair in try outputs(of: path, boxes: boxes, autorotate: false) {
            #expect((pair.several.width, pair.several.height) == (pair.alone.width, pair.alone.height))
            let (several, alone) = (try pair.several.pixels().means(), try pair.alone.pixels().means())
            #expect(zip(several, alone).allSatisfy { abs($0 - $1) < 8 }, "means \(several) against \(alone)")
        }
    }

    @Test func aQuarterTurnedInputComesOutUpright() throws {
        // Left half black, right half white before the turn; orientation 6 turns it a
        // quarter clockwise for display, so the top becomes black and the bottom white.
        var bytes = [UInt8](repeating: 0, count: 1280 * 960 * 3)
        for y in 0..<960 { for x in 640..<1280 { for band in 0..<3 { bytes[(y * 1280 + x) * 3 + band] = 255 } } }
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

    /// A JPEG output of `box`, with `quality` and the output's own `steps` after it.
    static func jpegOutput(_ id: String, _ box: FilterStep, quality: Int = 80, steps: [FilterStep] = []) -> OutputPlan {
        var spec = OutputSpec()
        spec.id = id
        spec.format = .jpeg
        spec.quality = quality
        return OutputPlan(spec, filters: [box] + steps)
    }

    /// A 200×150 input fits 1280 and 640 as it is: those two outputs are the same picture,
    /// encoded the same way, and share their bytes (encoded once; what is checked is that
    /// sharing gives each its own id and place, and never joins outputs that differ).
    /// The outputs of the picture as loaded have exactly the bytes they have alone (JPEG
    /// encoding is deterministic), also those that are not alike: another quality, a step
    /// of their own. (The 100-px output is halved from the load, not shrunk on load as it
    /// is alone: its size is the same, its bytes not.)
    @Test func outputsThatComeOutTheSameAreEncodedOnceAndEachIsWhatItIsAlone() throws {
        let path = directory.url("small.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 150, seed: 5), to: path)
        let plans = [
            Self.jpegOutput("w1280", .fit(width: 1280, height: 1280, enlarge: false)),
            Self.jpegOutput("w640", .fit(width: 640, height: 640, enlarge: false)),
            Self.jpegOutput("q60", .fit(width: 640, height: 640, enlarge: false), quality: 60),
            Self.jpegOutput("blurred", .fit(width: 640, height: 640, enlarge: false), steps: [.blur(sigma: 2)]),
            Self.jpegOutput("w100", .fit(width: 100, height: 100, enlarge: false)),
        ]
        let several = try ImageProcessor(filters: [], outputs: plans, limits: Limits()).processOutputs(.file(path))
        defer { VipsRuntime.endThreadWork() }
        #expect(several.map(\.output) == plans.map(\.spec.id))
        for (plan, made) in zip(plans, several) {
            let alone = try ImageProcessor(filters: plan.filters, output: plan.spec, limits: Limits()).process(.file(path))
            #expect((made.width, made.height) == (alone.width, alone.height))
            guard plan.spec.id != "w100" else { continue }
            #expect(made.data == alone.data, "\(plan.spec.id): \(made.data.count) bytes, alone \(alone.data.count)")
            #expect(made.sha256 == alone.sha256)
        }
        #expect(several[0].data == several[1].data)
        #expect(Set(several.map(\.data)).count == 4, "w1280 and w640 alike, the other three each their own")
    }

    /// An output encoded while the worker makes the next one, whose encode fails (WebP
    /// holds at most 16383 px a side), fails the item with its own message, although the
    /// output made after it was encoded well.
    @Test func anOutputWhoseEncodeFailsWhileTheNextIsMadeFailsTheItem() throws {
        var bytes = [UInt8](repeating: 90, count: 17000 * 4 * 3)
        for index in stride(from: 0, to: bytes.count, by: 7) { bytes[index] = 200 }
        let path = directory.url("wide.png")
        try ImageFixtures.write(try VipsImage.fromPixels(bytes, width: 17000, height: 4, bands: 3).labelled(.srgb), to: path)
        var wide = OutputSpec()
        wide.id = "wide"
        wide.format = .webp
        let plans = [
            OutputPlan(wide, filters: [.fit(width: 20000, height: 20000, enlarge: false)]),
            Self.jpegOutput("small", .fit(width: 1000, height: 1000, enlarge: false)),
        ]
        let processor = ImageProcessor(filters: [], outputs: plans, limits: Limits())
        defer { VipsRuntime.endThreadWork() }
        let error = #expect(throws: ItemFailure.self) { try processor.processOutputs(.file(path)) }
        #expect(error?.reason == .encode)
        #expect(
            error.map { $0.message.contains("too large") && $0.message.hasSuffix("(output wide)") } == true,
            "\(error?.message ?? "-")")
        // The small output alone is fine: the failure is the wide one's.
        let small = try ImageProcessor(filters: plans[1].filters, output: plans[1].spec, limits: Limits()).process(.file(path))
        #expect(small.width == 1000)
    }
}
