import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// Damaged and malicious inputs: each fails its item as `decode` (never a half-grey
/// output), through the processor and through the built binary, within bounded memory.
@Suite("Hostile input", .serialized)
struct HostileInputTests {
    let directory: TemporaryDirectory
    let harness = ProcessingHarness()

    init() throws { directory = try TemporaryDirectory("imgpipe-hostile") }

    /// One way of damaging a good file, and the format it starts from.
    enum Damage: String, CaseIterable, CustomTestStringConvertible {
        case jpegCutWithEndMarker, jpegScanZeroed, jpegScanGarbled, jpegTruncated
        case pngTruncated, pngOversizedChunk, webpTruncated, gifTruncated, tiffTruncated

        var testDescription: String { rawValue }

        var suffix: String {
            switch self {
            case .jpegCutWithEndMarker, .jpegScanZeroed, .jpegScanGarbled, .jpegTruncated: "jpg"
            case .pngTruncated, .pngOversizedChunk: "png"
            case .webpTruncated: "webp"
            case .gifTruncated: "gif"
            case .tiffTruncated: "tif"
            }
        }

        func apply(to data: Data) -> Data {
            switch self {
            case .jpegCutWithEndMarker: ImageFixtures.jpegCutWithEndMarker(data, keeping: 0.5)
            case .jpegScanZeroed: ImageFixtures.jpegScanZeroed(data)
            case .jpegScanGarbled: ImageFixtures.jpegScanGarbled(data)
            case .pngOversizedChunk: ImageFixtures.pngWithOversizedChunk(data)
            case .jpegTruncated, .pngTruncated, .webpTruncated, .gifTruncated, .tiffTruncated:
                data.prefix(data.count * 6 / 10)
            }
        }
    }

    /// A photo-like 800×600 image in `damage`'s format, damaged, written to `name`.
    @discardableResult
    func damaged(_ damage: Damage, name: String? = nil) throws -> String {
        let good = directory.url("good-\(damage.rawValue).\(damage.suffix)")
        try ImageFixtures.write(try ImageFixtures.photo(width: 800, height: 600), to: good)
        let target = directory.url(name ?? "\(damage.rawValue).\(damage.suffix)")
        try directory.folder((target as NSString).deletingLastPathComponent.replacingOccurrences(of: directory.path, with: "."))
        try damage.apply(to: try Data(contentsOf: URL(fileURLWithPath: good))).write(to: URL(fileURLWithPath: target))
        return target
    }

    // MARK: through the processor

    @Test(arguments: Damage.allCases)
    func damagedFileFailsAsDecodeOnEveryPath(damage: Damage) throws {
        let path = try damaged(damage)
        // Fused shrink-on-load, step by step, and no filters at all.
        let chains: [[FilterStep]] = [[.fit(width: 200, height: 200, enlarge: false)], [.grayscale], []]
        for chain in chains {
            let failure = harness.failure(chain, on: path)
            #expect(failure?.reason == .decode, "\(damage) with \(chain): \(String(describing: failure))")
        }
    }

    @Test func corruptJPEGMessageSaysWhatIsWrong() throws {
        let path = try damaged(.jpegScanGarbled)
        let failure = try #require(harness.failure([.fit(width: 200, height: 200, enlarge: false)], on: path))
        #expect(failure.message.contains("jpeg"), "\(failure)")
        #expect(failure.message.lowercased().contains("corrupt"), "\(failure)")
    }

    // MARK: container structure

    /// Good files of every accepted format, and the samples, pass the structure walk.
    @Test(arguments: ["jpg", "png", "gif", "webp", "tif", "heic", "avif"])
    func goodFilesOfEveryFormatPass(suffix: String) throws {
        let path = directory.url("good.\(suffix)")
        try ImageFixtures.write(try ImageFixtures.photo(width: 320, height: 240), to: path)
        #expect(harness.failure([.fit(width: 100, height: 100, enlarge: false)], on: path) == nil)
        #expect(harness.failure([.grayscale], on: path) == nil)
    }

    @Test func samplesPass() throws {
        let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../samples")
            .standardizedFileURL.path
        let names = try FileManager.default.contentsOfDirectory(atPath: samples).filter { !$0.hasSuffix(".md") }
        #expect(names.count >= 8)
        for name in names {
            #expect(harness.failure([.fit(width: 200, height: 200, enlarge: false)], on: samples + "/" + name) == nil, "\(name)")
        }
    }

    /// A declared size past the end of the file, in each format's container.
    enum Trap: String, CaseIterable, CustomTestStringConvertible {
        case jpegSegment, webpRIFFSize, gifSubBlock, tiffStrips, heifBox

