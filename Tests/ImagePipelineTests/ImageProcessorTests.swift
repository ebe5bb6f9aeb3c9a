import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// Filters and output preparation, checked on decoded pixels.
@Suite("Image processing")
struct ImageProcessorTests {
    let directory: TemporaryDirectory
    let harness = ProcessingHarness()

    init() throws { directory = try TemporaryDirectory() }

    func processor(_ filters: [FilterStep], format: OutputFormat = .png) -> ImageProcessor {
        harness.processor(filters, format: format)
    }

    func run(_ filters: [FilterStep], on path: String, format: OutputFormat = .png) throws -> Pixels {
        try harness.run(filters, on: path, format: format)
    }

    func failure(_ filters: [FilterStep], on path: String, limits: Limits = Limits()) -> ItemFailure? {
        harness.failure(filters, on: path, limits: limits)
    }

    func assertColour(
        _ pixel: [UInt8], near colour: ImageFixtures.RGB, tolerance: Int = 40,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let expected = [Int(colour.0), Int(colour.1), Int(colour.2)]
        let actual = pixel.prefix(3).map(Int.init)
        #expect(
            zip(actual, expected).allSatisfy { abs($0 - $1) <= tolerance }, "pixel \(actual) is not near \(expected)",
            sourceLocation: sourceLocation)
    }

    // MARK: fit

    @Test func fitKeepsAspectInsideTheBox() throws {
        let path = directory.url("big.jpg")
        try ImageFixtures.jpeg(at: path, width: 1600, height: 1200)
        let out = try run([.fit(width: 256, height: 256, enlarge: false)], on: path)
        #expect((out.width, out.height) == (256, 192))
    }

    @Test func fitNeverEnlargesUnlessAsked() throws {
        let path = directory.url("small.png")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 100, height: 80), to: path)
        let kept = try run([.fit(width: 256, height: 256, enlarge: false)], on: path)
        #expect((kept.width, kept.height) == (100, 80))
        let enlarged = try run([.fit(width: 256, height: 256, enlarge: true)], on: path)
        #expect((enlarged.width, enlarged.height) == (256, 205))
    }

    @Test func fitWithOneSideIsUnboundedOnTheOther() throws {
        let path = directory.url("wide.png")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 800, height: 200), to: path)
        let out = try run([.fit(width: 400, height: nil, enlarge: false)], on: path)
        #expect((out.width, out.height) == (400, 100))
    }

    @Test func fitAfterAnotherStepGivesTheSameGeometry() throws {
        let path = directory.url("big.jpg")
        try ImageFixtures.jpeg(at: path, width: 1600, height: 1200)
        let out = try run([.grayscale, .fit(width: 256, height: 256, enlarge: false)], on: path)
        #expect((out.width, out.height, out.bands) == (256, 192, 1))
    }

    // MARK: fill

    @Test(arguments: [Gravity.centre, .north, .west, .southEast, .attention, .entropy])
    func fillGivesTheExactSize(gravity: Gravity) throws {
        let path = directory.url("fill.jpg")
        try ImageFixtures.jpeg(at: path, width: 1000, height: 600)
        let fused = try run([.fill(width: 200, height: 200, gravity: gravity, focus: nil)], on: path)
        #expect((fused.width, fused.height) == (200, 200))
        let stepwise = try run([.grayscale, .fill(width: 300, height: 120, gravity: gravity, focus: nil)], on: path)
        #expect((stepwise.width, stepwise.height) == (300, 120))
    }

    @Test func fillGravityChoosesWhichPartIsKept() throws {
        // 1000×600 quadrants, filled into a 200×200 square: the square covers 333×200 of
        // the scaled 333×200 image... so a west crop keeps the left (red/blue) half.
        let path = directory.url("q.png")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 1000, height: 500), to: path)
        let west = try run([.fill(width: 100, height: 100, gravity: .west, focus: nil)], on: path)
        assertColour(west[10, 10], near: ImageFixtures.red)
        assertColour(west[90, 90], near: ImageFixtures.blue)
        let east = try run([.fill(width: 100, height: 100, gravity: .east, focus: nil)], on: path)
        assertColour(east[10, 10], near: ImageFixtures.green)
        assertColour(east[90, 90], near: ImageFixtures.white)
        let northEastStepwise = try run([.grayscale, .fill(width: 100, height: 100, gravity: .northEast, focus: nil)], on: path)
        #expect(northEastStepwise.bands == 1)
        #expect(Int(northEastStepwise[90, 90][0]) > 200, "the white quadrant should land bottom-right")
    }

    // MARK: autorotate

    @Test func autorotateFusedWithFitTurnsTheImageUpright() throws {
        // Stored 300×200 with orientation 6 (display = turn 90° clockwise): upright 200×300.
        let path = directory.url("rot6.jpg")
        try ImageFixtures.jpeg(at: path, width: 300, height: 200, orientation: 6)
        let out = try run([.autorotate, .fit(width: 100, height: 1000, enlarge: false)], on: path)
        #expect((out.width, out.height) == (100, 150))
        // Turning clockwise puts the stored bottom-left (blue) at the top-left.
        assertColour(out[10, 10], near: ImageFixtures.blue)
        assertColour(out[90, 10], near: ImageFixtures.red)
        assertColour(out[10, 140], near: ImageFixtures.white)
    }

    @Test func autorotateAloneAndFitWithoutItDisagreeAsTheyShould() throws {
        let path = directory.url("rot6.jpg")
        try ImageFixtures.jpeg(at: path, width: 300, height: 200, orientation: 6)
        let upright = try run([.autorotate], on: path)
        #expect((upright.width, upright.height) == (200, 300))
        let unrotated = try run([.fit(width: 150, height: 150, enlarge: false)], on: path)
        #expect((unrotated.width, unrotated.height) == (150, 100), "fit alone must not rotate")
        assertColour(unrotated[10, 10], near: ImageFixtures.red)
    }

    // MARK: colour

    @Test func grayscaleGivesOneBand() throws {
        let path = directory.url("q.png")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 64, height: 64), to: path)
        let out = try run([.grayscale], on: path)
        #expect(out.bands == 1)
        #expect(out[50, 50][0] > 230, "white stays white")
    }

    @Test func cmykComesOutAsSRGB() throws {
        let path = directory.url("cmyk.jpg")
        // Full cyan ink and nothing else: a cyan-blue, far more blue/green than red.
        try ImageFixtures.cmykJPEG(at: path, width: 64, height: 48, ink: (255, 0, 0, 0))
        let out = try run([.fit(width: 32, height: 32, enlarge: false)], on: path, format: .jpeg)
        #expect(out.bands == 3)
        let pixel = out[16, 12].map(Int.init)
        #expect(pixel[2] > pixel[0] + 80 && pixel[1] > pixel[0] + 40, "cyan expected, got \(pixel)")
        let stepwise = try run([], on: path, format: .png)
        #expect(stepwise.bands == 3)
    }

    @Test func sixteenBitComesOutEightBit() throws {
        let path = directory.url("deep.png")
        try ImageFixtures.png16(at: path, width: 40, height: 30, colour: (65535, 32768, 0))
        let out = try run([], on: path)
        #expect(out.bands == 3)
        let pixel = out[5, 5].map(Int.init)
        #expect(abs(pixel[0] - 255) <= 2 && abs(pixel[1] - 128) <= 3 && pixel[2] <= 2, "got \(pixel)")
    }

    @Test func greyAlphaKeepsAlphaInPNGAndFlattensOntoWhiteInJPEG() throws {
        let path = directory.url("ga.png")
        try ImageFixtures.greyAlphaPNG(at: path, width: 40, height: 20, grey: 60)
        let png = try run([], on: path, format: .png)
        #expect(png.bands == 2)
        #expect(png[5, 5][1] == 0 && png[35, 5][1] == 255)
        let jpeg = try run([], on: path, format: .jpeg)
        #expect(jpeg.bands == 1)
        #expect(jpeg[5, 10][0] > 245, "transparent becomes white")
        #expect(abs(Int(jpeg[35, 10][0]) - 60) < 8, "opaque grey kept")
    }

    @Test func rgbaKeepsAlphaInWebPAndFlattensInJPEG() throws {
        let path = directory.url("rgba.png")
        try ImageFixtures.rgbaPNG(at: path, width: 60, height: 40)
        let webp = try run([.fit(width: 30, height: 30, enlarge: false)], on: path, format: .webp)
        #expect(webp.bands == 4)
        let jpeg = try run([.fit(width: 30, height: 30, enlarge: false)], on: path, format: .jpeg)
        #expect(jpeg.bands == 3)
        assertColour(jpeg[3, 3], near: (255, 255, 255), tolerance: 12)
        assertColour(jpeg[27, 3], near: ImageFixtures.green)
    }

    @Test func paletteInputWorks() throws {
        let path = directory.url("palette.png")
        try ImageFixtures.palettePNG(at: path, width: 64, height: 64)
        let out = try run([.fit(width: 32, height: 32, enlarge: false)], on: path, format: .jpeg)
        #expect((out.width, out.height, out.bands) == (32, 32, 3))
        assertColour(out[4, 4], near: ImageFixtures.red)
    }

    // MARK: hostile input

    @Test func truncatedJPEGFailsInsteadOfComingOutGrey() throws {
        let whole = directory.url("whole.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 800, height: 600), to: whole)
        let cut = directory.url("cut.jpg")
        try ImageFixtures.truncate(whole, to: cut, keeping: 0.5)
        #expect(failure([.fit(width: 200, height: 200, enlarge: false)], on: cut)?.reason == .decode)
        #expect(failure([.grayscale], on: cut)?.reason == .decode)
    }

    @Test func emptyAndNonImageFilesFail() throws {
        let empty = try directory.write("", to: "empty.jpg")
        #expect(failure([], on: empty) == ItemFailure(.decode, "empty file (0 bytes)"))
        let text = try directory.write("just some notes", to: "notes.png")
        #expect(failure([], on: text)?.message.contains("not an image") == true)
    }

    @Test func untrustedFormatsAreRefused() throws {
        let svg = try directory.write(#"<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>"#, to: "v.png")
        #expect(failure([], on: svg)?.message.contains("SVG") == true)
        let ppm = try directory.write("P6\n2 2\n255\n............", to: "p.jpg")
        #expect(failure([], on: ppm)?.message.contains("PPM") == true)
    }

    @Test func pixelLimitIsCheckedFromTheHeaderBeforeDecoding() throws {
        let bomb = directory.url("bomb.png")
        try ImageFixtures.pngHeaderOnly(at: bomb, width: 100_000, height: 100_000)
        let failure = failure([.fit(width: 100, height: 100, enlarge: false)], on: bomb)
        #expect(failure?.reason == .limit)
        #expect(failure?.message.contains("100000×100000") == true)

        let ordinary = directory.url("ordinary.jpg")
        try ImageFixtures.jpeg(at: ordinary, width: 1200, height: 1000)
        var limits = Limits()
        limits.maxPixels = 1_000_000
        #expect(self.failure([], on: ordinary, limits: limits)?.reason == .limit)
        limits.maxPixels = 1_200_000
        #expect(self.failure([], on: ordinary, limits: limits) == nil)
    }

    @Test func byteLimitIsChecked() throws {
        let path = directory.url("photo.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 400, height: 300), to: path)
        var limits = Limits()
        limits.maxBytes = 1000
        let failure = failure([], on: path, limits: limits)
        #expect(failure?.reason == .limit)
        #expect(failure?.message.contains("maxBytes") == true)
    }

    @Test func decoderIsChosenByMagicBytesNotExtension() throws {
        let path = directory.url("actually-a-png.jpg")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 40, height: 40), to: directory.url("x.png"))
        try FileManager.default.moveItem(atPath: directory.url("x.png"), toPath: path)
        let result = try processor([]).process(.file(path))
        #expect(result.inputFormat == .png)
    }

    /// A FIFO (or a device) where an input file should be fails `download` at once: the
    /// file is opened without blocking and must be a regular file.
    @Test func anInputThatIsNotARegularFileFailsWithoutBlocking() throws {
        let fifo = directory.url("pipe.jpg")
        #expect(mkfifo(fifo, 0o644) == 0)
        for path in [fifo, "/dev/zero"] {
            let failure = harness.failure([], on: path)
            #expect(
                failure?.reason == .download && failure?.message.contains("not a regular file") == true,
                "\(path): \(String(describing: failure))")
        }
    }

}
