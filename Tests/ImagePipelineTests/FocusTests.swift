import Foundation
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// `fill` and `crop` with gravity `focus`: the window is centred on the item's point as far
/// as the picture allows, read back from decoded pixels of a gradient whose red is the
/// column and whose green is the row; an item without a usable point is cropped by
/// attention, with a note.
@Suite("Focus point")
struct FocusTests {
    let directory: TemporaryDirectory

    init() throws { directory = try TemporaryDirectory("imgpipe-focus") }

    /// A `width`×`height` PNG: red = x·255/(width−1), green = y·255/(height−1), blue 0.
    func gradient(_ name: String, width: Int, height: Int) throws -> String {
        var bytes = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let i = (y * width + x) * 3
                bytes[i] = UInt8((Double(x) * 255 / Double(width - 1)).rounded())
                bytes[i + 1] = UInt8((Double(y) * 255 / Double(height - 1)).rounded())
            }
        }
        let path = directory.url(name)
        try ImageFixtures.write(try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb), to: path)
        return path
    }

    func made(
        _ filters: [FilterStep], on path: String, metadata: String? = nil
    ) throws -> (pixels: Pixels, notes: [String]) {
        var output = OutputSpec()
        output.format = .png
        let processor = ImageProcessor(filters: filters, output: output, limits: Limits())
        let image = try processor.process(.file(path), fields: ItemFields(key: "k", stem: "k", metadata: metadata))
        defer { VipsRuntime.endThreadWork() }
        return (try VipsImage.open(data: image.data).pixels(), image.notes)
    }

    /// The red a column of the picture the window was cut from has, `width` wide.
    static func red(ofColumn x: Int, in width: Int) -> Double { Double(x) * 255 / Double(width - 1) }

    static let point = FocusPoint(x: "0.7", y: "0.5")

    /// 800×200 covered to 400×100, then 100×100 around x = 0.7: columns 230–329 (centre: 150–249).
    @Test(arguments: [false, true])
    func aFillIsCentredOnThePoint(stepwise: Bool) throws {
        let path = try gradient("wide.png", width: 800, height: 200)
        // `flip` twice leaves the picture as it was, and makes the fill a step of its own.
        let lead: [FilterStep] = stepwise ? [.flip(horizontal: true), .flip(horizontal: true)] : []
        let (out, notes) = try made(lead + [.fill(width: 100, height: 100, gravity: .focus, focus: Self.point)], on: path)
        #expect((out.width, out.height) == (100, 100))
        #expect(notes.isEmpty)
        #expect(abs(out.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 230, in: 400)) < 3, "left edge")
        #expect(abs(out.mean(band: 0, x: 99, width: 1) - Self.red(ofColumn: 329, in: 400)) < 3, "right edge")
        let (centred, _) = try made(lead + [.fill(width: 100, height: 100, gravity: .centre, focus: nil)], on: path)
        #expect(abs(centred.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 150, in: 400)) < 3)
    }

    /// The same vertically, and a point near an edge: the window stops at the edge.
    @Test func theWindowStaysInsideThePicture() throws {
        let path = try gradient("tall.png", width: 200, height: 800)
        let (high, _) = try made(
            [.fill(width: 100, height: 100, gravity: .focus, focus: FocusPoint(x: "0.5", y: "0.25"))], on: path)
        // Covered to 100×400: rows 50–149.
        #expect(abs(high.mean(band: 1, y: 0, height: 1) - Self.red(ofColumn: 50, in: 400)) < 3)
        let (edge, _) = try made(
            [.fill(width: 100, height: 100, gravity: .focus, focus: FocusPoint(x: "0.5", y: "0.99"))], on: path)
        #expect(abs(edge.mean(band: 1, y: 99, height: 1) - 255) < 3, "the window goes past the bottom")
    }

    /// `crop` by aspect: the 200×200 window of an 800×200 picture around x = 0.9 would end
    /// past the right edge (620–819), so it is moved to 600–799.
    @Test func anAspectCropFollowsThePoint() throws {
        let path = try gradient("wide.png", width: 800, height: 200)
        let step = FilterStep.cropAspect(aspectWidth: 1, aspectHeight: 1, gravity: .focus, focus: FocusPoint(x: "0.9", y: "0"))
        let (out, _) = try made([step], on: path)
        #expect((out.width, out.height) == (200, 200))
        #expect(abs(out.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 600, in: 800)) < 1)
        let middle = FilterStep.cropAspect(aspectWidth: 1, aspectHeight: 1, gravity: .focus, focus: FocusPoint(x: "0.25", y: "0"))
        #expect(abs(try made([middle], on: path).pixels.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 100, in: 800)) < 1)
    }

    /// The point read from the item's metadata: numbers and strings alike.
    @Test func thePointComesFromTheItemsFields() throws {
        let path = try gradient("wide.png", width: 800, height: 200)
        let step = FilterStep.fill(width: 100, height: 100, gravity: .focus, focus: FocusPoint(x: "{meta.fx}", y: "{meta.f.y}"))
        let (out, notes) = try made([step], on: path, metadata: #"{"fx": 0.7, "f": {"y": "0.5"}}"#)
        #expect(notes.isEmpty)
        #expect(abs(out.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 230, in: 400)) < 3)
        let (other, _) = try made([step], on: path, metadata: #"{"fx": 0.1, "f": {"y": 0.5}}"#)
        #expect(abs(other.mean(band: 0, x: 0, width: 1) - 0) < 3, "x = 0.1 puts the window at the left edge")
    }

    /// A missing or malformed value: cropped by attention, as `gravity: attention` would,
    /// with a note naming the value and where it came from.
    @Test(arguments: [
        (#"{"fy": 0.5}"#, #"focus x ({meta.fx}) is missing; cropped by attention instead"#),
        (
            #"{"fx": "left", "fy": 0.5}"#,
            #"focus x ({meta.fx}) is "left", not a fraction from 0 to 1; cropped by attention instead"#
        ),
        (#"{"fx": 0.5, "fy": 1.5}"#, #"focus y ({meta.fy}) is "1.5", not a fraction from 0 to 1; cropped by attention instead"#),
    ])
    func anItemWithoutAUsablePointIsCroppedByAttention(metadata: String, note: String) throws {
        let path = directory.url("photo.png")
        try ImageFixtures.write(try ImageFixtures.photo(width: 600, height: 300), to: path)
        let focus = FocusPoint(x: "{meta.fx}", y: "{meta.fy}")
        for (fill, attention) in [
            (
                FilterStep.fill(width: 120, height: 120, gravity: .focus, focus: focus),
                FilterStep.fill(width: 120, height: 120, gravity: .attention, focus: nil)
            ),
            (
                FilterStep.cropAspect(aspectWidth: 1, aspectHeight: 1, gravity: .focus, focus: focus),
                FilterStep.cropAspect(aspectWidth: 1, aspectHeight: 1, gravity: .attention, focus: nil)
            ),
        ] {
            let (out, notes) = try made([fill], on: path, metadata: metadata)
            #expect(notes == [note])
            let (expected, none) = try made([attention], on: path)
            #expect(none.isEmpty)
            #expect(out.samples == expected.samples, "not the attention crop")
        }
    }

    /// Several outputs from one load: each output's own fill follows the point.
    @Test func eachOutputOfASharedLoadFollowsThePoint() throws {
        let path = try gradient("wide.png", width: 800, height: 200)
        let plans = [(200, 100), (100, 100)].enumerated().map { index, size in
            var spec = OutputSpec()
            spec.id = "o\(index)"
            spec.format = .png
            return OutputPlan(spec, filters: [.fill(width: size.0, height: size.1, gravity: .focus, focus: Self.point)])
        }
        let made = try ImageProcessor(filters: [], outputs: plans, limits: Limits()).processOutputs(.file(path))
        defer { VipsRuntime.endThreadWork() }
        let wide = try VipsImage.open(data: made[0].data).pixels()
        let square = try VipsImage.open(data: made[1].data).pixels()
        #expect((wide.width, wide.height, square.width, square.height) == (200, 100, 100, 100))
        // 400×100, 200 wide around 280: 180–379; 100 wide: 230–329.
        #expect(abs(wide.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 180, in: 400)) < 3)
        #expect(abs(square.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 230, in: 400)) < 3)
    }

    /// End to end with the built binary: a JSON feed on a loopback server gives each
    /// entry's point; an entry whose point is unusable is cropped by attention, and the run
    /// says so for that item (through the pixel helper) and still ends 0.
    @Test func aJSONFeedGivesEachItemsPoint() throws {
        let image = try Data(contentsOf: URL(fileURLWithPath: try gradient("wide.png", width: 800, height: 200)))
        let server = try TestHTTPServer { request in
            let base = "http://\(request.headers["host"]!)"
            switch request.path {
            case "/feed.json":
                return .json(
                    #"[{"url": "\#(base)/a.png", "fx": 0.7, "fy": 0.5}, {"url": "\#(base)/b.png", "fx": 0.1, "fy": "0.5"}, "#
                        + #"{"url": "\#(base)/c.png", "fx": "here"}]"#)
            case "/a.png", "/b.png", "/c.png": return .bytes(image, type: "image/png")
            default: return .status(404)
            }
        }
        _ = try directory.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", "cache": false},
             "filters": [{"op": "fill", "width": 100, "height": 100, "gravity": "focus",
                          "focus": {"x": "{meta.fx}", "y": "{meta.fy}"}}],
             "output": {"format": "png", "name": "{stem}.{ext}"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let run = try ImgpipeBinary.run(["run", "pipe.json"], in: directory.path)
        #expect(run.status == 0, "stderr: \(run.stderr)")
        let notes = run.stderr.split(separator: "\n").filter { $0.contains("cropped by attention") }
        #expect(notes.count == 1, "stderr: \(run.stderr)")
        #expect(notes.first?.contains(#"c.png": focus x ({meta.fx}) is "here", not a fraction from 0 to 1"#) == true)
        let a = try ImageFixtures.decode(directory.url("out/a.png"))
        let b = try ImageFixtures.decode(directory.url("out/b.png"))
        #expect(abs(a.mean(band: 0, x: 0, width: 1) - Self.red(ofColumn: 230, in: 400)) < 3)
        #expect(abs(b.mean(band: 0, x: 0, width: 1) - 0) < 3)
        #expect(FileManager.default.fileExists(atPath: directory.url("out/c.png")))
    }

    /// A feed's value is quoted up to 80 scalars: a character of a thousand combining
    /// marks is not one character's worth of text.
    @Test func aLongValueIsQuotedInPart() {
        let value = "0" + String(repeating: "\u{301}", count: 3000)
        guard
            case .unusable(let why) = FocusPoint(x: "{meta.fx}", y: "0").resolved(
                with: ItemFields(key: "k", stem: "k", metadata: #"{"fx": ""# + value + #""}"#))
        else {
            Issue.record("a value of combining marks was taken")
            return
        }
        #expect(why.utf8.count < 300, "\(why.utf8.count) bytes")
    }

    /// An item keeps at most `ItemNotes.most` notes and one saying more were left out
    /// (the wire to the run takes no more than 64: 66 used to end the pixel helper).
    @Test func notesAreCapped() {
        let notes = ItemNotes()
        for index in 0..<100 { notes.add("note \(index)") }
        notes.add("note 3")
        #expect(notes.all.count == ItemNotes.most + 1)
        #expect(notes.all.last == "more notes left out")
        #expect(notes.all.first == "note 0")
    }

    /// The pipeline file: `focus` is required by gravity focus and refused with any other;
    /// a constant must be a fraction, a string either a fraction or a template.
    @Test func thePipelineFileIsCheckedAtValidate() throws {
        func error(_ filter: String) throws -> SpecError? {
            let directory = try TemporaryDirectory()
            _ = try directory.write(
                #"{"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}, "filters": [\#(filter)]}"#,
                to: "pipe.json")
            do {
                _ = try PipelineSpec.load(path: directory.url("pipe.json"))
                return nil
            } catch let error as SpecError {
                return error
            }
        }
        #expect(
            try error(#"{"op": "fill", "width": 10, "height": 10, "gravity": "focus"}"#)?.description
                == #"filters[0].focus: missing (required by gravity "focus")"#)
        #expect(
            try error(#"{"op": "fill", "width": 10, "height": 10, "focus": {"x": 0.5, "y": 0.5}}"#)?.description
                == #"filters[0].focus: is used only with gravity "focus""#)
        #expect(
            try error(#"{"op": "crop", "aspect": "1:1", "gravity": "focus", "focus": {"x": 1.5, "y": 0}}"#)?.path
                == "filters[0].focus.x")
        #expect(
            try error(#"{"op": "crop", "aspect": "1:1", "gravity": "focus", "focus": {"x": 0, "y": "middle"}}"#)?.path
                == "filters[0].focus.y")
        #expect(
            try error(#"{"op": "fill", "width": 9, "height": 9, "gravity": "focus", "focus": {"x": 0}}"#)?.path
                == "filters[0].focus.y")
        #expect(
            try error(#"{"op": "text", "text": "t", "gravity": "focus"}"#)?.path == "filters[0].gravity",
            "an overlay has no focus")
        // Strings: a number as JSON writes it, or a template of complete fields.
        for bad in [
            #""{meta.fx""#, #""0x1p-1""#, #"".5""#, #""nan""#, #""{meta.}""#, #""{meta..}""#, #""{width}""#, #""{key}x""#,
        ] {
            #expect(
                try error(#"{"op": "fill", "width": 9, "height": 9, "gravity": "focus", "focus": {"x": \#(bad), "y": 0}}"#)?.path
                    == "filters[0].focus.x", "\(bad) was taken")
        }
        #expect(FocusPoint.fraction(" 0.5\n") == 0.5)
        #expect(FocusPoint.isTemplate("0.{meta.x}") && FocusPoint.isTemplate("{meta.a}{meta.b}"))
        #expect(FocusPoint.fraction("2.5e-1") == 0.25)
        // A crop by rectangle has nothing to place.
        #expect(
            try error(#"{"op": "crop", "x": 0, "y": 0, "width": 5, "height": 5, "gravity": "focus"}"#)?.path
                == "filters[0].gravity")
        #expect(
            try error(#"{"op": "crop", "x": 0, "y": 0, "width": 5, "height": 5, "focus": {"x": 0, "y": 0}}"#)?.path
                == "filters[0].focus")
        let good = try PipelineSpec.decode(
            text:
                #"{"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}, "filters": [{"op": "fill", "width": 9, "height": 9, "gravity": "focus", "focus": {"x": "{meta.fx}", "y": 0.25}}]}"#,
            baseDirectory: "/", defaultName: "pipe")
        #expect(
            good.filters.first?.step == .fill(width: 9, height: 9, gravity: .focus, focus: FocusPoint(x: "{meta.fx}", y: "0.25")))
    }
}
