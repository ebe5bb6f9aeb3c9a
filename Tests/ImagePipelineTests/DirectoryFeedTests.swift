import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// A directory source's listing resumed after a cursor (issue 40, point 5): it starts
/// after the cursor's file, in listing order, without listing what came before.
@Suite("directory listing resumed")
struct DirectoryFeedTests {
    let work: TemporaryDirectory

    init() throws {
        work = try TemporaryDirectory("imgpipe-dirfeed")
        for path in ["a/1.jpg", "a/2.jpg", "b/c/1.jpg", "b/c/2.jpg", "b/c/3.jpg", "b/d.jpg", "b/e/1.jpg", "z.jpg"] {
            try work.write("x", to: "src/" + path)
        }
    }

    func keys(after key: String?) throws -> (keys: [String], total: Int?) {
        var keys: [String] = []
        var total: Int?
        let cursor = key.map { FeedCursor(key: $0, listed: 0) }
        try DirectoryFeed(root: work.url("src")).list(after: cursor, expecting: { total = $0.items }) { item in
            keys.append(item.key)
            return true
        }
        return (keys, total)
    }

    @Test func aResumedListingStartsAfterItsCursor() throws {
        let all = try keys(after: nil)
        #expect(all.keys == ["a/1.jpg", "a/2.jpg", "b/c/1.jpg", "b/c/2.jpg", "b/c/3.jpg", "b/d.jpg", "b/e/1.jpg", "z.jpg"])
        let resumed = try keys(after: "b/c/2.jpg")
        #expect(resumed.keys == ["b/c/3.jpg", "b/d.jpg", "b/e/1.jpg", "z.jpg"])
        #expect(resumed.total == 8, "the total is the folder's, for the run's progress")
        #expect(try keys(after: "z.jpg").keys.isEmpty)
        // The cursor's file gone: what sorts after it still comes, nothing before.
        try FileManager.default.removeItem(atPath: work.url("src/b/d.jpg"))
        #expect(try keys(after: "b/d.jpg").keys == ["b/e/1.jpg", "z.jpg"])
        // A cursor whose folder is gone.
        #expect(try keys(after: "b/ca/9.jpg").keys == ["b/e/1.jpg", "z.jpg"])
    }

    /// Names that are not UTF-8 (keys escaped `\xE9`) and backslashes (`\x5C`) are
    /// compared by their bytes, as the listing orders them.
    @Test func aCursorWithEscapedBytesIsFoundByItsBytes() throws {
        try FileManager.default.createDirectory(atPath: work.url("src/m"), withIntermediateDirectories: true)
        let latin = Array("src/m/caf".utf8) + [0xE9] + Array(".jpg".utf8)
        let slash = Array("src/m/x\\y.jpg".utf8)
        for bytes in [latin, slash] {
            let path = Array(work.path.utf8) + [UInt8(ascii: "/")] + bytes
            let fd = LocalPath.withCPath(bytes: path) { open($0, O_CREAT | O_WRONLY, 0o644) }
            #expect(fd >= 0)
            close(fd)
        }
        let all = try keys(after: nil).keys
        #expect(all.contains("m/caf\\xE9.jpg") && all.contains("m/x\\x5Cy.jpg"), "\(all)")
        #expect(try keys(after: "m/caf\\xE9.jpg").keys == ["m/x\\x5Cy.jpg", "z.jpg"])
        #expect(try keys(after: "m/x\\x5Cy.jpg").keys == ["z.jpg"])
    }
}
