import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// Each op, judged by what it does to decoded pixels.
@Suite("Filter ops")
struct FilterOpsTests {
    let directory: TemporaryDirectory
    let harness: ProcessingHarness
    /// 200×100 quadrants: red, green / blue, white.
    let quadrants: String
    /// 240×160 photo-like gradients with texture.
    let photo: String

    init() throws {
        directory = try TemporaryDirectory()
        harness = ProcessingHarness(baseDirectory: directory.path)
        quadrants = directory.url("quadrants.png")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 200, height: 100), to: quadrants)
        photo = directory.url("photo.png")
        try ImageFixtures.write(try ImageFixtures.photo(width: 240, height: 160), to: photo)
    }

    func run(_ step: FilterStep, on path: String? = nil, format: OutputFormat = .png) throws -> Pixels {
        try harness.run([step], on: path ?? quadrants, format: format)
    }

    func near(_ pixel: [UInt8], _ colour: ImageFixtures.RGB, tolerance: Int = 30) -> Bool {
        zip(pixel.prefix(3).map(Int.init), [Int(colour.0), Int(colour.1), Int(colour.2)]).allSatisfy { abs($0 - $1) <= tolerance }
    }

    // MARK: geometry

    @Test func resizeKeepsAspectWithOneSideAndObeysBoth() throws {
        let one = try run(.resize(width: 100, height: nil, scale: nil))
        #expect((one.width, one.height) == (100, 50))
        let both = try run(.resize(width: 60, height: 90, scale: nil))
        #expect((both.width, both.height) == (60, 90))
        let scaled = try run(.resize(width: nil, height: nil, scale: 1.5))
        #expect((scaled.width, scaled.height) == (300, 150))
    }

    @Test func cropCutsTheRectangleAndRefusesOneOutside() throws {
        let out = try run(.cropRect(x: 110, y: 10, width: 50, height: 30))
        #expect((out.width, out.height) == (50, 30))
        #expect(near(out[25, 15], ImageFixtures.green))
        let clipped = try run(.cropRect(x: 150, y: 50, width: 500, height: 500))
        #expect((clipped.width, clipped.height) == (50, 50))
        #expect(harness.failure([.cropRect(x: 300, y: 0, width: 10, height: 10)], on: quadrants)?.reason == .process)
    }

    @Test func cropByAspectTakesTheLargestWindow() throws {
        let square = try run(.cropAspect(aspectWidth: 1, aspectHeight: 1, gravity: .east, focus: nil))
        #expect((square.width, square.height) == (100, 100))
        #expect(near(square[90, 10], ImageFixtures.green) && near(square[90, 90], ImageFixtures.white))
        let wide = try run(.cropAspect(aspectWidth: 16, aspectHeight: 9, gravity: .centre, focus: nil))
        #expect((wide.width, wide.height) == (178, 100))
    }

    @Test func rotateByRightAnglesIsExactAndOtherAnglesFillTheCorners() throws {
        let turned = try run(.rotate(degrees: 90, background: .black))
        #expect((turned.width, turned.height) == (100, 200))
        // Clockwise: the top-left (red) goes to the top-right, blue comes to the top-left.
        #expect(near(turned[5, 5], ImageFixtures.blue, tolerance: 2))
        #expect(near(turned[95, 5], ImageFixtures.red, tolerance: 2))
        let upside = try run(.rotate(degrees: -180, background: .black))
        #expect(near(upside[5, 5], ImageFixtures.white, tolerance: 2))

        let tilted = try run(.rotate(degrees: 30, background: Colour(red: 255, green: 0, blue: 255)))
        #expect(tilted.width > 200 && tilted.height > 100)
        #expect(near(tilted[0, 0], (255, 0, 255), tolerance: 2), "corner shows the background")
    }

    @Test func flipMirrors() throws {
        #expect(near(try run(.flip(horizontal: true))[5, 5], ImageFixtures.green, tolerance: 2))
        #expect(near(try run(.flip(horizontal: false))[5, 5], ImageFixtures.blue, tolerance: 2))
    }

    @Test func padAndBorderAddColouredSpace() throws {
        let padded = try run(.pad(top: 10, right: 0, bottom: 5, left: 20, colour: Colour(red: 0, green: 0, blue: 255)))
        #expect((padded.width, padded.height) == (220, 115))
        #expect(near(padded[2, 2], (0, 0, 255), tolerance: 1))
        #expect(near(padded[25, 15], ImageFixtures.red, tolerance: 2))
        let framed = try run(.border(width: 6, colour: Colour(red: 255, green: 255, blue: 0)))
        #expect((framed.width, framed.height) == (212, 112))
        #expect(near(framed[211, 111], (255, 255, 0), tolerance: 1))
        let transparent = try run(.pad(top: 4, right: 4, bottom: 4, left: 4, colour: Colour(red: 0, green: 0, blue: 0, alpha: 0)))
        #expect(transparent.bands == 4 && transparent[0, 0][3] == 0 && transparent[10, 10][3] == 255)
    }

    @Test func trimCutsAUniformBorder() throws {
        let framed = directory.url("framed.png")
        let inner = try ImageFixtures.quadrants(width: 80, height: 60)
        try ImageFixtures.write(
            try inner.embedded(x: 30, y: 20, width: 140, height: 100, background: [255, 255, 255]), to: framed)
        let out = try run(.trim(threshold: 10), on: framed)
        #expect((out.width, out.height) == (80, 60))
        #expect(near(out[3, 3], ImageFixtures.red, tolerance: 2))
    }

    @Test func roundCornersMakesTheCornersTransparent() throws {
        let out = try run(.roundCorners(radius: 30))
        #expect(out.bands == 4)
        #expect(out[0, 0][3] == 0 && out[199, 99][3] == 0 && out[0, 99][3] == 0)
        #expect(out[100, 50][3] == 255 && out[30, 30][3] == 255 && out[0, 50][3] == 255)
        let jpeg = try run(.roundCorners(radius: 30), format: .jpeg)
        #expect(near(jpeg[1, 1], (255, 255, 255), tolerance: 10), "JPEG shows transparent corners as white")
    }

    // MARK: colour

    @Test func adjustMovesEachControlTheRightWay() throws {
        let base = try run(.adjust(Adjustments()), on: photo)
        let original = try harness.run([], on: photo)
        #expect(base.maxDifference(from: original, rows: 0..<base.height) <= 1, "neutral adjust changes nothing")
        let mean = { (p: Pixels) in p.means().prefix(3).reduce(0, +) / 3 }

        var brighter = Adjustments()
        brighter.brightness = 0.3
        #expect(mean(try run(.adjust(brighter), on: photo)) > mean(base) + 50)
        var exposed = Adjustments()
        exposed.exposure = 1
        #expect(mean(try run(.adjust(exposed), on: photo)) > mean(base) + 20)
        var flat = Adjustments()
        flat.contrast = 0
        let grey = try run(.adjust(flat), on: photo)
        #expect(grey.samples.allSatisfy { abs(Int($0) - 128) <= 1 }, "contrast 0 is flat mid-grey")
        var desaturated = Adjustments()
        desaturated.saturation = 0
        let d = try run(.adjust(desaturated))
        #expect(abs(Int(d[5, 5][0]) - Int(d[5, 5][1])) <= 8 && abs(Int(d[5, 5][1]) - Int(d[5, 5][2])) <= 8)
        var gamma = Adjustments()
        gamma.gamma = 2
        #expect(mean(try run(.adjust(gamma), on: photo)) > mean(base) + 15)
        var hue = Adjustments()
        hue.hue = 180
        let turned = try run(.adjust(hue))[5, 5].map(Int.init)
        #expect(turned[0] < turned[1] && turned[0] < turned[2], "red turned towards cyan: \(turned)")
    }

    @Test func sepiaGivesWarmTones() throws {
        for path in [photo, quadrants] {
            let m = try run(.sepia(intensity: 1), on: path).means()
            #expect(m[0] > m[1] && m[1] > m[2], "mean R > G > B, got \(m)")
        }
    }

    @Test func invertGives255MinusTheMean() throws {
        let original = try harness.run([], on: photo).means()
        let inverted = try run(.invert, on: photo).means()
        for band in 0..<3 { #expect(abs(inverted[band] - (255 - original[band])) < 0.6) }
    }

    @Test func posterizeLeavesFewLevels() throws {
        let two = try run(.posterize(levels: 2), on: photo)
        #expect(Set(two.samples).isSubset(of: [0, 255]))
        let four = try run(.posterize(levels: 4), on: photo)
        #expect(Set(four.samples).isSubset(of: [0, 85, 170, 255]))
    }

    @Test func vignetteDarkensCornersAndLeavesTheCentre() throws {
        let flat = directory.url("flat.png")
        try ImageFixtures.write(
            try VipsImage.black(width: 200, height: 120, bands: 3).linear([1, 1, 1], [200, 200, 200], clipToByte: true), to: flat)
        let out = try run(.vignette(intensity: 0.8, radius: 1), on: flat)
        #expect(abs(Int(out[100, 60][0]) - 200) <= 2, "centre untouched")
        #expect(out[1, 1][0] < 80, "corner darkened, got \(out[1, 1][0])")
        #expect(out[100, 60][0] > out[10, 60][0] && out[10, 60][0] > out[1, 60][0], "darker towards the edge")
    }

    @Test func tintColoursTheLuminance() throws {
        let m = try run(.tint(colour: Colour(red: 40, green: 90, blue: 255), intensity: 1), on: photo).means()
        #expect(m[2] > m[1] && m[1] > m[0], "blue tint, got \(m)")
    }

    @Test func normalizeStretchesToTheFullRange() throws {
        let dull = directory.url("dull.png")
        try ImageFixtures.write(try ImageFixtures.photo(width: 200, height: 100).linear([0.2], [100], clipToByte: true), to: dull)
        let before = try harness.run([], on: dull)
        #expect((before.samples.max() ?? 0) - (before.samples.min() ?? 0) < 60)
        let out = try run(.normalize, on: dull)
        #expect((out.samples.min() ?? 255) < 20 && (out.samples.max() ?? 0) > 235)
    }

    @Test func thresholdIsBlackAndWhite() throws {
        let out = try run(.threshold(level: 128), on: photo)
        #expect(out.bands == 1)
        #expect(Set(out.samples) == [0, 255])
        let quads = try run(.threshold(level: 128))
        #expect(quads[150, 75][0] == 255 && quads[50, 75][0] == 0, "white stays white, blue goes black")
    }

    // MARK: effects

    @Test func blurLowersEdgeEnergy() throws {
        let sharp = try harness.run([], on: photo).edgeEnergy
        let soft = try run(.blur(sigma: 3), on: photo).edgeEnergy
        #expect(soft < sharp * 0.5, "edge energy \(sharp) → \(soft)")
        let quads = try run(.blur(sigma: 4))
        #expect(quads[99, 25][0] < ImageFixtures.red.0 - 30, "the red/green edge is mixed")
    }

    @Test func sharpenRaisesEdgeEnergy() throws {
        let soft = directory.url("soft.png")
        try ImageFixtures.write(
            try ImageFixtures.quadrants(width: 200, height: 100).gaussianBlurred(sigma: 2).castToUChar(), to: soft)
        let before = try harness.run([], on: soft).edgeEnergy
        let after = try run(.sharpen(sigma: 2, amount: 2), on: soft).edgeEnergy
        #expect(after > before * 1.3, "edge energy \(before) → \(after)")
    }

    @Test func pixelateMakesUniformBlocksFromTheTopLeft() throws {
        let out = try run(.pixelate(size: 8), on: photo)
        #expect((out.width, out.height) == (240, 160))
        for (bx, by) in [(0, 0), (8, 16), (232, 152)] {
            let first = out[bx, by]
            for y in by..<by + 8 { for x in bx..<bx + 8 { #expect(out[x, y] == first) } }
        }
        #expect(out[7, 0] != out[8, 0] || out[8, 0] != out[16, 0])
    }

    @Test func medianRemovesSpeckles() throws {
        var bytes = [UInt8](repeating: 100, count: 60 * 40)
        for index in stride(from: 61, to: bytes.count, by: 97) { bytes[index] = 255 }
        let speckled = directory.url("speckled.png")
        try ImageFixtures.write(try VipsImage.fromPixels(bytes, width: 60, height: 40, bands: 1).labelled(.grey), to: speckled)
        let out = try run(.median(size: 3), on: speckled)
        #expect(out.samples.allSatisfy { $0 == 100 })
    }

    // MARK: overlays

    @Test func captionChangesTheTopAndBottomBandsOnly() throws {
        let original = try harness.run([], on: photo)
        let caption = Caption(
            top: "TOP TEXT", bottom: "BOTTOM TEXT", font: "DejaVu Sans Bold", colour: .white,
            strokeColour: .black, strokeWidth: nil, size: nil)
        let out = try run(.caption(caption), on: photo)
        let h = out.height
        #expect(out.maxDifference(from: original, rows: 0..<h / 4) > 100, "top band has text")
        #expect(out.maxDifference(from: original, rows: 3 * h / 4..<h) > 100, "bottom band has text")
        #expect(out.maxDifference(from: original, rows: h * 3 / 10..<h * 7 / 10) == 0, "the middle is untouched")
        let topOnly = try run(
            .caption(
                Caption(
                    top: "HI", bottom: nil, font: "DejaVu Sans Bold", colour: .white,
                    strokeColour: .black, strokeWidth: 2, size: 20)), on: photo)
        #expect(topOnly.maxDifference(from: original, rows: h / 2..<h) == 0)
    }

    /// Letters over a transparent area are drawn (they used to keep the alpha of what was
    /// under them, so "ONE DOES NOT" came out as "ONE DOES NO" on a half-transparent PNG).
    @Test func captionsAreDrawnOverTransparentAreas() throws {
        let path = directory.url("half-clear.png")
        try ImageFixtures.rgbaPNG(at: path, width: 200, height: 120)  // left half transparent
        let caption = Caption(
            top: "MMMMMMMMMMMMMMMM", bottom: nil, font: "DejaVu Sans Bold", colour: .white,
            strokeColour: .black, strokeWidth: 2, size: nil)
        let out = try run(.caption(caption), on: path)
        #expect(out.bands == 4)
        var drawnLeft = 0
        var clearBelow = true
        for y in 0..<out.height {
            for x in 0..<out.width / 2 {
                let alpha = out.samples[(y * out.width + x) * 4 + 3]
                if y < out.height / 4, alpha == 255 { drawnLeft += 1 }
                if y > out.height / 2, alpha != 0 { clearBelow = false }
            }
        }
        #expect(drawnLeft > 100, "the letters over the transparent half are missing (\(drawnLeft) opaque pixels)")
        #expect(clearBelow, "the transparent area away from the text stays transparent")
    }

    /// Pango and fontconfig are not thread-safe: pixel workers that render captions at the
    /// same moment crashed the process (SIGFPE inside GLib's hash table). Text from many
    /// threads at once comes out whole, and the same each time.
    /// The masks are released on other threads while text is being drawn: a mask must not
    /// carry Pango objects that its release frees outside the text lock (a CI run crashed
    /// with SIGFPE inside GLib while text was drawn; this path is one candidate).
    @Test func textMasksReleasedWhileOthersRenderDoNotCrash() throws {
        let held = LockedBox<[VipsImage]>([])
        let rendered = LockedBox(0)
        DispatchQueue.concurrentPerform(iterations: 300) { index in
            // As a pixel worker's job ends: libvips' state of this Dispatch thread freed here,
            // not whenever the thread happens to exit.
            defer { VipsRuntime.endThreadWork() }
            guard let mask = try? VipsImage.text("CAPTION \(index % 7)", font: "DejaVu Sans \(10 + index % 5)", width: 200) else {
                return
            }
            rendered.withLock { $0 += 1 }
            // Another thread's masks are dropped here, outside the lock, while others render.
            let released = held.withLock { list -> [VipsImage] in
                list.append(mask)
                guard list.count > 6 else { return [] }
                defer { list.removeAll() }
                return list
            }
            _ = released.count
        }
        #expect(rendered.withLock { $0 } == 300)
    }

    @Test func textRendersFromManyThreadsAtOnce() throws {
        let fonts = ["DejaVu Sans Bold", "DejaVu Sans", "DejaVu Serif", "DejaVu Sans Mono", "Sans 20", "No Such Font"]
        let masks = LockedBox([Int: [[UInt8]]]())
        let failures = LockedBox(0)
        DispatchQueue.concurrentPerform(iterations: 60) { index in
            defer { VipsRuntime.endThreadWork() }
            do {
                let mask = try VipsImage.text(
                    "ONE DOES NOT SIMPLY \(index % 3)", font: fonts[index % fonts.count],
                    width: 300, height: index % 2 == 0 ? 60 : nil)
                let samples = try mask.pixels().samples
                // index % 6 fixes the font, the text (index % 3) and the height (index % 2):
                // ten renders of each of six texts, drawn at once, must agree.
                masks.withLock { $0[index % fonts.count, default: []].append(samples) }
            } catch {
                failures.withLock { $0 += 1 }
            }
        }
        #expect(failures.withLock { $0 } == 0)
        let groups = masks.withLock { $0 }
        #expect(groups.count == 6 && groups.values.allSatisfy { $0.count == 10 })
        for (group, renders) in groups {
            #expect(Set(renders).count == 1, "text \(group) came out \(Set(renders).count) different ways")
            #expect(renders.first?.contains { $0 > 128 } == true, "text \(group) has no ink")
        }
    }

    @Test func textIsPlacedByGravity() throws {
        let original = try harness.run([], on: photo)
        let overlay = TextOverlay(
            text: "© imgpipe", gravity: .southEast, margin: 8, font: "DejaVu Sans", size: 20,
            colour: .white, opacity: 1)
        let out = try run(.text(overlay), on: photo)
        #expect(out.maxDifference(from: original, rows: out.height - 40..<out.height) > 60)
        #expect(out.maxDifference(from: original, rows: 0..<out.height / 2) == 0)
    }

    @Test func watermarkLandsWhereAskedOrEverywhereWhenTiled() throws {
        let logo = directory.url("logo.png")
        try ImageFixtures.rgbaPNG(at: logo, width: 40, height: 20)
        let original = try harness.run([], on: photo)
        let placed = try run(
            .watermark(
                Watermark(
                    image: "logo.png", gravity: .southEast, opacity: 1, scale: 0.25,
                    margin: 4, tile: false)), on: photo)
        #expect(placed.maxDifference(from: original, rows: placed.height - 30..<placed.height - 4) > 50)
        #expect(placed.maxDifference(from: original, rows: 0..<placed.height / 2) == 0)
        let tiled = try run(
            .watermark(
                Watermark(
                    image: "logo.png", gravity: .southEast, opacity: 0.5, scale: 0.25,
                    margin: 4, tile: true)), on: photo)
        #expect(tiled.maxDifference(from: original, rows: 0..<30) > 20)
    }

    // MARK: every op on every kind of input

    static let everyOp: [FilterStep] = [
        .autorotate, .fit(width: 50, height: 50, enlarge: false), .fill(width: 40, height: 30, gravity: .attention, focus: nil),
        .resize(width: 70, height: nil, scale: nil), .cropRect(x: 2, y: 2, width: 30, height: 20),
        .cropAspect(aspectWidth: 4, aspectHeight: 3, gravity: .entropy, focus: nil), .rotate(degrees: 33, background: .white),
        .rotate(degrees: 270, background: .black), .flip(horizontal: false),
        .pad(top: 3, right: 3, bottom: 3, left: 3, colour: .white),
        .trim(threshold: 10), .roundCorners(radius: 8), .border(width: 2, colour: .black),
        .adjust(Adjustments(brightness: 0.1, contrast: 1.2, saturation: 1.3, exposure: 0.2, gamma: 1.1, hue: 20)),
        .grayscale, .sepia(intensity: 0.7), .invert, .posterize(levels: 5), .vignette(intensity: 0.5, radius: 1),
        .tint(colour: .white, intensity: 0.5), .normalize, .threshold(level: 100), .blur(sigma: 1.5),
        .sharpen(sigma: 1, amount: 1), .pixelate(size: 4), .median(size: 3),
        .caption(
            Caption(
                top: "TOP", bottom: "BOTTOM", font: "DejaVu Sans Bold", colour: .white, strokeColour: .black,
                strokeWidth: nil, size: nil)),
        .text(
            TextOverlay(text: "hello", gravity: .north, margin: 2, font: "DejaVu Sans", size: nil, colour: .black, opacity: 0.7)),
        .watermark(Watermark(image: "logo.png", gravity: .centre, opacity: 0.5, scale: 0.3, margin: 0, tile: false)),
    ]

    @Test(arguments: ["jpeg", "rgba-png", "grey-png", "cmyk-jpeg", "grey16-png"])
    func everyOpWorksOnEveryKindOfInput(kind: String) throws {
        let input = directory.url("input-\(kind)." + (kind.hasSuffix("jpeg") ? "jpg" : "png"))
        switch kind {
        case "jpeg": try ImageFixtures.jpeg(at: input, width: 120, height: 80, orientation: 6)
        case "rgba-png": try ImageFixtures.rgbaPNG(at: input, width: 120, height: 80)
        case "grey-png": try ImageFixtures.write(try ImageFixtures.quadrants(width: 120, height: 80).toGrey(), to: input)
        case "cmyk-jpeg": try ImageFixtures.cmykJPEG(at: input, width: 120, height: 80, ink: (20, 200, 180, 10))
        default:
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 120, height: 80).toGrey().linear([257], [0], clipToByte: false)
                    .castTo16Bit().labelled(.grey16), to: input)
        }
        try ImageFixtures.rgbaPNG(at: directory.url("logo.png"), width: 40, height: 20)
        for step in Self.everyOp {
            for format in [OutputFormat.jpeg, .png] {
                let out = try harness.run([step], on: input, format: format)
                #expect(out.width > 0 && out.height > 0, "\(step) on \(kind) as \(format)")
                #expect(format != .jpeg || out.bands == 1 || out.bands == 3, "\(step) on \(kind): JPEG has no alpha")
            }
        }
    }

    @Test(arguments: [OutputFormat.jpeg, .png, .webp, .avif, .tiff, .gif])
    func everyOutputFormatDecodesBack(format: OutputFormat) throws {
        let result = try harness.processor([.fit(width: 64, height: 64, enlarge: false)], format: format).process(
            .file(quadrants))
        let decoded = try VipsImage.open(data: result.data)
        #expect((decoded.width, decoded.height) == (64, 32))
        let pixels = try decoded.pixels()
        VipsRuntime.endThreadWork()
        #expect(near(pixels[5, 5], ImageFixtures.red, tolerance: format == .gif ? 40 : 30))
    }
}
