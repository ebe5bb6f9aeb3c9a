import Testing

@testable import ImagePipeline

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
    ])
    func aNameIsMadeRelative(_ name: String, _ expected: String) {
        #expect(SafePath.relative(name) == expected)
    }
}
