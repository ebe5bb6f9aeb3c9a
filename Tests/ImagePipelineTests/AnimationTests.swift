import Foundation
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// Animated GIF and WebP inputs: every frame through the chain, delays and loop count
/// kept, read back by decoding every frame of the output.
@Suite("Animation")
struct AnimationTests {
    let directory: TemporaryDirectory

    init() throws { directory = try TemporaryDirectory("imgpipe-animation") }

    /// 30 frames of 200×100, frame i showing for 40 + 10·i ms, played 3 times.
    static let delays = (0..<30).map { 40 + 10 * $0 }

    func gif(count: Int = 30, width: Int = 200, height: Int = 100) throws -> String {
        let path = directory.url("anim-\(count)-\(width)x\(height).gif")
        let delays = count == 30 ? Self.delays : nil
        try ImageFixtures.animatedGIF(count: count, width: width, height: height, delays: delays, loop: 3)
            .write(to: URL(fileURLWithPath: path))
        return path
    }

    func output(_ format: OutputFormat, animation: Bool = true, quality: Int = 90) -> OutputSpec {
        var spec = OutputSpec()
        spec.format = format
        spec.quality = quality
        spec.keepsAnimation = animation
        return spec
    }

    /// Every frame of `data`: the tall picture, the frame height and the frame count.
    func frames(of data: Data) throws -> (pixels: Pixels, height: Int, count: Int, delays: [Int], loop: Int?) {
        defer { VipsRuntime.endThreadWork() }
        // A still PNG or JPEG has no frames to read as such.
        let image = try (try? VipsImage.openFrames(data: data)) ?? VipsImage.open(data: data)
        return (try image.pixels(), image.pageHeight, image.pageCount, image.frameDelays, image.loopCount)
    }

    /// The x of the white square's left edge in frame `index` (rows `height` tall), or nil.
    func square(in pixels: Pixels, frame index: Int, height: Int) -> Int? {
        let row = index * height + 2
        return (0..<pixels.width).first { x in pixels[x, row].prefix(3).allSatisfy { $0 > 230 } }
    }

    @Test func aGIFBecomesAnAnimatedWebPFrameByFrame() throws {
        let path = try gif()
        let processor = ImageProcessor(
            filters: [.fit(width: 100, height: 100, enlarge: false)], output: output(.webp), limits: Limits())
        let made = try processor.process(.file(path))
        #expect((made.width, made.height) == (100, 50), "the record gives one frame's size")
        let out = try frames(of: made.data)
        #expect(out.count == 30)
        #expect(out.height == 50)
        #expect(out.pixels.height == 1500)
        #expect(out.delays == Self.delays)
        #expect(out.loop == 3)
        for index in 0..<30 {
            // The grey away from the square, and the square where the frame put it (halved).
            let grey = out.pixels.mean(band: 1, x: 0, y: index * 50 + 20, width: 100, height: 30)
            #expect(abs(grey - Double(ImageFixtures.frameGrey(index))) < 4, "frame \(index) grey \(grey)")
            let expected = index * 192 / 29 / 2
            let found = try #require(square(in: out.pixels, frame: index, height: 50), "frame \(index) lost its square")
            #expect(abs(found - expected) <= 2, "frame \(index): square at \(found), expected \(expected)")
        }
    }

    /// GIF to GIF through a crop and a colour step: every frame gets the same window.
    @Test func aGIFStaysAGIFThroughGeometryAndColour() throws {
        let path = try gif(count: 12, width: 120, height: 80)
        let steps: [FilterStep] = [
            .cropRect(x: 20, y: 0, width: 80, height: 40), .flip(horizontal: true), .invert,
        ]
        let made = try ImageProcessor(filters: steps, output: output(.gif), limits: Limits()).process(.file(path))
        let out = try frames(of: made.data)
        #expect((out.count, out.height, out.pixels.width) == (12, 40, 80))
        #expect(out.delays == Array(repeating: 100, count: 12))
        for index in 0..<12 {
            let grey = out.pixels.mean(band: 0, x: 0, y: index * 40 + 20, width: 80, height: 20)
            #expect(abs(grey - Double(255 - Int(ImageFixtures.frameGrey(index)))) < 4, "frame \(index) was not inverted")
        }
    }

