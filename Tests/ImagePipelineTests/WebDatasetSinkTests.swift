import Crypto
import Foundation
import GRDB
import ImagePipelineTesting
import Synchronization
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The `webdataset` sink: shards read back by Python's `tarfile` (an independent reader),
/// their members checked against the state file, a kill -9 with a shard open, and the
/// journal that keeps a shard published just before a kill from being written twice.
@Suite("WebDataset sink", .serialized)
struct WebDatasetSinkTests {
    let work: TemporaryDirectory

    init() throws {
        work = try TemporaryDirectory("imgpipe-webdataset")
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    /// One member of a shard as `tarfile` reads it.
    struct Member: Decodable, Equatable {
        let name: String
        let size: Int
        let sha256: String
        let text: String?
    }

    /// Every shard in `folder` (by file name) with its members in archive order, read by
    /// Python's `tarfile`; the text of `.json` and `.txt` members comes along.
    func shards(in folder: String) throws -> [String: [Member]] {
        try work.write(
            """
            import hashlib, json, os, sys, tarfile
            folder = sys.argv[1]
            out = {}
            for name in sorted(os.listdir(folder)):
                if not name.endswith(".tar") or name.startswith("."):
                    continue
                members = []
                with tarfile.open(os.path.join(folder, name)) as tar:
                    for info in tar:
                        data = tar.extractfile(info).read()
                        text = data.decode() if info.name.endswith((".json", ".txt")) else None
                        members.append({"name": info.name, "size": info.size,
                                        "sha256": hashlib.sha256(data).hexdigest(), "text": text})
                out[name] = members
            print(json.dumps(out))
            """, to: "read_shards.py")
        let read = try ImgpipeBinary.launch(
            executable: "/usr/bin/env", ["python3", "read_shards.py", folder], in: work.path
        ).wait()
        try #require(read.status == 0, "python3 could not read the shards: \(read.stderr)")
        return try JSONDecoder().decode([String: [Member]].self, from: Data(read.stdout.utf8))
    }

    /// Every shard manifest (`NNNNN.parquet`) in `folder` as pyarrow reads it: its rows by
    /// file name, and its column types.
    func manifests(in folder: String) throws -> [String: [[String: Any]]] {
        try work.write(
            """
            import json, os, sys, pyarrow.parquet as pq
            folder = sys.argv[1]
            out = {}
            for name in sorted(os.listdir(folder)):
                if name.endswith(".parquet") and not name.startswith("."):
                    table = pq.read_table(os.path.join(folder, name))
                    out[name] = table.to_pylist()
                    types = {f.name: str(f.type) for f in table.schema}
                    assert types["key"] == "string" and types["originalWidth"] == "int64", types
            print(json.dumps(out))
            """, to: "read_manifests.py")
        let read = try ImgpipeBinary.launch(
            executable: "/usr/bin/env", ["python3", "read_manifests.py", folder], in: work.path
        ).wait()
        try #require(read.status == 0, "pyarrow could not read the manifests: \(read.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: [[String: Any]]])
    }

    /// The keys of the samples of a shard, in order, from its `.json` members.
    func sampleKeys(of members: [Member]) throws -> [String] {
        try members.filter { $0.name.hasSuffix(".json") }.map { member in
            let record = try #require(
                try JSONSerialization.jsonObject(with: Data((member.text ?? "").utf8)) as? [String: Any])
            return try #require(record["key"] as? String)
        }
    }

    func rows(_ sql: String) throws -> [Row] {
        try DatabaseQueue(path: work.url("state.sqlite")).read { try Row.fetchAll($0, sql: sql) }
    }

    // MARK: - names and archives

    @Test func sampleKeysHoldNoDotAndNeverMeet() {
        #expect(WebDatasetSink.sampleKey("cat.jpg") == "cat~2Ejpg")
        #expect(WebDatasetSink.sampleKey("a/b_c-d") == "a~2Fb_c-d")
        #expect(WebDatasetSink.sampleKey("~") == "~7E")
        #expect(WebDatasetSink.sampleKey("é") == "~C3~A9")
        let keys = [
            "cat.jpg", "cat_jpg", "cat~2Ejpg", "", ".", "~", "a/b", "a~2Fb",
            String(repeating: "x", count: 200), String(repeating: "x", count: 200) + "y",
            String(repeating: ".", count: 90), String(repeating: ".", count: 91),
        ]
        let made = keys.map { WebDatasetSink.sampleKey($0) }
        // Less room (long output ids in member names): cut to fit it.
        #expect(WebDatasetSink.sampleKey(String(repeating: "x", count: 200), room: 40).utf8.count == 40)
        #expect(Set(made).count == keys.count, "\(made)")
        for key in made {
            #expect(!key.contains(".") && !key.contains("/") && !key.isEmpty && key.utf8.count <= 95, "\(key)")
        }
    }

