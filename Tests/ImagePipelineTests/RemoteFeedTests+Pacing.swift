import Foundation
import GRDB
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// `limits.rate` and the back-off after 429/503, with the built binary against a loopback
/// server that notes when each request arrived. The checks are lower bounds on spacing,
/// which a slow machine only makes easier to meet.
extension RemoteFeedTests {
    /// The most requests among `times` that fall in any window of `seconds`.
    func busiestWindow(_ times: [Date], seconds: Double) -> Int {
        let sorted = times.sorted()
        var best = 0
        var start = 0
        for end in sorted.indices {
            while sorted[end].timeIntervalSince(sorted[start]) >= seconds { start += 1 }
            best = max(best, end - start + 1)
        }
        return best
    }

    /// The URL list in `urls.txt`, uncached, to `sinks` with these `limits`.
    func pacedPipeline(limits: String, sinks: String = #"{"type": "directory", "path": "out"}"#) throws {
        try politePipeline(source: #"{"type": "url-list", "path": "urls.txt", "cache": false}"#, sinks: sinks, limits: limits)
    }

    /// The test image, its body sent a tenth of a second after its headers.
    func slowImage() -> TestHTTPServer.Response {
        var response = TestHTTPServer.Response.bytes(jpeg)
        response.stall = 0.1
        return response
    }

    @Test func rateIsKeptPerHostAcrossDownloadsAndUploads() throws {
        let server = try taggedServer()
        try writeURLList(server.baseURL, (1...12).map { "/img/\($0).jpg" })
        try pacedPipeline(
            limits: #"{"timeout": 5, "downloads": 16, "uploads": 8, "rate": 5, "burst": 2}"#,
            sinks: #"{"type": "http", "url": "\#(server.baseURL)/upload/{stem}"}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        let arrivals = server.requests.map(\.receivedAt)
        #expect(server.requests.filter { $0.method == "PUT" }.count == 12)
        #expect(arrivals.count == 24, "12 images and 12 uploads, one origin")
        // 5 a second with a burst of 2: at most 7 in any second (one more for the jitter
        // between sending and the server's reading); unpaced, all 24 come within a second.
        let busiest = busiestWindow(arrivals, seconds: 1)
        #expect(busiest <= 8, "\(busiest) requests within one second")
        let first = try #require(arrivals.min())
        let last = try #require(arrivals.max())
        #expect(last.timeIntervalSince(first) >= (24 - 2) / 5 - 0.5, "24 requests at 5/s take over 4 s")
    }

    @Test func aRetryAfterHoldsTheWholeHostAndItsAnswerSlowsItDown() throws {
        let refused = LockedBox<Date?>(nil)
        let slow = slowImage()
        let server = try taggedServer { request in
            guard request.path == "/img/3.jpg" else { return request.path.hasSuffix(".jpg") ? slow : nil }
            return refused.withLock { when in
                guard when == nil else { return slow }
                when = Date()
                return .status(429, headers: [("Retry-After", "2")])
            }
        }
        // Two at a time, a tenth of a second each: unheld, requests would keep coming.
        try writeURLList(server.baseURL, (1...40).map { "/img/\($0).jpg" })
        try pacedPipeline(limits: #"{"timeout": 5, "downloads": 2}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("40 done, 0 skipped, 0 failed of 40"), "\(result.stdout)")
        #expect(result.stderr.contains("answered HTTP 429"), "the slow-down is logged: \(result.stderr)")
        #expect(result.stderr.contains("Retry-After"))
        let when = try #require(refused.withLock { $0 })
        // Two downloads at a time: the other thread's request on its way when the 429 went
        // out, and one it may send before imgpipe has read the 429, may arrive; nothing else
        // for the 2 s the host asked for (unheld: about 18, ten a second on each thread).
        let held = server.requests.filter { (0..<1.9).contains($0.receivedAt.timeIntervalSince(when)) }
        #expect(held.count <= 2, "requests during the host's Retry-After: \(held.map(\.path))")
        let after = server.requests.filter { $0.receivedAt.timeIntervalSince(when) >= 1.9 }
        #expect(!after.isEmpty, "the rest came after the pause")
        #expect(imageRequests(server).filter { $0 == "/img/3.jpg" }.count == 2, "the refused image was asked again")
    }

    @Test func anOverloadedSinkHostIsHeldForItsRetryAfter() throws {
        let refused = LockedBox<Date?>(nil)
        let server = try taggedServer { request in
            guard request.method == "PUT" else { return nil }
            return refused.withLock { when in
                guard when == nil else {
                    var stored = TestHTTPServer.Response.status(201)
                    stored.stall = 0.1
                    return stored
                }
                when = Date()
                return .status(503, headers: [("Retry-After", "2")])
            }
        }
        try writeURLList(server.baseURL, (1...30).map { "/img/\($0).jpg" })
        try pacedPipeline(
            limits: #"{"timeout": 5, "uploads": 2}"#, sinks: #"{"type": "http", "url": "\#(server.baseURL)/upload/{stem}"}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("answered HTTP 503"), "\(result.stderr)")
        let when = try #require(refused.withLock { $0 })
        let puts = server.requests.filter { $0.method == "PUT" }
        #expect(Set(puts.map(\.path)).count == 30, "every output delivered")
        // Two uploads at a time: at most the other thread's, on its way or sent before the
        // 503 was read (unheld: dozens).
        let held = puts.filter { (0..<1.9).contains($0.receivedAt.timeIntervalSince(when)) }
        #expect(held.count <= 2, "uploads during the host's Retry-After: \(held.map(\.path))")
    }

    /// The items of the state file at `path` (read while a run writes it) that are processed.
    static func processedItems(in path: String) -> Int {
        var configuration = Configuration()
        configuration.readonly = true
        let count = try? DatabaseQueue(path: path, configuration: configuration).read {
            try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM item WHERE status = 'processed'")
        }
        return (count ?? nil) ?? 0
    }

    /// The user's own server, with `"pacing": "off"`: its 503 and Retry-After put off only
    /// the request that got them; the other items' uploads go on meanwhile, and no host is
    /// slowed down. The 503 is answered once every item waits for the one upload thread, so
    /// only pacing could hold the next upload back: the check is a count of uploads during
    /// the Retry-After (held, none arrive then), and a lower bound on the refused one's retry.
    @Test func aSinkWithPacingOffPutsOffOnlyTheRequestThatGotA503() throws {
        let refused = LockedBox<Date?>(nil)
        let answered = LockedBox(false)
        let state = work.url(".imgpipe/pipe.sqlite")
        let server = try taggedServer { request in
            guard request.method == "PUT" else { return nil }
            let first = answered.withLock { was in
                defer { was = true }
                return !was
            }
            guard first else { return nil }
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline, Self.processedItems(in: state) < 5 { usleep(20_000) }
            refused.withLock { $0 = Date() }
            return .status(503, headers: [("Retry-After", "3")])
        }
        try writeURLList(server.baseURL, (1...5).map { "/img/\($0).jpg" })
        try pacedPipeline(
            limits: #"{"timeout": 30, "uploads": 1}"#,
            sinks: #"{"type": "http", "url": "\#(server.baseURL)/upload/{stem}", "pacing": "off"}"#)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("5 done, 0 skipped, 0 failed of 5"), "\(result.stdout)")
        #expect(!result.stderr.contains("answered HTTP 503"), "no host was slowed down: \(result.stderr)")
        let when = try #require(refused.withLock { $0 })
        let puts = server.requests.filter { $0.method == "PUT" }
        let first = try #require(puts.first)
        #expect(Set(puts.map(\.path)).count == 5 && puts.count == 6, "each item delivered, the refused one twice")
        let during = puts.filter { (0..<3).contains($0.receivedAt.timeIntervalSince(when)) }
        #expect(!during.isEmpty && !during.contains { $0.path == first.path }, "uploads during the Retry-After")
        let retried = try #require(puts.dropFirst().first { $0.path == first.path })
        #expect(retried.receivedAt.timeIntervalSince(when) >= 2.9, "the refused upload waited out its Retry-After")
    }
}

/// `HostPacing` on its own, on a clock the test sets.
struct HostPacingTests {
    let origin = "http://images.example:80"

    func at(_ seconds: Double) -> Date { Date(timeIntervalSinceReferenceDate: 1_000_000 + seconds) }

    @Test func turnsAreARateApartAfterTheBurst() {
        let pacing = HostPacing(rate: 4, burst: 2)
        let waits = (0..<6).map { _ in pacing.reserve(origin, now: at(0)) }
        #expect(waits.map { ($0 * 1000).rounded() / 1000 } == [0, 0, 0.25, 0.5, 0.75, 1.0])
        #expect(pacing.reserve("http://other.example:80", now: at(0)) == 0, "each host has its own turns")
        // After a quiet spell the burst is there again, and no more.
        let later = (0..<3).map { _ in pacing.reserve(origin, now: at(10)) }
        #expect(later.map { ($0 * 1000).rounded() / 1000 } == [0, 0, 0.25])
    }

    @Test func unlimitedHostsAreNeverHeldUntilOverloaded() {
        let pacing = HostPacing()
        #expect((0..<50).allSatisfy { _ in pacing.reserve(origin, now: at(0)) == 0 })
        #expect(pacing.currentRate(origin, now: at(0)) == nil)
    }

    @Test func anOverloadHalvesTheRateOnceASecondAndItRecovers() throws {
        let pacing = HostPacing(rate: 8, recoveryStep: 5)
        pacing.overloaded(origin, status: 429, retryAfter: nil, now: at(0))
        #expect(pacing.currentRate(origin, now: at(0)) == 4)
        // Answers to requests that were already in flight count once.
        pacing.overloaded(origin, status: 429, retryAfter: nil, now: at(0.5))
        #expect(pacing.currentRate(origin, now: at(0.5)) == 4)
        pacing.overloaded(origin, status: 503, retryAfter: nil, now: at(1.0))
        #expect(pacing.currentRate(origin, now: at(1.0)) == 2)
        // A quarter more every 5 quiet seconds, up to the configured rate and no further.
        #expect(pacing.currentRate(origin, now: at(6.0)) == 2.5)
        #expect(pacing.currentRate(origin, now: at(11.0)) == 3.125)
        #expect(pacing.currentRate(origin, now: at(100)) == 8)
        #expect(HostPacing.isOverload(status: 503) && !HostPacing.isOverload(status: 500))
    }

    @Test func aRetryAfterHoldsEveryRequestToTheHost() {
        let pacing = HostPacing()
        pacing.overloaded(origin, status: 429, retryAfter: 30, now: at(0))
        #expect(pacing.pause(of: origin, now: at(10)) == 20)
        #expect(pacing.reserve(origin, now: at(10)) >= 20)
        #expect(pacing.pause(of: "http://other.example:80", now: at(10)) == 0)
        // Far-off dates are capped.
        pacing.overloaded("http://slow.example:80", status: 503, retryAfter: 86_400, now: at(0))
        #expect(pacing.pause(of: "http://slow.example:80", now: at(0)) == HostPacing.maxPause)
    }

    @Test func anUnlimitedHostIsSlowedFromTheRateItWasAskedAtAndFreedLater() throws {
        let pacing = HostPacing(recoveryStep: 5)
        // 20 requests over one second: 20/s.
        for index in 0..<20 { _ = pacing.reserve(origin, now: at(Double(index) * 0.05)) }
        pacing.overloaded(origin, status: 429, retryAfter: nil, now: at(1))
        let slowed = try #require(pacing.currentRate(origin, now: at(1)))
        #expect(slowed > 5 && slowed <= 10, "about half of 20/s: \(slowed)")
        // Back to unlimited once it is past twice the rate that was throttled.
        #expect(pacing.currentRate(origin, now: at(1000)) == nil)
    }
}
