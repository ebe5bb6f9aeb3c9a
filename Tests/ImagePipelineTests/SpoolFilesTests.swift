import Foundation
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// The spool folder's files reused from one download to the next (`SpoolFiles`), and the
/// HTTP client writing over a file already there: on real files, a real loopback server
/// and the built binary.
@Suite("Spool files", .serialized)
struct SpoolFilesTests {
    let work: TemporaryDirectory

    init() throws {
        work = try TemporaryDirectory("imgpipe-spool")
        try FileManager.default.createDirectory(atPath: work.url("spool"), withIntermediateDirectories: true)
    }

    func info(_ path: String) -> stat? {
        var info = stat()
        return lstat(path, &info) == 0 ? info : nil
    }

    func bytes(_ count: Int, seed: UInt8) -> Data { Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) &+ seed }) }

    @Test func anEndedItemsFileGoesToTheNextDownloadWithAtMostAMegabyteOfBlocks() throws {
        let spool = SpoolFiles(directory: work.url("spool"), keep: 4)
        let first = work.url("spool/7")
        let large = bytes(3 << 20, seed: 1)
        try large.write(to: URL(fileURLWithPath: first))
        let inode = try #require(info(first)).st_ino
        spool.recycle(first)
        #expect(info(first) == nil)
        let free = work.files(under: "spool")
        #expect(free.count == 1 && free[0].hasPrefix(".free-"), "\(free)")
        let kept = try #require(info(work.url("spool/" + free[0])))
        #expect(kept.st_ino == inode)
        #expect(kept.st_size == large.count, "its length kept")
        // (An extent block or two of the file system's own may be counted as well.)
        #expect(
            (SpoolFiles.keptBytes...SpoolFiles.keptBytes + 65536).contains(off_t(kept.st_blocks) * 512),
            "its blocks past the first MB freed, as deleting it would: \(kept.st_blocks) blocks")
        let head = try Data(contentsOf: URL(fileURLWithPath: work.url("spool/" + free[0])))
        #expect(head.prefix(Int(SpoolFiles.keptBytes)) == large.prefix(Int(SpoolFiles.keptBytes)))
        #expect(head.dropFirst(Int(SpoolFiles.keptBytes)).allSatisfy { $0 == 0 }, "a hole")
        // A smaller file keeps its blocks, for the next download to write over.
        let small = work.url("spool/8")
        try bytes(300_000, seed: 2).write(to: URL(fileURLWithPath: small))
        let smallInfo = try #require(info(small))
        #expect(smallInfo.st_blocks > 0)
        spool.recycle(small)
        #expect(work.files(under: "spool").count == 2)

        // The last file given back goes first, under its own name: taken, not moved.
        let last = try #require(spool.take())
        #expect(SpoolFiles.isLeftover((last as NSString).lastPathComponent), "\(last)")
        let reused = try #require(info(last))
        #expect(reused.st_ino == smallInfo.st_ino && reused.st_blocks == smallInfo.st_blocks)
        let next = try #require(spool.take())
        #expect(info(next)?.st_ino == inode)
        #expect(spool.take() == nil, "no free file is left")
        #expect(work.files(under: "spool").count == 2, "both still there, for their downloads")
    }

    @Test func aFileLinkedElsewhereIsDeletedNeverReused() throws {
        // A cached download is a hard link between the cache and the spool: writing over
        // it would change the cache's copy.
        let spool = SpoolFiles(directory: work.url("spool"), keep: 4)
        let body = bytes(50_000, seed: 7)
        try body.write(to: URL(fileURLWithPath: work.url("cached")))
        #expect(link(work.url("cached"), work.url("spool/3")) == 0)
        spool.recycle(work.url("spool/3"))
        #expect(work.files(under: "spool").isEmpty)
        #expect(spool.take() == nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: work.url("cached"))) == body)
        #expect(info(work.url("cached"))?.st_nlink == 1)
    }

    @Test func atMostKeepFilesWait() throws {
        let spool = SpoolFiles(directory: work.url("spool"), keep: 2)
        for seq in 1...5 {
            try bytes(1000, seed: UInt8(seq)).write(to: URL(fileURLWithPath: work.url("spool/\(seq)")))
            spool.recycle(work.url("spool/\(seq)"))
        }
        #expect(work.files(under: "spool").count == 2)
        #expect(work.files(under: "spool").allSatisfy(SpoolFiles.isLeftover))
        spool.clear()  // the session's end: a work folder kept for failed items keeps none of them
        #expect(work.files(under: "spool").isEmpty)
        #expect(spool.take() == nil)
    }

    /// Items held in a sink's batch (a shard) give their files back all at once when it
    /// commits: as many wait as the session had made, not only `keep`, so that the next
    /// items take them instead of making files again (which ext4 without a journal makes
    /// dear after many deletions). With `keep` alone, 8 of these 10 were deleted.
    @Test func filesGivenBackAtOnceAllWaitForTheNextItems() throws {
        let spool = SpoolFiles(directory: work.url("spool"), keep: 2)
        for seq in 1...10 {
            #expect(spool.take() == nil, "nothing free yet: the item makes its file")
            try bytes(5000, seed: UInt8(seq)).write(to: URL(fileURLWithPath: work.url("spool/\(seq)")))
        }
        let inodes = Set((1...10).compactMap { info(work.url("spool/\($0)"))?.st_ino })
        for seq in 1...10 { spool.recycle(work.url("spool/\(seq)")) }
        #expect(work.files(under: "spool").count == 10)
        #expect(work.files(under: "spool").allSatisfy(SpoolFiles.isLeftover))
        let taken = (1...10).compactMap { _ in spool.take() }
        #expect(Set(taken.compactMap { info($0)?.st_ino }) == inodes, "the same files, taken again")
        #expect(spool.take() == nil)
    }

    /// An output staged over a longer file of a delivered one is exactly its own bytes, in
    /// the same file (`FileWriter` writes over, then cuts).
    @Test func anOutputWrittenOverALongerFileIsExactlyItsBytes() throws {
        let path = work.url("spool/staged.jpg.partial")
        try FileWriter.write(bytes(300_000, seed: 1), to: path)
        let inode = try #require(info(path)).st_ino
        let short = bytes(1234, seed: 2)
        try FileWriter.write(short, to: path)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == short)
        #expect(info(path)?.st_ino == inode)
        let long = bytes(400_000, seed: 3)
        try FileWriter.write(long, to: path)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == long)
    }

    @Test func aDownloadOverALongerFileLeavesExactlyItsBody() throws {
        let long = bytes(400_000, seed: 3)
        let short = bytes(1234, seed: 9)
        let server = try TestHTTPServer { request in
            switch request.path {
            case "/long": .bytes(long, headers: [])
            case "/short": .bytes(short, headers: [])
            case "/empty": .bytes(Data(), headers: [])
            default: .status(404)
            }
        }
        defer { server.stop() }
        let client = HTTPClient(timeout: 5)
        let file = work.url("spool/1.part")
        for (path, body) in [("/long", long), ("/short", short), ("/long", long), ("/empty", Data())] {
            let url = try #require(URL(string: server.baseURL + path))
            let result = try client.perform(HTTPRequest(url: url, destination: file))
            #expect(result.status == 200)
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == body, "after \(path)")
        }
        // Over a file emptied for reuse (its length kept, its blocks freed) as well.
        try long.write(to: URL(fileURLWithPath: work.url("spool/2")))
        let spool = SpoolFiles(directory: work.url("spool"), keep: 1)
        spool.recycle(work.url("spool/2"))
        let free = try #require(spool.take())
        _ = try client.perform(HTTPRequest(url: try #require(URL(string: server.baseURL + "/short")), destination: free))
        #expect(try Data(contentsOf: URL(fileURLWithPath: free)) == short)
        // …and a longer body over a shorter file: nothing to cut, nothing left of the old one.
        _ = try client.perform(HTTPRequest(url: try #require(URL(string: server.baseURL + "/long")), destination: free))
        #expect(try Data(contentsOf: URL(fileURLWithPath: free)) == long)
    }

    /// `keepInMemory`: a body up to the limit comes back in memory and is in the file, whole,
    /// written there once the transfer is complete; a longer one goes to the file (what was
    /// kept of it first, then the rest as it comes) and is not kept.
    @Test func aBodyUpToTheLimitIsKeptInMemoryAndInTheFile() throws {
        let small = bytes(100_000, seed: 4)
        let large = bytes(600_000, seed: 5)
        let short = bytes(777, seed: 6)
        let server = try TestHTTPServer { request in
            switch request.path {
            case "/small": .bytes(small)
            case "/large": .bytes(large)
            case "/short": .bytes(short)
            case "/empty": .bytes(Data())
            default: .status(404)
            }
        }
        defer { server.stop() }
        let client = HTTPClient(timeout: 5)
        let file = work.url("spool/5.part")
        func get(_ path: String, keep: Int) throws -> HTTPResult {
            var request = HTTPRequest(url: try #require(URL(string: server.baseURL + path)), destination: file)
            request.keepInMemory = keep
            return try client.perform(request)
        }
        func onDisk() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: file)) }
        for (path, body) in [
            ("/small", small), ("/large", large), ("/short", short), ("/small", small), ("/empty", Data()),
            ("/large", large),
        ] {
            let result = try get(path, keep: 300_000)
            #expect(result.status == 200 && result.bytes == body.count)
            #expect(try onDisk() == body, "the file after \(path)")
            #expect(result.body == (body.count <= 300_000 ? body : nil), "what was kept of \(path)")
        }
        // Nothing kept by default.
        #expect(try get("/small", keep: 0).body == nil)
        #expect(try onDisk() == small)
    }

    /// Downloads retried at once (a 502 with `Retry-After: 0`, backoff 0) while other
    /// downloads take and give back spool files: an attempt's file is never given back
    /// while the next attempt of its item writes to it. Before, the retry could start
    /// before the failed attempt gave its (new) file back: the item failed as "an empty
    /// body", and another item took the file and was delivered with the wrong image.
    @Test func aRetryAtOnceKeepsItsFileAndEveryItemItsImage() throws {
        var bodies: [String: Data] = [:]
        for index in 0..<16 {
            let path = work.url("src-\(index).png")
            try ImageFixtures.write(ImageFixtures.photo(width: 8 + index * 9, height: 6 + index * 5, seed: index + 1), to: path)
            bodies["\(index)"] = try Data(contentsOf: URL(fileURLWithPath: path))
        }
        let served = bodies
        let asked = LockedBox<[String: Int]>([:])
        let server = try TestHTTPServer { request in
            // /<kind>/<item>/<source>.png
            let parts = request.path.split(separator: "/").map(String.init)
            guard parts.count == 3, let body = served[String(parts[2].dropLast(4))] else { return .status(404) }
            let count = asked.withLock {
                $0[request.path, default: 0] += 1
                return $0[request.path]!
            }
            if parts[0] == "flaky" {
                if count <= 2 { return .status(502, headers: [("Retry-After", "0")]) }
                Thread.sleep(forTimeInterval: 0.05)
            }
            return .bytes(body, type: "image/png")
        }
        defer { server.stop() }
        let items = (0..<96).map { (key: "k\($0)", source: ($0 * 7) % 16, kind: $0 % 3 == 0 ? "flaky" : "img") }
        try work.write(
            "key,url\n"
                + items.map { "\($0.key),\(server.baseURL)/\($0.kind)/\($0.key)/\($0.source).png" }
                .joined(separator: "\n") + "\n", to: "list.csv")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "list.csv", "cache": false},
             "output": {"format": "png", "name": "{key}.{ext}"}, "sink": {"type": "directory", "path": "out"},
             "limits": {"downloads": 16, "workers": 1}, "retry": {"attempts": 3, "backoff": 0}}
            """, to: "pipe.json")
        for round in 1...3 {
            try? FileManager.default.removeItem(atPath: work.url("out"))
            asked.withLock { $0 = [:] }
            let run = try ImgpipeBinary.run(["run", "pipe.json", "--new", "--quiet"], in: work.path)
            #expect(run.status == 0, "round \(round): \(run.stderr)")
            var sources: [Int: Pixels] = [:]
            for item in items {
                let source = try sources[item.source] ?? ImageFixtures.decode(work.url("src-\(item.source).png"))
                sources[item.source] = source
                let output = try? ImageFixtures.decode(work.url("out/\(item.key).png"))
                #expect(
                    output?.samples == source.samples && output?.width == source.width,
                    "round \(round): \(item.key) is not source \(item.source)")
            }
        }
    }

    /// Forty remote images of forty sizes through one download and one pixel worker (each
    /// download goes into an earlier item's file): every output is its own image; with a
    /// cache, every cached copy still holds the bytes the server sent.
    @Test func everyItemGetsItsOwnBytesAndTheCacheKeepsItsCopies() throws {
        var bodies: [String: Data] = [:]
        for index in 1...40 {
            let path = work.url("src-\(index).png")
            try ImageFixtures.write(ImageFixtures.photo(width: 20 + index * 3, height: 10 + index, seed: index), to: path)
            bodies["/img/\(index).png"] = try Data(contentsOf: URL(fileURLWithPath: path))
        }
        let served = bodies
        let server = try TestHTTPServer { request in served[request.path].map { .bytes($0, headers: []) } ?? .status(404) }
        defer { server.stop() }
        try work.write((1...40).map { server.baseURL + "/img/\($0).png" }.joined(separator: "\n") + "\n", to: "urls.txt")
        for cache in ["false", #"{"path": "cache"}"#] {
            try? FileManager.default.removeItem(atPath: work.url("out"))
            try work.write(
                """
                {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": \(cache)},
                 "output": {"format": "png", "name": "{name}.{ext}"},
                 "sink": {"type": "directory", "path": "out"}, "limits": {"downloads": 1, "workers": 1}}
                """, to: "pipe.json")
            let run = try ImgpipeBinary.run(["run", "pipe.json", "--new", "--quiet"], in: work.path)
            #expect(run.status == 0, "cache \(cache): \(run.stderr)")
            for index in 1...40 {
                let pixels = try ImageFixtures.decode(work.url("out/\(index).png"))
                let source = try ImageFixtures.decode(work.url("src-\(index).png"))
                #expect((pixels.width, pixels.height) == (20 + index * 3, 10 + index), "item \(index), cache \(cache)")
                #expect(pixels.samples == source.samples, "item \(index)'s pixels, cache \(cache)")
            }
        }
        // Each cached body is one the server sent, byte for byte: none was written over.
        let cached = work.files(under: "cache").filter { !$0.hasSuffix(".json") && !$0.contains("/.") && $0.contains("/") }
        #expect(cached.count == 40, "\(cached)")
        let sent = Set(bodies.values)
        for name in cached {
            #expect(sent.contains(try Data(contentsOf: URL(fileURLWithPath: work.url("cache/" + name)))), "cache/\(name)")
        }
        // A run from the cache alone still gives every item its own image.
        server.stop()
        try? FileManager.default.removeItem(atPath: work.url("out"))
        let again = try ImgpipeBinary.run(["run", "pipe.json", "--new", "--quiet"], in: work.path)
        #expect(again.status == 0, "\(again.stderr)")
        for index in [1, 20, 40] {
            #expect(try ImageFixtures.decode(work.url("out/\(index).png")).width == 20 + index * 3)
        }
    }
}
