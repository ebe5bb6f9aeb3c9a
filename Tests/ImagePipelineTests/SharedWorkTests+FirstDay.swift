import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline

/// Shared runs as a new user met them ("first day, round two", point 12).
extension SharedWorkTests {
    /// A folder source and a folder sink: no server needed.
    func folderPipeline(_ count: Int) throws {
        try images(count)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}], "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
    }

    /// Each worker's progress line counts the whole run: once the feed is listed the total
    /// is its 12 items, not the items this worker was given so far (`4/6+`), and the last
    /// line of each says so.
    @Test func eachWorkersProgressLineShowsTheRunsTotal() throws {
        try folderPipeline(12)
        let workers = try (0..<2).map { _ in
            try ImgpipeBinary.launch(
                ["work", "pipe.json", "--state", url, "--chunk-size", "2", "-j", "1"], in: work.path,
                environment: ["IMGPIPE_PROGRESS_INTERVAL": "0"])
        }
        for result in workers.map({ $0.wait() }) {
            #expect(result.status == 0, "\(result.stderr)")
            let lines = result.stderr.split(separator: "\n").filter { $0.hasPrefix("progress: ") }
            let last = try #require(lines.last, "no progress line: \(result.stderr)")
            #expect(last.hasPrefix("progress: 12/12 done"), "\(lines)")
            // Lines never count down, nor show a total under the feed's.
            let totals = lines.compactMap { $0.split(separator: "/").dropFirst().first?.split(separator: " ").first }
            #expect(totals.allSatisfy { $0 == "12" || $0.hasSuffix("+") }, "\(lines)")
        }
    }
}
