import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// How large a feed page may be: a limit of its own, named as such.
extension RemoteFeedTests {
    /// A feed page over 64 MiB (a single-page feed of millions of entries) failed with
    /// `over limits.maxBytes (67108864)` whatever `limits.maxBytes` said: the limit was a
    /// fixed page cap. It is the source's `maxPageBytes` (64 MiB by default), and the failure
    /// names it; raised, the page is read. (The page here is one entry padded with white
    /// space to 65 MiB, which is quick to parse.)
    @Test func aFeedPageOverItsLimitNamesMaxPageBytesAndALargerLimitReadsIt() throws {
        let padding = Data(repeating: UInt8(ascii: " "), count: 65 << 20)
        let server = try server { request in
            let base = "http://\(request.headers["host"]!)"
            switch request.path {
            case "/large.json":
                var body = Data(#"[{"url": "\#(base)/images/large.jpg"}"#.utf8)
                body.append(padding)
                body.append(Data("]".utf8))
                return .bytes(body, headers: [("Content-Type", "application/json")])
            case "/small.json":
                return .json("[" + (1...40).map { #"{"url": "\#(base)/images/p\#($0).jpg"}"# }.joined(separator: ", ") + "]")
            default:
                return nil
            }
        }
        let limits = #"{"timeout": 30, "maxBytes": 1048576}"#
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/large.json", "cache": false}"#, limits: limits)
        let refused = try imgpipe("run", "pipe.json")
        #expect(refused.status == 2, "stderr: \(refused.stderr)")
        #expect(refused.stderr.contains("is over source.maxPageBytes (67108864)"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("limits.maxBytes"), "\(refused.stderr)")

        try pipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/large.json", "cache": false, "maxPageBytes": 134217728}"#,
            limits: limits)
        #expect(try imgpipe("validate", "pipe.json").status == 0)
        let read = try imgpipe("run", "pipe.json", "--new")
        #expect(read.status == 0, "stderr: \(read.stderr)")
        #expect(work.files(under: "out") == ["images/large.jpg"])

        // A small limit holds for a small page, and names itself.
        try pipeline(
            source: #"{"type": "json-feed", "url": "\#(server.baseURL)/small.json", "cache": false, "maxPageBytes": 1000}"#)
        let small = try imgpipe("run", "pipe.json", "--new")
        #expect(small.status == 2 && small.stderr.contains("is over source.maxPageBytes (1000"), "\(small.stderr)")

        // Checked like any setting: a positive integer, and only where pages are read.
        try pipeline(source: #"{"type": "json-feed", "url": "\#(server.baseURL)/small.json", "maxPageBytes": 0}"#)
        let zero = try imgpipe("validate", "pipe.json")
        #expect(zero.status == 2 && zero.stderr.contains("source.maxPageBytes: expected an integer"), "\(zero.stderr)")
        try work.write("\(server.baseURL)/images/a.jpg\n", to: "list.txt")
        try pipeline(source: #"{"type": "url-list", "path": "list.txt", "maxPageBytes": 1000}"#)
        let list = try imgpipe("validate", "pipe.json")
        #expect(list.status == 2 && list.stderr.contains("maxPageBytes"), "\(list.stderr)")
        let schema = try imgpipe("schema")
        #expect(schema.stdout.contains("\"maxPageBytes\""))
    }
}
