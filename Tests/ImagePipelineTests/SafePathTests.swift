import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// Names from a feed made safe below a sink's folder: what needs no change comes back as it
/// is (the common case, taken on a fast path), and everything else is mended as before.
@Suite("Safe paths")
struct SafePathTests {
    @Test(arguments: [
        ("a/b.jpg", "a/b.jpg"), ("photo.jpg", "photo.jpg"), ("...", "..."), ("a./.b", "a./.b"), ("é/東京.jpg", "é/東京.jpg"),
        ("/a//b/", "a/b"), ("./a/../b", "a/_/b"), ("..", "_"), (".", "_"), ("", "_"), ("/", "_"), ("a/./b", "a/b"),
        ("a\u{01}b\u{7F}", "a_b_"), ("tab\there/x", "tab_here/x"),
        (String(repeating: "x", count: 300) + ".jpg", String(repeating: "x", count: 251) + ".jpg"),
        (String(repeating: "y", count: 255), String(repeating: "y", count: 255)),
        // A `/` and a combining mark after it are one Character, but two things to the
        // file system: `..` and `/` must be seen at the byte.
        ("../\u{301}x.jpg", "_/\u{301}x.jpg"), ("/\u{301}etc/x", "\u{301}etc/x"), ("a/./\u{301}", "a/\u{301}"),
        (
            String(repeating: "x", count: 200) + "/\u{301}" + String(repeating: "y", count: 300),
            String(repeating: "x", count: 200) + "/" + String(repeating: "y", count: 255)
        ),
    ])
    func aNameIsMadeRelative(_ name: String, _ expected: String) {
        #expect(SafePath.relative(name) == expected)
    }
}

/// Folders made from a feed's URL paths split where the file system will: at each `/`.
@Suite("Safe folders")
struct SafeFoldersTests {
    @Test(arguments: [
        ("shop/101/main", "shop/101/main"), ("./\u{301}x", "\u{301}x"), ("../\u{301}x/y", "\u{301}x/y"),
        ("a/.hidden/b", "a/hidden/b"), ("", "_"),
    ])
    func aURLPathBecomesFolders(_ path: String, _ expected: String) {
        #expect(FeedItem.safeFolders(path) == expected)
    }
}