    /// Names over ustar's 100 bytes (and not ASCII) go whole through a pax header, sizes and
    /// contents exact, as Python's `tarfile` reads them.
    @Test func aTarOfLongNamesReadsBackWhole() throws {
        let members: [(String, [UInt8])] = [
            ("short.txt", Array("hello".utf8)),
            (String(repeating: "n", count: 150) + ".json", Array("{}".utf8)),
            ("été.txt", []),
            ("block.bin", [UInt8](repeating: 7, count: 512)),
        ]
        var archive: [UInt8] = []
        for (name, data) in members {
            archive += TarFormat.header(name: name, size: data.count, modified: 1_700_000_000)
            archive += data + TarFormat.padding(data.count)
        }
        archive += TarFormat.end
        _ = try work.folder("tars")
        try Data(archive).write(to: URL(fileURLWithPath: work.url("tars/00000.tar")))
        let read = try #require(try shards(in: work.url("tars"))["00000.tar"])
        #expect(read.map(\.name) == members.map(\.0))
        #expect(read.map(\.size) == members.map(\.1.count))
        #expect(read.map(\.sha256) == members.map { SHA256.hash(data: Data($0.1)).hex })
    }

    // MARK: - the built binary

    /// Seven items in shards of three: `00000.tar` to `00002.tar` (3, 3, 1 samples), each
    /// sample's members together (`KEY.jpg` then `KEY.json`), the image the output the state
    /// file recorded, each item in exactly one shard, stats beside each shard, nothing
    /// temporary left.
    @Test func aRunWritesWholeNumberedShards() throws {
        let keys = (1...7).map { "img-\($0).jpg" }
        for (index, key) in keys.enumerated() {
            try ImageFixtures.jpeg(at: work.url("in/" + key), width: 64 + index, height: 48)
        }
        // Two that never reach the sink, counted in the shards' stats by reason.
        try work.write("not an image", to: "in/broken.jpg")
        try ImageFixtures.jpeg(at: work.url("in/small.jpg"), width: 8, height: 8)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "accept": {"minWidth": 16},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 3}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")

