import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

extension FirstDayTests {
    // MARK: - 6. A one-liner run again makes only what is new

    /// Small JPEGs `photos/pN.jpg` for each N of `range`, each its own picture.
    func photos(_ range: ClosedRange<Int>) throws {
        for index in range {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 96, height: 72, seed: index), to: work.url("photos/p\(index).jpg"))
        }
    }

    /// The width of each thumbnail in `thumbs/`, by name.
    func widths() throws -> [String: Int] {
        var widths: [String: Int] = [:]
        for name in work.files(under: "thumbs") { widths[name] = try VipsImage.open(path: work.url("thumbs/" + name)).width }
        return widths
    }

    /// The one-liner again after photos were added, from the same folder and from another
    /// one, writes only the new thumbnails: the others keep their inode and modification
    /// time. Its pipeline and state are in `.imgpipe/` beside the output folder, not in it.
    /// `--new` writes every one again; another `--fit` is another pipeline, which makes
    /// every thumbnail, and the first flags after it make every one again too (their
    /// files were written over).
    @Test func aOneLinerRunAgainMakesOnlyWhatIsNew() throws {
        try photos(1...4)
        let first = try imgpipe("thumbnail", "photos", "--fit", "32", "--to", "thumbs")
        #expect(first.status == 0, "stderr: \(first.stderr)")
        #expect(work.files(under: "thumbs") == ["p1.jpg", "p2.jpg", "p3.jpg", "p4.jpg"], "only thumbnails in the output folder")
        let kept = work.files(under: ".imgpipe").filter { $0.hasPrefix("thumbnail-") }
        #expect(kept.contains { $0.hasSuffix(".json") } && kept.contains { $0.hasSuffix(".sqlite") }, "\(kept)")
        let before = work.stamps(under: "thumbs")

        try photos(5...6)
        let again = try imgpipe("thumbnail", "photos", "--fit", "32", "--to", "thumbs")
        #expect(again.status == 0, "stderr: \(again.stderr)")
        #expect(again.stderr.contains("making only what is new or changed"), "stderr: \(again.stderr)")
        let after = work.stamps(under: "thumbs")
        #expect(Set(after.keys) == Set((1...6).map { "p\($0).jpg" }))
        for (name, stamp) in before { #expect(after[name] == stamp, "\(name) was written again") }

        // From another folder: the same state, beside the output folder.
        try photos(7...7)
        try work.folder("elsewhere")
        let elsewhere = try ImgpipeBinary.run(
            ["thumbnail", "../photos", "--fit", "32", "--to", "../thumbs"], in: work.url("elsewhere"))
        #expect(elsewhere.status == 0, "stderr: \(elsewhere.stderr)")
        #expect(work.files(under: "elsewhere").isEmpty, "\(work.files(under: "elsewhere"))")
        let third = work.stamps(under: "thumbs")
        #expect(third.count == 7 && third.filter { after[$0.key] != nil && after[$0.key] != $0.value }.isEmpty)

        // status takes the saved pipeline file from anywhere.
        let saved = try #require(kept.first { $0.hasSuffix(".json") })
        let status = try ImgpipeBinary.run(["status", "../.imgpipe/" + saved, "--json"], in: work.url("elsewhere"))
        #expect(status.status == 0 && status.stdout.contains(#""done" : 7"#), "\(status.stdout)\(status.stderr)")

        let redone = try imgpipe("thumbnail", "photos", "--fit", "32", "--to", "thumbs", "--new")
        #expect(redone.status == 0, "stderr: \(redone.stderr)")
        let fresh = work.stamps(under: "thumbs")
        #expect(fresh.allSatisfy { third[$0.key] != $0.value }, "--new writes every thumbnail again")

        let smaller = try imgpipe("thumbnail", "photos", "--fit", "20", "--to", "thumbs")
        #expect(smaller.status == 0, "stderr: \(smaller.stderr)")
        let narrow = try widths()
        #expect(narrow.count == 7 && narrow.values.allSatisfy { $0 == 20 }, "\(narrow)")
        let back = try imgpipe("thumbnail", "photos", "--fit", "32", "--to", "thumbs")
        #expect(back.status == 0, "stderr: \(back.stderr)")
        let wide = try widths()
        #expect(wide.count == 7 && wide.values.allSatisfy { $0 == 32 }, "\(wide)")

        // Where the state cannot be kept beside the output folder (a file is in the way),
        // it is kept here, as before, saying so.
        try work.write("", to: "blocked/.imgpipe")
        let blocked = try imgpipe("thumbnail", "photos", "--fit", "32", "--to", "blocked/thumbs")
        #expect(blocked.status == 0, "stderr: \(blocked.stderr)")
        #expect(blocked.stderr.contains("cannot keep this command's state beside blocked/thumbs"), "\(blocked.stderr)")
        #expect(work.files(under: "blocked/thumbs").count == 7)
    }

    /// Over a URL list, a run again asks for each known image with its ETag (a 304 each),
    /// downloads only the new URL, and writes only its thumbnail.
    @Test func aOneLinerOverAURLListDownloadsOnlyWhatIsNew() throws {
        let jpeg = self.jpeg
        let server = try TestHTTPServer { request in
            if request.headers["if-none-match"] == "\"same\"" { return .status(304) }
            return .bytes(jpeg, headers: [("ETag", "\"same\"")])
        }
        let urls = (1...4).map { "\(server.baseURL)/shop/item\($0).jpg" }
        try work.write(urls.prefix(3).joined(separator: "\n") + "\n", to: "urls.txt")
        let first = try imgpipe("thumbnail", "urls.txt", "--fit", "32", "--to", "thumbs")
        #expect(first.status == 0, "stderr: \(first.stderr)")
        let before = work.stamps(under: "thumbs")
        #expect(before.count == 3, "\(before)")

        try work.write(urls.joined(separator: "\n") + "\n", to: "urls.txt")
        let requestsBefore = server.requests.count
        let again = try imgpipe("thumbnail", "urls.txt", "--fit", "32", "--to", "thumbs")
        #expect(again.status == 0, "stderr: \(again.stderr)")
        let asked = server.requests.dropFirst(requestsBefore)
        let downloads = asked.filter { $0.headers["if-none-match"] == nil }.map(\.path)
        #expect(downloads == ["/shop/item4.jpg"], "only the new image is downloaded: \(asked.map(\.path))")
        let after = work.stamps(under: "thumbs")
        #expect(after.count == 4 && after["shop/item4.jpg"] != nil, "\(after.keys.sorted())")
        for (name, stamp) in before { #expect(after[name] == stamp, "\(name) was written again") }
    }

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
