import Foundation
import ImagePipelineTesting
import ParquetKit
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// An output's quality chosen per image (`QualitySearch`): an SSIM target, a byte budget,
/// both, on the real photos of `samples/`, checked on the bytes written and their decoded
/// pixels against the pixels before encoding.
@Suite("Quality per image")
struct QualitySearchTests {
    static let samples = DeployTests.root + "/samples"
    /// Real photos of several kinds: a sharp night launch, a still life, a portrait, a
    /// deep-sky field full of fine detail.
    static let photos = ["rocket.jpg", "coffee.webp", "astronaut-exif-rotated.jpg", "hubble-deep-field.jpg"]
    let fit = FilterStep.fit(width: 512, height: 512, enlarge: false)

    /// The format of `bytes` as imgpipe reads it (`ImageFormat.sniff`).
    static func sniffed(_ bytes: Data) -> String? {
        guard case .accepted(let format) = ImageFormat.sniff(Array(bytes.prefix(64))) else { return nil }
        return format.rawValue
    }

    /// One output of `spec` made from the sample `name`, fitted to 512.
    func made(_ name: String, _ spec: OutputSpec) throws -> ProcessedImage {
        let image = try ImageProcessor(filters: [fit], output: spec, limits: Limits()).process(.file(Self.samples + "/" + name))
        VipsRuntime.endThreadWork()
        return image
    }

    /// The pixels before encoding: the same chain, written losslessly.
    func reference(_ name: String) throws -> VipsImage {
        var lossless = OutputSpec()
        lossless.format = .png
        return try VipsImage.open(data: try made(name, lossless).data).materialized()
    }

    func jpeg(_ target: Double? = nil, maxBytes: Int? = nil, quality: Int = 85) -> OutputSpec {
        var spec = OutputSpec()
        spec.ssimTarget = target
        spec.maxBytes = maxBytes
        spec.quality = quality
        return spec
    }

    /// The SSIM of `reference` encoded as JPEG at `quality`, decoded again.
    func ssim(of reference: VipsImage, atQuality quality: Int) throws -> Double {
        let bytes = try reference.encoded(.jpeg(quality: quality, progressive: false, strip: true))
        return try VipsImage.open(data: bytes).structuralSimilarity(to: reference)
    }

    @Test func aTargetGivesEachPhotoTheLowestQualityThatReachesIt() throws {
        for name in Self.photos {
            let image = try made(name, jpeg(0.97))
            let choice = try #require(image.choice, "\(name): no choice recorded")
            let reference = try reference(name)
            // The bytes written, decoded, reach the target against the pixels before encoding,
            // and the SSIM recorded is theirs.
            let reached = try VipsImage.open(data: image.data).structuralSimilarity(to: reference)
            #expect(abs(reached - (choice.ssim ?? 0)) < 1e-9, "\(name): recorded \(choice.ssim ?? 0), measured \(reached)")
            if choice.quality < 100 {
                #expect(reached >= 0.97, "\(name): SSIM \(reached) at quality \(choice.quality)")
                // One quality lower falls short: the lowest that reaches it.
                if choice.quality > 30 {
                    #expect(try ssim(of: reference, atQuality: choice.quality - 1) < 0.97, "\(name) at \(choice.quality - 1)")
                }
            }
            // Never more bytes than the quality a fixed setting would need for all of them.
            let fixed = try made(name, jpeg(quality: 95))
            #expect(image.data.count <= fixed.data.count, "\(name): \(image.data.count) against q95's \(fixed.data.count)")
        }
    }

