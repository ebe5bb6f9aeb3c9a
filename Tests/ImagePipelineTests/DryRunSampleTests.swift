import Foundation
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// `dry-run` of a folder takes a small sample spread across it (sub-folders, formats,
/// sizes), the same on each dry-run, says how to take more, and prints a table that fits
/// a terminal however many outputs the pipeline has. The built binary, end to end.
@Suite("Dry-run sample", .serialized)
struct DryRunSampleTests {
    let work: TemporaryDirectory
    init() throws { work = try TemporaryDirectory("imgpipe-dryrun-sample") }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    static let folders = ["a", "b", "c", "d"]
    static let formats = ["jpg", "png", "tif", "webp"]

    /// 44 small pictures: 14 in `a/` (so the first 12 in byte order are all `a/`'s), 10
    /// in each of `b/`, `c/` and `d/`, the four formats in turn, sizes growing; and a
    /// pipeline with five outputs (the table had a column group per output).
    func makeShop() throws {
        for (folderIndex, folder) in Self.folders.enumerated() {
            for number in 1...(folder == "a" ? 14 : 10) {
                let side = 16 + 4 * number
                let name = String(format: "%@/p%02d.%@", folder, number, Self.formats[(number + folderIndex) % 4])
                try ImageFixtures.write(
                    try ImageFixtures.photo(width: side, height: side * 3 / 4, seed: number), to: work.url("shop/" + name))
            }
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "shop"},
             "filters": [{"op": "fit", "width": 16}],
             "outputs": [{"id": "small", "filters": [{"op": "fit", "width": 8}]}, {"id": "medium", "filters": [{"op": "fit", "width": 12}]},
                         {"id": "large"}, {"id": "lossless", "format": "png"}, {"id": "web", "format": "webp"}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "shop.json")
    }

    /// The keys of the samples a `--json` dry-run previewed, in order.
    func sampleKeys(_ result: CommandResult) throws -> [String] {
        let rows = try #require(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        return rows.compactMap { $0["key"] as? String }
    }

    @Test func aFolderGivesTwelveSamplesFromEveryFolderAndFormat() throws {
        try makeShop()
        let first = try imgpipe("dry-run", "shop.json", "--json", "--out", "one")
        #expect(first.status == 0, "stderr: \(first.stderr)")
        let keys = try sampleKeys(first)
        #expect(keys.count == 12, "\(keys)")
        #expect(Set(keys.map { String($0.prefix(1)) }) == Set(Self.folders), "every sub-folder: \(keys)")
        #expect(Set(keys.map { String($0.split(separator: ".").last ?? "") }) == Set(Self.formats), "every format: \(keys)")
        #expect(keys == keys.sorted(), "listing order")
        #expect(first.stderr.contains("previewing 12 of 44 images, spread over 4 folders and 4 formats"), "\(first.stderr)")
        #expect(first.stderr.contains("--limit N") && first.stderr.contains("--all"), "says how to take more: \(first.stderr)")
        #expect(work.files(under: "one").filter { $0.hasPrefix("before/") }.count == 12, "12 samples processed")

        // The same sample on each dry-run.
        let again = try imgpipe("dry-run", "shop.json", "--json", "--out", "two")
        #expect(try sampleKeys(again) == keys)

        let five = try imgpipe("dry-run", "shop.json", "--json", "--limit", "5", "--out", "three")
        #expect(try sampleKeys(five).count == 5 && five.stderr.contains("previewing 5 of 44 images"), "\(five.stderr)")
        let all = try imgpipe("dry-run", "shop.json", "--json", "--all", "--out", "four")
        #expect(try sampleKeys(all).count == 44 && !all.stderr.contains("previewing"), "\(all.stderr)")
        let both = try imgpipe("dry-run", "shop.json", "--all", "--limit", "5")
        #expect(both.status == 2 && both.stderr.contains("--limit and --all cannot be used together"))
    }

    /// Five outputs: a block per sample, a line per output, no line over 110 characters
    /// (the table was 19 columns and 230 wide); the line naming `--limit N` and `--all` is
    /// printed before the table.
    @Test func theTableOfManyOutputsFitsATerminal() throws {
        try makeShop()
        let result = try imgpipe("dry-run", "shop.json", "--out", "preview")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("previewing 12 of 44 images") == true, "stdout: \(result.stdout)")
        #expect(lines.allSatisfy { $0.count <= 110 }, "longest: \(lines.map(\.count).max() ?? 0)\n\(result.stdout)")
        let header = try #require(lines.first { $0.hasPrefix("sample ") })
        #expect(header.split(separator: " ").map(String.init) == ["sample", "input", "out", "output", "bytes", "ssim", "ms"])
        for id in ["small", "medium", "large", "lossless", "web"] {
            #expect(lines.filter { $0.contains(" \(id) ") }.count == 12, "a line per sample for \(id)")
        }
        let large = try #require(lines.first { $0.contains(" large ") })
        #expect(large.contains("×") && large.contains(" → "), "size and bytes of the output: \(large)")
    }
}

extension DryRunSampleTests {
    /// A dry-run makes the run's own processor, with every check `run` makes: a text the
    /// chain puts wholly outside every picture is the pipeline's fault (exit 2, naming its
    /// path), as `validate` and `run` say, not a preview of each sample failing. (Before,
    /// dry-run made its own processor without that check and previewed the samples.)
    @Test func aDryRunRefusesWhatARunRefuses() throws {
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 40, height: 30)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 20, "height": 20},
                         {"op": "text", "text": "hello", "gravity": "south-east", "margin": 30}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "outside.json")
        let validated = try imgpipe("validate", "outside.json")
        #expect(validated.status == 2 && validated.stderr.contains("filters[1]"), "\(validated.stderr)")
        let dry = try imgpipe("dry-run", "outside.json", "--out", "preview")
        #expect(dry.status == 2, "\(dry.stdout)\(dry.stderr)")
        #expect(dry.stderr.contains("filters[1]") && dry.stderr.contains("wholly outside"), "\(dry.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.url("preview/index.html")))
    }
}
