import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// Feed entries with a NUL character, through a shared run.
extension SharedWorkTests {
    /// PostgreSQL kept `a\u0000b` as `a\u{FFFD}b` beside `a` where a state file kept `a`
    /// alone (cut at the NUL): the two stores disagreed. Both now leave the entry out at
    /// listing, with the same notice, and hold `a`.
    @Test func aFeedEntryWithANulIsLeftOutOfASharedRunAsOfAStateFile() throws {
        try ImageFixtures.jpeg(at: work.url("photo.jpg"), width: 64, height: 48)
        let photo = try Data(contentsOf: URL(fileURLWithPath: work.url("photo.jpg")))
        let server = try TestHTTPServer { request in
            guard request.path == "/feed.json" else { return .bytes(photo) }
            let base = "http://\(request.headers["host"]!)"
            return .json(#"[{"id": "a\u0000b", "url": "\#(base)/images/ab.jpg"}, {"id": "a", "url": "\#(base)/images/a.jpg"}]"#)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", "keyField": "id", "cache": false},
             "output": {"format": "png"}, "sinks": [{"type": "directory", "path": "out"}],
             "limits": {"timeout": 5}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        let result = try shared(["run", "pipe.json"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(
            result.stderr.contains("1 entry left out, with a NUL character in the key or the image URL: [0]"), "\(result.stderr)")
        let keys = try database().execute("SELECT key FROM imgpipe_item ORDER BY key").all.map { $0["key"] ?? "" }
        #expect(keys == ["a"])
        #expect(work.files(under: "out") == ["images/a.png"])
        #expect(!server.requests.contains { $0.path == "/images/ab.jpg" })
    }
}
