import Foundation
import GRDB
import ImagePipeline
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// The `s3` sink and source end to end: the built binary against moto's S3 server on
/// loopback, with signatures checked, and every object read back by boto3. moto is
/// required (`make deps` installs it): a machine without it fails these tests.
@Suite("S3 sink and source", .serialized)
struct S3Tests {
    let work: TemporaryDirectory
    let server: MotoServer
    let bucket: String

    init() throws {
        work = try TemporaryDirectory("imgpipe-s3")
        server = try MotoServer()
        bucket = "imgpipe-" + UUID().uuidString.prefix(8).lowercased()
        try server.createBucket(bucket)
    }

    static let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../samples").standardizedFileURL.path

    func imgpipe(_ arguments: [String], environment: [String: String]? = nil) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path, environment: environment ?? server.credentials)
    }

    @discardableResult
    func pipeline(
        source: String, sink: String, output: String = #"{"format": "jpeg", "quality": 80}"#,
        filters: String = #"[{"op": "autorotate"}, {"op": "fit", "width": 160, "height": 160}]"#,
        limits: String = #"{"timeout": 10, "uploads": 2}"#
    ) throws -> String {
        try work.write(
            """
            {"version": 1, "source": \(source), "filters": \(filters), "output": \(output),
             "sink": \(sink), "limits": \(limits), "retry": {"attempts": 3, "backoff": 0.05}}
            """, to: "pipe.json")
    }

    func s3Sink(_ extra: String = "") -> String {
        #"{"type": "s3", "name": "bucket", "bucket": "\#(bucket)", "endpoint": "\#(server.endpoint)", "prefix": "thumbs"\#(extra)}"#
    }

    /// `export`'s records: key → (sha256 of the output, remote URL of the `bucket` sink).
    func exported() throws -> [String: (sha256: String, remote: String)] {
        let result = try imgpipe(["export", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        var records: [String: (String, String)] = [:]
        for line in result.stdout.split(separator: "\n") {
            let record = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let output = (record["outputs"] as? [String: Any])?["default"] as? [String: Any]
            let delivery = ((record["deliveries"] as? [String: Any])?["bucket"] as? [String: Any])?["default"] as? [String: Any]
            records[record["key"] as? String ?? ""] = (
                output?["sha256"] as? String ?? "", delivery?["remoteURL"] as? String ?? ""
            )
        }
        return records
    }

    func stateFileBytes() throws -> Data {
        var bytes = Data()
        for name in try FileManager.default.contentsOfDirectory(atPath: work.url(".imgpipe")) where name.hasPrefix("pipe.sqlite")
        {
            bytes += try Data(contentsOf: URL(fileURLWithPath: work.url(".imgpipe/" + name)))
        }
        return bytes
    }

    // MARK: - the sink

    @Test func everyOutputIsStoredOnceAndReadsBackByteForByte() throws {
        try pipeline(
            source: #"{"type": "directory", "path": "\#(Self.samples)"}"#,
            sink: s3Sink(#", "storageClass": "STANDARD_IA", "metadata": {"project": "demo"}"#))
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stdout: \(result.stdout)\nstderr: \(result.stderr)")

        let records = try exported()
        let objects = try server.objects(in: bucket)
        #expect(records.count >= 8 && objects.count == records.count, "\(records.count) items, \(objects.count) objects")
        for (key, record) in records {
            let name = "thumbs/" + (key as NSString).deletingPathExtension + ".jpg"
            #expect(record.remote == "s3://\(bucket)/\(name)")
            let object = try #require(objects[name], "no object \(name)")
            #expect(object.sha256 == record.sha256, "\(name): the bytes stored are the output's")
            #expect(object.contentType == "image/jpeg")
            #expect(object.storageClass == "STANDARD_IA")
            #expect(object.metadata["project"] == "demo" && object.metadata["imgpipe-sha256"] == record.sha256)
            #expect(!object.etag.contains("-"), "small outputs are one PutObject")
        }
        // The secret is in no file imgpipe wrote and nowhere it printed.
        let secret = Data(server.secretAccessKey.utf8)
        #expect(try stateFileBytes().range(of: secret) == nil)
        #expect(!result.stdout.contains(server.secretAccessKey) && !result.stderr.contains(server.secretAccessKey))
        let status = try imgpipe(["status", "pipe.json", "--json", "-v"])
        #expect(!status.stdout.contains(server.secretAccessKey) && !status.stderr.contains(server.secretAccessKey))
        // Running again (a new run) replaces each object with the same bytes: still one per item.
        #expect(try imgpipe(["run", "pipe.json", "--new"]).status == 0)
        #expect(try server.objects(in: bucket).mapValues(\.sha256) == objects.mapValues(\.sha256))
    }

    @Test func largeOutputsGoUpInPartsAndArriveIntact() throws {
        for index in 1...2 {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 1800, height: 1800, seed: index), to: work.url("in/big-\(index).png"))
        }
        try pipeline(
            source: #"{"type": "directory", "path": "in"}"#,
            sink: s3Sink(#", "multipartThreshold": 1048576, "partSize": 5242880"#),
            output: #"{"format": "png", "compression": 0}"#, filters: "[]")
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let records = try exported()
        let objects = try server.objects(in: bucket)
        #expect(objects.count == 2 && records.count == 2)
        for (key, record) in records {
            let object = try #require(objects["thumbs/" + key])
            #expect(object.size > 5 << 20 * 1 && object.sha256 == record.sha256)
            #expect(object.etag.hasSuffix("-2"), "two parts: \(object.etag)")
        }
        #expect(try server.multipartUploads(in: bucket).isEmpty)
    }

    @Test func killNineMidUploadThenResumeLeavesOneObjectPerItemAndNoUploadBehind() throws {
        server.holdParts = true
        defer { server.holdParts = false }
        for index in 1...8 {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 1800, height: 1800, seed: index), to: work.url("in/big-\(index).png"))
        }
        try pipeline(
            source: #"{"type": "directory", "path": "in"}"#,
            sink: s3Sink(#", "multipartThreshold": 1048576, "partSize": 5242880"#),
            output: #"{"format": "png", "compression": 0}"#, filters: "[]",
            limits: #"{"timeout": 10, "uploads": 2, "workers": 2}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path, environment: server.credentials)
        // Killed once the server holds a part: a multipart upload is under way, and stays so.
        let deadline = Date().addingTimeInterval(120)
        while !server.partSeen, running.process.isRunning, Date() < deadline { usleep(10_000) }
        #expect(server.partSeen, "no part reached the server")
        running.signal(SIGKILL)
        _ = running.wait()
        server.holdParts = false
        #expect(running.process.terminationReason == .uncaughtSignal, "killed mid-run")
        let stored = try server.objects(in: bucket).count
        let dangling = try server.multipartUploads(in: bucket)
        #expect(
            !dangling.isEmpty && stored < 8, "killed with \(dangling.count) upload(s) under way and \(stored) object(s) stored")

        let resumed = try imgpipe(["resume", "pipe.json"])
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        let objects = try server.objects(in: bucket)
        let records = try exported()
        #expect(objects.count == 8 && records.count == 8)
        for (key, record) in records { #expect(objects["thumbs/" + key]?.sha256 == record.sha256, "\(key)") }
        #expect(try server.multipartUploads(in: bucket).isEmpty, "the upload the kill interrupted was aborted")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: work.url(".imgpipe/pipe.work/s3-uploads/bucket")).isEmpty,
            "the journal is empty")
    }

    @Test func aWrongSecretStopsTheRunBeforeItStartsNamingTheSinkNotTheSecret() throws {
        try pipeline(source: #"{"type": "directory", "path": "\#(Self.samples)"}"#, sink: s3Sink())
        let wrong = "wrong-" + String(server.secretAccessKey.dropFirst(6))
        let result = try imgpipe(
            ["run", "pipe.json"],
            environment: ["AWS_ACCESS_KEY_ID": server.accessKeyId, "AWS_SECRET_ACCESS_KEY": wrong])
        // Refused by the sink's check before a run exists (exit 1, as for a sink folder that cannot be made).
        #expect(result.status == 1, "stdout: \(result.stdout)\nstderr: \(result.stderr)")
        #expect(
            result.stderr.contains("sink bucket") && result.stderr.contains("SignatureDoesNotMatch")
                && result.stderr.contains("check the secret access key"), "\(result.stderr)")
        #expect(try imgpipe(["status", "pipe.json"]).stderr.contains("no runs"))
        #expect(!result.stderr.contains(wrong) && !result.stdout.contains(wrong))
        #expect(try server.objects(in: bucket).isEmpty)
        let unknown = try imgpipe(
            ["run", "pipe.json"],
            environment: ["AWS_ACCESS_KEY_ID": "AKIDUNKNOWN", "AWS_SECRET_ACCESS_KEY": server.secretAccessKey])
        #expect(unknown.status == 1 && unknown.stderr.contains("InvalidAccessKeyId"), "\(unknown.stderr)")
    }

    @Test func validateNamesABadBucketAnEndpointAndMissingCredentials() throws {
        try pipeline(
            source: #"{"type": "directory", "path": "\#(Self.samples)"}"#,
            sink: #"{"type": "s3", "bucket": "Bad_Bucket", "endpoint": "\#(server.endpoint)"}"#)
        let bad = try imgpipe(["validate", "pipe.json"])
        #expect(
            bad.status == 2 && bad.stderr.contains("sink.bucket") && bad.stderr.contains("not a valid bucket name"),
            "\(bad.stderr)")

        try pipeline(
            source: #"{"type": "directory", "path": "\#(Self.samples)"}"#,
            sink: #"{"type": "s3", "bucket": "ok-bucket", "endpoint": "ftp://host"}"#)
        let endpoint = try imgpipe(["validate", "pipe.json"])
        #expect(endpoint.status == 2 && endpoint.stderr.contains("sink.endpoint"), "\(endpoint.stderr)")

        try pipeline(
            source: #"{"type": "directory", "path": "\#(Self.samples)"}"#,
            sink: #"{"type": "s3", "bucket": "ok-bucket", "endpoint": "\#(server.endpoint)"}"#)
        // Without the default variables: a warning, a fault with --strict, naming the variable.
        let unset = try ImgpipeBinary.launch(
            executable: "/usr/bin/env",
            [
                "-u", "AWS_ACCESS_KEY_ID", "-u", "AWS_SECRET_ACCESS_KEY", "-u", "AWS_SESSION_TOKEN",
                ImgpipeBinary.path, "validate", "pipe.json", "--strict",
            ], in: work.path
        ).wait()
        let message = unset.stderr
        #expect(
            unset.status == 2 && message.contains("environment variables AWS_ACCESS_KEY_ID and")
                && message.contains("AWS_SECRET_ACCESS_KEY are not set"), "\(message)")

        try pipeline(
            source: #"{"type": "directory", "path": "\#(Self.samples)"}"#,
            sink: #"{"type": "s3", "bucket": "ok-bucket", "secretAccessKey": "abc123written-out"}"#)
        let literal = try imgpipe(["validate", "pipe.json"])
        #expect(
            literal.status == 2 && literal.stderr.contains("sink.secretAccessKey") && literal.stderr.contains("reference"),
            "\(literal.stderr)")
    }

    // MARK: - the source

    @Test func theSourceListsPageByPageAndAResumeContinuesAfterTheLastKey() throws {
        for index in 1...15 {
            try ImageFixtures.write(
                try ImageFixtures.photo(width: 900, height: 700, seed: index),
                to: work.url(String(format: "stage/%02d.jpg", index)))
        }
        try work.write("not an image", to: "stage/notes.txt")
        try server.upload(folder: work.url("stage"), to: bucket, prefix: "in/")
        try server.upload(folder: work.url("stage"), to: bucket, prefix: "elsewhere/")
        try pipeline(
            source: #"{"type": "s3", "bucket": "\#(bucket)", "prefix": "in", "endpoint": "\#(server.endpoint)", "pageSize": 4}"#,
            sink: #"{"type": "directory", "name": "bucket", "path": "out"}"#,
            limits: #"{"timeout": 10, "downloads": 1, "workers": 1, "uploads": 1}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path, environment: server.credentials)
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline, work.files(under: "out").count < 5, running.process.isRunning { usleep(2000) }
        running.signal(SIGKILL)
        _ = running.wait()
        let before = work.files(under: "out").count
        #expect(before >= 5 && before < 15, "killed after \(before) outputs")

        let resumed = try imgpipe(["resume", "pipe.json", "--log-level", "info"])
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out") == (1...15).map { String(format: "%02d.jpg", $0) })
        // The listing continued after the last key the killed run recorded: no page twice.
        let pages = resumed.stderr.split(separator: "\n").filter { $0.contains("feed page") }
        let first = try #require(pages.first, "\(resumed.stderr)")
        #expect(first.contains("startAfter=in/") && !first.contains("startAfter=in/01.jpg"), "\(first)")
        #expect(pages.count <= 3, "\(pages.count) pages listed on resume")
        let status = try imgpipe(["status", "pipe.json", "--json"]).decoded(StatusReport.self)
        #expect(status.done == 15 && status.failed == 0 && status.total == 15)
        // Through the cache, keyed without signature or credential: a new run downloads nothing.
        let again = try imgpipe(["run", "pipe.json", "--new"])
        #expect(again.status == 0, "stderr: \(again.stderr)")
        let rerun = try imgpipe(["status", "pipe.json", "--json"]).decoded(StatusReport.self)
        #expect(rerun.done == 15 && rerun.tiers["cache"] == 15, "\(rerun.tiers)")
        for file in work.files(under: ".imgpipe") {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: work.url(".imgpipe/" + file)))
            for secret in [server.secretAccessKey, "Signature=", "X-Amz-Signature"] {
                #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(secret) in \(file)")
            }
        }
    }

    /// Keys are names, not paths: `in/sub/../x.png` is an object of its own, where libcurl
    /// sent `/in/x.png` and the item came out as that other object (`in/./d.png` as a 404);
    /// and a key with a control character, which S3 cannot write in XML, stopped the whole
    /// listing ("the answer is not a listing") until keys came URL-encoded.
    @Test func keysWithDotSegmentsOrControlCharactersAreTheirOwnObjects() throws {
        let sizes = [
            "in/x.png": (77, 77), "in/sub/../x.png": (55, 33), "in/./d.png": (20, 30),
            "in/ctl\u{01}x.png": (40, 10), "in/a b+c.png": (12, 14),
        ]
        for (index, (key, size)) in sizes.sorted(by: { $0.key < $1.key }).enumerated() {
            let file = work.url("stage/\(index).png")
            try ImageFixtures.write(try ImageFixtures.photo(width: size.0, height: size.1, seed: index), to: file)
            try server.boto3("s3.upload_file(sys.argv[1], sys.argv[2], sys.argv[3])", arguments: [file, bucket, key])
        }
        let listed = try server.boto3(
            #"print(json.dumps(sorted(o["Key"] for o in s3.list_objects_v2(Bucket=sys.argv[1])["Contents"])))"#,
            arguments: [bucket])
        try #require(
            try JSONDecoder().decode([String].self, from: Data(listed.utf8)) == sizes.keys.sorted(), "stored as named: \(listed)")
        try pipeline(
            source: #"{"type": "s3", "bucket": "\#(bucket)", "prefix": "in/", "endpoint": "\#(server.endpoint)"}"#,
            sink: #"{"type": "directory", "path": "out"}"#, output: #"{"format": "png", "name": "{index}.png"}"#,
            filters: "[]")
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        for record in try imgpipe(["export", "pipe.json"]).jsonLines() {
            let key = try #require(record["key"] as? String)
            let expected = try #require(sizes["in/" + key], "\(key)")
            let name = try #require((record["outputs"] as? [String: [String: Any]])?["default"]?["name"] as? String)
            let image = try VipsImage.open(path: work.url("out/" + name))
            #expect((image.width, image.height) == expected, "\(key) came out \(image.width)×\(image.height)")
        }
        #expect(work.files(under: "out").count == sizes.count)
    }

    @Test func aSourceWithAWrongSecretCannotBeListed() throws {
        try pipeline(
            source: #"{"type": "s3", "bucket": "\#(bucket)", "endpoint": "\#(server.endpoint)"}"#,
            sink: #"{"type": "directory", "path": "out"}"#)
        let result = try imgpipe(
            ["run", "pipe.json"],
            environment: ["AWS_ACCESS_KEY_ID": server.accessKeyId, "AWS_SECRET_ACCESS_KEY": "not-the-secret"])
        // No item could be listed: the pipeline's fault (exit 2), no run kept to resume.
        #expect(result.status == 2, "stderr: \(result.stderr)")
        #expect(result.stderr.contains("ListObjectsV2") && result.stderr.contains("SignatureDoesNotMatch"), "\(result.stderr)")
        #expect(result.stderr.contains("no item could be listed, so there is nothing to resume"), "\(result.stderr)")
    }

    // MARK: - a table in a bucket

    /// A Parquet table and a gzipped CSV, each an object of the bucket (written by pyarrow
    /// and Python's csv, put by boto3), read as a `table` source's `s3` location: their rows'
    /// images come from a loopback server, keys and captions as the table says; an object that
    /// is not there stops the listing naming its address.
    @Test func aTableInABucketIsReadLikeALocalOne() throws {
        let jpeg = try Data(contentsOf: URL(fileURLWithPath: Self.samples + "/chelsea-cmyk.jpg"))
        let images = try TestHTTPServer { request in request.path.hasPrefix("/img/") ? .bytes(jpeg) : .status(404) }
        let base = images.baseURL
        try server.boto3(
            """
            import csv, gzip, io, pyarrow as pa, pyarrow.parquet as pq
            bucket, base = sys.argv[1], sys.argv[2]
            rows = {"url": [f"{base}/img/{i}.jpg" for i in range(3)], "id": ["a", "b", "c"], "text": ["one", "two", None]}
            out = io.BytesIO()
            pq.write_table(pa.table(rows), out)
            s3.put_object(Bucket=bucket, Key="tables/urls.parquet", Body=out.getvalue())
            text = io.StringIO()
            writer = csv.writer(text)
            writer.writerow(["url", "id", "text"])
            for i in range(3):
                writer.writerow([rows["url"][i], rows["id"][i], rows["text"][i] or ""])
            s3.put_object(Bucket=bucket, Key="tables/urls.csv.gz", Body=gzip.compress(text.getvalue().encode()))
            """, arguments: [bucket, base])
        for table in ["urls.parquet", "urls.csv.gz", "gone.parquet"] {
            try? FileManager.default.removeItem(atPath: work.url(".imgpipe"))
            try pipeline(
                source: """
                    {"type": "table", "path": "\(table)", "columns": {"url": "url", "key": "id", "caption": "text"},
                     "s3": {"bucket": "\(bucket)", "endpoint": "\(server.endpoint)", "prefix": "tables"}, "cache": false}
                    """,
                sink: #"{"type": "directory", "path": "out"}"#)
            let run = try imgpipe(["run", "pipe.json"])
            if table == "gone.parquet" {
                #expect(run.status != 0)
                #expect(run.stderr.contains("cannot read table s3://\(bucket)/tables/gone.parquet"), "\(run.stderr)")
                continue
            }
            #expect(run.status == 0, "\(table): \(run.stdout)\(run.stderr)")
            let records = try imgpipe(["export", "pipe.json"]).jsonLines()
            #expect(records.map { $0["key"] as? String } == ["a", "b", "c"], "\(table)")
            #expect(records.allSatisfy { $0["status"] as? String == "done" }, "\(table)")
            let metadata = records.first?["metadata"] as? [String: Any]
            #expect(metadata?["text"] as? String == "one", "\(table): \(metadata ?? [:])")
        }
    }

    /// A table's download is written into a file whose name is gone before the first byte
    /// arrives: a kill -9 in the middle of it (the server holds the GET) leaves nothing in
    /// the temporary folder.
    @Test func aKillDuringATablesDownloadLeavesNoFileBehind() throws {
        try server.boto3(
            """
            import io, pyarrow as pa, pyarrow.parquet as pq
            out = io.BytesIO()
            pq.write_table(pa.table({"url": ["http://127.0.0.1:9/a.jpg"]}), out)
            s3.put_object(Bucket=sys.argv[1], Key="tables/urls.parquet", Body=out.getvalue())
            """, arguments: [bucket])
        try pipeline(
            source: """
                {"type": "table", "path": "urls.parquet", "columns": {"url": "url"},
                 "s3": {"bucket": "\(bucket)", "endpoint": "\(server.endpoint)", "prefix": "tables"}, "cache": false}
                """,
            sink: #"{"type": "directory", "path": "out"}"#)
        let temporary = try work.folder("tmp")
        server.hold(matching: "GET /\(bucket)/tables/urls.parquet")
        defer { server.holdParts = false }
        let running = try ImgpipeBinary.launch(
            ["run", "pipe.json"], in: work.path, environment: server.credentials.merging(["TMPDIR": temporary]) { $1 })
        defer { if running.process.isRunning { running.signal(SIGKILL) } }
        try #require(server.killOnceHeld(running), "the table's download did not reach the server")
        #expect(running.process.terminationReason == .uncaughtSignal)
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary) == [])
    }
}
