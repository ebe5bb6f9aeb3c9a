import Foundation
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// `imgpipe work` with the built binary: several worker processes on one PostgreSQL
/// database (a throwaway cluster on loopback, one database per test) and a real upload
/// server that keeps what it received, killed, stopped and interrupted mid-run.
@Suite("imgpipe work on a shared run")
final class SharedWorkTests: @unchecked Sendable {
    // @unchecked: every stored property is a constant set in init.
    let work: TemporaryDirectory
    let cluster: PostgresCluster
    let url: String

    init() throws {
        work = try TemporaryDirectory("imgpipe-shared")
        cluster = try PostgresCluster.start()
        url = try cluster.makeDatabase()
    }

    deinit { cluster.dropDatabase(url) }

    func images(_ count: Int) throws {
        try ImageFixtures.jpegs(count, in: work.url("in"))
    }

    /// A directory source, a folder sink and an upload sink on `server`.
    func pipeline(_ server: UploadServer, uploads: Int = 2) throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "output": {"format": "png", "name": "{stem}.png"},
             "sinks": [{"type": "directory", "path": "out"}, {"type": "upload", "endpoint": "\(server.baseURL)/upload"}],
             "limits": {"uploads": \(uploads), "timeout": 10}, "retry": {"attempts": 3, "backoff": 0.05}}
            """, to: "pipe.json")
    }

    /// The built binary on this test's pipeline and database (`--state` added).
    func shared(_ arguments: [String]) throws -> CommandResult {
        try ImgpipeBinary.run(arguments + ["--state", url], in: work.path)
    }

    func worker(_ extra: [String] = []) throws -> RunningCommand {
        try ImgpipeBinary.launch(["work", "pipe.json", "--state", url, "--chunk-size", "4"] + extra, in: work.path)
    }

    func status() throws -> [String: Any] {
        let result = try shared(["status", "pipe.json", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    func database() throws -> PostgresConnection { try PostgresConnection(url: url) }

    /// Upload requests as `server` received them, replays of a known key included (it
    /// honours idempotency keys; many real servers do not).
    func posts(_ server: UploadServer) -> Int { server.server.requests.filter { $0.path.hasPrefix("/once/") }.count }

    /// Polls `condition` every 10 ms for at most 60 s; a test whose condition never came
    /// true fails here, saying so.
    func waitUntil(_ condition: () throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation) rethrows {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if try condition() { return }
            usleep(10_000)
        }
        Issue.record("the awaited condition never came true in 60 s", sourceLocation: sourceLocation)
    }

    @Test func threeWorkersShareOneRunAndEachItemIsDeliveredOnce() throws {
        let server = try UploadServer(mode: .slow(0.05))
        try images(60)
        try pipeline(server)
        let workers = try (0..<3).map { _ in try worker(["--heartbeat", "0.5", "--lease", "5"]) }
        let results = workers.map { $0.wait() }
        for result in results { #expect(result.status == 0, "\(result.stderr)") }

        let report = try status()
        #expect(report["done"] as? Int == 60 && report["failed"] as? Int == 0 && report["pending"] as? Int == 0)
        #expect(report["state"] as? String == "finished")
        #expect((report["chunks"] as? [String: Int]) == ["pending": 0, "leased": 0, "done": 15])
        let shown = try #require(report["workers"] as? [[String: Any]])
        #expect(shown.count == 3)
        #expect(shown.compactMap { $0["itemsDone"] as? Int }.reduce(0, +) == 60, "each item recorded by one worker")
        #expect(shown.filter { ($0["itemsDone"] as? Int ?? 0) > 0 }.count >= 2, "the work was shared: \(shown)")

        let files = try FileManager.default.contentsOfDirectory(atPath: work.url("out")).filter { $0.hasSuffix(".png") }
        #expect(files.count == 60)
        for file in files.prefix(5) { #expect(try VipsImage.open(path: work.url("out/\(file)")).width == 32) }
        let uploads = server.uploads
        #expect(uploads.count == 60 && Set(uploads.compactMap(\.filename)).count == 60, "each item uploaded once")
        let uuid = try #require(report["uuid"] as? String)
        #expect(uploads.allSatisfy { $0.key?.hasPrefix("imgpipe-\(uuid)-") == true }, "idempotency keys carry the run's UUID")

        // export reads the shared run: every item with its output and both deliveries,
        // against the files on disk and what the upload server keeps.
        let exported = try shared(["export", "pipe.json"])
        #expect(exported.status == 0, "\(exported.stderr)")
        let records = try exported.jsonLines()
        #expect(records.count == 60)
        let uploadedURLs = Set(uploads.map(\.path))
        #expect(uploadedURLs.count == 60)
        for record in records {
            let key = try #require(record["key"] as? String)
            let output = try #require((record["outputs"] as? [String: Any])?["default"] as? [String: Any], "\(record)")
            let name = try #require(output["name"] as? String)
            let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url("out/\(name)")))
            #expect(output["sha256"] as? String == sha256Hex(bytes) && output["bytes"] as? Int == bytes.count, "\(key)")
            #expect(output["width"] as? Int == 32)
            let deliveries = try #require(record["deliveries"] as? [String: [String: [String: Any]]])
            #expect(deliveries["directory-0"]?["default"]?["status"] as? String == "done")
            let upload = try #require(deliveries["upload-1"]?["default"])
            #expect(upload["status"] as? String == "done" && (upload["remoteURL"] as? String)?.contains("/files/") == true)
            #expect(record["status"] as? String == "done" && record["attempts"] as? Int == 1)
        }
        #expect(!exported.stdout.contains(cluster.password))

        // The run finished: working again does not start another.
        let again = try shared(["work", "pipe.json"])
        #expect(
            again.status == 0 && again.stdout.contains("already finished: 60 done") && server.uploads.count == 60,
            "a worker restarted after the end does nothing and exits as the run ended: \(again.stdout)\(again.stderr)")
        let text = try shared(["status", "pipe.json"])
        #expect(text.stdout.contains("imgpipe:***@127.0.0.1") && !text.stdout.contains(cluster.password), "\(text.stdout)")
        #expect(text.stdout.contains("chunks: 0 pending, 0 leased, 15 done"), "\(text.stdout)")

        // --new starts another run once the latest has finished.
        let next = try shared(["work", "pipe.json", "--new", "--json"])
        #expect(next.status == 0, "\(next.stderr)")
        let second = try next.decoded(StatusReport.self)
        #expect(Int(second.run) != (report["run"] as? Int) && second.total == 60 && second.done == 60 && second.isFinished)
        // This worker's session in the run's report: it made every item of the new run.
        #expect(
            second.session?.worker != nil && second.session?.done == 60 && second.chunks?.pending == 0,
            "\(second)")
        #expect(second.workers?.map(\.name) == [second.session?.worker].compactMap { $0 })
        // Its journal was removed at the clean end, so the session names none.
        #expect(second.session?.stateFile == nil, "\(String(describing: second.session))")
        #expect(server.uploads.count == 120, "a new run has its own UUID, so its own idempotency keys")
    }

    /// Output names are the run's: `{index}` numbers the whole feed (the lister's order),
    /// whichever worker takes an item, and a name two items of the run would both get is
    /// refused to the second on whichever worker it is.
    @Test func outputNamesAreUniqueAcrossTheWholeRun() throws {
        // 24 pictures that differ, and two files of the same picture in folders of their
        // own: listed first and last (the directory is listed in order), so in the first
        // chunk and the last; their outputs' `{hash}` is the same.
        for index in 1...24 {
            try ImageFixtures.write(
                ImageFixtures.photo(width: 64, height: 48, seed: index),
                to: work.url(String(format: "in/img-%03d.jpg", index)))
        }
        for folder in ["in/a", "in/z"] {
            try ImageFixtures.write(ImageFixtures.photo(width: 64, height: 48, seed: 99), to: work.url("\(folder)/same.jpg"))
        }
        // A slow upload sink keeps the first worker busy while the second starts.
        let server = try UploadServer(mode: .slow(0.1))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "outputs": [{"id": "n", "format": "png", "name": "{index}.png"},
                         {"id": "s", "format": "png", "name": "{hash}.png"}],
             "sinks": [{"type": "directory", "path": "out"},
                       {"type": "upload", "endpoint": "\(server.baseURL)/upload", "outputs": ["n"]}],
             "limits": {"workers": 1, "uploads": 1}}
            """, to: "pipe.json")
        let workers = try (0..<2).map { _ in try worker(["--heartbeat", "0.5", "--lease", "5"]) }
        let results = workers.map { $0.wait() }
        for result in results {
            #expect(result.status == 1, "one item fails (its name is taken): \(result.stdout)\(result.stderr)")
        }
        let report = try status()
        #expect(report["done"] as? Int == 25 && report["failed"] as? Int == 1, "\(report) \(results.map(\.stderr))")
        let shown = try #require(report["workers"] as? [[String: Any]])
        #expect(shown.filter { ($0["itemsDone"] as? Int ?? 0) > 0 }.count == 2, "both workers took items: \(shown)")

        let exported = try shared(["export", "pipe.json", "--only", "failed"]).jsonLines()
        #expect(exported.count == 1)
        let failed = try #require(exported.first)
        let loser = try #require(failed["key"] as? String)
        #expect(["a/same.jpg", "z/same.jpg"].contains(loser))
        #expect(
            (failed["message"] as? String)?.contains(" is already used by item \"") == true,
            "\(failed)")
        // `{index}` is the item's place in the whole feed: the failed item's number is the
        // only one missing, and no number is made twice.
        let files = Set(work.files(under: "out").map { URL(fileURLWithPath: $0).lastPathComponent })
        let numbered = files.filter { $0.count < 10 }
        let missing = loser == "a/same.jpg" ? 1 : 26
        #expect(numbered == Set((1...26).filter { $0 != missing }.map { "\($0).png" }), "\(numbered.sorted())")
        #expect(files.count == numbered.count + 25, "25 different pictures, each once by {hash}: \(files.count)")
        let records = try shared(["export", "pipe.json", "--only", "done"]).jsonLines()
        let byKey = Dictionary(
            uniqueKeysWithValues: records.compactMap { record -> (String, String)? in
                guard let key = record["key"] as? String, let outputs = record["outputs"] as? [String: Any],
                    let name = (outputs["n"] as? [String: Any])?["name"] as? String
                else { return nil }
                return (key, name)
            })
        #expect(
            byKey.count == 25 && byKey["img-001.jpg"] == "2.png" && byKey["img-024.jpg"] == "25.png",
            "\(byKey.sorted { $0.key < $1.key }.prefix(4))")
    }

    /// Three `main.jpg` in three folders, named `{name}.{ext}` by two workers: the first to
    /// claim `main.png` keeps it (chunks are claimed in feed order, but two workers race
    /// for them) and the others get names of their own (the stem and 8 hex digits of their
    /// key's SHA-256), claimed run-wide, so that no item fails and no file is written over.
    @Test func itemsThatWantOneNameGetNamesOfTheirOwnOnEveryWorker() throws {
        let keys = ["a/main.jpg", "b/main.jpg", "c/main.jpg"]
        for (index, key) in keys.enumerated() {
            try ImageFixtures.jpeg(at: work.url("in/" + key), width: 64, height: 40 + index * 4)
        }
        try images(9)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 64, "height": 64}],
             "output": {"format": "png", "name": "{name}.png"},
             "sink": {"type": "directory", "path": "out"}, "limits": {"workers": 1}}
            """, to: "pipe.json")
        let workers = try (0..<2).map { _ in
            try ImgpipeBinary.launch(["work", "pipe.json", "--state", url, "--chunk-size", "1"], in: work.path)
        }
        for result in workers.map({ $0.wait() }) { #expect(result.status == 0, "\(result.stdout)\(result.stderr)") }
        let report = try status()
        #expect(report["done"] as? Int == 12 && report["failed"] as? Int == 0, "\(report)")
        let records = try shared(["export", "pipe.json"]).jsonLines()
        var names: [String: String] = [:]
        for record in records {
            guard let key = record["key"] as? String, keys.contains(key),
                let name = ((record["outputs"] as? [String: Any])?["default"] as? [String: Any])?["name"] as? String
            else { continue }
            names[key] = name
        }
        #expect(Set(names.values).count == 3 && names.values.filter { $0 == "main.png" }.count == 1, "\(names)")
        for (index, key) in keys.enumerated() {
            let name = try #require(names[key])
            #expect(name == "main.png" || name == "main-" + sha256Hex(key).prefix(8) + ".png", "\(key): \(name)")
            #expect(try ImageFixtures.decode(work.url("out/\(name)")).height == 40 + index * 4, "\(name) holds \(key)")
        }
        #expect(work.files(under: "out").count == 12)
    }

    @Test func killNineMidUploadAnotherWorkerFinishesAndEachItemIsStoredOnce() throws {
        let server = try UploadServer(mode: .slow(0.25))
        try images(24)
        try pipeline(server, uploads: 3)
        let first = try worker(["--lease", "3", "--heartbeat", "0.5"])
        // Killed while uploads are in flight: received by the server, not yet answered.
        waitUntil { server.uploads.count >= 4 && posts(server) > server.uploads.count }
        first.signal(SIGKILL)
        _ = first.wait()
        let before = server.uploads.count
        #expect(before >= 4 && before < 24, "killed after \(before) uploads")

        let second = try shared(["work", "pipe.json", "--lease", "3", "--heartbeat", "0.5"])
        #expect(second.status == 0, "\(second.stderr)")
        Thread.sleep(forTimeInterval: 0.3)  // an upload the killed worker had sent lands
        let uploads = server.uploads
        #expect(uploads.count == 24 && Set(uploads.compactMap(\.filename)).count == 24, "each item stored exactly once")
        #expect(posts(server) > 24, "uploads cut off by the kill were sent again, with the same key (\(posts(server)) posts)")
        let report = try status()
        #expect(report["done"] as? Int == 24 && report["state"] as? String == "finished")
    }

    /// Whether this machine lets a test start a process in a pid namespace of its own.
    static let pidNamespaces =
        (try? ImgpipeBinary.launch(
            executable: "/usr/bin/unshare", ["-p", "-f", "/bin/true"],
            in: "/"
        ).wait().status) == 0

    /// A worker restarted in place after a `kill -9` (a Kubernetes container: the same host
    /// name, pid 1 again, the same folder) rejoins the run and finishes it: it used to open
    /// its predecessor's journal, which already held the run, and fail at every restart
    /// (`UNIQUE constraint failed: run.uuid`). Pid 1 comes from `unshare -p -f`.
    @Test(.enabled(if: SharedWorkTests.pidNamespaces, "needs pid namespaces (unshare -p, as root)"))
    func aWorkerRestartedInPlaceAsTheSamePidRejoinsTheRun() throws {
        let server = try UploadServer(mode: .slow(0.2))
        try images(16)
        try pipeline(server, uploads: 2)
        let arguments = [
            "-p", "-f", ImgpipeBinary.path, "work", "pipe.json", "--state", url, "--chunk-size", "4",
            "--lease", "3", "--heartbeat", "0.5",
        ]
        let first = try ImgpipeBinary.launch(executable: "/usr/bin/unshare", arguments, in: work.path)
        waitUntil { server.uploads.count >= 3 }
        // The worker is the namespace's pid 1, unshare's child.
        let unshare = first.process.processIdentifier
        let children = try String(contentsOfFile: "/proc/\(unshare)/task/\(unshare)/children", encoding: .utf8)
        let workerPid = try #require(children.split(separator: " ").first.flatMap { Int32($0) })
        kill(workerPid, SIGKILL)
        _ = first.wait()
        let folder = work.url(".imgpipe/pipe.workers")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(left.contains { $0.hasSuffix("-1.sqlite") }, "the killed worker's journal is there: \(left)")
        #expect(server.uploads.count < 16, "killed before the end")

        let second = try ImgpipeBinary.launch(executable: "/usr/bin/unshare", arguments, in: work.path).wait()
        #expect(second.status == 0, "\(second.stdout)\n\(second.stderr)")
        let report = try status()
        #expect(report["done"] as? Int == 16 && report["state"] as? String == "finished", "\(report)")
        #expect(Set(server.uploads.compactMap(\.filename)).count == 16)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: folder).isEmpty,
            "the old journal went, the new one after a clean end")
    }

    /// A worker whose pipeline lists other items, uses other ones, delivers elsewhere or
    /// compares items otherwise (`dedup`) does not join (or end as) the run of another: it joined, failed 190 of 300 items as
    /// `limit` under its own `maxPixels` and mixed its sink folder into the run's tallies.
    /// A machine's own threads and timeouts may differ.
    @Test func aWorkerWhosePipelineDiffersInItsItemsOrSinksDoesNotJoin() throws {
        let server = try UploadServer()
        try images(4)
        try work.folder("in2")
        try pipeline(server)
        let base = try String(contentsOfFile: work.url("pipe.json"), encoding: .utf8)
        #expect(try shared(["work", "pipe.json"]).status == 0)
        let variants = [
            ("source", base.replacingOccurrences(of: #""path": "in""#, with: #""path": "in2""#)),
            ("accept", base.replacingOccurrences(of: #""limits": {"#, with: #""accept": {"formats": ["png"]}, "limits": {"#)),
            ("limits.maxPixels", base.replacingOccurrences(of: #""limits": {"#, with: #""limits": {"maxPixels": 1000, "#)),
            ("sinks", base.replacingOccurrences(of: #"{"type": "directory", "path": "out"}, "#, with: "")),
            ("dedup", base.replacingOccurrences(of: #""limits": {"#, with: #""dedup": {"exact": true}, "limits": {"#)),
        ]
        for (field, text) in variants {
            try #require(text != base, "the \(field) variant changed nothing")
            try work.write(text, to: "pipe.json")
            let refused = try shared(["work", "pipe.json"])
            #expect(
                refused.status == 2 && refused.stderr.contains("was made with other \(field):"), "\(field): \(refused.stderr)")
        }
        try work.write(
            base.replacingOccurrences(of: #""uploads": 2, "timeout": 10"#, with: #""uploads": 1, "timeout": 5, "workers": 1"#),
            to: "pipe.json")
        let same = try shared(["work", "pipe.json"])
        #expect(same.status == 0 && same.stdout.contains("already finished"), "\(same.stdout) \(same.stderr)")
    }

    @Test func aWorkerStoppedPastItsLeaseHasItsLateWritesRefused() throws {
        let server = try UploadServer(mode: .slow(0.2))
        try images(16)
        try pipeline(server, uploads: 1)
        let stopped = try worker(["--lease", "3", "--heartbeat", "0.5"])
        waitUntil { server.uploads.count >= 2 }
        stopped.signal(SIGSTOP)
        let held = try database().execute("SELECT id, token FROM imgpipe_chunk WHERE state = 'leased'").all
        #expect(!held.isEmpty, "the stopped worker held a chunk")

        // Another worker waits out the lease, rescues the chunk and finishes the run.
        let other = try shared(["work", "pipe.json", "--lease", "3", "--heartbeat", "0.5"])
        #expect(other.status == 0, "\(other.stderr)")
        let tokens = try database().execute("SELECT id, token FROM imgpipe_chunk").all
        #expect(tokens.allSatisfy { $0["token"] == nil }, "every chunk done")

        let sentBeforeWaking = posts(server)
        stopped.signal(SIGCONT)
        let late = stopped.wait()
        #expect(late.status == 0, "the run is finished: the late worker ends as it did \(late.stderr)")
        #expect(late.stderr.contains("lease lost"), "the late worker learnt its leases were gone: \(late.stderr)")
        // Woken, it starts no delivery for the chunks the other worker took over (before, it
        // sent every item it had made and not delivered yet: 12-14 requests in runs like this
        // one). Only an upload under way at the stop may end: its second step (the POST after
        // the GET of the upload URL) can go out after waking (1 in 8 runs here).
        #expect(
            posts(server) - sentBeforeWaking <= 1,
            "\(posts(server) - sentBeforeWaking) upload(s) sent after waking (limits.uploads 1)")
        // Sent twice at most: what was in flight at the stop, or answered just before it with
        // its end not yet written.
        #expect(sentBeforeWaking <= 16 + 2, "\(sentBeforeWaking) requests for 16 items")
        let statuses = try database().execute("SELECT status, count(*) AS n FROM imgpipe_item GROUP BY status").all
        #expect(statuses.map { "\($0["status"]!)=\($0["n"]!)" } == ["done=16"], "no item both done and failed")
        let counters = try database().execute("SELECT sum(done) AS done, sum(failed) AS failed FROM imgpipe_chunk").first
        #expect(counters?["done"] == "16" && counters?["failed"] == "0", "no finished row rewritten")
        let uploads = server.uploads
        #expect(
            uploads.count == 16 && Set(uploads.compactMap(\.filename)).count == 16,
            "the late worker's uploads were recognised by their key")
    }

    @Test func sigtermHandsTheChunksBackAtOnce() throws {
        let server = try UploadServer(mode: .slow(0.3))
        try images(24)
        try pipeline(server, uploads: 1)
        // A long lease: only a hand-back lets another worker take the chunks soon.
        let first = try worker(["--lease", "600"])
        waitUntil { server.uploads.count >= 1 }
        first.signal(SIGTERM)
        let interrupted = first.wait()
        #expect(interrupted.status == 130, "\(interrupted.stderr)")
        let leased = try database().execute("SELECT count(*) AS n FROM imgpipe_chunk WHERE state = 'leased'").first
        #expect(leased?["n"] == "0", "chunks handed back, not left to expire")
        let report = try status()
        #expect((report["pending"] as? Int ?? 0) > 0)

        server.mode = .normal
        let second = try shared(["work", "pipe.json", "--lease", "600"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(server.uploads.count == 24 && Set(server.uploads.compactMap(\.filename)).count == 24)
        #expect(try status()["done"] as? Int == 24)
    }

    @Test func workNeedsAPostgresStateAndNeverPrintsThePassword() throws {
        try images(1)
        let server = try UploadServer()
        try pipeline(server)
        let sqlite = try ImgpipeBinary.run(["work", "pipe.json"], in: work.path)
        #expect(sqlite.status == 2 && sqlite.stderr.contains("give --state postgres://"), "\(sqlite.stderr)")
        let wrong = url.replacingOccurrences(of: cluster.password, with: "Wrong-Secret-42")
        let refused = try ImgpipeBinary.run(["work", "pipe.json", "--state", wrong], in: work.path)
        #expect(refused.status == 2 && refused.stderr.contains("password authentication failed"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("Wrong-Secret-42") && !refused.stdout.contains("Wrong-Secret-42"))
        // A password holding '/' or '?' as it is: libpq read a piece of it as the port or an
        // option and quoted it back (`invalid integer value "LEAKpart" for connection option
        // "port"`). Refused before libpq sees it, quoting none of it.
        let port = url.split(separator: ":").last.flatMap { $0.split(separator: "/").first } ?? "5432"
        for (bad, piece) in [
            ("postgres://imgpipe:LEAKpart/rest@127.0.0.1:\(port)/x", "LEAKpart"),
            ("postgres://imgpipe:pw/a?LEAKME@127.0.0.1:\(port)/x", "LEAKME"),
        ] {
            for command in [["status", "pipe.json"], ["work", "pipe.json"]] {
                let result = try ImgpipeBinary.run(command + ["--state", bad], in: work.path)
                #expect(result.status == 2 && result.stderr.contains("percent-encode"), "\(result.stderr)")
                #expect(!(result.stderr + result.stdout).contains(piece), "\(result.stderr)")
            }
        }
        let thumbnail = try ImgpipeBinary.run(
            ["thumbnail", "in", "--to", "thumbs"], in: work.path, environment: ["IMGPIPE_STATE": url])
        #expect(
            thumbnail.status == 2 && thumbnail.stderr.contains("imgpipe:***@") && !thumbnail.stderr.contains(cluster.password),
            "\(thumbnail.stderr)")
    }

    // MARK: - one lister

    /// A NASA-images-like API on loopback: `pages` pages of 4 items, each page linking the
    /// next; the first request of `stallPage` is answered after `stall` seconds. Images are
    /// small JPEGs. `jsonFeed`: the pages are a `json-feed`'s, `{"items": […], "next": URL}`.
    func pagedFeed(pages: Int, stallPage: Int = 0, stall: Double = 0, jsonFeed: Bool = false) throws -> TestHTTPServer {
        let path = work.url("fixture.jpg")
        try ImageFixtures.jpeg(at: path, width: 64, height: 48)
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: path))
        let stalled = LockedBox(false)
        let server = try TestHTTPServer { request in
            if request.path.hasPrefix("/images/") { return .bytes(jpeg) }
            guard request.path == "/search" else { return .status(404) }
            let page = Int(request.query["page"] ?? "1") ?? 1
            let host = "http://\(request.headers["host"]!)"
            var response: TestHTTPServer.Response
            if jsonFeed {
                let items = (1...4).map { n in #"{"id": "p\#(page)-\#(n)", "url": "\#(host)/images/p\#(page)-\#(n).jpg"}"# }
                let next = page < pages ? #""/search?page=\#(page + 1)""# : "null"
                response = .json(#"{"items": [\#(items.joined(separator: ","))], "next": \#(next)}"#)
            } else {
                let items = (1...4).map { n in
                    #"{"data": [{"nasa_id": "p\#(page)-\#(n)"}], "links": [{"href": "\#(host)/images/p\#(page)-\#(n).jpg", "rel": "preview"}]}"#
                }
                let next = page < pages ? #", "links": [{"rel": "next", "href": "\#(host)/search?page=\#(page + 1)"}]"# : ""
                response = .json(#"{"collection": {"items": [\#(items.joined(separator: ","))]\#(next)}}"#)
            }
            if page == stallPage,
                stalled.withLock({ was in
                    defer { was = true }
                    return !was
                })
            {
                response.stall = stall
            }
            return response
        }
        let source =
            jsonFeed
            ? #"{"type": "json-feed", "url": "\#(server.baseURL)/search", "items": "/items", "next": "/next", "keyField": "id", "cache": false}"#
            : #"{"type": "nasa-images", "query": "moon", "endpoint": "\#(server.baseURL)", "cache": false}"#
        try work.write(
            """
            {"version": 1, "source": \(source),
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "output": {"format": "png", "name": "{key}.png"},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        return server
    }

    func keysInFeedOrder() throws -> [String] {
        try database().execute("SELECT key FROM imgpipe_item ORDER BY seq").all.compactMap { $0["key"] }
    }

    @Test func aFiftyPageFeedOverFourWorkersIsListedOnce() throws {
        let server = try pagedFeed(pages: 50)
        let workers = try (0..<4).map { _ in try worker(["--heartbeat", "0.5", "--lease", "5"]) }
        for result in workers.map({ $0.wait() }) { #expect(result.status == 0, "\(result.stderr)") }
        let pages = server.requests(to: "/search").map { $0.query["page"] ?? "1" }
        #expect(pages.count == 50 && Set(pages).count == 50, "each page requested once: \(pages.count) requests")
        #expect(server.requests.filter { $0.path.hasPrefix("/images/") }.count == 200, "each image fetched once")
        let expected = (1...50).flatMap { page in (1...4).map { "p\(page)-\($0)" } }
        #expect(try keysInFeedOrder() == expected)
        #expect(try status()["done"] as? Int == 200)
        #expect(work.files(under: "out").count == 200)
    }

    /// The same of a NASA search and of a `json-feed` paged by `next`.
    @Test(arguments: [false, true])
    func aListerKilledMidFeedIsReplacedAndTheListingGoesOnFromItsCursor(jsonFeed: Bool) throws {
        // Page 12 takes 30 s to answer: the first lister is killed while it waits for it.
        let server = try pagedFeed(pages: 20, stallPage: 12, stall: 30, jsonFeed: jsonFeed)
        let first = try worker(["--heartbeat", "0.5", "--lease", "2"])
        waitUntil { server.requests(to: "/search").contains { $0.query["page"] == "12" } }
        let lister = try database().execute("SELECT lister FROM imgpipe_run").first?["lister"]
        #expect(lister?.contains(":\(first.process.processIdentifier):") == true, "the only worker lists: \(lister ?? "-")")
        first.signal(SIGKILL)
        _ = first.wait()
        let listedBefore = try keysInFeedOrder().count
        #expect(listedBefore >= 40 && listedBefore <= 44, "pages 1-11 recorded before the kill: \(listedBefore)")

        let cursor = try database().execute("SELECT feed_cursor FROM imgpipe_run").first?["feed_cursor"]
        #expect(cursor?.contains("\"key\":\"p") == true, "the cursor names the last key recorded: \(cursor ?? "-")")
        // The new lister asks for page 12 again; this time it answers at once.
        let result = try worker(["--heartbeat", "0.5", "--lease", "2"]).wait()
        #expect(result.status == 0, "\(result.stderr)")
        let expected = (1...20).flatMap { page in (1...4).map { "p\(page)-\($0)" } }
        #expect(try keysInFeedOrder() == expected, "no item twice, none lost, feed order kept across listers")
        // The second lister started at the cursor's page, not at the first page.
        let requests = Dictionary(grouping: server.requests(to: "/search"), by: { Int($0.query["page"] ?? "1") ?? 1 })
            .mapValues(\.count)
        #expect(
            (1...10).allSatisfy { requests[$0] == 1 },
            "pages before the cursor's asked once: \(requests.sorted { $0.key < $1.key })")
        #expect(requests[12] == 2 && (13...20).allSatisfy { requests[$0] == 1 })
        #expect(try status()["done"] as? Int == 80)
    }

    // MARK: - the database under the workers

    @Test func workersReconnectWhenTheirConnectionsAreCutAndFinish() throws {
        let server = try UploadServer(mode: .slow(0.05))
        try images(30)
        try pipeline(server, uploads: 1)
        let workers = try (0..<2).map { _ in try worker(["--heartbeat", "0.5", "--lease", "10"]) }
        waitUntil { server.uploads.count >= 6 }
        let cut = try database().execute(
            """
            SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()
            """
        ).first?["n"]
        #expect(Int(cut ?? "") ?? 0 >= 4, "the workers' connections were cut: \(cut ?? "-")")
        for result in workers.map({ $0.wait() }) { #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)") }
        #expect(try status()["done"] as? Int == 30)
        #expect(server.uploads.count == 30 && Set(server.uploads.compactMap(\.filename)).count == 30)
    }

    @Test func aWorkerThatLosesTheDatabaseForLongerThanItsLeaseStopsAndExitsOne() throws {
        let server = try UploadServer(mode: .slow(0.2))
        try images(40)
        try pipeline(server, uploads: 1)
        let name = try #require(url.split(separator: "/").last.map(String.init))
        let running = try worker(["--heartbeat", "0.5", "--lease", "2"])
        waitUntil { server.uploads.count >= 2 }
        let admin = try PostgresConnection(url: cluster.url(database: "postgres"))
        try admin.execute("ALTER DATABASE \(name) WITH ALLOW_CONNECTIONS false")
        try admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", [name])
        let result = running.wait()
        try admin.execute("ALTER DATABASE \(name) WITH ALLOW_CONNECTIONS true")
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("no heartbeat reached the database"), "\(result.stderr)")
        #expect(!result.stderr.contains(cluster.password))
        #expect(server.uploads.count < 40, "it stopped before the end")
        let state = try database().execute("SELECT state FROM imgpipe_run").first?["state"]
        #expect(state == "running", "the run goes on for the other workers")
    }

    @Test func workersOnOtherMachinesKeepTheirPartialFilesInASharedSinkFolder() throws {
        try images(3)
        let server = try UploadServer()
        try pipeline(server)
        let host = FeedItem.safeName(ProcessInfo.processInfo.hostName)
        let other = work.url("out/.imgpipe-partial/another-host-1")
        let deadHere = work.url("out/.imgpipe-partial/\(host)-999999")
        for folder in [other, deadHere] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try work.write("partial", to: String(folder.dropFirst(work.path.count + 1)) + "/1-x.tmp")
        }
        let result = try shared(["work", "pipe.json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: other + "/1-x.tmp"), "another machine's worker may still be writing there")
        #expect(
            !FileManager.default.fileExists(atPath: deadHere), "a folder of a process of this machine that is gone is removed")
        #expect(work.files(under: "out").filter { $0.hasSuffix(".png") }.count == 3)
    }

    /// With 40 items the worker's claims are cut to the work left (20, then parts of the
    /// rest), and the chunk it takes back can come back cut in two under a new number.
    @Test(arguments: [16, 40])
    func aWorkerAloneStoppedPastItsLeaseTakesItsChunkBackAndEndsEveryItem(count: Int) throws {
        let server = try UploadServer(mode: .slow(0.1))
        try images(count)
        try pipeline(server, uploads: 1)
        let alone = try worker(["--lease", "2", "--heartbeat", "0.5"])
        waitUntil { server.uploads.count >= 3 }
        alone.signal(SIGSTOP)
        Thread.sleep(forTimeInterval: 3)  // its lease runs out; nobody else is there to rescue it
        alone.signal(SIGCONT)
        // It finds its lease gone, rescues the chunk itself, claims it again, and records
        // the items it had ended from its own journal instead of passing over them.
        let result = alone.wait()
        #expect(result.status == 0, "\(result.stderr)")
        let report = try status()
        #expect(report["done"] as? Int == count && report["state"] as? String == "finished", "\(report)")
        #expect(server.uploads.count == count && Set(server.uploads.compactMap(\.filename)).count == count)
    }

    @Test func aRunWithAFailedItemExitsOneAndShowsTheFailure() throws {
        try images(5)
        try work.write("not a JPEG at all", to: "in/bad.jpg")
        let server = try UploadServer()
        try pipeline(server)
        let result = try shared(["work", "pipe.json"])
        #expect(result.status == 1, "finished with a failed item: \(result.stdout)\(result.stderr)")
        let report = try status()
        #expect(report["done"] as? Int == 5 && report["failed"] as? Int == 1 && report["state"] as? String == "finished")
        #expect(report["failuresByReason"] as? [String: Int] == ["decode": 1])
        let failures = try #require(report["failures"] as? [[String: Any]])
        #expect(
            failures.count == 1 && failures.first?["key"] as? String == "bad.jpg"
                && failures.first?["reason"] as? String == "decode")
        #expect((report["startedAt"] as? String)?.hasSuffix("Z") == true && report["finishedAt"] is String)
        #expect((report["itemsPerSecond"] as? Double ?? 0) > 0)
        let text = try shared(["status", "pipe.json"])
        #expect(
            text.stdout.contains("failures by reason: decode 1") && text.stdout.contains("  bad.jpg: decode:"), "\(text.stdout)")
        let failed = try shared(["export", "pipe.json", "--only", "failed"])
        #expect(try failed.jsonLines().map { $0["key"] as? String } == ["bad.jpg"])
        // A worker started after the end exits as the run ended: 1, failed items.
        #expect(try shared(["work", "pipe.json"]).status == 1)

        // The file mended, resume --retry-failed reopens the run and does that item alone.
        try ImageFixtures.jpeg(at: work.url("in/bad.jpg"), width: 64, height: 48)
        let retried = try shared(["resume", "pipe.json", "--retry-failed"])
        #expect(retried.status == 0, "\(retried.stdout)\(retried.stderr)")
        let after = try status()
        #expect(after["done"] as? Int == 6 && after["failed"] as? Int == 0 && after["state"] as? String == "finished", "\(after)")
        #expect(server.uploads.count == 6, "only the mended item was uploaded again")
    }

    /// `run --limit N` and `resume --refresh-feed` with a PostgreSQL state, as with a state
    /// file: the run takes at most N items (the lister stops there, a joining worker too);
    /// a refresh lists the feed again and adds only what the run lacks; a refresh whose
    /// listing fails leaves the run as complete as it was.
    @Test func runLimitAndResumeRefreshFeedWithAPostgresState() throws {
        let server = try UploadServer()
        try images(9)
        try pipeline(server)
        let limited = try shared(["run", "pipe.json", "--limit", "5", "--json"])
        #expect(limited.status == 0, "\(limited.stdout)\(limited.stderr)")
        var report = try status()
        #expect(
            report["total"] as? Int == 5 && report["done"] as? Int == 5 && report["state"] as? String == "finished", "\(report)")
        #expect(server.uploads.count == 5)
        // The limit is the run's: a worker that joins lists nothing more.
        let joined = try shared(["work", "pipe.json"])
        #expect(joined.status == 0 && server.uploads.count == 5, "\(joined.stdout)\(joined.stderr)")
        let listed = try database().execute("SELECT key FROM imgpipe_item ORDER BY seq").all.compactMap { $0["key"] }
        #expect(listed == (1...5).map { String(format: "img-%03d.jpg", $0) }, "the first five of the feed, in its order")

        // A run without a limit, then three new files: the refresh adds them alone.
        #expect(try shared(["run", "pipe.json", "--new"]).status == 0)
        #expect(server.uploads.count == 14)
        for index in 10...12 {
            try ImageFixtures.jpeg(at: work.url(String(format: "in/img-%03d.jpg", index)), width: 64, height: 48)
        }
        let refreshed = try shared(["resume", "pipe.json", "--refresh-feed"])
        #expect(refreshed.status == 0, "\(refreshed.stdout)\(refreshed.stderr)")
        report = try status()
        #expect(
            report["total"] as? Int == 12 && report["done"] as? Int == 12 && report["state"] as? String == "finished", "\(report)"
        )
        let new = server.uploads.dropFirst(14).compactMap(\.filename).sorted()
        #expect(new == ["img-010.png", "img-011.png", "img-012.png"], "only the new files were done: \(new)")
        // Listed again, the items the run had take no number: the new ones follow on.
        let numbers = try database().execute(
            """
            SELECT count(*) AS n, min(seq) AS first, max(seq) AS last FROM imgpipe_item
            WHERE run_id = (SELECT max(id) FROM imgpipe_run)
            """
        ).first
        #expect(
            numbers?["n"] == "12" && numbers?["first"] == "0" && numbers?["last"] == "11",
            "\(numbers.map { [$0["n"], $0["last"]] } ?? [])")

    }

    /// A refresh whose listing fails (the feed's server is gone) says so, exits 1, and leaves
    /// the shared run finished with its feed complete, as a state file's would be.
    @Test func aRefreshWhoseListingFailsLeavesTheSharedRunFinished() throws {
        try ImageFixtures.jpeg(at: work.url("photo.jpg"), width: 64, height: 48)
        let photo = try Data(contentsOf: URL(fileURLWithPath: work.url("photo.jpg")))
        let server = try TestHTTPServer { request in
            guard request.path == "/feed.json" else { return .bytes(photo) }
            return .json(
                "["
                    + (1...4).map { #"{"url": "http://\#(request.headers["host"]!)/images/n\#($0).jpg"}"# }
                    .joined(separator: ",") + "]")
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "\(server.baseURL)/feed.json", "cache": false},
             "output": {"format": "png", "name": "{stem}.png"}, "sinks": [{"type": "directory", "path": "out"}],
             "limits": {"timeout": 5}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        #expect(try shared(["run", "pipe.json"]).status == 0)
        server.stop()
        let failed = try shared(["resume", "pipe.json", "--refresh-feed"])
        #expect(
            failed.status == 1 && (failed.stdout + failed.stderr).contains("could not be listed"),
            "\(failed.stdout)\(failed.stderr)")
        let report = try status()
        #expect(
            report["total"] as? Int == 4 && report["done"] as? Int == 4 && report["state"] as? String == "finished"
                && report["feedComplete"] as? Int == 1, "\(report)")
        let again = try shared(["resume", "pipe.json"])
        #expect(again.status == 0 && (again.stdout + again.stderr).contains("already finished"), "\(again.stdout)\(again.stderr)")
    }

    /// `status --json` of a shared run has a state file's keys, read from per-chunk tallies:
    /// deliveries by sink and by output, items by tier; a retry of failed items takes their
    /// counts back before they are done again.
    @Test func statusCountsDeliveriesBySinkAndTierAndARetryRecountsThem() throws {
        let server = try UploadServer(mode: .refuse(403))
        try images(6)
        try pipeline(server)
        let refused = try shared(["work", "pipe.json"])
        #expect(refused.status == 1, "every upload refused: \(refused.stdout)\(refused.stderr)")
        var report = try status()
        #expect(report["name"] as? String == "pipe" && report["pipeline"] as? String == "pipe.json", "\(report)")
        #expect(report["failed"] as? Int == 6 && report["fetched"] as? Int == 0 && report["processed"] as? Int == 0)
        #expect(report["failuresByReason"] as? [String: Int] == ["upload": 6])
        #expect(report["tiers"] as? [String: Int] == ["local": 6], "\(report["tiers"] ?? "-")")
        #expect(
            report["sinks"] as? [String: [String: Int]] == [
                "directory-0": ["done": 6, "failed": 0, "pending": 0], "upload-1": ["done": 0, "failed": 6, "pending": 0],
            ], "\(report["sinks"] ?? "-")")
        let outputs = try #require(report["outputs"] as? [String: [String: Any]])
        #expect(
            outputs["default"]?["format"] as? String == "png"
                && outputs["default"]?["deliveries"] as? [String: Int] == ["done": 6, "failed": 6, "pending": 0], "\(outputs)")
        let text = try shared(["status", "pipe.json"])
        #expect(
            text.stdout.contains("sink upload-1: 0 done, 6 failed, 0 pending") && text.stdout.contains("served from: local 6"),
            "\(text.stdout)")

        server.mode = .normal
        let retried = try shared(["resume", "pipe.json", "--retry-failed"])
        #expect(retried.status == 0, "\(retried.stdout)\(retried.stderr)")
        report = try status()
        #expect(report["done"] as? Int == 6 && report["failed"] as? Int == 0 && report["tiers"] as? [String: Int] == ["local": 6])
        #expect(
            report["sinks"] as? [String: [String: Int]] == [
                "directory-0": ["done": 6, "failed": 0, "pending": 0], "upload-1": ["done": 6, "failed": 0, "pending": 0],
            ], "the failed items' counts were taken back before they were done again: \(report["sinks"] ?? "-")")
        #expect(server.uploads.count == 6)
    }

    /// A database made by the version before this one (no tallies, names, limit, refresh
    /// or dedup columns): `status` and `export` read it as it is; the first worker of this
    /// version adds what is missing and counts the items that ended before from their detail.
    @Test func aDatabaseOfTheEarlierVersionIsReadThenUpgradedWithItsCounts() throws {
        let server = try UploadServer()
        try images(4)
        try pipeline(server)
        #expect(try shared(["work", "pipe.json"]).status == 0)
        for statement in [
            "ALTER TABLE imgpipe_item DROP COLUMN tally", "ALTER TABLE imgpipe_chunk DROP COLUMN tally",
            "ALTER TABLE imgpipe_run DROP COLUMN item_limit, DROP COLUMN refreshing, DROP COLUMN refresh_error",
            "DROP TABLE imgpipe_name", "DROP TABLE imgpipe_kept, imgpipe_sighting",
            "ALTER TABLE imgpipe_item DROP COLUMN judged, DROP COLUMN placeholder",
        ] {
            try database().execute(statement)
        }
        let before = try status()
        #expect(before["done"] as? Int == 4 && before["state"] as? String == "finished", "\(before)")
        #expect(try shared(["export", "pipe.json"]).jsonLines().count == 4)
        for index in 5...6 {
            try ImageFixtures.jpeg(at: work.url(String(format: "in/img-%03d.jpg", index)), width: 64, height: 48)
        }
        let upgraded = try shared(["resume", "pipe.json", "--refresh-feed"])
        #expect(upgraded.status == 0, "\(upgraded.stdout)\(upgraded.stderr)")
        let after = try status()
        #expect(after["done"] as? Int == 6 && after["tiers"] as? [String: Int] == ["local": 6], "\(after)")
        #expect(
            after["sinks"] as? [String: [String: Int]] == [
                "directory-0": ["done": 6, "failed": 0, "pending": 0], "upload-1": ["done": 6, "failed": 0, "pending": 0],
            ], "\(after["sinks"] ?? "-")")
        #expect(server.uploads.count == 6)
    }

    @Test func runAndResumeTakeAPostgresStateWithTheirOwnRules() throws {
        let server = try UploadServer(mode: .slow(0.2))
        try images(12)
        try pipeline(server, uploads: 1)
        let environment = ["IMGPIPE_STATE": url]
        // Interrupted: `run` again refuses the unfinished run, `resume` finishes it.
        let first = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path, environment: environment)
        waitUntil { server.uploads.count >= 2 }
        first.signal(SIGTERM)
        #expect(first.wait().status == 130)
        let again = try ImgpipeBinary.run(["run", "pipe.json"], in: work.path, environment: environment)
        #expect(again.status == 2 && again.stderr.contains("is unfinished"), "\(again.stderr)")
        #expect(try ImgpipeBinary.run(["run", "pipe.json", "--limit", "3"], in: work.path, environment: environment).status == 2)
        server.mode = .normal
        let resumed = try ImgpipeBinary.run(["resume", "pipe.json"], in: work.path, environment: environment)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try status()["done"] as? Int == 12 && server.uploads.count == 12)
        let nothing = try ImgpipeBinary.run(["resume", "pipe.json"], in: work.path, environment: environment)
        #expect(
            nothing.status == 0 && nothing.stdout.contains("already finished: 12 done"),
            "as resume of a finished state file: \(nothing.stdout)")
        // After the end, `run` starts a new run (its own UUID: uploaded again under new keys).
        let second = try ImgpipeBinary.run(["run", "pipe.json"], in: work.path, environment: environment)
        #expect(second.status == 0, "\(second.stderr)")
        let report = try status()
        #expect(report["run"] as? Int == 2 && report["done"] as? Int == 12)
        #expect(server.uploads.count == 24)
        // status --run N and --runs read any run of the database.
        let runOne = try shared(["status", "pipe.json", "--run", "1", "--json"])
        #expect((try JSONSerialization.jsonObject(with: Data(runOne.stdout.utf8)) as? [String: Any])?["run"] as? Int == 1)
        #expect(try shared(["status", "pipe.json", "--run", "999"]).status == 2)
        let list = try shared(["status", "pipe.json", "--runs"])
        #expect(
            list.stdout.contains("run #2 of pipe: finished") && list.stdout.contains("run #1 of pipe: finished"), "\(list.stdout)"
        )
    }

    @Test func workersOfARunAbandonedByRunNewStop() throws {
        let server = try UploadServer(mode: .slow(0.3))
        try images(12)
        try pipeline(server, uploads: 1)
        let worker = try worker(["--heartbeat", "0.5", "--lease", "5"])
        waitUntil { server.uploads.count >= 1 }
        // The server stays slow: the old worker has seconds of uploads left when the new
        // run abandons its run, even on a loaded machine (with fast answers it once ended
        // all of them before `run --new` had started).
        let replaced = try shared(["run", "pipe.json", "--new"])
        #expect(replaced.status == 0, "\(replaced.stderr)")
        let old = worker.wait()
        #expect(old.status == 1 && old.stderr.contains("was abandoned"), "\(old.stdout)\(old.stderr)")
        let runs = try database().execute("SELECT id, state FROM imgpipe_run ORDER BY id").all.map {
            "\($0["id"]!)=\($0["state"]!)"
        }
        #expect(runs == ["1=abandoned", "2=finished"])
    }
}