    /// Pads and a focus crop on every frame: each frame 160×80, red = x, green = its index.
    @Test func padsAndAFocusCropApplyToEveryFrame() throws {
        let pictures = try (0..<6).map { index in
            var bytes = [UInt8](repeating: 0, count: 160 * 80 * 3)
            for y in 0..<80 {
                for x in 0..<160 {
                    bytes[(y * 160 + x) * 3] = UInt8(x * 255 / 159)
                    bytes[(y * 160 + x) * 3 + 1] = UInt8(index * 40)
                }
            }
            return try VipsImage.fromPixels(bytes, width: 160, height: 80, bands: 3).labelled(.srgb)
        }
        let path = directory.url("gradient.gif")
        try VipsImage.animation(pictures, delays: Array(repeating: 80, count: 6), loop: 0).encoded(.gif(strip: false))
            .write(to: URL(fileURLWithPath: path))
        let steps: [FilterStep] = [
            .fill(width: 40, height: 40, gravity: .focus, focus: FocusPoint(x: "{meta.fx}", y: "0.5")),
            .pad(top: 5, right: 0, bottom: 5, left: 0, colour: .white),
        ]
        let processor = ImageProcessor(filters: steps, output: output(.webp, quality: 95), limits: Limits())
        let cases: [(metadata: String, left: Int, note: String?)] = [
            (#"{"fx": 0.75}"#, 40, nil), ("{}", 20, "focus x ({meta.fx}) is missing; cropped at the centre instead"),
        ]
        for (metadata, left, note) in cases {
            let made = try processor.process(.file(path), fields: ItemFields(key: "k", stem: "k", metadata: metadata))
            #expect(made.notes == (note.map { [$0] } ?? []))
            let out = try frames(of: made.data)
            #expect((out.count, out.height, out.pixels.width) == (6, 50, 40))
            for index in 0..<6 {
                let top = index * 50
                #expect(out.pixels.mean(band: 1, x: 0, y: top, width: 40, height: 5) > 240, "frame \(index): no white pad above")
                #expect(abs(out.pixels.mean(band: 1, x: 0, y: top + 15, width: 40, height: 20) - Double(index * 40)) < 6)
                // Column `left` of the 80×40 cover is column 2·left + 0.5 of the source.
                let red = out.pixels.mean(band: 0, x: 0, y: top + 15, width: 1, height: 20)
                let expected = (Double(2 * left) + 0.5) * 255 / 159
                #expect(abs(red - expected) < 6, "frame \(index): window at red \(red), not \(expected)")
            }
        }
    }

    /// `"animation": "first"`, a format that cannot animate, or a step that cannot apply
    /// to each frame: the first frame only, as before.
    @Test(arguments: [0, 1, 2])
    func otherwiseTheFirstFrameIsKept(_ variant: Int) throws {
        let path = try gif(count: 6, width: 64, height: 48)
        let (filters, spec): ([FilterStep], OutputSpec) =
            switch variant {
            case 0: ([], output(.webp, animation: false))
            case 1: ([], output(.png))
            default: ([.trim(threshold: 10)], output(.webp))
            }
        let made = try ImageProcessor(filters: filters, output: spec, limits: Limits()).process(.file(path))
        let out = try frames(of: made.data)
        #expect(out.count == 1)
        #expect(abs(out.pixels.mean(band: 0, x: 0, y: 20, width: 64, height: 20) - Double(ImageFixtures.frameGrey(0))) < 4)
    }

    /// An animation past `limits.maxFrames`, or whose frames together pass `maxPixels`,
    /// fails with `limit`; a still output of it does not count its frames.
    @Test func framesAreCountedAgainstTheLimits() throws {
        let path = try gif(count: 12, width: 100, height: 100)
        var limits = Limits()
        limits.maxFrames = 10
        let tooMany = ImageProcessor(filters: [], output: output(.webp), limits: limits)
        #expect(throws: ItemFailure(.limit, "the animation has 12 frames, over limits.maxFrames (10)")) {
            try tooMany.process(.file(path))
        }
        limits = Limits()
        limits.maxPixels = 100_000
        let tooLarge = ImageProcessor(filters: [], output: output(.webp), limits: limits)
        #expect(
            throws: ItemFailure(.limit, "the animation is 12 frames of 100×100 (0.1 MP), over limits.maxPixels (0.1 MP)")
        ) {
            try tooLarge.process(.file(path))
        }
        limits.maxFrames = 10
        #expect((try? ImageProcessor(filters: [], output: output(.jpeg), limits: limits).process(.file(path))) != nil)
    }

    /// Several outputs: the animated one keeps its frames, a JPEG beside it is the first.
    @Test func anAnimatedOutputAndAStillOneFromOneInput() throws {
        let path = try gif(count: 8, width: 160, height: 80)
        var animated = output(.webp)
        animated.id = "anim"
        var still = output(.jpeg)
        still.id = "still"
        let plans = [
            OutputPlan(animated, filters: [.fit(width: 80, height: nil, enlarge: false)]),
            OutputPlan(still, filters: [.fill(width: 40, height: 40, gravity: .centre, focus: nil)]),
        ]
        let made = try ImageProcessor(filters: [], outputs: plans, limits: Limits()).processOutputs(.file(path))
        let first = try frames(of: made[0].data)
        #expect((first.count, first.height, first.pixels.width) == (8, 40, 80))
        let second = try frames(of: made[1].data)
        #expect((second.count, second.pixels.width, second.pixels.height) == (1, 40, 40))
    }

    /// End to end with the built binary: a folder of an animated GIF and a still JPEG to
    /// WebP; an animation over `limits.maxFrames` fails as `limit` without stopping the
    /// batch; `validate` names the step that keeps an output from animating.
    @Test func theBinaryKeepsAnimationsAndCountsTheirFrames() throws {
        _ = try directory.write("", to: "in/.keep")
        try ImageFixtures.animatedGIF(count: 30, width: 200, height: 100, delays: Self.delays, loop: 3)
            .write(to: URL(fileURLWithPath: directory.url("in/a.gif")))
        try ImageFixtures.animatedGIF(count: 40, width: 50, height: 50).write(
            to: URL(fileURLWithPath: directory.url("in/long.gif")))
        try ImageFixtures.jpeg(at: directory.url("in/still.jpg"), width: 300, height: 200)
        _ = try directory.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 100, "height": 100}],
             "output": {"format": "webp"}, "sink": {"type": "directory", "path": "out"},
             "limits": {"maxFrames": 32}}
            """, to: "pipe.json")
        let run = try ImgpipeBinary.run(["run", "pipe.json"], in: directory.path)
        #expect(run.status == 1, "stderr: \(run.stderr)")
        let out = try frames(of: try Data(contentsOf: URL(fileURLWithPath: directory.url("out/a.webp"))))
        #expect((out.count, out.height, out.pixels.width, out.delays, out.loop) == (30, 50, 100, Self.delays, 3))
        let still = try frames(of: try Data(contentsOf: URL(fileURLWithPath: directory.url("out/still.webp"))))
        #expect((still.count, still.pixels.width, still.pixels.height) == (1, 100, 67))
        let status = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: directory.path).decoded(StatusReport.self)
        #expect(status.done == 2)
        #expect(status.failures.map(\.key) == ["long.gif"])
        #expect(status.failures.first?.reason == "limit")
        #expect(status.failures.first?.message == "the animation has 40 frames, over limits.maxFrames (32)")

        _ = try directory.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 100, "height": 100}, {"op": "blur", "sigma": 2}],
             "output": {"format": "gif"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "blur.json")
        let validate = try ImgpipeBinary.run(["validate", "blur.json"], in: directory.path)
        #expect(validate.status == 0)
        #expect(
            validate.stderr.contains(
                "blur.json: output: an animated input becomes one frame, as filters[1] blur cannot apply to each frame on its own"
            ),
            "stderr: \(validate.stderr)")
    }

    /// A damaged animation fails as `decode`, whether it is cut short or its frames lie.
    @Test func aDamagedAnimationFailsAsDecode() throws {
        let whole = try ImageFixtures.animatedGIF(count: 30, width: 200, height: 100)
        let processor = ImageProcessor(
            filters: [.fit(width: 100, height: 100, enlarge: false)], output: output(.webp), limits: Limits())
        let cut = whole.prefix(whole.count * 6 / 10)
        do {
            let made = try processor.process(.data(Data(cut)))
            Issue.record("a GIF cut short came out \(made.data.count) bytes")
        } catch {
            #expect(error.reason == .decode, "\(error)")
        }
    }

    /// Transparent frames are resampled premultiplied, as a still picture is: the colour
    /// of transparent pixels does not darken their neighbours (it did, 255 → 127).
    @Test func transparentFramesKeepTheirColourThroughAResize() throws {
        // Two frames of other yellows (WebP merges a frame that repeats the one before).
        let pictures = try (0..<2).map { index in
            var bytes = [UInt8](repeating: 0, count: 40 * 30 * 4)
            for y in 0..<30 {
                for x in 20..<40 {
                    bytes.replaceSubrange((y * 40 + x) * 4..<(y * 40 + x) * 4 + 4, with: [255, 253 - UInt8(index * 60), 0, 255])
                }
            }
            return try VipsImage.fromPixels(bytes, width: 40, height: 30, bands: 4).labelled(.srgb)
        }
        let path = directory.url("sticker.gif")
        try VipsImage.animation(pictures, delays: [100, 100], loop: 0).encoded(.gif(strip: false))
            .write(to: URL(fileURLWithPath: path))
        var kept = output(.webp)
        kept.lossless = true
        var first = kept
        first.keepsAnimation = false
        let fit = FilterStep.fit(width: 13, height: 13, enlarge: false)
        let animated = try frames(
            of: try ImageProcessor(filters: [fit], output: kept, limits: Limits()).process(.file(path)).data)
        let still = try frames(of: try ImageProcessor(filters: [fit], output: first, limits: Limits()).process(.file(path)).data)
        #expect(animated.count == 2)
        for x in 0..<13 where still.pixels[x, 4][3] > 40 {
            #expect(abs(Int(animated.pixels[x, 4][0]) - Int(still.pixels[x, 4][0])) <= 8, "column \(x): \(animated.pixels[x, 4])")
        }
    }

    /// What a filter makes counts every frame against `maxPixels` (20 frames of 100×100 are
    /// 25 times 8000 px of input), and the stack of frames stays within libvips' bound.
    @Test func whatTheFiltersMakeCountsEveryFrame() throws {
        let path = try gif(count: 20, width: 20, height: 20)
        var limits = Limits()
        limits.maxPixels = 10_000
        let resize = FilterStep.resize(width: 100, height: 100, scale: nil)
        do {
            _ = try ImageProcessor(filters: [resize], output: output(.webp), limits: limits).process(.file(path))
            Issue.record("20 frames of 100×100 passed maxPixels 10000")
        } catch {
            #expect(error.reason == .limit)
            #expect(error.message.hasPrefix("resize makes 20 frames of 100×100 (0.2 MP), over limits.maxPixels"), "\(error)")
        }
        let tall = try gif(count: 1000, width: 16, height: 16)
        let stretch = FilterStep.resize(width: 16, height: 10_001, scale: nil)
        do {
            _ = try ImageProcessor(filters: [stretch], output: output(.webp), limits: Limits()).process(.file(tall))
            Issue.record("a stack of 10001000 rows passed")
        } catch {
            #expect(
                error.message
                    == "resize makes 1000 frames of 16×10001, which stack 10001000 rows high, over the 10000000 rows libvips holds in one picture"
            )
        }
    }

    /// A crop that takes the whole frame reads no point and says nothing, as for a still.
    @Test func aWholeFrameCropSaysNothing() throws {
        let path = try gif(count: 3, width: 40, height: 30)
        let fill = FilterStep.fill(width: 40, height: 30, gravity: .focus, focus: FocusPoint(x: "{meta.fx}", y: "0.5"))
        let made = try ImageProcessor(filters: [fill], output: output(.webp), limits: Limits()).process(
            .file(path), fields: ItemFields(key: "k", stem: "k", metadata: "{}"))
        #expect(made.notes.isEmpty)
        #expect(try frames(of: made.data).count == 3)
    }

    /// A quality target on an animation: the quality is chosen on the first frame and
    /// every frame is encoded at it; the record has the choice.
    @Test func aQualityTargetIsMetOnTheFirstFrameAndSetForAll() throws {
        let path = try gif(count: 10, width: 200, height: 100)
        var spec = output(.webp)
        spec.ssimTarget = 0.95
        let made = try ImageProcessor(filters: [.fit(width: 100, height: 100, enlarge: false)], output: spec, limits: Limits())
            .process(.file(path))
        let choice = try #require(made.choice)
        #expect((30...100).contains(choice.quality))
        #expect((choice.ssim ?? 0) >= 0.95)
        let out = try frames(of: made.data)
        #expect((out.count, out.height, out.pixels.width) == (10, 50, 100))
        // Every frame at the chosen quality: the bytes of the animation made at it.
        let fixed = try ImageProcessor(
            filters: [.fit(width: 100, height: 100, enlarge: false)], output: output(.webp, quality: choice.quality),
            limits: Limits()
        ).process(.file(path))
        #expect(fixed.data == made.data)
    }

    /// `validate` names the step or setting that keeps an output from animating.
    @Test func validateSaysWhatMakesAnOutputOneFrame() throws {
        func notes(_ pipeline: String) throws -> [String] {
            try PipelineSpec.decode(text: pipeline, baseDirectory: "/", defaultName: "pipe").firstFrameNotes
        }
        let base = #""version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}"#
        #expect(
            try notes(#"{\#(base), "filters": [{"op": "fit", "width": 9}, {"op": "trim"}], "output": {"format": "webp"}}"#)
                == [
                    #"output: an animated input becomes one frame, as filters[1] trim cannot apply to each frame on its own ("animation": "first" on the output says so and quiets this)"#
                ])
        #expect(
            try notes(#"{\#(base), "filters": [{"op": "trim"}], "output": {"format": "webp", "animation": "first"}}"#).isEmpty)
        #expect(try notes(#"{\#(base), "filters": [{"op": "trim"}], "output": {"format": "jpeg"}}"#).isEmpty)
        #expect(try notes(#"{\#(base), "output": {"format": "gif"}}"#).isEmpty)
        #expect(
            try notes(#"{\#(base), "output": {"format": "webp", "maxBytes": 5000}}"#).first?.contains(
                "as maxBytes is a still picture's budget") == true)
        #expect(try notes(#"{\#(base), "output": {"format": "webp", "quality": {"ssim": 0.95}}}"#).isEmpty)
    }
}
