import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// Failures of a filter on an item name the filter, through the built binary.
extension CommandLineTests {
    /// `fit` 20×20 then `text`: on a 3:2 picture (20×13) the text's default margin (16) puts
    /// it wholly outside, which failed each item with libvips' `embed: bad dimensions`,
    /// naming neither the filter nor a size. The failure names the step by its place in the
    /// file, its op and the picture it was given, an output's own step by its output; and
    /// `validate` refuses the chain whose sizes show it without an image (a 12×12 box).
    @Test func aFilterThatFailsOnAnItemIsNamedWithTheSizesInvolved() throws {
        try ImageFixtures.write(try ImageFixtures.photo(width: 300, height: 200), to: work.url("in/a.png"))
        try pipeline(filters: #"[{"op": "fit", "width": 20, "height": 20}, {"op": "text", "text": "x"}]"#)
        #expect(try imgpipe("validate", "pipe.json").status == 0, "a 20-high box leaves room for margin 16")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 1, "stderr: \(run.stderr)")
        let failure = try status().failures.first
        #expect(failure?.reason == "process")
        let message = failure?.message ?? ""
        #expect(message.hasPrefix("filters[1] text on a 20×13 picture: "), "message: \(message)")
        #expect(
            message.contains(
                "16 px from the south edge, lies wholly outside the picture (margin 16 is not less than its height, 13)"),
            "message: \(message)")
        #expect(!message.contains("bad dimensions"), "message: \(message)")

        // An output's own step, after a load shared by two outputs.
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "outputs": [{"id": "big", "filters": [{"op": "fit", "width": 100, "height": 100}]},
                         {"id": "small", "filters": [{"op": "fit", "width": 20, "height": 20},
                                                     {"op": "text", "text": "x", "gravity": "north"}]}],
             "sink": {"type": "directory", "path": "out2"}}
            """, to: "pipe.json")
        let outputs = try imgpipe("run", "pipe.json", "--new")
        #expect(outputs.status == 1, "stderr: \(outputs.stderr)")
        let own = try status().failures.first?.message ?? ""
        #expect(own.hasPrefix("outputs[1].filters[1] text on a 20×13 picture: "), "message: \(own)")
        #expect(own.contains("from the north edge") && !own.hasSuffix("(output small)"), "message: \(own)")

        // Known without an image: a 12×12 box is at most 12 high, the margin 16.
        try pipeline(filters: #"[{"op": "fit", "width": 12, "height": 12}, {"op": "text", "text": "x"}]"#)
        let refused = try imgpipe("validate", "pipe.json")
        #expect(refused.status == 2)
        #expect(
            refused.stderr.contains(
                "filters[1]: margin 16 from the south edge puts the text wholly outside the picture, "
                    + "which the filters before it make at most 12 pixels high; make the margin smaller than 12"),
            "stderr: \(refused.stderr)")
        #expect(try imgpipe("run", "pipe.json", "--new").status == 2)
        // A gravity along the other side, or a margin that fits, is no fault.
        try pipeline(filters: #"[{"op": "fit", "width": 40, "height": 12}, {"op": "text", "text": "x", "gravity": "west"}]"#)
        #expect(try imgpipe("validate", "pipe.json").status == 0)
    }
}
