import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

#if canImport(Glibc)
    import Glibc
#endif

/// `--metrics` on the built binary: what a scrape of `GET /metrics` reads while a run goes
/// on and as it ends, checked against `imgpipe status --json`, the address the endpoint is
/// bound to (in /proc/net/tcp), and the exposition's syntax.
@Suite("Metrics endpoint", .serialized)
final class MetricsTests: @unchecked Sendable {
    // @unchecked: every stored property is a constant set in init.
    let work: TemporaryDirectory
    let jpeg: Data

    init() throws {
        work = try TemporaryDirectory("imgpipe-metrics")
        try ImageFixtures.jpeg(at: work.url("fixture.jpg"), width: 64, height: 48)
        jpeg = try Data(contentsOf: URL(fileURLWithPath: work.url("fixture.jpg")))
        try ImageFixtures.jpeg(at: work.url("tiny.jpg"), width: 16, height: 16)
    }

    /// A feed of five items — two done, one whose upload is slow (done), one refused by the
    /// `http` sink (failed: upload), one 404 (failed: download), one too small (skipped) —
    /// and two sinks, a folder and `http` PUTs to `sink`.
    func pipeline(images: TestHTTPServer, sink: TestHTTPServer) throws {
        let items = ["ok1.jpg", "ok2.jpg", "refused.jpg", "gone.jpg", "tiny.jpg", "slow.jpg"]
        try work.write(items.map { images.baseURL + "/" + $0 }.joined(separator: "\n") + "\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "name": "metered", "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "accept": {"minWidth": 32},
             "output": {"format": "jpeg", "name": "{name}.jpg"},
             "sinks": [{"type": "directory", "path": "out"},
                       {"type": "http", "url": "\(sink.baseURL)/put/{name}.{ext}", "method": "PUT"}],
             "limits": {"workers": 1, "uploads": 2, "timeout": 20}, "retry": {"attempts": 1}}
            """, to: "pipe.json")
    }

    func servers() throws -> (images: TestHTTPServer, sink: TestHTTPServer) {
        let jpeg = self.jpeg
        let tiny = try Data(contentsOf: URL(fileURLWithPath: work.url("tiny.jpg")))
        let images = try TestHTTPServer { request in
            switch request.path {
            case "/gone.jpg": .status(404)
            case "/tiny.jpg": .bytes(tiny)
            default: .bytes(jpeg)
            }
        }
        let sink = try TestHTTPServer { request in
            switch request.path {
            case "/put/refused.jpg": .status(403)
            // Holds the run long enough for a scrape while it goes on.
            case "/put/slow.jpg": TestHTTPServer.Response(status: 200, body: Data("ok".utf8), stall: 4)
            default: .status(200)
            }
        }
        return (images, sink)
    }

    @Test func aRunsCountersAgreeWithItsStatus() throws {
        let (images, sink) = try servers()
        try pipeline(images: images, sink: sink)
        let port = try Self.freePort()
        // A bare port: 127.0.0.1.
        let run = try ImgpipeBinary.launch(
            ["run", "pipe.json", "--metrics", "\(port)", "--metrics-linger", "5"], in: work.path)

        // While the slow upload holds the run: the other items are counted, the session is on.
        let during = try #require(
            Self.poll(port: port) { $0.value("imgpipe_session_active") == 1 && $0.sum("imgpipe_items_total") >= 4 },
            "no scrape showed four settled items while the run went on")
        #expect(Self.listening(port: port) == "127.0.0.1", "a bare port must be bound to loopback only")
        #expect(during.value("imgpipe_items_total", ["status": "done"]) == 2)

        // After the run, while the endpoint lingers: the final counts.
        let end = try #require(Self.poll(port: port) { $0.value("imgpipe_session_active") == 0 }, "no scrape after the run")
        let result = run.wait()
        #expect(result.status == 1, "stderr: \(result.stderr)")
        let statusRun = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: work.path)
        let status = try statusRun.decoded(StatusReport.self)

        try Self.checkSyntax(end.text)
        // Every series names the pipeline and the run.
        for sample in end.samples {
            #expect(sample.labels["pipeline"] == "metered" && sample.labels["run"] == "\(status.run)", "\(sample.line)")
        }
        #expect(end.value("imgpipe_items_total", ["status": "done"]) == Double(status.done))
        #expect(end.sum("imgpipe_items_total", ["status": "failed"]) == Double(status.failed))
        #expect(end.sum("imgpipe_items_total", ["status": "skipped"]) == Double(status.skipped))
        for (reason, count) in status.failuresByReason {
            #expect(end.value("imgpipe_items_total", ["status": "failed", "reason": reason]) == Double(count), "\(reason)")
        }
        for (reason, count) in status.skipsByReason {
            #expect(end.value("imgpipe_items_total", ["status": "skipped", "reason": reason]) == Double(count), "\(reason)")
        }
        #expect(status.done == 3 && status.failed == 2 && status.skipped == 1)
        #expect(status.sinks.count == 2)
        for (name, counts) in status.sinks {
            // A series that never counted is absent: 0.
            let delivered = end.value("imgpipe_deliveries_total", ["sink": name, "outcome": "delivered"]) ?? 0
            let failed = end.value("imgpipe_deliveries_total", ["sink": name, "outcome": "failed"]) ?? 0
            #expect(delivered == Double(counts.done) && failed == Double(counts.failed), "\(name): \(counts)")
        }
        #expect(status.sinks.values.map(\.failed).reduce(0, +) == 1)
        // Downloaded: five images answered (the 404 is no image); written: four outputs.
        #expect(end.value("imgpipe_downloaded_bytes_total") == Double(4 * jpeg.count + Self.size(work.url("tiny.jpg"))))
        // The folder sink has a copy of each of the four outputs (the refused one too).
        let outputs = work.files(under: "out").filter { $0.hasSuffix(".jpg") }
        #expect(outputs.count == 4, "\(outputs)")
        let written = outputs.map { Self.size(work.url("out/" + $0)) }.reduce(0, +)
        #expect(end.value("imgpipe_written_bytes_total") == Double(written))
        // A histogram per stage, each item's time counted once per stage it went through.
        #expect(end.value("imgpipe_stage_seconds_count", ["stage": "fetch"]) == 6)
        #expect(end.value("imgpipe_stage_seconds_count", ["stage": "pixels"]) == 5)
        #expect((end.value("imgpipe_stage_seconds_sum", ["stage": "deliver"]) ?? 0) >= 4)
        #expect(end.value("imgpipe_queue_depth", ["stage": "fetch"]) == 0)
        #expect(end.value("imgpipe_host_breakers_open") == 0)
        #expect(Self.get(port: port, path: "/metrics") == nil, "the endpoint must close with the process")
    }

    /// `run --incremental` with one item added: the three others carried over whole. Their
    /// deliveries (the earlier run's) are counted as `status` counts them.
    @Test func anIncrementalRunCountsTheDeliveriesItCarries() throws {
        for index in 0..<3 { try ImageFixtures.jpeg(at: work.url("in/\(index).jpg"), width: 64, height: 48) }
        try work.write(
            """
            {"version": 1, "name": "carried", "source": {"type": "directory", "path": "in"},
             "outputs": [{"id": "small", "format": "jpeg", "name": "s/{stem}.jpg", "filters": [{"op": "fit", "width": 32, "height": 32}]},
                         {"id": "big", "format": "png", "name": "b/{stem}.png"}],
             "sinks": [{"type": "directory", "path": "out"}, {"type": "directory", "path": "copy", "outputs": ["small"]}]}
            """, to: "carried.json")
        let first = try ImgpipeBinary.run(["run", "carried.json", "--quiet"], in: work.path)
        #expect(first.status == 0, "\(first.stderr)")
        try ImageFixtures.jpeg(at: work.url("in/3.jpg"), width: 64, height: 48)
        let port = try Self.freePort()
        let again = try ImgpipeBinary.launch(
            ["run", "carried.json", "--incremental", "--quiet", "--metrics", "\(port)", "--metrics-linger", "5"], in: work.path)
        let end = try #require(Self.poll(port: port) { $0.value("imgpipe_session_active") == 0 }, "no scrape after the run")
        let result = again.wait()
        #expect(result.status == 0, "\(result.stderr)")
        let status = try ImgpipeBinary.run(["status", "carried.json", "--json"], in: work.path).decoded(StatusReport.self)
        #expect(status.done == 4, "\(status)")
        #expect(end.value("imgpipe_items_total", ["status": "done"]) == 4)
        #expect(status.sinks.count == 2)
        for (name, counts) in status.sinks {
            let delivered = end.value("imgpipe_deliveries_total", ["sink": name, "outcome": "delivered"]) ?? 0
            #expect(delivered == Double(counts.done), "\(name): \(counts)")
        }
        // Two outputs to the first sink, one to the second, for each of four items.
        #expect(end.sum("imgpipe_deliveries_total") == 12)

        // Again, nothing changed: no run is made, and the series count the run compared
        // with (#2) as a re-run carrying every item over would.
        let port2 = try Self.freePort()
        let same = try ImgpipeBinary.launch(
            ["run", "carried.json", "--incremental", "--metrics", "\(port2)", "--metrics-linger", "5"], in: work.path)
        let last = try #require(Self.poll(port: port2) { $0.value("imgpipe_session_active") == 0 }, "no scrape after the look")
        let sameResult = same.wait()
        #expect(sameResult.status == 0 && sameResult.stderr.contains("up to date"), "\(sameResult.stderr)")
        #expect(last.value("imgpipe_items_total", ["status": "done", "run": "2"]) == 4)
        for (name, counts) in status.sinks {
            let delivered = last.value("imgpipe_deliveries_total", ["sink": name, "outcome": "delivered", "run": "2"])
            #expect(delivered == Double(counts.done), "\(name): \(counts)")
        }
        #expect(last.sum("imgpipe_deliveries_total") == 12)
    }

    /// A host that answered 503 with `Retry-After` shows as held and slowed while the hold
    /// lasts, with the rate it is asked at; the download is counted as a retry. A host that
    /// refuses every connection trips its breaker.
    @Test func hostsHeldBackAreShown() throws {
        let jpeg = self.jpeg
        let answered = LockedBox(0)
        let images = try TestHTTPServer { request in
            guard request.path == "/busy.jpg" else { return .bytes(jpeg) }
            let first = answered.withLock { count in
                count += 1
                return count == 1
            }
            return first ? .status(503, headers: [("Retry-After", "3")]) : .bytes(jpeg)
        }
        let refusing = try RefusingPort()
        let dead = (1...6).map { "http://127.0.0.1:\(refusing.port)/dead-\($0).jpg" }
        try work.write(
            ([images.baseURL + "/busy.jpg", images.baseURL + "/ok.jpg"] + dead).joined(separator: "\n"), to: "urls.txt")
        try work.write(
            """
            {"version": 1, "name": "paced", "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "output": {"format": "jpeg", "name": "{name}.jpg"}, "sink": {"type": "directory", "path": "out"},
             "limits": {"downloads": 1, "timeout": 10}, "retry": {"attempts": 2, "backoff": 0.05}}
            """, to: "paced.json")
        let port = try Self.freePort()
        let run = try ImgpipeBinary.launch(
            ["run", "paced.json", "--metrics", "127.0.0.1:\(port)", "--metrics-linger", "5"], in: work.path)
        let held = try #require(Self.poll(port: port) { $0.value("imgpipe_hosts_held") == 1 }, "no scrape showed the hold")
        #expect(held.value("imgpipe_hosts_slowed") == 1)
        let rate = held.value("imgpipe_host_rate_requests_per_second", ["host": images.baseURL])
        #expect(rate.map { $0 >= HostPacing.minimumRate } == true, "\(held.text)")

        let end = try #require(Self.poll(port: port) { $0.value("imgpipe_session_active") == 0 }, "no scrape after the run")
        let result = run.wait()
        #expect(result.status == 1, "stderr: \(result.stderr)")
        #expect(end.value("imgpipe_hosts_held") == 0)
        #expect(end.value("imgpipe_host_breakers_open") == 1)
        #expect(end.value("imgpipe_items_total", ["status": "done"]) == 2)
        #expect(end.value("imgpipe_items_total", ["status": "failed", "reason": "download"]) == 6)
        // The 503, and each refused connection below the breaker's threshold, asked again once.
        #expect((end.value("imgpipe_retries_total", ["stage": "fetch"]) ?? 0) >= 1)
    }

    /// Other paths get 404; the run is not held up by it.
    @Test func otherPathsAreNotFound() throws {
        let (images, sink) = try servers()
        try pipeline(images: images, sink: sink)
        let port = try Self.freePort()
        // Lingering, so that the endpoint is still there for the checks below however soon
        // the run ends (a loaded machine once finished it before the last one); ended by the
        // test, not waited for.
        let run = try ImgpipeBinary.launch(
            ["run", "pipe.json", "--metrics", ":\(port)", "--metrics-linger", "120", "--quiet"], in: work.path)
        defer {
            run.signal(SIGKILL)
            _ = run.wait()
        }
        var answer: (status: Int, body: String)?
        let deadline = Date().addingTimeInterval(10)
        while answer == nil, Date() < deadline {
            answer = Self.get(port: port, path: "/")
            if answer == nil { usleep(50_000) }
        }
        #expect(answer?.status == 404)
        #expect(Self.get(port: port, path: "/metrics?x=1")?.status == 200)
        #expect(Self.listening(port: port) == "127.0.0.1")
    }

    /// A client that trickles its request a byte at a time is dropped at the endpoint's
    /// deadline (one for the whole request, not one per read): it holds neither the next
    /// scrape nor the command's end (`stop`) for longer.
    @Test func aClientThatTricklesItsRequestIsDroppedAtTheDeadline() throws {
        let port = try Self.freePort()
        let endpoint = try MetricsEndpoint(
            address: MetricsAddress(host: "127.0.0.1", port: UInt16(port)), metrics: RunMetrics(pipeline: "trickle"))
        let slow = try #require(Self.opened(port: port))
        defer { close(slow) }
        // A byte every 0.3 s for up to 12 s, never the blank line: how long the server kept it.
        let started = Date()
        var kept = 0.0
        for byte in Array("GET /metrics HTTP/1.1\r\nX-Slow: ".utf8) + Array(repeating: UInt8(ascii: "a"), count: 40) {
            var one = byte
            if send(slow, &one, 1, Int32(MSG_NOSIGNAL)) != 1 { break }
            var probe = pollfd(fd: slow, events: Int16(POLLIN), revents: 0)
            // Readable with nothing to read: the server closed its end.
            if Glibc.poll(&probe, 1, 300) > 0 { break }
            kept = Date().timeIntervalSince(started)
        }
        #expect(kept < MetricsEndpoint.clientSeconds + 2, "the trickling client was kept \(kept) s")
        #expect(Self.get(port: port, path: "/metrics")?.status == 200, "the next scrape is answered")
        // A second trickler, then the end: `stop` does not wait for it to finish.
        let second = try #require(Self.opened(port: port))
        defer { close(second) }
        _ = send(second, "GET /met", 8, Int32(MSG_NOSIGNAL))
        usleep(200_000)
        let stopping = Date()
        endpoint.stop()
        #expect(Date().timeIntervalSince(stopping) < MetricsEndpoint.clientSeconds + 2)
    }

    /// A port already taken is a usage error (exit 2) naming the address, before any run.
    @Test func aPortInUseIsRefusedAtStart() throws {
        let (images, sink) = try servers()
        try pipeline(images: images, sink: sink)
        let taken = try TestHTTPServer { _ in .status(200) }
        let result = try ImgpipeBinary.run(["run", "pipe.json", "--metrics", "127.0.0.1:\(taken.port)"], in: work.path)
        #expect(result.status == 2)
        #expect(result.stderr.contains("127.0.0.1:\(taken.port)") && result.stderr.contains("in use"), "\(result.stderr)")
        #expect(images.requests.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe/pipe.sqlite")))

        for bad in ["0", "host:", "70000", "::1:80", "a:b", "imgpipe.example:9464"] {
            let refused = try ImgpipeBinary.run(["run", "pipe.json", "--metrics", bad], in: work.path)
            #expect(refused.status == 2, "\(bad)")
            #expect(refused.stderr.contains("--metrics \(bad)"), "\(bad): \(refused.stderr)")
        }
    }

    /// `work` on a shared run labels its series with the worker, and counts what it did.
    @Test func aWorkerLabelsItsSeries() throws {
        let cluster = try PostgresCluster.start()
        let url = try cluster.makeDatabase()
        defer { cluster.dropDatabase(url) }
        let (images, sink) = try servers()
        try pipeline(images: images, sink: sink)
        let port = try Self.freePort()
        let worker = try ImgpipeBinary.launch(
            ["work", "pipe.json", "--state", url, "--metrics", "127.0.0.1:\(port)", "--metrics-linger", "5", "--json"],
            in: work.path)
        let end = try #require(Self.poll(port: port, seconds: 60) { $0.value("imgpipe_session_active") == 0 })
        let result = worker.wait()
        let report = try result.decoded(StatusReport.self)
        let (run, summary) = (report.run, try #require(report.session))
        try Self.checkSyntax(end.text)
        for sample in end.samples {
            #expect(
                sample.labels["worker"] == summary.worker && sample.labels["run"] == "\(run)"
                    && sample.labels["pipeline"] == "metered", "\(sample.line)")
        }
        #expect(end.value("imgpipe_items_total", ["status": "done"]) == Double(summary.done))
        #expect(end.sum("imgpipe_items_total", ["status": "failed"]) == Double(summary.failed))
        #expect(end.sum("imgpipe_items_total", ["status": "skipped"]) == Double(summary.skipped))
        #expect(summary.done == 3 && summary.failed == 2 && summary.skipped == 1)
    }

    // MARK: - helpers

    /// One scrape, parsed.
    struct Scrape {
        struct Sample {
            let name: String
            let labels: [String: String]
            let value: Double
            let line: String
        }

        let text: String
        let samples: [Sample]

        init(_ text: String) {
            self.text = text
            var samples: [Sample] = []
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let (head, value) = (
                    line.split(separator: " ").dropLast().joined(separator: " "), line.split(separator: " ").last
                )
                let name = String(head.prefix { $0 != "{" })
                var labels: [String: String] = [:]
                if let open = head.firstIndex(of: "{") {
                    let inner = head[head.index(after: open)..<(head.lastIndex(of: "}") ?? head.endIndex)]
                    for pair in inner.split(separator: ",") {
                        let parts = pair.split(separator: "=", maxSplits: 1)
                        guard parts.count == 2 else { continue }
                        labels[String(parts[0])] = String(parts[1].dropFirst().dropLast())
                    }
                }
                samples.append(
                    Sample(name: name, labels: labels, value: value.flatMap { Double($0) } ?? .nan, line: String(line)))
            }
            self.samples = samples
        }

        func matching(_ name: String, _ labels: [String: String]) -> [Sample] {
            samples.filter { sample in sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value } }
        }

        /// The value of the one series that matches (nil: none).
        func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
            let found = matching(name, labels)
            return found.count == 1 ? found[0].value : found.isEmpty ? nil : .nan
        }

        func sum(_ name: String, _ labels: [String: String] = [:]) -> Double {
            matching(name, labels).map(\.value).reduce(0, +)
        }
    }

    /// Checks the text exposition format: TYPE lines with valid names and known types, and
    /// every sample of a family typed before it, with a number for its value.
    static func checkSyntax(_ text: String) throws {
        let metricName = /[a-zA-Z_:][a-zA-Z0-9_:]*/
        let labelPair = /[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"/
        var typed: [String: String] = [:]
        #expect(text.hasSuffix("\n"))
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                #expect(parts.count == 4, "\(line)")
                #expect(parts.count > 2 && (try? metricName.wholeMatch(in: String(parts[2]))) != nil, "\(line)")
                #expect(["counter", "gauge", "histogram", "summary", "untyped"].contains(parts.last.map(String.init)), "\(line)")
                typed[String(parts[2])] = String(parts[3])
                continue
            }
            if line.hasPrefix("#") { continue }
            let sample = Scrape(String(line)).samples[0]
            #expect((try? metricName.wholeMatch(in: sample.name)) != nil, "\(line)")
            #expect(!sample.value.isNaN, "\(line)")
            if let open = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}") {
                let inner = String(line[line.index(after: open)..<close])
                let rebuilt = inner.matches(of: labelPair).map { String(inner[$0.range]) }.joined(separator: ",")
                #expect(rebuilt == inner, "labels of \(line)")
            }
            let family =
                typed[sample.name]
                ?? ["_bucket", "_sum", "_count"].lazy.compactMap { suffix in
                    sample.name.hasSuffix(suffix) ? typed[String(sample.name.dropLast(suffix.count))] : nil
                }.first
            #expect(family != nil, "no TYPE line before \(line)")
        }
        #expect(typed["imgpipe_items_total"] == "counter")
        #expect(typed["imgpipe_stage_seconds"] == "histogram")
        #expect(typed["imgpipe_queue_depth"] == "gauge")
    }

    /// Scrapes every 50 ms until `until` holds (at most `seconds`).
    static func poll(port: Int, seconds: Double = 30, until: (Scrape) -> Bool) -> Scrape? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let answer = get(port: port, path: "/metrics"), answer.status == 200 {
                let scrape = Scrape(answer.body)
                if until(scrape) { return scrape }
            }
            usleep(50_000)
        }
        return nil
    }

    /// A socket connected to 127.0.0.1:`port`, nil when nothing answers.
    static func opened(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// `GET path` on 127.0.0.1:`port`: the status and body, nil when nothing answers.
    static func get(port: Int, path: String) -> (status: Int, body: String)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else { return nil }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let got = recv(fd, &buffer, buffer.count, 0)
            if got <= 0 { break }
            response += buffer[0..<got]
        }
        let text = String(decoding: response, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let statusLine = text[..<split.lowerBound].split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        return (status, String(text[split.upperBound...]))
    }

    /// A port nothing listens on now.
    static func freePort() throws -> Int {
        let probe = try TestHTTPServer { _ in .status(200) }
        let port = probe.port
        probe.stop()
        return port
    }

    /// The IPv4 address a socket listening on `port` is bound to, from /proc/net/tcp.
    static func listening(port: Int) -> String? {
        // Read to the end: `String(contentsOfFile:)` stops after the first 4 KiB of a /proc
        // file, and a loaded machine lists more sockets than that before this one.
        guard let handle = FileHandle(forReadingAtPath: "/proc/net/tcp"), let data = try? handle.readToEnd() else {
            return nil
        }
        try? handle.close()
        let table = String(decoding: data, as: UTF8.self)
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 3, fields[3] == "0A" else { continue }
            let local = fields[1].split(separator: ":")
            guard local.count == 2, Int(local[1], radix: 16) == port, let raw = UInt32(local[0], radix: 16) else { continue }
            // Written in the host's (little-endian) order.
            return [raw & 0xff, raw >> 8 & 0xff, raw >> 16 & 0xff, raw >> 24].map(String.init).joined(separator: ".")
        }
        return nil
    }

    static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? Int) ?? 0
    }
}