        let shards = try shards(in: work.url("shards"))
        #expect(shards.keys.sorted() == ["00000.tar", "00001.tar", "00002.tar"])
        #expect(shards.mapValues { $0.count } == ["00000.tar": 6, "00001.tar": 6, "00002.tar": 2])
        var seen: [String] = []
        let outputs = try Dictionary(
            uniqueKeysWithValues: rows("SELECT itemKey, hash FROM output WHERE hash IS NOT NULL").map {
                ($0["itemKey"] as String, $0["hash"] as String)
            }
        )
        // Each item's fingerprints as the state file has them.
        let fingerprints = try Dictionary(
            uniqueKeysWithValues: rows("SELECT key, phash, thumbhash, dominant FROM item WHERE phash IS NOT NULL").map {
                ($0["key"] as String, [$0["phash"] as String, $0["thumbhash"] as String, $0["dominant"] as String])
            }
        )
        #expect(fingerprints.keys.sorted() == keys)
        var failed: [String: Int] = [:]
        var skipped: [String: Int] = [:]
        let manifests = try manifests(in: work.url("shards"))
        #expect(manifests.keys.sorted() == ["00000.parquet", "00001.parquet", "00002.parquet"])
        for (name, members) in shards {
            let shardKeys = try sampleKeys(of: members)
            seen += shardKeys
            // The manifest: a row per sample, in order, saying what KEY.json says, with the
            // input's size and hash as decoded and read.
            let manifest = manifests[String(name.dropLast(4)) + ".parquet"] ?? []
            #expect(manifest.map { $0["key"] as? String } == shardKeys.map(Optional.some), "\(name)")
            for row in manifest {
                let key = row["key"] as? String ?? ""
                let input = work.url("in/" + key)
                #expect(
                    row["originalWidth"] as? Int == 64 + (keys.firstIndex(of: key) ?? -64) && row["originalHeight"] as? Int == 48)
                #expect(row["sha256"] as? String == sha256Hex(try Data(contentsOf: URL(fileURLWithPath: input))), "\(row)")
                #expect(row["output.sha256"] as? String == outputs[key] && row["width"] as? Int == 32, "\(row)")
                #expect(row["output.member"] as? String == WebDatasetSink.sampleKey(key) + ".jpg" && row["caption"] is NSNull)
                #expect((row["url"] as? String)?.hasSuffix("in/" + key) == true, "\(row)")
                #expect(["phash", "thumbhash", "dominant"].map { row[$0] as? String ?? "" } == fingerprints[key], "\(row)")
            }
            for (index, key) in shardKeys.enumerated() {
                let sample = WebDatasetSink.sampleKey(key)
                let image = members[2 * index]
                let record = members[2 * index + 1]
                #expect(image.name == sample + ".jpg" && record.name == sample + ".json", "\(name): \(image.name)")
                #expect(image.sha256 == outputs[key], "\(name): \(key) is not the output recorded")
                let json = try #require(
                    try JSONSerialization.jsonObject(with: Data((record.text ?? "").utf8)) as? [String: Any])
                #expect((json["width"] as? Int) == 32 && (json["height"] as? Int) ?? 0 > 0, "\(json)")
                #expect(json["originalWidth"] as? Int == 64 + (keys.firstIndex(of: key) ?? -64), "\(json)")
                #expect(json["originalHeight"] as? Int == 48 && (json["sha256"] as? String)?.count == 64, "\(json)")
                #expect((json["url"] as? String)?.hasSuffix("in/" + key) == true, "\(json)")
                #expect(["phash", "thumbhash", "dominant"].map { json[$0] as? String ?? "" } == fingerprints[key], "\(json)")
            }
            let stats = try #require(
                try JSONSerialization.jsonObject(
                    with: Data(contentsOf: URL(fileURLWithPath: work.url("shards/" + String(name.dropLast(4)) + "_stats.json"))))
                    as? [String: Any])
            #expect(stats["samples"] as? Int == shardKeys.count, "\(stats)")
            failed.merge(stats["failed"] as? [String: Int] ?? [:], uniquingKeysWith: +)
            skipped.merge(stats["skipped"] as? [String: Int] ?? [:], uniquingKeysWith: +)
        }
        #expect(seen.sorted() == keys, "each item in exactly one shard")
        #expect(failed == ["decode": 1] && skipped == ["too-small": 1], "the shards' stats: \(failed), \(skipped)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).filter { $0.hasPrefix(".") } == [])
        // Each delivery names the shard that holds it.
        let delivered = try rows("SELECT itemKey, status, remoteURL FROM delivery WHERE status = 'done'")
        #expect(delivered.map { $0["itemKey"] as String }.sorted() == keys)
        for row in delivered {
            let key: String = row["itemKey"]
            let shard = try #require(try shards.first { try sampleKeys(of: $0.value).contains(key) }?.key)
            #expect(row["status"] == "done" && (row["remoteURL"] as String).hasSuffix("shards/" + shard), "\(row)")
        }
    }

    /// A kill -9 with a shard open (two items held, the feed's last two held back by the
    /// server): the first shard stays whole, the open one is lost, and `resume` writes its
    /// items again into whole shards numbered on from 1, each item once.
    @Test func aShardOpenAtAKillIsWrittenAgainOnResume() throws {
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let released = Mutex(false)
        let server = try TestHTTPServer { request in
            // The last two wait until the test lets them go.
            if request.path == "/6.jpg" || request.path == "/7.jpg" {
                while !released.withLock({ $0 }) { usleep(10_000) }
            }
            return .bytes(jpeg)
        }
        defer { released.withLock { $0 = true } }
        let keys = (1...7).map { "\($0).jpg" }
        try work.write(keys.map { "\(server.baseURL)/\($0)\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 3},
             "retry": {"attempts": 1}, "limits": {"timeout": 120}}
            """, to: "pipe.json")
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--state", "state.sqlite"], in: work.path)
        defer { if running.process.isRunning { running.signal(SIGKILL) } }

        // Wait for shard 0 recorded and two items held in the open shard.
        let deadline = Date().addingTimeInterval(120)
        var settled = false
        while Date() < deadline, running.process.isRunning, !settled {
            // The state file may be locked for a moment (the run opening it): looked at again.
            let states = (try? rows("SELECT status, count(*) AS n FROM item GROUP BY status")) ?? []
            let counts = Dictionary(uniqueKeysWithValues: states.map { ($0["status"] as String, $0["n"] as Int) })
            settled = counts["done"] == 3 && counts["processed"] == 2
            if !settled { usleep(20_000) }
        }
        try #require(settled, "the run did not reach one shard done and two items held")
        let partials = try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).filter {
            $0.hasPrefix(WebDatasetSink.partialPrefix)
        }
        #expect(partials.count == 1, "the open shard is written under a temporary name")
        running.signal(SIGKILL)
        #expect(running.wait().status != 0)
        #expect(try shards(in: work.url("shards")).keys.sorted() == ["00000.tar"])

        released.withLock { $0 = true }
        let resumed = try imgpipe("resume", "pipe.json", "--state", "state.sqlite")
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        let shards = try shards(in: work.url("shards"))
        #expect(shards.keys.sorted() == ["00000.tar", "00001.tar", "00002.tar"])
        let all = try shards.values.flatMap { try sampleKeys(of: $0) }
        let done = try rows("SELECT key FROM item WHERE status = 'done'").map { $0["key"] as String }
        #expect(all.count == 7 && Set(all) == Set(done) && done.count == 7, "each item once: \(all)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).filter { $0.hasPrefix(".") } == [])
    }

    /// `dedup.placeholders` with the shard still open: the two items made with a host's
    /// placeholder before the third URL showed it to be one are taken out of the open shard
    /// and skipped, not delivered; the shard is written whole with the others.
    @Test func itemsFoundToBePlaceholdersAreTakenOutOfTheOpenShard() throws {
        let unavailable = try ImageFixtures.scene(width: 120, height: 90, seed: 90).encoded(.png(compression: 6, strip: true))
        let pictures = try (1...4).map {
            try ImageFixtures.scene(width: 120, height: 90, seed: UInt64(90 + $0)).encoded(.png(compression: 6, strip: true))
        }
        let server = try TestHTTPServer { request in
            guard request.path.hasPrefix("/r"), let index = Int(request.path.dropFirst(2).prefix(1)) else {
                return .bytes(unavailable)
            }
            return .bytes(pictures[index - 1])
        }
        defer { server.stop() }
        let order = ["r1", "p1", "r2", "p2", "r3", "p3", "r4", "p4"]
        try work.write(order.map { "\(server.baseURL)/\($0).png\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "dedup": {"placeholders": true}, "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 100}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json")
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let shards = try shards(in: work.url("shards"))
        #expect(shards.keys.sorted() == ["00000.tar"], "\(shards.keys.sorted())")
        let keys = try shards.values.flatMap { try sampleKeys(of: $0) }.map {
            $0.split(separator: "/").last.map(String.init) ?? $0
        }
        // Samples are in the order items reached the sink (two workers: r4 may come before r3).
        #expect(keys.sorted() == ["r1.png", "r2.png", "r3.png", "r4.png"], "\(keys)")
        #expect(try manifests(in: work.url("shards")).values.first?.count == 4)
        let exported = try imgpipe("export", "pipe.json")
        let records = Dictionary(
            uniqueKeysWithValues: try exported.jsonLines().map {
                (($0["key"] as? String)?.split(separator: "/").last.map(String.init) ?? "", $0)
            })
        for name in ["p1.png", "p2.png"] {
            let record = try #require(records[name])
            #expect(record["status"] as? String == "skipped" && record["reason"] as? String == "placeholder", "\(record)")
            // Taken out of the open shard, or refused by it (found while on its way there).
            #expect(record["placeholder"] as? Bool == true && (record["message"] as? String ?? "").contains("not delivered"))
        }
        for name in ["p3.png", "p4.png"] { #expect(records[name]?["reason"] as? String == "placeholder") }
        let status = try imgpipe("status", "pipe.json", "--json").decoded(StatusReport.self)
        #expect(status.done == 4 && status.skipsByReason == ["placeholder": 4] && status.placeholders == 2, "\(status)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).filter { $0.hasPrefix(".") } == [])
    }

    /// A kill -9 after two items held in the open shard were flagged as made with a
    /// placeholder (their sighting written, the items not yet taken out): `resume` does not
    /// deliver them; the new shard holds the others.
    @Test func itemsFlaggedBeforeAKillAreNotDeliveredOnResume() throws {
        let pictures = try (1...3).map {
            try ImageFixtures.scene(width: 120, height: 90, seed: UInt64(95 + $0)).encoded(.png(compression: 6, strip: true))
        }
        let released = Mutex(false)
        let server = try TestHTTPServer { request in
            // The last one waits until the test lets it go.
            if request.path == "/r3.png" { while !released.withLock({ $0 }) { usleep(10_000) } }
            let index = Int(request.path.dropFirst(2).prefix(1)) ?? 1
            return .bytes(pictures[index - 1])
        }
        defer { released.withLock { $0 = true } }
        try work.write(["r1", "p1", "r2", "p2", "r3"].map { "\(server.baseURL)/\($0).png\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "dedup": {"placeholders": true}, "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 100}, "limits": {"timeout": 120}}
            """, to: "pipe.json")
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--state", "state.sqlite"], in: work.path)
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        let deadline = Date().addingTimeInterval(120)
        var held = false
        while Date() < deadline, running.process.isRunning, !held {
            held = ((try? rows("SELECT count(*) AS n FROM item WHERE status = 'processed'")) ?? []).first?["n"] == 4
            if !held { usleep(20_000) }
        }
        try #require(held, "four items were never held in the open shard")
        running.signal(SIGKILL)
        #expect(running.wait().status != 0)
        try DatabaseQueue(path: work.url("state.sqlite")).write {
            try $0.execute(sql: "UPDATE item SET placeholder = 1 WHERE key LIKE '%/p_.png'")
        }

        released.withLock { $0 = true }
        let resumed = try imgpipe("resume", "pipe.json", "--state", "state.sqlite")
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        let keys = try shards(in: work.url("shards")).values.flatMap { try sampleKeys(of: $0) }
            .map { $0.split(separator: "/").last.map(String.init) ?? $0 }.sorted()
        #expect(keys == ["r1.png", "r2.png", "r3.png"], "\(keys)")
        let skipped = try rows("SELECT key, reason, placeholder FROM item WHERE status = 'skipped' ORDER BY key")
        #expect(skipped.map { $0["reason"] as String } == ["placeholder", "placeholder"], "\(skipped)")
        #expect(skipped.map { $0["placeholder"] as Int } == [1, 1])
    }

    /// An item a shard holds while another sink retries its delivery: the session waits for
    /// that delivery before it ends (it used to give the item's place back when the shard
    /// took it, end with the retry still pending, and leave the item for resume).
    @Test func aSessionWaitsForASinkThatRetriesAnItemAShardHolds() throws {
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let images = try TestHTTPServer { _ in .bytes(jpeg) }
        let uploads = Mutex(0)
        let endpoint = try TestHTTPServer { _ in
            // The first upload is refused as a passing failure: retried a second later.
            uploads.withLock { count in
                count += 1
                return count == 1 ? .status(503) : .status(200)
            }
        }
        try work.write("\(images.baseURL)/one.jpg\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sinks": [{"type": "webdataset", "path": "shards"}, {"type": "http", "url": "\(endpoint.baseURL)/up"}],
             "retry": {"attempts": 3, "backoff": 1}}
            """, to: "pipe.json")
        let result = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(uploads.withLock { $0 } == 2)
        #expect(try rows("SELECT status FROM item").map { $0["status"] as String } == ["done"])
        let keys = try shards(in: work.url("shards")).mapValues { try sampleKeys(of: $0) }
        #expect(keys == ["00000.tar": try rows("SELECT key FROM item").map { $0["key"] as String }], "\(keys)")
    }

    /// The samples of the fullest open (temporary) shard in `shards`, counted by their
    /// `KEY.json` members' names.
    func openShardSamples() -> Int {
        let folder = (try? FileManager.default.contentsOfDirectory(atPath: work.url("shards"))) ?? []
        return folder.filter { $0.hasPrefix(WebDatasetSink.partialPrefix) && $0.hasSuffix(".tar") }
            .compactMap { FileManager.default.contents(atPath: work.url("shards/" + $0)) }
            .map { $0.ranges(of: Data(".json\u{0}".utf8)).count }.max() ?? 0
    }

    /// An http sink's endpoint that answers each item's first upload (told apart by its
    /// `Idempotency-Key`) 503 at once, and hangs its second until `release` (two minutes at
    /// most); `uploads` counts them. An item's deliveries go one sink after the other: the
    /// refused upload is tried again on a timer, once the shard holds the item.
    func hangingEndpoint() throws -> (
        server: TestHTTPServer, uploads: @Sendable () -> Int, release: @Sendable () -> Void
    ) {
        let state = LockedBox((uploads: 0, seen: Set<String>(), released: false))
        let server = try TestHTTPServer { request in
            let first = state.withLock { state in
                state.uploads += 1
                return state.seen.insert(request.headers["idempotency-key"] ?? "").inserted
            }
            guard !first else { return .status(503) }
            let deadline = Date().addingTimeInterval(120)
            while !state.withLock({ $0.released }), Date() < deadline { usleep(10_000) }
            return .status(200)
        }
        return (server, { state.withLock { $0.uploads } }, { state.withLock { $0.released = true } })
    }

    /// Ctrl-C while another sink's uploads of items a shard holds outlast the grace period:
    /// the shard is committed before the abort (the items are made; only the other sink is
    /// still at work), not dropped with it; resume then finishes the uploads alone.
    @Test func aGracePeriodThatRunsOutCommitsWhatTheShardHolds() throws {
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let images = try TestHTTPServer { _ in .bytes(jpeg) }
        let (endpoint, uploads, release) = try hangingEndpoint()
        defer { release() }
        try work.write((1...3).map { "\(images.baseURL)/\($0).jpg\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}], "limits": {"uploads": 6, "timeout": 150},
             "sinks": [{"type": "webdataset", "name": "shards", "path": "shards", "samplesPerShard": 100},
                       {"type": "http", "name": "archive", "url": "\(endpoint.baseURL)/up"}],
             "retry": {"attempts": 3, "backoff": 0.1}}
            """, to: "pipe.json")
        let running = try ImgpipeBinary.launch(["run", "pipe.json", "--state", "state.sqlite"], in: work.path)
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        let deadline = Date().addingTimeInterval(120)
        var holding = 0
        while holding < 3, running.process.isRunning, Date() < deadline {
            holding = openShardSamples()
            if holding < 3 { usleep(10_000) }
        }
        try #require(holding == 3, "the open shard never held the three samples")
        // And the three retried uploads under way (a retry still on its timer would be left
        // pending by the Ctrl-C, and the session end at once).
        while uploads() < 6, running.process.isRunning, Date() < deadline { usleep(10_000) }
        try #require(uploads() == 6, "the http sink's retries never came")
        running.signal(SIGINT)
        let interrupted = running.wait()
        #expect(interrupted.status != 0, "\(interrupted.stderr)")
        #expect(interrupted.stderr.contains("grace period over"), "\(interrupted.stderr)")
        let keys = try rows("SELECT key FROM item ORDER BY key").map { $0["key"] as String }
        #expect(try shards(in: work.url("shards")).mapValues { try sampleKeys(of: $0).sorted() } == ["00000.tar": keys])
        let shardDeliveries = try rows("SELECT status FROM delivery WHERE sink = 'shards'").map { $0["status"] as String }
        #expect(shardDeliveries == ["done", "done", "done"])

        release()
        let resumed = try imgpipe("resume", "pipe.json", "--state", "state.sqlite")
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(try rows("SELECT status FROM item").map { $0["status"] as String } == ["done", "done", "done"])
        #expect(try shards(in: work.url("shards")).keys.sorted() == ["00000.tar"], "no shard written again")
    }

    /// An item that fails after the session's last shard was committed (the run ends with no
    /// shard open) is counted in that shard's stats, written again when the session ends.
    @Test func aFailureAfterTheLastShardIsCountedInIt() throws {
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let server = try TestHTTPServer { request in
            if request.path == "/slow-bad.jpg" {
                usleep(1_500_000)
                return .bytes(Data("not an image".utf8))
            }
            return .bytes(jpeg)
        }
        try work.write(["g1.jpg", "g2.jpg", "slow-bad.jpg"].map { "\(server.baseURL)/\($0)\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 2}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
        let run = try imgpipe("run", "pipe.json", "--state", "state.sqlite")
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(try shards(in: work.url("shards")).keys.sorted() == ["00000.tar"])
        let stats = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: work.url("shards/00000_stats.json"))))
                as? [String: Any])
        #expect(stats["failed"] as? [String: Int] == ["decode": 1] && stats["samples"] as? Int == 2, "\(stats)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).filter { $0.hasPrefix(".") } == [])
    }

    func makeJPEG() throws -> String {
        let path = work.url("source.jpg")
        try ImageFixtures.jpeg(at: path, width: 40, height: 30)
        return path
    }

    // MARK: - the journal, in process

    /// Items of one item each, staged as files, for a sink handed them directly.
    func items(_ keys: [String], run: String = "run-a") throws -> [BatchItem] {
        let source = try makeJPEG()
        let size = try Data(contentsOf: URL(fileURLWithPath: source))
        return keys.map { key in
            let delivery = Delivery(
                runId: 1, runUUID: run, key: key, width: 40, height: 30, stagedPath: source, name: key, format: .jpeg,
                origin: "in/" + key, nameKey: key, nameStem: key, sha256: SHA256.hash(data: size).hex, index: 0)
            return BatchItem(key: key, metadata: #"{"n": 1}"#, caption: "a caption of \(key)", deliveries: [delivery])
        }
    }

    func sink() -> WebDatasetSink {
        WebDatasetSink(name: "shards", root: work.url("shards"), samplesPerShard: 10, outputs: ["default"])
    }

    /// A process killed after it published a shard and before the runner recorded it: the
    /// next session's sink reads its journal and answers those items delivered, without a
    /// second copy; once a session finishes, the journal is gone and nothing is answered so.
    @Test func aShardPublishedBeforeItsRecordIsNotWrittenTwice() throws {
        let workRoot = work.url("work")
        let first = sink()
        try first.prepare(workRoot: workRoot)
        for item in try items(["a", "b"]) {
            #expect(try first.accept(item, attempt: 1) == .held(full: false))
        }
        let receipts = try first.commit()
        #expect(receipts.keys.sorted() == ["a", "b"])
        // Killed here: no finish, nothing recorded; and another process swept the stats
        // before they were renamed into place (written again from the journal), and the
        // manifest, whose making again was cut short by a kill (made again from the shard's
        // records).
        try FileManager.default.removeItem(atPath: work.url("shards/00000_stats.json"))
        try work.write("PAR1", to: "shards/00000.parquet")

        let second = sink()
        try second.prepare(workRoot: workRoot)
        let manifest = try #require(try manifests(in: work.url("shards"))["00000.parquet"])
        #expect(manifest.map { $0["key"] as? String } == ["a", "b"] && manifest.first?["caption"] as? String == "a caption of a")
        #expect(manifest.first?["meta"] as? String == #"{"n":1}"# && manifest.first?["output.bytes"] as? Int ?? 0 > 0)
        let stats = try String(contentsOfFile: work.url("shards/00000_stats.json"), encoding: .utf8)
        #expect(stats.contains(#""samples":2"#) && stats.contains(#""recovered":true"#), "\(stats)")
        for item in try items(["a", "b"]) {
            guard case .delivered = try second.accept(item, attempt: 1) else {
                Issue.record("\(item.key) was written again")
                continue
            }
        }
        // Another run's items of the same keys are not the journal's.
        #expect(try second.accept(try items(["a"], run: "run-b")[0], attempt: 1) == .held(full: false))
        #expect(try second.accept(try items(["c"])[0], attempt: 1) == .held(full: false))
        _ = try second.commit()
        second.finish()
        let shards = try shards(in: work.url("shards"))
        #expect(try shards.mapValues { try sampleKeys(of: $0) } == ["00000.tar": ["a", "b"], "00001.tar": ["a", "c"]])
        // The caption and the feed's metadata travel with the sample.
        let members = try #require(shards["00000.tar"])
        #expect(members.map(\.name) == ["a.jpg", "a.txt", "a.json", "b.jpg", "b.txt", "b.json"])
        #expect(members[1].text == "a caption of a")
        #expect(members[2].text?.contains(#""meta":{"n":1}"#) == true, "\(members[2].text ?? "")")

        let third = sink()
        try third.prepare(workRoot: workRoot)
        #expect(try third.accept(try items(["a"])[0], attempt: 1) == .held(full: false))
        third.discard()
    }

    /// A sink killed in its commit after it wrote the journal and before the link: it holds
    /// `a` and `b` in its partial shard, and the journal names that file as a commit does.
    func killedBeforeItsLink() throws -> (sink: WebDatasetSink, partial: String) {
        let first = sink()
        try first.prepare(workRoot: work.url("work"))
        for item in try items(["a", "b"]) { _ = try first.accept(item, attempt: 1) }
        let partial = try #require(
            try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).first {
                $0.hasPrefix(WebDatasetSink.partialPrefix) && $0.hasSuffix(".tar")
            })
        let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url("shards/" + partial)))
        let entry =
            #"{"run": "run-a", "partial": "\#(partial)", "size": "\#(bytes.count + 1024)", "#
            + #""sha256": "\#(SHA256.hash(data: bytes + Data(count: 1024)).hex)", "keys": ["a", "b"]}"#
        try work.write(#"{"entries": [\#(entry)]}"#, to: "work/webdataset-shards.journal.open")
        return (first, partial)
    }

    /// A process killed after it wrote the journal and before the link: the shard was never
    /// published, so the next session removes it and takes its items again.
    @Test func aShardNeverPublishedIsRemovedAndItsItemsTakenAgain() throws {
        let (_, partial) = try killedBeforeItsLink()
        let second = sink()
        try second.prepare(workRoot: work.url("work"))
        #expect(!FileManager.default.fileExists(atPath: work.url("shards/" + partial)))
        #expect(!FileManager.default.fileExists(atPath: work.url("work/webdataset-shards.journal")))
        #expect(!FileManager.default.fileExists(atPath: work.url("work/webdataset-shards.journal.open")))
        for item in try items(["a", "b"]) {
            #expect(try second.accept(item, attempt: 1) == .held(full: false))
        }
        _ = try second.commit()
        #expect(try shards(in: work.url("shards")).mapValues { try sampleKeys(of: $0) } == ["00000.tar": ["a", "b"]])
    }

    /// The same, but the partial shard was removed meanwhile (another process swept it):
    /// its items are not taken for delivered, though no file says otherwise.
    @Test func aShardSweptBeforeItsLinkIsNotTakenForPublished() throws {
        let (first, partial) = try killedBeforeItsLink()
        first.discard()
        #expect(!FileManager.default.fileExists(atPath: work.url("shards/" + partial)))

        let second = sink()
        try second.prepare(workRoot: work.url("work"))
        #expect(try second.accept(try items(["a"])[0], attempt: 1) == .held(full: false))
        second.discard()
    }

    /// The same, and then a numbered shard of the very size appeared (another run's, given
    /// the removed file's inode): it holds other bytes, so the items are not taken for its.
    @Test func aShardOfTheSameSizeButOtherBytesIsNotTakenForTheJournals() throws {
        let (first, _) = try killedBeforeItsLink()
        let journal = try String(contentsOfFile: work.url("work/webdataset-shards.journal.open"), encoding: .utf8)
        let size = try #require(Int(journal.split(separator: "\"").drop { $0 != "size" }.dropFirst(2).first ?? ""))
        first.discard()
        try Data(count: size).write(to: URL(fileURLWithPath: work.url("shards/00000.tar")))

        let second = sink()
        try second.prepare(workRoot: work.url("work"))
        #expect(try second.accept(try items(["a"])[0], attempt: 1) == .held(full: false))
        second.discard()
    }

    /// Entries of a run the next session does not deliver (a run replaced by `run --new` or
    /// `--incremental`) go when that session ends: their items are never handed again.
    @Test func aSessionOfAnotherRunDropsTheJournalsEntries() throws {
        let first = sink()
        try first.prepare(workRoot: work.url("work"))
        _ = try first.accept(try items(["a"])[0], attempt: 1)
        _ = try first.commit()  // killed before the record
        let second = sink()
        try second.prepare(workRoot: work.url("work"))
        #expect(FileManager.default.fileExists(atPath: work.url("work/webdataset-shards.journal")))
        #expect(try second.accept(try items(["a"], run: "run-b")[0], attempt: 1) == .held(full: false))
        _ = try second.commit()
        second.finish()
        #expect(!FileManager.default.fileExists(atPath: work.url("work/webdataset-shards.journal")))
    }

    /// Killed twice in the window between a link and its record: the first shard's items
    /// not yet answered, and the second shard's, are both still known to the third session;
    /// a session that ends normally forgets only the items it answered.
    @Test func theJournalKeepsWhatNoEndedSessionAnswered() throws {
        let workRoot = work.url("work")
        let first = sink()
        try first.prepare(workRoot: workRoot)
        for item in try items(["a", "b"]) { _ = try first.accept(item, attempt: 1) }
        _ = try first.commit()  // 00000.tar: a, b; killed before the record

        let second = sink()
        try second.prepare(workRoot: workRoot)
        guard case .delivered = try second.accept(try items(["a"])[0], attempt: 1) else {
            Issue.record("a was written again")
            return
        }
        #expect(try second.accept(try items(["c"])[0], attempt: 1) == .held(full: false))
        _ = try second.commit()  // 00001.tar: c; killed again before the record

        let third = sink()
        try third.prepare(workRoot: workRoot)
        for key in ["b", "c"] {
            guard case .delivered(let receipt) = try third.accept(try items([key])[0], attempt: 1) else {
                Issue.record("\(key) was written again")
                continue
            }
            #expect(receipt.remoteURL == work.url("shards/" + (key == "b" ? "00000.tar" : "00001.tar")))
        }
        third.finish()  // ended normally: b and c recorded; a was answered in a session that did not end

        let fourth = sink()
        try fourth.prepare(workRoot: workRoot)
        guard case .delivered = try fourth.accept(try items(["a"])[0], attempt: 1) else {
            Issue.record("a, answered only in a session that was killed, was forgotten")
            return
        }
        #expect(try fourth.accept(try items(["b"])[0], attempt: 1) == .held(full: false))
        fourth.discard()
        fourth.finish()
        #expect(!FileManager.default.fileExists(atPath: work.url("work/webdataset-shards.journal")))
        #expect(
            try shards(in: work.url("shards")).mapValues { try sampleKeys(of: $0) } == [
                "00000.tar": ["a", "b"], "00001.tar": ["c"],
            ])
    }

    /// Two `webdataset` sinks on one folder would write each sample twice: refused, however
    /// the folder is written (a spelling, a symbolic link to it, or to a folder above it not
    /// made yet).
    @Test func twoShardSinksOnOneFolderAreRefused() throws {
        _ = try work.folder("in")
        _ = try work.folder("shards")
        _ = try work.folder("real")
        try FileManager.default.createSymbolicLink(atPath: work.url("alias"), withDestinationPath: "shards")
        try FileManager.default.createSymbolicLink(atPath: work.url("above"), withDestinationPath: "real")
        for (first, second) in [("shards", "./shards/"), ("shards", "alias"), ("real/new", "above/new")] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "sinks": [{"type": "webdataset", "path": "\(first)"}, {"type": "webdataset", "path": "\(second)"}]}
                """, to: "pipe.json")
            let result = try imgpipe("validate", "pipe.json")
            #expect(result.status == 2, "\(second): \(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("each sample would be written twice"), "\(second): \(result.stderr)")
        }
    }

    /// An output id that would push member names past ustar's 100 bytes is refused.
    @Test func aLongOutputIdIsRefusedForSeveralOutputs() throws {
        let long = String(repeating: "o", count: 41)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "outputs": [{"id": "small"}, {"id": "\(long)", "format": "png"}],
             "sink": {"type": "webdataset", "path": "shards"}}
            """, to: "pipe.json")
        _ = try work.folder("in")
        let result = try imgpipe("validate", "pipe.json")
        #expect(result.status == 2 && result.stderr.contains("may be at most 40 bytes"), "\(result.stderr)")
    }

    /// A shard the journal must check that cannot be read stops the sink with the journal
    /// kept, instead of taking the shard for unpublished and writing its items again.
    @Test func aShardThatCannotBeReadKeepsTheJournal() throws {
        _ = try work.folder("shards/00000.tar")  // a folder: opened, but not read
        var info = stat()
        try #require(lstat(work.url("shards/00000.tar"), &info) == 0)
        let entry =
            #"{"run": "run-a", "partial": ".imgpipe-shard-gone.tar", "size": "\#(info.st_size)", "#
            + #""sha256": "00", "keys": ["a"]}"#
        try work.write(#"{"entries": [\#(entry)]}"#, to: "work/webdataset-shards.journal.open")
        let sink = sink()
        #expect(throws: SinkError.self) { try sink.prepare(workRoot: work.url("work")) }
        #expect(FileManager.default.fileExists(atPath: work.url("work/webdataset-shards.journal.open")))
    }

    /// A member whose name needs a pax header keeps its extension in its ustar name, for
    /// readers that know no pax: `KEY.jpg` and `KEY.json` stay apart there too.
    @Test func aLongNamesUstarFallbackKeepsItsExtension() {
        let stem = String(repeating: "k", count: 120)
        func ustarName(_ name: String) -> String {
            let header = TarFormat.header(name: name, size: 1, modified: 0)
            // The pax header, its record (under 512 bytes), then the ustar header.
            let field = header[1024..<1124].prefix { $0 != 0 }
            return String(decoding: field, as: UTF8.self)
        }
        #expect(ustarName(stem + ".jpg").hasSuffix(".jpg") && ustarName(stem + ".json").hasSuffix(".json"))
        #expect(ustarName(stem + ".jpg").utf8.count == 100)
    }

    /// `samplesPerShard` is checked where the file says it.
    @Test func aShardSizeOutOfRangeIsRefusedWithItsPath() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "sink": {"type": "webdataset", "path": "shards", "samplesPerShard": 0}}
            """, to: "pipe.json")
        _ = try work.folder("in")
        let result = try imgpipe("validate", "pipe.json")
        #expect(result.status == 2, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("sink.samplesPerShard"), "\(result.stderr)")
    }
}
