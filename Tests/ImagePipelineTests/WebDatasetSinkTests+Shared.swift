import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// Two `work` processes of one shared run (PostgreSQL) writing shards into one folder.
extension WebDatasetSinkTests {
    /// Each worker commits its own shards (a full one, or what it holds when it finds
    /// nothing to claim), and the numbers they take make one sequence from 00000 without a
    /// gap; every item is in exactly one shard, and every shard reads whole.
    @Test func twoWorkersWriteOneSequenceOfShards() throws {
        try twoWorkersWriteOneSequence(sink: #"{"type": "webdataset", "path": "shards", "samplesPerShard": 3}"#) {
            work.url("shards")
        }
    }

    /// The same, into a bucket (moto's server): the numbers are taken by uploads that fail
    /// on a key that exists.
    @Test func twoWorkersWriteOneSequenceOfShardsIntoABucket() throws {
        let moto = try MotoServer()
        let bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try moto.createBucket(bucket)
        let sink =
            #"{"type": "webdataset", "samplesPerShard": 3, "s3": {"bucket": "\#(bucket)", "prefix": "sets", "#
            + #""endpoint": "\#(moto.endpoint)"}}"#
        try twoWorkersWriteOneSequence(sink: sink, environment: moto.credentials) {
            try download(from: moto, bucket: bucket, prefix: "sets/")
        }
    }

    /// A worker stopped (SIGSTOP) past its lease while its open shard holds items: another
    /// worker takes its chunk and finishes the run. Woken, the first learns its leases are
    /// gone and drops the shard instead of committing it: each item is in one shard only.
    @Test func aWorkerStoppedPastItsLeaseDropsTheShardItHolds() throws {
        let (cluster, url, server) = try sharedRun(
            items: 12, sink: #"{"type": "webdataset", "path": "shards", "samplesPerShard": 100}"#)
        defer { cluster.dropDatabase(url) }
        defer { withExtendedLifetime(server) {} }
        let lease = ["--lease", "3", "--heartbeat", "0.5", "--chunk-size", "6", "-j", "1"]
        let stopped = try ImgpipeBinary.launch(["work", "pipe.json", "--state", url] + lease, in: work.path)
        defer { if stopped.process.isRunning { stopped.signal(SIGKILL) } }
        // Stopped once its open shard holds two samples.
        let deadline = Date().addingTimeInterval(120)
        var holding = 0
        while holding < 2, stopped.process.isRunning, Date() < deadline {
            holding = openShardSamples()
            if holding < 2 { usleep(10_000) }
        }
        try #require(holding >= 2, "the first worker's open shard never held two samples")
        stopped.signal(SIGSTOP)

        let other = try ImgpipeBinary.run(["work", "pipe.json", "--state", url] + lease, in: work.path)
        #expect(other.status == 0, "\(other.stderr)")
        stopped.signal(SIGCONT)
        let late = stopped.wait()
        #expect(late.status == 0, "\(late.stderr)")

        let shards = try shards(in: work.url("shards"))
        let all = try shards.values.flatMap { try sampleKeys(of: $0) }
        #expect(all.count == 12 && Set(all).count == 12, "each item in one shard: \(all.sorted())")
        let numbers = shards.keys.compactMap { Int($0.dropLast(4)) }.sorted()
        #expect(numbers == Array(0..<numbers.count), "\(shards.keys.sorted())")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.url("shards")).filter { $0.hasPrefix(".") } == [])
    }

    /// A database for a shared run of `items` images from a loopback server into `sink`
    /// (`pipe.json`). Each image takes 0.2 s to arrive, one at a time per worker: workers
    /// have items to claim for seconds. The server is returned to be kept alive.
    func sharedRun(items: Int, sink: String) throws -> (PostgresCluster, String, TestHTTPServer) {
        let cluster = try PostgresCluster.start()
        let url = try cluster.makeDatabase()
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: try makeJPEG()))
        let server = try TestHTTPServer { _ in
            var response = TestHTTPServer.Response.bytes(jpeg)
            response.stall = 0.2
            return response
        }
        let names = (1...items).map { String(format: "img-%02d.jpg", $0) }
        try work.write(names.map { "\(server.baseURL)/\($0)\n" }.joined(), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "filters": [{"op": "fit", "width": 24, "height": 24}], "limits": {"downloads": 1},
             "sink": \(sink)}
            """, to: "pipe.json")
        return (cluster, url, server)
    }

    /// The objects under `prefix` of a bucket, downloaded by boto3 into a new folder by
    /// their names below the prefix; the folder.
    func download(from moto: MotoServer, bucket: String, prefix: String) throws -> String {
        let folder = work.url("downloaded-" + UUID().uuidString.prefix(6))
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try moto.boto3(
            """
            bucket, prefix, folder = sys.argv[1:4]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    s3.download_file(bucket, item["Key"], os.path.join(folder, item["Key"][len(prefix):]))
            """, arguments: [bucket, prefix, folder])
        return folder
    }

    func twoWorkersWriteOneSequence(
        sink: String, environment: [String: String] = [:], shardsFolder: () throws -> String
    ) throws {
        let (cluster, url, server) = try sharedRun(items: 20, sink: sink)
        defer { cluster.dropDatabase(url) }
        defer { withExtendedLifetime(server) {} }
        let workers = try (0..<2).map { _ in
            try ImgpipeBinary.launch(
                ["work", "pipe.json", "--state", url, "--chunk-size", "2", "-j", "1"], in: work.path, environment: environment)
        }
        for result in workers.map({ $0.wait() }) { #expect(result.status == 0, "\(result.stderr)") }

        let folder = try shardsFolder()
        let shards = try shards(in: folder)
        let numbers = shards.keys.compactMap { Int($0.dropLast(4)) }.sorted()
        #expect(!numbers.isEmpty && numbers == Array(0..<numbers.count), "\(shards.keys.sorted())")
        let all = try shards.values.flatMap { try sampleKeys(of: $0) }
        let done = try ImgpipeBinary.run(
            ["export", "pipe.json", "--state", url, "--format", "jsonl"], in: work.path, environment: environment)
        #expect(done.stdout.split(separator: "\n").count == 20, "\(done.stderr)")
        #expect(all.count == 20 && Set(all).count == 20, "each item in exactly one shard: \(all.sorted())")
        #expect(shards.values.allSatisfy { $0.count <= 6 }, "at most three samples a shard")
        // Both workers took numbers from the one sequence.
        let writers = try Set(
            numbers.map { number in
                let stats = try Data(
                    contentsOf: URL(fileURLWithPath: folder + "/" + String(format: "%05d_stats.json", number)))
                let object = try #require(try JSONSerialization.jsonObject(with: stats) as? [String: Any])
                return try #require(object["writer"] as? String)
            })
        #expect(writers.count == 2, "\(writers)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasPrefix(".") } == [])
        #expect(try manifests(in: folder).count == numbers.count, "a manifest beside each shard")
    }
}