        var testDescription: String { rawValue }
        var suffix: String { ["jpg", "webp", "gif", "tif", "heic"][Self.allCases.firstIndex(of: self)!] }
        /// What the message must say.
        var expected: String {
            ["segment FFDB declares", "RIFF size", "sub-block", "IFD", "iloc extent"][Self.allCases.firstIndex(of: self)!]
        }

        func apply(to bytes: inout [UInt8]) {
            switch self {
            case .jpegSegment:
                // The quantisation table's segment declares 65520 bytes; 200 are left.
                let dqt = bytes.indices.first { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xDB } ?? 2
                bytes[dqt + 2] = 0xFF
                bytes[dqt + 3] = 0xF0
                bytes.removeLast(bytes.count - dqt - 200)
            case .webpRIFFSize: bytes[7] = 0x40
            case .gifSubBlock: bytes.removeLast(bytes.count / 2)
            case .tiffStrips, .heifBox: bytes.removeLast(bytes.count / 3)
            }
        }
    }

    @Test(arguments: Trap.allCases)
    func declaredSizePastTheEndFailsNamingFormatAndOffset(trap: Trap) throws {
        let path = directory.url("trap.\(trap.suffix)")
        try ImageFixtures.write(try ImageFixtures.photo(width: 320, height: 240), to: path)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        trap.apply(to: &bytes)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let failure = try #require(harness.failure([.fit(width: 100, height: 100, enlarge: false)], on: path))
        #expect(failure.reason == .decode)
        #expect(failure.message.hasPrefix("malformed "), "\(failure)")
        #expect(failure.message.contains(trap.expected) && failure.message.contains("offset"), "\(failure)")
    }

    /// libvips 8.14 fails to read this PNG's header (a chunk runs 5000 bytes past the end)
    /// without any error text; the message was "libvips reported no reason".
    @Test func aFailureWithoutErrorTextSaysWhatFailed() throws {
        let good = directory.url("good.png")
        try ImageFixtures.write(try ImageFixtures.photo(width: 800, height: 600), to: good)
        let data = try Data(contentsOf: URL(fileURLWithPath: good))
        let png = ImageFixtures.pngWithOversizedChunk(data, length: UInt32(data.count + 5000))
        defer { VipsRuntime.endThreadWork() }
        #expect {
            _ = try VipsImage.open(data: png)
        } throws: { error in
            let message = (error as? VipsError)?.message ?? ""
            // Alone, the fallback names the input's size; beside other suites, libvips' shared
            // error buffer may hold another thread's text instead. Never "no reason".
            return !message.isEmpty && !message.contains("no reason")
                && (message.contains("\(png.count) bytes") || !message.contains("without giving a reason"))
        }
    }

    // MARK: through the binary

    func pipeline() throws {
        try directory.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 256, "height": 256}],
             "output": {"format": "jpeg"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
    }

    @Test func damagedFilesFailEndToEndWithNoOutput() throws {
        try pipeline()
        for damage in Damage.allCases where damage != .pngOversizedChunk {
            try damaged(damage, name: "in/\(damage.rawValue).\(damage.suffix)")
        }
        try ImageFixtures.jpeg(at: directory.url("in/fine.jpg"), width: 640, height: 480)

        let run = try ImgpipeBinary.runMeasured(["run", "pipe.json"], in: directory.path)
        #expect(run.signal == nil && !run.timedOut)
        #expect(run.result.status == 1, "stderr: \(run.result.stderr)")
        #expect(directory.files(under: "out") == ["fine.jpg"])
        let status = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: directory.path)
        let failures = try status.decoded(StatusReport.self).failures
        #expect(failures.count == Damage.allCases.count - 1)
        for failure in failures {
            #expect(failure.reason == "decode", "\(failure)")
        }
    }

    /// A 1 MB PNG whose tEXt chunk declares 2 GB made libpng allocate it (2.1 GB peak,
    /// 25 s) before failing. The chunk walk refuses it before libvips sees it.
    @Test func oversizedChunkFailsFastInBoundedMemory() throws {
        try pipeline()
        let path = try damaged(.pngOversizedChunk, name: "in/trap.png")
        #expect((try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0) < 2_000_000)

        let run = try ImgpipeBinary.runMeasured(["run", "pipe.json"], in: directory.path)
        #expect(run.signal == nil && !run.timedOut)
        #expect(run.result.status == 1, "stderr: \(run.result.stderr)")
        #expect(run.peakRSSMegabytes > 1 && run.peakRSSMegabytes < 400, "peak RSS \(run.peakRSSMegabytes) MB")
        #expect(directory.files(under: "out").isEmpty)
        #expect(run.result.stderr.contains("tEXt"), "stderr: \(run.result.stderr)")
    }
}
