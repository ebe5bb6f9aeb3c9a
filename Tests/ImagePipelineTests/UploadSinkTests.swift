import Foundation
import GRDB
import ImagePipelineTesting
import Testing
import VipsKit

@testable import ImagePipeline
@testable import PipelineKit

/// Upload and HTTP sinks end to end, against a loopback server that parses multipart
/// bodies and honours `Idempotency-Key`.
@Suite("Upload sinks", .serialized)
struct UploadSinkTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-upload") }

    func images(_ count: Int, size: (Int, Int) = (120, 90)) throws {
        for index in 1...count {
            try ImageFixtures.jpeg(at: work.url(String(format: "in/img-%03d.jpg", index)), width: size.0, height: size.1)
        }
    }

    func pipeline(
        sinks: String, limits: String = #"{"uploads": 4, "timeout": 5}"#,
        retry: String = #"{"attempts": 3, "backoff": 0.05}"#
    ) throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 60, "height": 60}],
             "sinks": \(sinks), "limits": \(limits), "retry": \(retry)}
            """, to: "pipe.json")
    }

    func imgpipe(_ arguments: [String], environment: [String: String] = [:]) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path, environment: environment)
    }

    func status() throws -> StatusReport {
        try imgpipe(["status", "pipe.json", "--json"]).decoded(StatusReport.self)
    }

    func deliveries() throws -> [Row] {
        let queue = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite"))
        return try queue.read { try Row.fetchAll($0, sql: "SELECT * FROM delivery ORDER BY itemKey, sink") }
    }

    /// The UUID of the newest run in `pipe.json`'s state file.
    func runUUID(_ stateFile: String = ".imgpipe/pipe.sqlite") throws -> String {
        let queue = try DatabaseQueue(path: work.url(stateFile))
        return try #require(try queue.read { try String.fetchOne($0, sql: "SELECT uuid FROM run ORDER BY id DESC LIMIT 1") })
    }

    func stateFileBytes() throws -> Data {
        var bytes = Data()
        for name in ["pipe.sqlite", "pipe.sqlite-wal"] where FileManager.default.fileExists(atPath: work.url(".imgpipe/" + name))
        {
            bytes += try Data(contentsOf: URL(fileURLWithPath: work.url(".imgpipe/" + name)))
        }
        return bytes
    }

    /// A duplicate key in the endpoint's answer used to make it "not {\"url\": …}" (the
    /// strict parser refused it), and 100,000 keys in the upload's answer took minutes to
    /// parse: answers are read leniently, and their `url` kept.
    @Test func anAnswerWithADuplicateKeyOrManyKeysKeepsItsURL() throws {
        let extra = (0..<100_000).map { #""k\#($0)": \#($0)"# }.joined(separator: ", ")
        let server = try TestHTTPServer { request in
            let host = "http://\(request.headers["host"]!)"
            switch (request.method, request.path) {
            // Foundation's decoder keeps the first of duplicate keys.
            case ("GET", "/upload"):
                return .json(#"{"url": "\#(host)/post", "url": "\#(host)/ignored", "ticket": 1, "ticket": 2}"#)
            case ("POST", "/post"):
                return .json(#"{\#(extra), "url": "/files/kept.jpg", "url": "/files/ignored.jpg"}"#, status: 201)
            default: return .status(404)
            }
        }
        try images(1)
        try pipeline(sinks: #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload"}]"#)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr) \(result.stdout)")
        #expect(server.requests(to: "/post").count == 1)
        #expect(try deliveries().map { $0["remoteURL"] as String? } == [server.baseURL + "/files/kept.jpg"])
    }

    /// An answer's `url` with a character a URL cannot hold (a space, `|`, a `%` that starts
    /// no escape) is kept as the server wrote it, that character encoded: its `%2F` stayed `%2F`, where Foundation
    /// encoded every `%` again (`%252F`), posting to another URL and keeping a secret in a
    /// form the masking did not know.
    @Test func anAnswerURLIsKeptAsWrittenWithOnlyWhatCannotBeInAURLEncoded() throws {
        let server = try TestHTTPServer { request in
            let host = "http://\(request.headers["host"]!)"
            switch request.method {
            case "GET": return .json(#"{"url": "\#(host)/post?k=Ab%2Fcd%2Bef&p=100%&note=a b|c"}"#)
            case "POST": return .json(#"{"url": "/files/a b%2Fc.jpg"}"#, status: 201)
            default: return .status(404)
            }
        }
        try images(1)
        try pipeline(sinks: #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload"}]"#, retry: #"{"attempts": 1}"#)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr) \(result.stdout)")
        let posted = try #require(server.requests.first { $0.method == "POST" })
        #expect(posted.target == "/post?k=Ab%2Fcd%2Bef&p=100%25&note=a%20b%7Cc", "\(posted.target)")
        #expect(try deliveries().map { $0["remoteURL"] as String? } == [server.baseURL + "/files/a%20b%2Fc.jpg"])
    }

    /// Only a string is a one-shot URL: an endpoint answering `{"url": 5}` fails the
    /// delivery (`upload`), where it was read as the path `5` beside the endpoint and the
    /// file posted there, recorded done.
    @Test func anEndpointAnswerWhoseURLIsNoStringFailsTheUpload() throws {
        let server = try TestHTTPServer { request in
            request.method == "GET" ? .json(#"{"url": 5}"#) : .json("{}", status: 201)
        }
        try images(1)
        try pipeline(sinks: #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upget/"}]"#, retry: #"{"attempts": 1}"#)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 1, "stderr: \(result.stderr)")
        #expect(server.requests.allSatisfy { $0.method == "GET" }, "posted to \(server.requests.map(\.path))")
        let failure = try #require(try status().failures.first)
        #expect(failure.reason == "upload" && failure.message.contains(#"did not answer {"url": …}"#), "\(failure)")
    }

    @Test func twoStepUploadSendsFieldsOriginalAndFile() throws {
        let server = try UploadServer()
        try images(5)
        let secret = "appid-\(UUID().uuidString.prefix(10))"
        try pipeline(
            sinks:
                #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload", "fields": {"//": "a comment, not a field", "appid": "${TEST_APPID}", "album": "trip"}}]"#
        )
        let result = try imgpipe(["run", "pipe.json"], environment: ["TEST_APPID": secret])
        #expect(result.status == 0, "stderr: \(result.stderr)")

        let uploads = server.uploads
        #expect(uploads.count == 5)
        #expect(Set(uploads.compactMap(\.filename)) == Set((1...5).map { String(format: "img-%03d.jpg", $0) }))
        for upload in uploads {
            #expect(upload.fields["appid"] == secret && upload.fields["album"] == "trip")
            #expect(upload.fields["//"] == nil, "a comment key was sent as a form field")
            #expect(upload.fields["original"] == work.url("in/" + upload.filename!), "original is the item's path")
            #expect(upload.contentType == "image/jpeg")
            let image = try VipsImage.open(data: upload.data)
            #expect((image.width, image.height) == (60, 45))
            #expect(upload.key?.hasPrefix("imgpipe-\(try runUUID())-") == true)
        }
        #expect(Set(uploads.compactMap(\.key)).count == 5, "one Idempotency-Key per item")
        let rows = try deliveries()
        #expect(rows.allSatisfy { ($0["remoteURL"] as String?)?.hasPrefix(server.baseURL + "/files/") == true })
        #expect(rows.allSatisfy { ($0["httpStatus"] as Int?) == 201 && ($0["status"] as String) == "done" })
        #expect(try stateFileBytes().range(of: Data(secret.utf8)) == nil, "the secret reached the state file")
        #expect(!(result.stdout + result.stderr).contains(secret))
        let report = try imgpipe(["status", "pipe.json", "--json"])
        #expect(!report.stdout.contains(secret))
        #expect(try status().sinks["upload-0"] == DeliveryCounts(done: 5, failed: 0, pending: 0))
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe/pipe.work/run-1/staged")), "staged outputs removed")
    }

    /// Two pipelines over the same feed with the same sink name, each with its own state
    /// file (both have a run #1), and then a deleted state folder with changed filters:
    /// a server that honours `Idempotency-Key` must store every upload of every run.
    @Test func idempotencyKeysAreUniqueAcrossStateFiles() throws {
        let server = try UploadServer()
        try images(4)
        let sink = #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload"}]"#
        try pipeline(sinks: sink)
        #expect(try imgpipe(["run", "pipe.json"]).status == 0)
        let first = try runUUID()
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 30, "height": 30}], "sinks": \(sink)}
            """, to: "other.json")
        #expect(try imgpipe(["run", "other.json"]).status == 0)
        #expect(server.uploads.count == 8, "the second pipeline's uploads were taken for replays")
        let second = try runUUID(".imgpipe/other.sqlite")
        #expect(first != second)

        try FileManager.default.removeItem(atPath: work.url(".imgpipe"))
        try pipeline(sinks: sink)
        #expect(try imgpipe(["run", "pipe.json"]).status == 0)
        #expect(server.uploads.count == 12, "a recreated state file reused the keys of the deleted one")
        let keys = server.uploads.compactMap(\.key)
        #expect(Set(keys).count == 12)
        let widths = try server.uploads.map { try VipsImage.open(data: $0.data).width }
        #expect(widths.sorted() == [30, 30, 30, 30, 60, 60, 60, 60, 60, 60, 60, 60])
    }

    /// An upload server that answers with an endless body cannot fill memory: the answer
    /// is cut at 16 MiB and the delivery fails `upload`.
    @Test func anEndlessUploadAnswerIsCut() throws {
        let server = try TestHTTPServer { _ in .streamed(.flood(bytes: 8 << 30), type: "application/json") }
        try images(2)
        try pipeline(
            sinks: #"[{"type": "http", "url": "\#(server.baseURL)/put/{stem}.jpg", "method": "PUT"}]"#,
            retry: #"{"attempts": 1}"#)
        let watched = try ImgpipeBinary.runMeasured(["run", "pipe.json"], in: work.path, timeout: 60)
        #expect(!watched.timedOut, "the run was still going after 60 s")
        let result = watched.result
        #expect(result.status == 1)
        let failures = try status().failures
        #expect(failures.count == 2)
        #expect(
            failures.allSatisfy { $0.reason == "upload" && $0.message.contains("the answer's limit") },
            "got: \(failures)")
        // The answer lands in the run's own process (its pixel helpers hold only pixels).
        #expect(watched.ownPeakRSS > 1 << 20 && watched.ownPeakRSS < 200 << 20, "peak RSS \(watched.ownPeakRSS >> 20) MB")
    }

    /// An upload answered with a redirect is not followed (it would arrive as a GET, or a
    /// PUT without its body, and carry its headers to another host): it fails `upload`.
    @Test func aRedirectedUploadIsAFailureNotADelivery() throws {
        let server = try TestHTTPServer { request in
            request.path.hasPrefix("/up/") ? .status(302, headers: [("Location", "/landing")]) : .json("{}")
        }
        try images(2)
        let put =
            #"{"type": "http", "url": "\#(server.baseURL)/up/{stem}.jpg", "method": "PUT", "headers": {"X-Api-Key": "k3y"}}"#
        let post = #"{"type": "http", "name": "form", "url": "\#(server.baseURL)/up/{stem}", "method": "POST"}"#
        try pipeline(sinks: "[\(put), \(post)]", retry: #"{"attempts": 1}"#)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 1)
        #expect(server.requests(to: "/landing").isEmpty, "a redirect was followed")
        let report = try status()
        #expect(report.done == 0 && report.failed == 2)
        #expect(report.failures.allSatisfy { $0.reason == "upload" && $0.message.contains("redirect") }, "\(report.failures)")
    }

    /// Ctrl-C while a delivery waits for a `Retry-After: 60`: the run stops at once, the
    /// delivery stays pending, and resume delivers it.
    @Test func anInterruptDoesNotWaitForARetryTimer() throws {
        let busy = LockedBox(true)
        let server = try TestHTTPServer { _ in
            busy.withLock { $0 } ? .status(503, headers: [("Retry-After", "60")]) : .json("{}", status: 201)
        }
        try images(2)
        try pipeline(
            sinks: #"[{"type": "http", "url": "\#(server.baseURL)/put/{stem}.jpg", "method": "PUT"}]"#,
            retry: #"{"attempts": 3, "backoff": 0.05}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, server.requests.count < 2 { usleep(20_000) }
        usleep(200_000)
        let sent = server.requests.count
        running.signal(SIGINT)
        // The hang guard is shorter than the server's Retry-After (60 s) plus the grace
        // period: an interrupt that waited for the retry timer would be killed at it.
        let result = try #require(running.watch(deadline: 30).result, "the interrupt waited for the retry timer")
        #expect(result.status == 130, "stderr: \(result.stderr)")
        #expect(server.requests.count == sent, "no retry was sent after the interrupt")
        #expect(try status().pending == 2, "both items left for resume")
        busy.withLock { $0 = false }
        let resumed = try imgpipe(["resume", "pipe.json"])
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(try status().done == 2)
    }

    @Test func httpSinkPutsEachOutputAndPostsMultipart() throws {
        let server = try UploadServer()
        try images(3)
        let token = "tok-\(UUID().uuidString.prefix(10))"
        try pipeline(
            sinks: """
                [{"type": "http", "url": "\(server.baseURL)/put/{stem}-{hash}.{ext}", "headers": {"Authorization": "Bearer ${TEST_TOKEN}"}},
                 {"type": "http", "name": "form", "url": "\(server.baseURL)/put/form/{key}", "method": "POST", "fileField": "image"}]
                """)
        let result = try imgpipe(["run", "pipe.json"], environment: ["TEST_TOKEN": token])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let puts = server.server.requests.filter { $0.method == "PUT" }
        #expect(puts.count == 3)
        #expect(
            puts.allSatisfy { $0.headers["authorization"] == "Bearer \(token)" && $0.headers["content-type"] == "image/jpeg" })
        #expect(
            puts.allSatisfy { $0.path.range(of: #"^/put/img-00[1-3]-[0-9a-f]{16}\.jpg$"#, options: .regularExpression) != nil },
            "\(puts.map(\.path))")
        for put in puts { #expect((try? VipsImage.open(data: put.body))?.width == 60) }
        let posts = server.uploads.filter { $0.path.hasPrefix("/put/form/") }
        #expect(posts.count == 3)
        #expect(posts.allSatisfy { $0.filename?.hasSuffix(".jpg") == true && $0.path.contains("img-00") })
        #expect(try stateFileBytes().range(of: Data(token.utf8)) == nil)
        let sinks = try status().sinks
        #expect(
            sinks == [
                "http-0": DeliveryCounts(done: 3, failed: 0, pending: 0),
                "form": DeliveryCounts(done: 3, failed: 0, pending: 0),
            ])
    }

    @Test func killNineMidUploadThenResumeStoresEachItemExactlyOnce() throws {
        let server = try UploadServer(mode: .slow(0.25))
        try images(24, size: (64, 48))
        try pipeline(
            sinks: #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload"}]"#, limits: #"{"uploads": 3, "timeout": 10}"#)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let deadline = Date().addingTimeInterval(60)
        // Kill while uploads are in flight: received by the server, not yet answered.
        func posts() -> Int { server.server.requests.filter { $0.path.hasPrefix("/once/") }.count }
        while Date() < deadline, !(server.uploads.count >= 6 && posts() > server.uploads.count) { usleep(2000) }
        running.signal(SIGKILL)
        _ = running.wait()
        Thread.sleep(forTimeInterval: 0.4)  // let uploads already in flight land on the server
        let before = server.uploads.count
        #expect(before >= 6 && before < 24, "killed after \(before) uploads")

        server.mode = .normal
        let resumed = try imgpipe(["resume", "pipe.json"])
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        let uploads = server.uploads
        #expect(uploads.count == 24, "each item stored exactly once (got \(uploads.count))")
        #expect(Set(uploads.compactMap(\.filename)).count == 24, "none missing")
        let attempts = server.server.requests.filter { $0.path.hasPrefix("/once/") }.count
        #expect(attempts > 24, "some uploads were sent again and recognised by their key (\(attempts) posts)")
        #expect(try status().done == 24)
    }

    @Test func aRefusingEndpointFailsEveryItemWithReasonUpload() throws {
        let server = try UploadServer(mode: .refuse(403))
        try images(4)
        try pipeline(sinks: #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload"}]"#)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 1)
        let report = try status()
        #expect(report.failed == 4)
        #expect(report.failures.allSatisfy { $0.reason == "upload" && $0.message.contains("403") })
        #expect(server.server.requests.filter { $0.path.hasPrefix("/once/") }.count == 4, "4xx is not retried")
        #expect(try deliveries().allSatisfy { ($0["httpStatus"] as Int?) == 403 && ($0["status"] as String) == "failed" })
    }

    @Test func aFlakyEndpointIsRetriedUntilItTakesTheUpload() throws {
        let server = try UploadServer(mode: .flaky(failures: 2))
        try images(3)
        try pipeline(sinks: #"[{"type": "upload", "endpoint": "\#(server.baseURL)/upload"}]"#)
        let result = try imgpipe(["run", "pipe.json"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(server.uploads.count == 3)
        #expect(try deliveries().allSatisfy { ($0["attempts"] as Int) == 3 }, "two 503s, then stored")
    }

    @Test func twoSinksWhereOneFailsThenRetryDeliversOnlyWhatIsMissing() throws {
        let server = try UploadServer(mode: .refuse(500))
        try images(4)
        try pipeline(
            sinks:
                #"[{"type": "directory", "path": "out"}, {"type": "upload", "name": "server", "endpoint": "\#(server.baseURL)/upload"}]"#,
            retry: #"{"attempts": 2, "backoff": 0.05}"#)
        let first = try imgpipe(["run", "pipe.json"])
        #expect(first.status == 1)
        #expect(work.files(under: "out").count == 4, "the directory sink got every output")
        let sinks = try status().sinks
        #expect(sinks["directory-0"] == DeliveryCounts(done: 4, failed: 0, pending: 0))
        #expect(sinks["server"] == DeliveryCounts(done: 0, failed: 4, pending: 0))
        let inode = { (path: String) in (try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? Int) }
        let inodes = try work.files(under: "out").map { try inode(work.url("out/" + $0)) }

        server.mode = .normal
        let retried = try imgpipe(["resume", "pipe.json", "--retry-failed"])
        #expect(retried.status == 0, "stderr: \(retried.stderr)")
        #expect(server.uploads.count == 4)
        #expect(
            try work.files(under: "out").map { try inode(work.url("out/" + $0)) } == inodes,
            "the directory sink was not written again")
        let queue = try DatabaseQueue(path: work.url(".imgpipe/pipe.sqlite"))
        let attempts = try queue.read { try Int.fetchAll($0, sql: "SELECT attempts FROM item") }
        #expect(attempts == [1, 1, 1, 1], "nothing was processed again")
        #expect(try status().done == 4)
        #expect(
            !FileManager.default.fileExists(atPath: work.url(".imgpipe/pipe.work/run-1")), "staged outputs removed at the end")
    }
}

/// The first step's answer is the server's word: when the sink's fields hold a `${…}`
/// value, the second step goes to the endpoint's own host only (or a host in `allowHosts`),
/// never to another host or from https down to http.
@Suite("Upload fields stay with the endpoint's host", .serialized)
struct UploadTargetTests {
    let work: TemporaryDirectory
    let secret = "appkey-\(UUID().uuidString.prefix(10))"

    init() throws {
        work = try TemporaryDirectory("imgpipe-upload-target")
        for index in 1...2 {
            try ImageFixtures.jpeg(at: work.url("in/img-\(index).jpg"), width: 80, height: 60)
        }
    }

    /// An endpoint on 127.0.0.1 that points the upload at `other` (another address).
    func run(other: TestHTTPServer, allowHosts: String?) throws -> CommandResult {
        let target = other.baseURL
        let endpoint = try TestHTTPServer { request in
            request.path == "/ticket" ? .json(#"{"url": "\#(target)/put"}"#) : .status(404)
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 40, "height": 40}],
             "sink": {"type": "upload", "endpoint": "\(endpoint.baseURL)/ticket", "fields": {"appkey": "${APP_KEY}"}
                      \(allowHosts.map { #", "allowHosts": \#($0)"# } ?? "")},
             "limits": {"timeout": 5}, "retry": {"attempts": 2, "backoff": 0.05}}
            """, to: "pipe.json")
        let result = try ImgpipeBinary.run(["run", "pipe.json", "--new"], in: work.path, environment: ["APP_KEY": secret])
        endpoint.stop()
        return result
    }

    @Test func anotherHostNamedByTheEndpointReceivesNoSecretField() throws {
        let other = try TestHTTPServer(host: "127.0.0.2") { _ in .json(#"{"url": "stored"}"#, status: 201) }
        let refused = try run(other: other, allowHosts: nil)
        #expect(refused.status == 1, "stderr: \(refused.stderr)")
        #expect(other.requests.isEmpty, "the other host received \(other.requests.count) request(s)")
        let status = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: work.path).decoded(StatusReport.self)
        #expect(status.failures.count == 2)
        for failure in status.failures {
            #expect(
                failure.reason == "upload" && failure.message.contains("http://127.0.0.2:\(other.port)")
                    && failure.message.contains("allowHosts"), "\(failure.message)")
            #expect(!failure.message.contains(secret))
        }
        // Listed, the host receives the fields.
        let allowed = try run(other: other, allowHosts: #"["127.0.0.2"]"#)
        #expect(allowed.status == 0, "stderr: \(allowed.stderr)")
        #expect(
            other.requests.count == 2 && other.requests.allSatisfy { String(decoding: $0.body, as: UTF8.self).contains(secret) })
    }

    @Test func fieldsWithoutASecretGoWhereTheEndpointSays() throws {
        let other = try TestHTTPServer(host: "127.0.0.2") { _ in .json(#"{"url": "stored"}"#, status: 201) }
        let target = other.baseURL
        let endpoint = try TestHTTPServer { _ in .json(#"{"url": "\#(target)/put"}"#) }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "sink": {"type": "upload", "endpoint": "\(endpoint.baseURL)/ticket", "fields": {"album": "summer"}}}
            """, to: "pipe.json")
        let result = try ImgpipeBinary.run(["run", "pipe.json"], in: work.path)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(other.requests.count == 2)
    }

    /// A host in `allowHosts` still never gets the fields over plain http from an https
    /// endpoint (the list was looked at first); a default port is the same port.
    @Test func noHostGetsTheFieldsOverPlainHTTPFromAnHTTPSEndpoint() throws {
        let endpoint = try #require(URL(string: "https://uploads.example/ticket"))
        func refusal(_ target: String, _ allow: [String]) throws -> String? {
            UploadSink.refusal(of: try #require(URL(string: target)), endpoint: endpoint, allowHosts: allow)
        }
        #expect(try refusal("http://cdn.example/put", ["cdn.example"])?.contains("plain http") == true)
        #expect(try refusal("http://uploads.example/put", ["*"])?.contains("plain http") == true)
        #expect(try refusal("https://cdn.example/put", ["cdn.example"]) == nil)
        #expect(try refusal("https://uploads.example:443/put", []) == nil)
        #expect(try refusal("https://uploads.example:8443/put", [])?.contains("another host") == true)
    }
}
