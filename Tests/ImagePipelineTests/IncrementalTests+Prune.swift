import Foundation
import ImagePipelineTesting
import Testing

@testable import PipelineKit

extension IncrementalTests {
    /// A folder sink compared by where it delivers (`SinkParameters.deliversLike`): turning
    /// `prune` on makes nothing again, and another folder makes everything again.
    @Test func turningPruneOnKeepsTheSinkAndAnotherFolderDoesNot() throws {
        for index in 1...3 { try photo("p\(index)", seed: index) }
        func write(path: String, prune: Bool) throws {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "outputs": [{"id": "web", "format": "jpeg", "name": "{stem}.jpg"}],
                 "sinks": [{"type": "directory", "path": "\(path)", "prune": \(prune)}]}
                """, to: "pipe.json")
        }
        func reasons(_ plan: [String: Any]) -> [String] {
            ((plan["outputs"] as? [String: Any])?["web"] as? [String: Any])?["reasons"] as? [String] ?? []
        }
        try write(path: "out", prune: false)
        #expect(try imgpipe("run", "pipe.json").status == 0)

        try write(path: "out", prune: true)
        let pruning = try plan()
        #expect(redo(pruning, "web") == 0 && reasons(pruning).isEmpty, "\(pruning)")

        try write(path: "elsewhere", prune: true)
        let moved = try plan()
        #expect(redo(moved, "web") == 3 && reasons(moved).contains("sink \"directory-0\" changed"), "\(moved)")
    }
}
