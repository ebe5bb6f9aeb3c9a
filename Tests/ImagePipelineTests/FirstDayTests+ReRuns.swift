import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

extension FirstDayTests {
    // MARK: - 7. The cache lives beside the state

    /// Run from the parent folder, a remote pipeline finds its state beside the pipeline
    /// file and its cache with it: nothing is downloaded again and nothing is made in the
    /// current folder. `imgpipe cache` shows that cache. A cache `path` in the file is the
    /// pipeline file's folder's.
    @Test func theCacheLivesBesideTheState() throws {
        let server = try server(serving: ["/a.jpg", "/b.jpg"])
        try work.write("\(server.baseURL)/a.jpg\n\(server.baseURL)/b.jpg\n", to: "feed/urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt"},
             "filters": [{"op": "fit", "width": 32, "height": 32}], "sink": {"type": "directory", "path": "out"}}
            """, to: "feed/remote.json")
        let first = try ImgpipeBinary.run(["run", "remote.json"], in: work.url("feed"))
        #expect(first.status == 0, "stderr: \(first.stderr)")
        #expect(server.requests.count == 2)

        let fromParent = try imgpipe("run", "feed/remote.json")
        #expect(fromParent.status == 0, "stderr: \(fromParent.stderr)")
        #expect(fromParent.stdout.contains("run #2"), "the state beside the pipeline file: \(fromParent.stdout)")
        #expect(server.requests.count == 2, "downloaded again: \(server.requests.map(\.path))")
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")), "\(work.files(under: ".imgpipe"))")
        let shown = try imgpipe("cache", "feed/remote.json")
        #expect(shown.stdout.contains("cache feed/.imgpipe/cache: 2 entries"), "stdout: \(shown.stdout)")

        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": {"path": "kept"}},
             "sink": {"type": "directory", "path": "out2"}}
            """, to: "feed/named.json")
        #expect(try imgpipe("run", "feed/named.json").status == 0)
        #expect(work.files(under: "feed/kept").count >= 2 && !FileManager.default.fileExists(atPath: work.url("kept")))
    }
}