    @Test func aTargetSavesBytesOnPhotosThatDoNotNeedTheHighestQuality() throws {
        // A still life and a portrait reach 0.97 well below 95.
        for name in ["coffee.webp", "astronaut-exif-rotated.jpg"] {
            let searched = try made(name, jpeg(0.97))
            let fixed = try made(name, jpeg(quality: 95))
            #expect(try #require(searched.choice).quality < 95, "\(name)")
            #expect(
                Double(searched.data.count) < 0.8 * Double(fixed.data.count),
                "\(name): \(searched.data.count) vs \(fixed.data.count)")
        }
    }

    @Test func aBudgetGivesTheHighestQualityThatFits() throws {
        for name in Self.photos {
            var spec = OutputSpec()
            spec.format = .webp
            spec.maxBytes = 20_000
            let image = try made(name, spec)
            let choice = try #require(image.choice)
            #expect(image.data.count <= 20_000, "\(name): \(image.data.count) bytes")
            #expect(choice.ssim == nil, "no target: no SSIM computed")
            if choice.quality < 100 {
                let reference = try reference(name)
                let above = try reference.encoded(.webp(quality: choice.quality + 1, lossless: false, effort: 4, strip: true))
                #expect(above.count > 20_000, "\(name): quality \(choice.quality + 1) fits too (\(above.count) bytes)")
            }
        }
    }

    @Test func aTargetTheBudgetForbidsGivesWayToTheBudget() throws {
        let alone = try made("hubble-deep-field.jpg", jpeg(0.99))
        let both = try made("hubble-deep-field.jpg", jpeg(0.99, maxBytes: 40_000))
        #expect(alone.data.count > 40_000, "the target alone is over the budget (\(alone.data.count))")
        #expect(both.data.count <= 40_000)
        #expect(try #require(both.choice).quality < #require(alone.choice).quality)
        #expect(try #require(both.choice?.ssim) < 0.99, "the SSIM recorded is the one reached")
        // A budget the target fits under changes nothing.
        let roomy = try made("coffee.webp", jpeg(0.97, maxBytes: 10_000_000))
        let plain = try made("coffee.webp", jpeg(0.97))
        #expect(roomy.data == plain.data && roomy.choice == plain.choice)
    }

    @Test func aQualityBesideABudgetIsItsCeiling() throws {
        let capped = try made("rocket.jpg", try output(#"{ "quality": 50, "maxBytes": 100000 }"#))
        let fixed = try made("rocket.jpg", jpeg(quality: 50))
        #expect(try #require(capped.choice).quality == 50 && capped.data == fixed.data)
        // Without a number, a budget that everything fits gives 100.
        let roomy = try made("rocket.jpg", try output(#"{ "maxBytes": 10000000 }"#))
        #expect(roomy.choice?.quality == 100)
        #expect(error(#"{ "quality": 50, "minQuality": 60, "maxBytes": 100000 }"#).contains("above quality 50"))
        // A ceiling under the default floor lowers the floor.
        #expect(try output(#"{ "format": "webp", "quality": 20, "maxBytes": 5000 }"#).minQuality == 20)
    }

    @Test func aBudgetNothingFitsFailsAsLimitNamingTheSizeReached() throws {
        var spec = jpeg(maxBytes: 800)
        spec.minQuality = 40
        do throws(ItemFailure) {
            _ = try ImageProcessor(filters: [fit], output: spec, limits: Limits()).process(.file(Self.samples + "/rocket.jpg"))
            Issue.record("a 512-pixel photo fit in 800 bytes")
        } catch {
            #expect(error.reason == .limit)
            #expect(error.message.contains("at quality 40 (minQuality), over maxBytes 800"), "\(error.message)")
            let size = try #require(FailureAdvice.bytes(in: error.message))
            #expect(size > 800)
            #expect(FailureAdvice.of(reason: "limit", message: error.message, httpStatus: nil).cause == "output-budget")
        }
    }

    @Test func theSamePixelsGiveTheSameChoiceEveryTime() throws {
        let first = try made("rocket.jpg", jpeg(0.95))
        let again = try made("rocket.jpg", jpeg(0.95))
        #expect(first.data == again.data && first.choice == again.choice)
    }

    @Test func twoOutputsAlikeButForTheirTargetAreEncodedEachTheirOwnWay() throws {
        var low = jpeg(0.9)
        low.id = "low"
        var high = jpeg(0.99)
        high.id = "high"
        let images = try ImageProcessor(filters: [fit], outputs: [OutputPlan(low), OutputPlan(high)], limits: Limits())
            .processOutputs(.file(Self.samples + "/coffee.webp"))
        VipsRuntime.endThreadWork()
        #expect(images[0].data.count < images[1].data.count)
        #expect(try #require(images[0].choice).quality < #require(images[1].choice).quality)
    }

    @Test func theSearchFindsWhatAScanFindsInAFewProbes() {
        // Monotone curves of several shapes: the answer is the scan's, in fewer probes on
        // the whole than halving takes (six or seven over 30…100), and never many more.
        let curves: [(Int) -> Double] = [
            { 1 - 0.5 * exp(-Double($0) / 20) },
            { 0.8 + 0.2 * Double($0) / 100 },
            { Double($0) < 90 ? 0.9 + Double($0) / 10_000 : 0.99 + Double($0 - 90) / 1000 },
            // Steep at the top, flat below: where a line through the bracket overshoots.
            { 0.85 + 0.15 * pow(Double($0) / 100, 12) },
            { 1 - 0.15 * pow(1 - Double($0) / 100, 0.3) },
        ]
        var probes: [Int] = []
        var halvings: [Int] = []
        for curve in curves {
            for step in 0..<60 {
                let target = 0.85 + Double(step) * 0.0025
                var tried = 0
                let found = QualitySearch.lowest(reaching: target, from: 30) { quality in
                    tried += 1
                    return curve(quality)
                }
                let scanned = (30...100).first { curve($0) >= target } ?? 100
                #expect(found == scanned, "target \(target): \(found), the scan says \(scanned)")
                #expect(tried <= 10, "target \(target): \(tried) probes")
                probes.append(tried)
                var (low, high, halving) = (30, 100, 0)
                while low < high {
                    let middle = (low + high) / 2
                    halving += 1
                    if curve(middle) >= target { high = middle } else { low = middle + 1 }
                }
                halvings.append(halving)
            }
        }
        #expect(probes.reduce(0, +) < halvings.reduce(0, +), "\(probes) against halving's \(halvings)")
        // Photos' loss falls about exponentially with the quality: on such a curve the line
        // through −log(1 − SSIM) needs at most 7 probes for any target (347 over these 60;
        // the line through SSIM itself took up to 9, 372 in all).
        var exponential: [Int] = []
        for step in 0..<60 {
            var tried = 0
            _ = QualitySearch.lowest(reaching: 0.85 + Double(step) * 0.0025, from: 30) { quality in
                tried += 1
                return 1 - 0.4 * exp(-Double(quality) / 15)
            }
            exponential.append(tried)
        }
        #expect(exponential.max() ?? 0 <= 7 && exponential.reduce(0, +) <= 350, "\(exponential)")
        // A curve that is not monotone: the answer is a quality that was tried and reached
        // the target, or 100.
        var passed: Set<Int> = []
        let found = QualitySearch.lowest(reaching: 0.5, from: 30) { quality in
            let score = quality % 7 == 0 ? 0.9 : 0.1
            if score >= 0.5 { passed.insert(quality) }
            return score
        }
        #expect(found == 100 || passed.contains(found))
    }

    // MARK: - the best format

    @Test func theBestFormatIsTheSmallestOfItsCandidatesEachAtTheTarget() throws {
        for name in ["rocket.jpg", "hubble-deep-field.jpg"] {
            let best = try made(name, try output(#"{ "format": "best", "quality": { "ssim": 0.97 } }"#))
            let chosen = try #require(best.format, "\(name): no format recorded")
            var sizes: [OutputFormat: Int] = [:]
            for format in OutputSpec.bestDefault {
                var spec = jpeg(0.97)
                spec.format = format
                sizes[format] = try made(name, spec).data.count
            }
            #expect(best.data.count == sizes.values.min(), "\(name): \(best.data.count) as \(chosen) against \(sizes)")
            #expect(sizes[chosen] == best.data.count)
            // The bytes are the format said, and reach the target.
            let decoded = try VipsImage.open(data: best.data)
            #expect(try decoded.structuralSimilarity(to: reference(name)) >= 0.97 || best.choice?.quality == 100)
            #expect(Self.sniffed(best.data) == chosen.rawValue, "\(name): \(chosen)")
        }
    }

    @Test func anImageWithTransparencyNeverGoesToAFormatWithout() throws {
        // JPEG would be smaller for this photo, but it has an alpha channel.
        let best = try made("chelsea-alpha.png", try output(#"{ "format": "best", "formats": ["jpeg", "webp"], "quality": 80 }"#))
        #expect(best.format == .webp)
        #expect(try VipsImage.open(data: best.data).hasAlpha)
        // The same picture without alpha may go to JPEG.
        let opaque = try made("rocket.jpg", try output(#"{ "format": "best", "formats": ["jpeg", "webp"], "quality": 80 }"#))
        #expect([OutputFormat.jpeg, .webp].contains(try #require(opaque.format)))
    }

    @Test func aFormatThatCannotHoldThePictureIsPassedOver() throws {
        // WebP holds at most 16383 pixels a side; JPEG and PNG hold this one.
        let wide = try TemporaryDirectory()
        let path = wide.url("wide.png")
        try ImageFixtures.write(try ImageFixtures.quadrants(width: 17000, height: 40), to: path)
        let spec = try output(#"{ "format": "best", "formats": ["webp", "jpeg", "png"], "quality": 80 }"#)
        let image = try ImageProcessor(filters: [], output: spec, limits: Limits()).process(.file(path))
        VipsRuntime.endThreadWork()
        #expect(image.format == .jpeg || image.format == .png)
        #expect(image.width == 17000)
    }

    @Test func aCandidateThatReachesTheTargetIsKeptOverASmallerOneThatDoesNot() throws {
        // No lossy format reaches 0.9999 on this photo at 128 pixels; PNG does.
        var spec = try output(#"{ "format": "best", "formats": ["jpeg", "webp", "png"], "quality": { "ssim": 0.9999 } }"#)
        spec.id = "default"
        let image = try ImageProcessor(filters: [.fit(width: 128, height: 128, enlarge: false)], output: spec, limits: Limits())
            .process(.file(Self.samples + "/rocket.jpg"))
        VipsRuntime.endThreadWork()
        #expect(image.format == .png)
    }

    @Test func twoBestOutputsDifferingInAnotherFormatsSettingsAreNotTwins() throws {
        let lossy = try output(#"{ "id": "a", "format": "best", "formats": ["jpeg", "webp"], "quality": 50 }"#)
        let lossless = try output(
            #"{ "id": "b", "format": "best", "formats": ["jpeg", "webp"], "quality": 50, "lossless": true }"#)
        let images = try ImageProcessor(
            filters: [.fit(width: 64, height: 64, enlarge: false)], outputs: [OutputPlan(lossy), OutputPlan(lossless)],
            limits: Limits()
        ).processOutputs(.file(Self.samples + "/rocket.jpg"))
        VipsRuntime.endThreadWork()
        let alone = try ImageProcessor(filters: [.fit(width: 64, height: 64, enlarge: false)], output: lossless, limits: Limits())
            .process(.file(Self.samples + "/rocket.jpg"))
        VipsRuntime.endThreadWork()
        #expect(images[1].data == alone.data && images[1].format == alone.format)
    }

    @Test func theFileSaysBestAndItsFormats() throws {
        let best = try output(#"{ "format": "BEST" }"#)
        #expect(best.bestOf == OutputSpec.bestDefault && best.format == .avif)
        #expect(try output(#"{ "format": "best", "formats": ["png", "jpeg"] }"#).bestOf == [.png, .jpeg])
        #expect(error(#"{ "format": "best", "formats": ["jpeg"] }"#).contains("no format that keeps transparency"))
        #expect(error(#"{ "format": "best", "formats": ["gif", "webp"] }"#).contains("formats[0]"))
        #expect(error(#"{ "format": "best", "formats": ["webp", "webp"] }"#).contains("different formats"))
        #expect(error(#"{ "format": "jpeg", "formats": ["webp"] }"#).contains("used only with"))
        #expect(error(#"{ "format": "best", "formats": ["png"], "quality": 80 }"#).contains("not used by best of png"))
    }

    // MARK: - the pipeline file

    func output(_ json: String) throws -> OutputSpec {
        try OutputSpec(node: SpecNode(value: try JSONParser.parse(json), path: .root))
    }

    func error(_ json: String) -> String {
        do {
            _ = try output(json)
            return "accepted"
        } catch {
            return "\(error)"
        }
    }

    @Test func theFileSaysTargetsAndBudgetsAndRefusesWhatCannotApply() throws {
        let target = try output(#"{ "quality": { "ssim": 0.97 }, "maxBytes": 30000, "minQuality": 40 }"#)
        #expect(target.ssimTarget == 0.97 && target.maxBytes == 30000 && target.minQuality == 40 && target.searchesQuality)
        #expect(try output(#"{ "quality": 70 }"#).searchesQuality == false)
        #expect(error(#"{ "quality": { "ssim": 1.5 } }"#).contains("quality.ssim"))
        #expect(error(#"{ "quality": { "psnr": 40 } }"#).contains("unknown key"))
        #expect(error(#"{ "quality": "high" }"#).contains("a quality 1…100 or a target"))
        #expect(error(#"{ "minQuality": 40 }"#).contains("used only with a quality target"))
        #expect(error(#"{ "format": "png", "maxBytes": 1000 }"#).contains("not used by png"))
        #expect(error(#"{ "format": "webp", "lossless": true, "quality": { "ssim": 0.97 } }"#).contains("lossless WebP"))
    }

    // MARK: - through the binary

    /// A folder with the samples `names` in `photos/` and `p.json` fitting them to `size`
    /// into `out/` with `output`.
    func work(_ names: [String], size: Int, output: String) throws -> TemporaryDirectory {
        let work = try TemporaryDirectory()
        let photos = try work.folder("photos")
        for name in names {
            try FileManager.default.copyItem(atPath: Self.samples + "/" + name, toPath: photos + "/" + name)
        }
        _ = try work.write(
            """
            { "version": 1, "source": { "type": "directory", "path": "photos" },
              "filters": [ { "op": "fit", "width": \(size), "height": \(size) } ],
              "output": \(output), "sink": { "type": "directory", "path": "out" } }
            """, to: "p.json")
        return work
    }

    @Test func aBestOutputIsNamedAndDeliveredInTheFormatItCameOutIn() throws {
        let work = try work(
            ["rocket.jpg", "chelsea-alpha.png"], size: 256,
            output: #"{ "format": "best", "formats": ["jpeg", "webp"], "quality": 80 }"#)
        let run = try ImgpipeBinary.run(["run", "p.json", "--quiet"], in: work.path)
        #expect(run.status == 0, "\(run.stderr)")
        let export = try ImgpipeBinary.run(["export", "p.json", "--format", "jsonl"], in: work.path)
        var formats: [String: String] = [:]
        for line in export.stdout.split(separator: "\n") {
            let record = try JSONParser.parse(String(line))
            guard case .string(let key)? = record["key"], case .string(let name)? = record["outputs"]?["default"]?["name"],
                case .string(let format)? = record["outputs"]?["default"]?["format"]
            else {
                Issue.record("\(line)")
                continue
            }
            formats[key] = format
            let ext = try #require(OutputFormat(rawValue: format)).fileExtension
            #expect(name.hasSuffix("." + ext), "\(key): \(name) is \(format)")
            let written = try Data(contentsOf: URL(fileURLWithPath: work.path + "/out/" + name))
            #expect(Self.sniffed(written) == format, "\(name)")
        }
        #expect(formats["chelsea-alpha.png"] == "webp" && formats.count == 2, "\(formats)")
    }

    @Test func itemsOfOneStemGetNamesOfTheirOwnAndAPlanAfterSeesNothingToDo() throws {
        let work = try work(
            ["rocket.jpg"], size: 64, output: #"{ "format": "best", "formats": ["webp", "jpeg"], "quality": 80 }"#)
        try FileManager.default.copyItem(atPath: Self.samples + "/camera-grey.png", toPath: work.path + "/photos/rocket.png")
        let run = try ImgpipeBinary.run(["run", "p.json", "--quiet"], in: work.path)
        #expect(run.status == 0, "\(run.stderr)")
        let written = try FileManager.default.contentsOfDirectory(atPath: work.path + "/out").sorted()
        #expect(written.count == 2 && written.allSatisfy { $0.hasPrefix("rocket") }, "\(written)")
        let plan = try ImgpipeBinary.run(["plan", "p.json"], in: work.path)
        #expect(plan.status == 0 && plan.stdout.contains("nothing to do"), "\(plan.stdout)\(plan.stderr)")
    }

    @Test func anIncrementalRunThatCopiesAnItemKeepsItsChoice() throws {
        let work = try TemporaryDirectory()
        let photos = try work.folder("photos")
        try FileManager.default.copyItem(atPath: Self.samples + "/rocket.jpg", toPath: photos + "/rocket.jpg")
        func pipeline(_ sinks: String) throws {
            _ = try work.write(
                """
                { "version": 1, "source": { "type": "directory", "path": "photos" },
                  "output": { "format": "jpeg", "quality": { "ssim": 0.95 } }, "sinks": [\(sinks)] }
                """, to: "p.json")
        }
        try pipeline(#"{ "type": "directory", "path": "a" }, { "type": "directory", "path": "b" }"#)
        #expect(try ImgpipeBinary.run(["run", "p.json", "--quiet"], in: work.path).status == 0)
        // A sink gone: the item's rows are copied to the new run, not moved.
        try pipeline(#"{ "type": "directory", "path": "a" }"#)
        let again = try ImgpipeBinary.run(["run", "p.json", "--incremental", "--quiet"], in: work.path)
        #expect(again.status == 0, "\(again.stderr)")
        let export = try ImgpipeBinary.run(["export", "p.json", "--format", "jsonl"], in: work.path)
        let record = try JSONParser.parse(export.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(record["outputs"]?["default"]?["quality"] != nil && record["outputs"]?["default"]?["ssim"] != nil, "\(record)")
    }

    @Test func aRunRecordsTheQualityChosenAndTheSSIMReachedInItsExport() throws {
        let work = try work(
            ["rocket.jpg", "coffee.webp"], size: 512,
            output: #"{ "format": "jpeg", "quality": { "ssim": 0.97 }, "maxBytes": 60000 }"#)
        let run = try ImgpipeBinary.run(["run", "p.json", "--quiet"], in: work.path)
        #expect(run.status == 0, "\(run.stderr)")
        let export = try ImgpipeBinary.run(["export", "p.json", "--format", "jsonl"], in: work.path)
        #expect(export.status == 0, "\(export.stderr)")
        let records = export.stdout.split(separator: "\n").map { try? JSONParser.parse(String($0)) }
        #expect(records.count == 2)
        func number(_ value: JSONValue?) -> Double? {
            if case .number(let number, _)? = value { return number }
            return nil
        }
        var chosen: [String: (quality: Int, ssim: Double)] = [:]
        for record in records {
            let output = try #require(record?["outputs"]?["default"])
            let quality = try #require(number(output["quality"]))
            let ssim = try #require(number(output["ssim"]))
            guard case .string(let name)? = output["name"] else {
                Issue.record("no name: \(output)")
                continue
            }
            let written = try Data(contentsOf: URL(fileURLWithPath: work.path + "/out/" + name))
            #expect(written.count <= 60_000 && Double(written.count) == number(output["bytes"]))
            #expect((30...100).contains(Int(quality)))
            #expect(ssim > 0.9 && ssim <= 1)
            guard case .string(let key)? = record?["key"] else { continue }
            chosen[key] = (Int(quality), ssim)
        }
        #expect(chosen.count == 2)
        // CSV and Parquet carry the same two columns, as JSON Lines write them.
        let csv = try ImgpipeBinary.run(["export", "p.json", "--format", "csv"], in: work.path)
        let rows = csv.stdout.split(separator: "\n").map { $0.split(separator: ",", omittingEmptySubsequences: false) }
        #expect(rows.count == 1 + chosen.count, "\(csv.stdout)")
        let header = try #require(rows.first)
        let (qualityColumn, ssimColumn) = (
            try #require(header.firstIndex(of: "output.quality")), try #require(header.firstIndex(of: "output.ssim"))
        )
        for row in rows.dropFirst() {
            let (quality, ssim) = try #require(chosen[String(row[0])])
            #expect(Int(row[qualityColumn]) == quality && Double(row[ssimColumn]) == ssim, "\(row)")
        }
        let parquet = try ImgpipeBinary.run(["export", "p.json", "--format", "parquet", "-o", "items.parquet"], in: work.path)
        #expect(parquet.status == 0, "\(parquet.stderr)")
        let reader = try ParquetReader(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: work.path + "/items.parquet"))))
        let names = reader.columns.map(\.name)
        let wanted = try ["key", "output.quality", "output.ssim"].map { name in try #require(names.firstIndex(of: name)) }
        var cursor = try reader.rows(inGroup: 0, columns: wanted)
        var seen = 0
        while let row = try cursor.next() {
            guard case .bytes(let key)? = row[0], case .int(let quality)? = row[1], case .double(let ssim)? = row[2] else {
                Issue.record("\(row)")
                continue
            }
            let expected = try #require(chosen[String(decoding: key, as: UTF8.self)])
            #expect(Int(quality) == expected.quality && ssim == expected.ssim)
            seen += 1
        }
        #expect(seen == 2)
    }
}
