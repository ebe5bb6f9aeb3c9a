import Foundation
import ImagePipelineTesting
import Synchronization
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The `webdataset` sink with an `s3` location, against moto's server on loopback: shards
/// read back by boto3, Python's `tarfile` and pyarrow; numbers taken by conditional uploads;
/// a kill in the middle of a shard's upload.
extension WebDatasetSinkTests {
    /// A sink on a bucket's prefix, as a process of its own would make it (its own work folder).
    func bucketSink(_ moto: MotoServer, bucket: String, workRoot: String) throws -> WebDatasetSink {
        let client = S3Client(
            bucket: bucket, region: "us-east-1", endpoint: URL(string: moto.endpoint), pathStyle: true,
            credentials: S3Credentials(accessKeyId: moto.accessKeyId, secretAccessKey: moto.secretAccessKey),
            http: HTTPClient(timeout: 10))
        var retry = RetryPolicy()
        retry.backoff = 0.05
        let place = ShardBucket(client: client, folder: "sets/", options: S3SinkOptions(), metadata: [], retry: retry)
        let sink = WebDatasetSink(name: "shards", place: place, samplesPerShard: 10, outputs: ["default"])
        try sink.prepare(workRoot: workRoot)
        return sink
    }

    /// Two processes that both found the prefix empty commit in turn: each upload that finds
    /// its number taken (412) goes up under the next free one, so the numbers have no gap
    /// and no shard replaces another.
    @Test func twoWritersOfOneBucketTakeNumbersWithoutAGap() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let first = try bucketSink(moto, bucket: bucket, workRoot: work.url("work-1"))
        let second = try bucketSink(moto, bucket: bucket, workRoot: work.url("work-2"))
        var receipts: [String: String] = [:]
        for (sink, keys) in [(first, ["a", "b"]), (second, ["c"]), (first, ["d"]), (second, ["e", "f"])] {
            for item in try items(keys) { #expect(try sink.accept(item, attempt: 1) == .held(full: false)) }
            for (key, receipt) in try sink.commit() { receipts[key] = receipt.remoteURL }
        }
        first.finish()
        second.finish()
        let folder = try download(from: moto, bucket: bucket, prefix: "sets/")
        let shards = try shards(in: folder)
        #expect(
            try shards.mapValues { try sampleKeys(of: $0) }
                == ["00000.tar": ["a", "b"], "00001.tar": ["c"], "00002.tar": ["d"], "00003.tar": ["e", "f"]])
        #expect(receipts["c"] == "s3://\(bucket)/sets/00001.tar" && receipts["f"] == "s3://\(bucket)/sets/00003.tar")
        #expect(try manifests(in: folder).mapValues { $0.compactMap { $0["key"] as? String } }["00003.parquet"] == ["e", "f"])
        // Each shard says what its bytes are, for a journal that settles after a kill.
        let objects = try moto.objects(in: bucket)
        for number in 0..<4 {
            let object = try #require(objects[String(format: "sets/%05d.tar", number)])
            #expect(object.metadata["imgpipe-sha256"] == object.sha256 && object.contentType == "application/x-tar")
        }
        #expect(try moto.multipartUploads(in: bucket).isEmpty)
        for root in ["work-1", "work-2"] {
            #expect(try FileManager.default.contentsOfDirectory(atPath: work.url(root + "/webdataset-shards.shards")) == [])
        }
    }

    /// An upload S3 stored but whose answer was lost (a 500 after the store) is tried again
    /// and refused: the shard there is this one (its SHA-256 says so), so it keeps its number.
    @Test func anUploadStoredWithItsAnswerLostKeepsItsNumber() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let sink = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        try moto.inject([MotoServer.Fault("PUT /\(bucket)/sets/00000.tar", status: 500, after: true, times: 1)])
        for item in try items(["a", "b"]) { _ = try sink.accept(item, attempt: 1) }
        #expect(
            try sink.commit().mapValues(\.remoteURL) == [
                "a": "s3://\(bucket)/sets/00000.tar", "b": "s3://\(bucket)/sets/00000.tar",
            ])
        sink.finish()
        #expect(try moto.objects(in: bucket).keys.filter { $0.hasSuffix(".tar") } == ["sets/00000.tar"])
    }

    /// The same, but what is there cannot be looked at (its `HeadObject` fails), or every
    /// later try fails too: the shard may be stored, so its items fail without a second copy,
    /// and the journal keeps the entry. The next session finds the shard and answers them
    /// delivered (as `resume --retry-failed` would hand them again).
    @Test(arguments: [false, true])
    func aPublishingThatMayHaveBeenStoredIsSettledNextSession(laterTriesFail: Bool) throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let sink = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        let shard = "/\(bucket)/sets/00000.tar"
        try moto.inject(
            [MotoServer.Fault("PUT " + shard, status: 500, after: true, times: 1)]
                + (laterTriesFail ? [MotoServer.Fault("PUT " + shard, status: 503)] : [])
                + [MotoServer.Fault("HEAD " + shard, status: 503)])
        for item in try items(["a", "b"]) { _ = try sink.accept(item, attempt: 1) }
        #expect(throws: DeliveryFailure.self) { try sink.commit() }
        sink.finish()
        #expect(try moto.objects(in: bucket).keys.filter { $0.hasSuffix(".tar") } == ["sets/00000.tar"], "one copy")

        try moto.inject([])
        let next = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        for item in try items(["a", "b"]) {
            #expect(try next.accept(item, attempt: 1) == .delivered(DeliveryReceipt(remoteURL: "s3://\(bucket)/sets/00000.tar")))
        }
        #expect(try next.accept(try items(["c"])[0], attempt: 1) == .held(full: false))
        _ = try next.commit()
        next.finish()
        let folder = try download(from: moto, bucket: bucket, prefix: "sets/")
        #expect(try shards(in: folder).mapValues { try sampleKeys(of: $0) } == ["00000.tar": ["a", "b"], "00001.tar": ["c"]])
    }

    /// An earlier try of this very upload still under way answers the retry 409, then
    /// finishes: the look before the next try finds the shard there with this one's digest,
    /// and it keeps its number (it was uploaded again under the next one).
    @Test func aConflictWithItsOwnEarlierTryKeepsTheNumber() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let sink = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        try moto.inject([MotoServer.Fault("PUT /\(bucket)/sets/00000.tar", status: 409, after: true, times: 1)])
        for item in try items(["a", "b"]) { _ = try sink.accept(item, attempt: 1) }
        #expect(try sink.commit()["a"]?.remoteURL == "s3://\(bucket)/sets/00000.tar")
        sink.finish()
        #expect(try moto.objects(in: bucket).keys.filter { $0.hasSuffix(".tar") } == ["sets/00000.tar"])
    }

    /// Another conditional write of the key under way (409) is waited for and tried again, a
    /// few times, not a hundred; then the shard fails saying why.
    @Test func aConflictThatLastsFailsTheShardAfterItsRetries() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let sink = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        try moto.inject([MotoServer.Fault("PUT /\(bucket)/sets/00000.tar", status: 409)])
        _ = try sink.accept(try items(["a"])[0], attempt: 1)
        do {
            _ = try sink.commit()
            Issue.record("the commit succeeded")
        } catch {
            #expect(error.failure.message.contains("(after 3 tries)"), "\(error.failure.message)")
        }
        sink.finish()
        #expect(try moto.objects(in: bucket).isEmpty)
    }

    /// A journal entry of an upload killed before S3 answered with its id names only its key,
    /// which every process writing shards here uploads too: another process's upload of that
    /// key is left alone (the `s3` sink, whose keys are its own, aborts them).
    @Test func anUploadOfAnotherWriterIsNotAbortedForAKeyInTheJournal() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        try work.write("sets/00000.tar\n", to: "work/s3-uploads/shards/entry.upload")
        try moto.boto3("s3.create_multipart_upload(Bucket=sys.argv[1], Key='sets/00000.tar')", arguments: [bucket])
        let sink = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        sink.finish()
        #expect(try moto.multipartUploads(in: bucket) == ["sets/00000.tar"])
        #expect(!FileManager.default.fileExists(atPath: work.url("work/s3-uploads/shards/entry.upload")))
    }

    /// A bucket named by a variable (`"bucket": "${BUCKET}"` inside `s3`): another value is
    /// another place, which a change-aware re-run fills with every sample; the same value
    /// is nothing to do.
    @Test func aShardBucketMovedByItsVariableIsAnotherPlace() throws {
        let moto = try MotoServer()
        let buckets = ["a", "b"].map { "imgpipe-\($0)-" + UUID().uuidString.prefix(6).lowercased() }
        for bucket in buckets { try moto.createBucket(bucket) }
        for index in 1...3 {
            try ImageFixtures.write(try ImageFixtures.photo(width: 40, height: 30, seed: index), to: work.url("in/p\(index).png"))
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "webdataset", "s3": {"bucket": "${BUCKET}", "endpoint": "\(moto.endpoint)"}}}
            """, to: "pipe.json")
        func imgpipe(_ arguments: String..., bucket: String) throws -> CommandResult {
            try ImgpipeBinary.run(arguments, in: work.path, environment: moto.credentials.merging(["BUCKET": bucket]) { $1 })
        }
        func redo(_ bucket: String) throws -> Int? {
            let plan = try imgpipe("plan", "pipe.json", "--json", bucket: bucket)
            let value = try JSONSerialization.jsonObject(with: Data(plan.stdout.utf8)) as? [String: Any]
            return ((value?["outputs"] as? [String: Any])?["default"] as? [String: Any])?["redo"] as? Int
        }
        #expect(try imgpipe("run", "pipe.json", bucket: buckets[0]).status == 0)
        #expect(try redo(buckets[0]) == 0)
        #expect(try redo(buckets[1]) == 3)
        let moved = try imgpipe("run", "pipe.json", "--incremental", bucket: buckets[1])
        #expect(moved.status == 0, "\(moved.stderr)")
        let folder = try download(from: moto, bucket: buckets[1], prefix: "")
        #expect(try shards(in: folder).values.flatMap { try sampleKeys(of: $0) }.sorted() == ["p1.png", "p2.png", "p3.png"])
    }

    /// Ctrl-C, and the grace period runs out while an http sink's retries hang: the shard is
    /// committed then, each request made once (the run is stopping), and a passing 500 on
    /// its upload leaves its items pending, not failed: resume puts the shard up.
    @Test func aCommitCutShortByCtrlCLeavesItsItemsPending() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let images = try TestHTTPServer { _ in .bytes(jpeg) }
        let (endpoint, uploads, release) = try hangingEndpoint()
        defer { release() }
        try work.write((1...2).map { "\(images.baseURL)/\($0).jpg\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}], "limits": {"uploads": 6, "timeout": 150},
             "sinks": [{"type": "webdataset", "name": "shards", "samplesPerShard": 100,
                        "s3": {"bucket": "\(bucket)", "endpoint": "\(moto.endpoint)"}},
                       {"type": "http", "name": "archive", "url": "\(endpoint.baseURL)/up"}],
             "retry": {"attempts": 3, "backoff": 0.1}}
            """, to: "pipe.json")
        try moto.inject([MotoServer.Fault("PUT /\(bucket)/00000.tar", status: 500, times: 1)])
        let running = try ImgpipeBinary.launch(
            ["run", "pipe.json", "--state", "state.sqlite"], in: work.path, environment: moto.credentials)
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        // Both items held in the shard: their retried uploads to the http sink hang.
        let deadline = Date().addingTimeInterval(120)
        while uploads() < 4, running.process.isRunning, Date() < deadline { usleep(10_000) }
        try #require(uploads() >= 4, "the http sink's retries never came")
        running.signal(SIGINT)
        let interrupted = running.wait()
        #expect(interrupted.stderr.contains("grace period over"), "\(interrupted.stderr)")
        let shard = try rows("SELECT status FROM delivery WHERE sink = 'shards'").map { $0["status"] as String }
        #expect(shard == ["pending", "pending"], "\(interrupted.stderr)")
        #expect(try rows("SELECT count(*) AS n FROM item WHERE status = 'failed'").first?["n"] as Int? == 0)
        #expect(try moto.objects(in: bucket).keys.filter { $0.hasSuffix(".tar") } == [])

        release()
        let resumed = try ImgpipeBinary.run(
            ["resume", "pipe.json", "--state", "state.sqlite"], in: work.path, environment: moto.credentials)
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(try rows("SELECT status FROM item").map { $0["status"] as String } == ["done", "done"])
        #expect(try moto.objects(in: bucket).keys.filter { $0.hasSuffix(".tar") } == ["00000.tar"])
    }

    /// What `validate` says of a sink with no place, an `s3` key a shard sink does not take,
    /// and two shard sinks on one prefix.
    @Test func validateNamesWhatIsWrongWithAShardSinksPlace() throws {
        _ = try work.folder("in")
        let bucket = #""s3": {"bucket": "data", "prefix": "sets", "endpoint": "http://127.0.0.1:9"}"#
        let cases = [
            (#"{"type": "webdataset"}"#, "a webdataset sink writes its shards into a folder (\"path\") or a bucket (\"s3\")"),
            (#"{"type": "webdataset", "s3": {"bucket": "data", "key": "{key}"}}"#, "sinks[0].s3.key: unknown key"),
            (#"{"type": "webdataset", \#(bucket)}, {"type": "webdataset", "name": "b", \#(bucket)}"#, "written twice"),
            (
                #"{"type": "webdataset", "path": "train", \#(bucket)}, "#
                    + #"{"type": "webdataset", "name": "b", "s3": {"bucket": "data", "prefix": "sets/train/", "#
                    + #""endpoint": "http://127.0.0.1:9/", "pathStyle": false}}"#, "written twice"
            ),
        ]
        for (sinks, message) in cases {
            try work.write(
                #"{"version": 1, "source": {"type": "directory", "path": "in"}, "sinks": [\#(sinks)]}"#, to: "pipe.json")
            let result = try ImgpipeBinary.run(
                ["validate", "pipe.json"], in: work.path,
                environment: ["AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"])
            #expect(result.status == 2 && result.stderr.contains(message), "\(sinks): \(result.stderr)")
        }
    }

    /// A process killed after its shard was uploaded and before the runner recorded it: the
    /// next session finds the shard in the bucket by its size and the SHA-256 it carries,
    /// answers its items delivered, and puts the manifest the kill left behind in place.
    @Test func aShardUploadedBeforeItsRecordIsNotUploadedTwice() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let first = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        for item in try items(["a", "b"]) { _ = try first.accept(item, attempt: 1) }
        _ = try first.commit()
        // Killed here; and the manifest never reached the bucket.
        try moto.boto3("s3.delete_object(Bucket=sys.argv[1], Key='sets/00000.parquet')", arguments: [bucket])

        let second = try bucketSink(moto, bucket: bucket, workRoot: work.url("work"))
        for item in try items(["a", "b"]) {
            #expect(
                try second.accept(item, attempt: 1) == .delivered(DeliveryReceipt(remoteURL: "s3://\(bucket)/sets/00000.tar")))
        }
        #expect(try second.accept(try items(["c"])[0], attempt: 1) == .held(full: false))
        _ = try second.commit()
        second.finish()
        let folder = try download(from: moto, bucket: bucket, prefix: "sets/")
        #expect(try shards(in: folder).mapValues { try sampleKeys(of: $0) } == ["00000.tar": ["a", "b"], "00001.tar": ["c"]])
        #expect(try manifests(in: folder)["00000.parquet"]?.compactMap { $0["key"] as? String } == ["a", "b"])
    }

    /// kill -9 while a shard's multipart upload is under way (the server holds its part),
    /// then `resume`: the upload is aborted, the shard goes up again, and the bucket holds
    /// whole shards numbered without a gap, each sample once, the same as `export --only done`.
    @Test func aKillMidUploadThenResumeGivesWholeGaplessShards() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let server = try TestHTTPServer { _ in .bytes(jpeg) }
        let keys = (1...7).map { "\($0).jpg" }
        try work.write(keys.map { "\(server.baseURL)/\($0)\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 16, "height": 16}],
             "sink": {"type": "webdataset", "samplesPerShard": 3, "path": "train",
                      "s3": {"bucket": "\(bucket)", "prefix": "sets", "endpoint": "\(moto.endpoint)", "multipartThreshold": 1}},
             "retry": {"attempts": 2, "backoff": 0.05}, "limits": {"timeout": 150}}
            """, to: "pipe.json")
        moto.holdParts = true
        defer { moto.holdParts = false }
        let running = try ImgpipeBinary.launch(
            ["run", "pipe.json", "--state", "state.sqlite"], in: work.path, environment: moto.credentials)
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        try #require(moto.killOnceHeld(running), "no part of a shard reached the server")
        #expect(running.process.terminationReason == .uncaughtSignal)
        #expect(try moto.objects(in: bucket).keys.filter { $0.hasSuffix(".tar") } == [], "no shard is whole yet")
        #expect(try moto.multipartUploads(in: bucket) == ["sets/train/00000.tar"])

        let resumed = try ImgpipeBinary.run(
            ["resume", "pipe.json", "--state", "state.sqlite"], in: work.path, environment: moto.credentials)
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(try moto.multipartUploads(in: bucket).isEmpty, "the upload the kill cut short was aborted")
        let folder = try download(from: moto, bucket: bucket, prefix: "sets/train/")
        let shards = try shards(in: folder)
        #expect(shards.keys.sorted() == ["00000.tar", "00001.tar", "00002.tar"])
        let all = try shards.values.flatMap { try sampleKeys(of: $0) }
        let done = try rows("SELECT key FROM item WHERE status = 'done'").map { $0["key"] as String }
        #expect(all.count == 7 && Set(all) == Set(done) && done.count == 7, "each item once: \(all)")
        let manifests = try manifests(in: folder)
        #expect(manifests.count == 3 && manifests.values.map(\.count).reduce(0, +) == 7)
        let stats = try String(contentsOfFile: folder + "/00002_stats.json", encoding: .utf8)
        #expect(stats.contains(#""samples":1"#), "\(stats)")
        let exported = try ImgpipeBinary.run(
            ["export", "pipe.json", "--state", "state.sqlite", "--only", "done"], in: work.path, environment: moto.credentials)
        #expect(exported.stdout.contains("s3://\(bucket)/sets/train/00002.tar"), "\(exported.stdout.prefix(600))")
    }
}
