import Foundation
import ImagePipelineTesting
import Synchronization
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// `dedup` in a run shared through PostgreSQL: two `work` processes judge the items in
/// feed order between them, whichever makes an item first, and across a kill -9.
extension DedupTests {
    /// Exact, near and placeholder groups over two workers with chunks of two items: each
    /// group is kept once, and the item kept is the first in feed order even when its copy,
    /// on the other worker, is made seconds before it.
    @Test func twoWorkersKeepTheFirstOfEachGroupWhicheverMadeItFirst() throws {
        try sharedGroups { first, _, _ in
            let result = first.wait()
            #expect(result.status == 0, "\(result.stderr)")
        }
    }

    /// The worker holding the first item is killed (kill -9) while the other waits for its
    /// verdict with the copies made: the other takes its chunks when their leases run out,
    /// makes the first item, and keeps it; every verdict is as without the kill.
    @Test func aWorkerKilledBeforeItsVerdictsLeavesThemToTheOther() throws {
        try sharedGroups(lease: ["--lease", "3", "--heartbeat", "0.5"]) { first, copyAsked, _ in
            // The copies wait, made, for the first item's verdict.
            #expect(copyAsked.wait(timeout: .now() + 60) == .success, "the copy was never asked for")
            usleep(300_000)
            first.signal(SIGKILL)
            _ = first.wait()
        }
    }

    /// Runs the groups' feed over two workers: the first starts alone and is given the
    /// first four items; the second starts once the first item is asked for. `middle` runs
    /// then, with the first worker, a semaphore signalled when the first item's exact copy
    /// is asked for, and the second worker. The first item's first download is held until
    /// its copy has been asked for (or the worker that asked is gone); then the records,
    /// the sink's files and `status` are checked.
    func sharedGroups(
        lease: [String] = [],
        _ middle: (RunningCommand, DispatchSemaphore, RunningCommand) throws -> Void
    ) throws {
        let cluster = try PostgresCluster.start()
        let url = try cluster.makeDatabase()
        defer { cluster.dropDatabase(url) }
        let scenes = try (71...76).map { try Self.scenePNG(UInt64($0)) }
        let copies: [String: Data] = [
            "/a1.png": scenes[0], "/a2.png": scenes[1], "/a3.png": scenes[2], "/a4.png": scenes[3],
            "/f1.png": scenes[4], "/f2.png": scenes[5],
            "/b1.png": scenes[0], "/b2.jpg": try Self.nearCopy(of: scenes[1], scale: 0.6, quality: 70),
            "/b3.jpg": try Self.nearCopy(of: scenes[2], lift: 10),
        ]
        // The first worker downloads one item at a time and holds only the first four items
        // (`limits` below): the copies are made by the second, while the first is held.
        let firstAsked = Atomic(0)
        let copyAsked = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)
        let copyCameFirst = Atomic(false)
        let copyServer = try TestHTTPServer(host: "127.0.0.2") { request in
            guard let bytes = copies[request.path] else { return .status(404) }
            if request.path == "/a1.png", firstAsked.add(1, ordering: .acquiringAndReleasing).oldValue == 0 {
                copyCameFirst.store(released.wait(timeout: .now() + 30) == .success, ordering: .releasing)
                Thread.sleep(forTimeInterval: 1)
            }
            if request.path == "/b1.png" {
                released.signal()
                copyAsked.signal()
            }
            return .bytes(bytes)
        }
        // One host's "photo unavailable" picture, for every URL.
        let unavailable = try Self.nearCopy(of: try Self.scenePNG(80))
        let placeholderServer = try TestHTTPServer { _ in .bytes(unavailable) }
        defer {
            copyServer.stop()
            placeholderServer.stop()
        }
        let order = [
            "a1.png", "a2.png", "a3.png", "a4.png", "f1.png", "f2.png", "b1.png", "b2.jpg", "b3.jpg",
            "p1.jpg", "p2.jpg", "p3.jpg", "p4.jpg",
        ]
        let urls = order.map { ($0.hasPrefix("p") ? placeholderServer : copyServer).baseURL + "/" + $0 }
        try work.write(urls.joined(separator: "\n") + "\n", to: "urls.txt")
        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt", "cache": false},
             "dedup": {"exact": true, "similar": true, "placeholders": true},
             "limits": {"downloads": 1, "uploads": 1},
             "filters": [{"op": "fit", "width": 200, "height": 200}], "output": {"format": "png"},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
        let arguments = ["work", "pipe.json", "--state", url, "--chunk-size", "2", "-j", "1"] + lease
        let first = try ImgpipeBinary.launch(arguments, in: work.path)
        defer { if first.process.isRunning { first.signal(SIGKILL) } }
        let deadline = Date().addingTimeInterval(60)
        while firstAsked.load(ordering: .acquiring) == 0, first.process.isRunning, Date() < deadline { usleep(10_000) }
        let second = try ImgpipeBinary.launch(arguments, in: work.path)
        defer { if second.process.isRunning { second.signal(SIGKILL) } }
        try middle(first, copyAsked, second)
        let last = second.wait()
        #expect(last.status == 0, "\(last.stderr)")
        let copyCameFirstly = copyCameFirst.load(ordering: .acquiring)
        #expect(copyCameFirstly, "the copy was not downloaded while the first was held")

