import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// Hundreds of deterministic mutants of good files, run through the built binary in one
/// `imgpipe run`: no crash, no hang, bounded memory, every item accounted for, no output
/// for a failed item and a sound output for a done one.
@Suite("Mutated inputs", .serialized)
struct MutationTests {
    static let mutantsPerSeed = 50
    static let box = 64

    let directory: TemporaryDirectory

    init() throws { directory = try TemporaryDirectory("imgpipe-mutants") }

    /// Good files of every accepted format, small so that the run stays quick.
    func seeds() throws -> [(suffix: String, data: Data)] {
        try ["jpg", "jpg[interlace]", "png", "gif", "webp", "tif[compression=deflate]"].enumerated().map { index, format in
            let suffix = String(format.prefix { $0 != "[" })
            let path = directory.url("seed-\(index).\(suffix)")
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 160, height: 120), to: path + String(format.drop { $0 != "[" }))
            return (suffix, try Data(contentsOf: URL(fileURLWithPath: path)))
        }
    }

    /// One mutant: a kind of damage chosen by `random`, applied at random places.
    static func mutate(_ data: Data, random: inout SeededRandom) -> Data {
        var bytes = [UInt8](data)
        func position() -> Int { Int(random.next() % UInt64(max(1, bytes.count))) }
        switch random.next() % 7 {
        case 0:  // bit flips
            for _ in 0...random.next() % 8 { bytes[position()] ^= 1 << (random.next() % 8) }
        case 1:  // a run of bytes zeroed
            let start = position()
            for index in start..<min(bytes.count, start + 1 + Int(random.next() % 512)) { bytes[index] = 0 }
        case 2:  // truncated
            bytes.removeLast(bytes.count - position())
        case 3:  // an end-of-image marker inserted (and the rest dropped, half the time)
            let at = position()
            if random.next() % 2 == 0 { bytes.removeLast(bytes.count - at) }
            bytes.insert(contentsOf: [0xFF, 0xD9], at: min(at, bytes.count))
        case 4:  // a length field in the header rewritten
            let at = 4 + Int(random.next() % UInt64(max(1, min(bytes.count - 8, 256))))
            let value = random.next()
            for index in 0..<4 where at + index < bytes.count {
                bytes[at + index] = UInt8(truncatingIfNeeded: value >> (8 * index))
            }
        case 5:  // bytes appended
            bytes += (0..<1 + random.next() % 4096).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        default:  // a block of garbage in the middle
            let start = position()
            for index in start..<min(bytes.count, start + 1 + Int(random.next() % 64)) {
                bytes[index] = UInt8(truncatingIfNeeded: random.next())
            }
        }
        return Data(bytes)
    }

    @Test func mutantsNeverCrashHangOrLeakAnOutput() throws {
        try directory.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": \(Self.box), "height": \(Self.box)}],
             "output": {"format": "jpeg"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        try directory.folder("in")
        var random = SeededRandom(seed: 11)
        var mutants: [String: Data] = [:]
        for (index, seed) in try seeds().enumerated() {
            for number in 0..<Self.mutantsPerSeed {
                let key = String(format: "m%d-%03d.%@", index, number, seed.suffix)
                let mutant = Self.mutate(seed.data, random: &random)
                mutants[key] = mutant
                try mutant.write(to: URL(fileURLWithPath: directory.url("in/" + key)))
            }
        }

        let run = try ImgpipeBinary.runMeasured(["run", "pipe.json", "--quiet"], in: directory.path, timeout: 300)
        #expect(run.signal == nil, "killed by signal \(String(describing: run.signal)): \(run.result.stderr.suffix(2000))")
        #expect(!run.timedOut, "hang guard fired")
        #expect([0, 1].contains(run.result.status), "exit \(run.result.status): \(run.result.stderr.suffix(2000))")
        #expect(run.peakRSSMegabytes > 1 && run.peakRSSMegabytes < 400, "peak RSS \(run.peakRSSMegabytes) MB")

        let status = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: directory.path)
        let report = try status.decoded(StatusReport.self)
        let failures = report.failures
        let done = report.done
        #expect(report.total == mutants.count)
        #expect(done + failures.count == mutants.count, "done \(done), failed \(failures.count) of \(mutants.count)")
        #expect(report.pending == 0)
        #expect(done > 0 && failures.count > 0, "both outcomes exercised: \(done) done, \(failures.count) failed")
        print("mutants: \(mutants.count), done \(done), failed \(failures.count), peak RSS \(run.peakRSSMegabytes) MB")

        let outputs = Set(directory.files(under: "out"))
        for failure in failures {
            let key = failure.key
            #expect(!outputs.contains(Self.outputName(key)), "failed item \(key) left an output")
            #expect(!failure.message.contains("no reason"), "\(failure)")
            // A decoder that crashed would only end its pixel helper: a crash is still a defect.
            #expect(!failure.message.contains("pixel helper"), "a pixel helper crashed: \(failure)")
        }
        #expect(!run.result.stderr.contains("pixel helper"), "a pixel helper crashed: \(run.result.stderr.suffix(2000))")
        let failed = Set(failures.map(\.key))
        for (key, mutant) in mutants where !failed.contains(key) {
            let name = Self.outputName(key)
            guard outputs.contains(name) else {
                Issue.record("done item \(key) has no output")
                continue
            }
            let header = try VipsImage.open(data: mutant)
            let scale = min(1, Double(Self.box) / Double(max(header.width, header.height)))
            let expected = (Double(header.width) * scale, Double(header.height) * scale)
            let out = try ImageFixtures.decode(directory.url("out/" + name))
            #expect(
                abs(Double(out.width) - expected.0) <= 1 && abs(Double(out.height) - expected.1) <= 1,
                "\(key): \(out.width)×\(out.height), expected about \(expected)")
        }
        VipsRuntime.endThreadWork()
    }

    static func outputName(_ key: String) -> String {
        (key as NSString).deletingPathExtension + ".jpg"
    }
}