        let exported = try imgpipe("export", "pipe.json", "--state", url, "--format", "jsonl")
        #expect(exported.status == 0, "\(exported.stderr)")
        func name(_ key: Any?) -> String? { (key as? String).map { String($0.split(separator: "/").last ?? "") } }
        let records = Dictionary(uniqueKeysWithValues: try exported.jsonLines().map { (name($0["key"]) ?? "", $0) })
        for kept in ["a1.png", "a2.png", "a3.png", "a4.png", "f1.png", "f2.png", "p1.jpg"] {
            #expect(records[kept]?["status"] as? String == "done", "\(kept): \(records[kept] ?? [:])")
        }
        for (copy, first) in [("b1.png", "a1.png"), ("b2.jpg", "a2.png"), ("b3.jpg", "a3.png"), ("p2.jpg", "p1.jpg")] {
            let record = try #require(records[copy])
            #expect(record["reason"] as? String == "duplicate" && name(record["duplicateOf"]) == first, "\(copy): \(record)")
        }
        #expect(records["b1.png"]?["distance"] as? Int == 0)
        for distance in [records["b2.jpg"]?["distance"], records["b3.jpg"]?["distance"]] {
            #expect((distance as? Int).map { (0...8).contains($0) } == true, "\(distance ?? "-")")
        }
        for placeholder in ["p3.jpg", "p4.jpg"] {
            #expect(records[placeholder]?["reason"] as? String == "placeholder", "\(records[placeholder] ?? [:])")
        }
        // Found a placeholder at the third sighting: the two before it are flagged.
        #expect(records["p1.jpg"]?["placeholder"] as? Bool == true && records["p2.jpg"]?["placeholder"] as? Bool == true)
        #expect(records["a1.png"]?["placeholder"] == nil)
        let made = try FileManager.default.contentsOfDirectory(atPath: work.url("out")).sorted()
        #expect(made == ["a1.png", "a2.png", "a3.png", "a4.png", "f1.png", "f2.png", "p1.png"], "\(made)")

        let status = try imgpipe("status", "pipe.json", "--state", url, "--json").decoded(StatusReport.self)
        #expect(status.state == "finished" && status.done == 7, "\(status)")
        #expect(status.placeholders == 2 && status.skipsByReason == ["duplicate": 4, "placeholder": 2], "\(status)")
        #expect(status.workers?.count == 2 && status.workers?.contains { $0.itemsDone > 0 } == true, "\(status.workers ?? [])")
    }
}
