import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// A real network cut under a shared run (issue 39, point 5): one `imgpipe work` runs in a
/// network namespace of its own and reaches both the PostgreSQL database and the upload
/// server over a veth pair; two more run on this machine. Mid-run the pair's machine end is
/// taken down for longer than a lease, so that what the worker sends goes unanswered (no
/// reset; "no route to host" at most, once its neighbour entry has failed): the case for
/// keepalives and timeouts. It comes back up once that worker has exited.
@Suite("A network cut under a shared run", .serialized)
final class NetworkCutTests: @unchecked Sendable {
    // @unchecked: every stored property is a constant set in init.
    let work: TemporaryDirectory
    let lease = 4.0

    init() throws {
        work = try TemporaryDirectory("imgpipe-netcut")
    }

    /// Polls `condition` every 20 ms for at most `seconds`; false (and an issue) when it
    /// never came true.
    @discardableResult
    func waitUntil(
        _ what: String, seconds: Double = 60, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () throws -> Bool
    ) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(20_000)
        }
        Issue.record("\(what): not within \(Int(seconds)) s", sourceLocation: sourceLocation)
        return false
    }

    /// `command`'s end and when it came, waiting at most `seconds`: a process still running
    /// then is killed (and the test fails), so a hang cannot hold up the suite.
    func end(_ command: RunningCommand, within seconds: Double, _ what: String) -> (result: CommandResult, at: Date) {
        let ended = waitUntil("\(what) to exit", seconds: seconds) { !command.process.isRunning }
        if !ended { command.signal(SIGKILL) }
        let result = command.wait()
        return (result, Date())
    }

    @Test(.enabled(if: NetworkLink.available, "needs root and network namespaces (ip netns add, veth pairs)"))
    func aWorkerCutOffLongerThanItsLeaseLosesItsChunksAndEachItemIsDeliveredOnce() throws {
        let link = try NetworkLink()
        defer { link.remove() }
        let cluster = try PostgresCluster.dedicated(alsoOn: link.hostAddress, clients: link.subnet)
        defer { cluster.stop() }
        let url = try cluster.makeDatabase()
        let name = try #require(url.split(separator: "/").last.map(String.init))
        let server = try UploadServer(mode: .slow(0.25), host: link.hostAddress)
        defer { server.stop() }
        let count = 60
        try ImageFixtures.jpegs(count, in: work.url("in"))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "output": {"format": "png", "name": "{stem}.png"},
             "sinks": [{"type": "upload", "endpoint": "\(server.baseURL)/upload"}],
             "limits": {"uploads": 1, "timeout": 10}, "retry": {"attempts": 3, "backoff": 0.05}}
            """, to: "pipe.json")
        let options = ["--chunk-size", "4", "--lease", String(Int(lease)), "--heartbeat", "0.5"]
        let database = try PostgresConnection(url: url)

        // The worker in the namespace starts first (and lists the feed); it reaches the
        // database and the server at the machine's end of the pair, and nothing else.
        let inside = link.inside(
            [ImgpipeBinary.path, "work", "pipe.json", "--state", cluster.url(database: name, host: link.hostAddress)] + options)
        let cutOff = try ImgpipeBinary.launch(executable: inside.executable, inside.arguments, in: work.path)
        var others: [RunningCommand] = []
        defer { for process in [cutOff] + others where process.process.isRunning { process.signal(SIGKILL) } }
        // `ip netns exec` execs the command: the worker's pid is the one started here.
        let pid = String(cutOff.process.processIdentifier)
        let fromInside = { server.server.requests.filter { $0.peer == link.innerAddress && $0.path.hasPrefix("/once/") } }
        /// Chunks the cut-off worker holds with at least `pending` items not ended.
        func held(pending: Int) throws -> [String] {
            try database.execute(
                """
                SELECT id FROM imgpipe_chunk WHERE state = 'leased' AND split_part(owner, ':', 2) = $1
                  AND items - (done + failed + skipped) >= $2 ORDER BY id
                """, [pid, String(pending)]
            ).all.compactMap { $0["id"] }
        }
        // (Its tables may not be made yet: an error is "not yet".)
        try #require(waitUntil("the worker in the namespace to hold a chunk") { (try? held(pending: 1))?.isEmpty == false })
        others = try (0..<2).map { _ in
            try ImgpipeBinary.launch(["work", "pipe.json", "--state", url] + options, in: work.path)
        }
        // Cut while it is mid-chunk: it has uploaded, and its chunk has items to go.
        try #require(
            try waitUntil("the worker in the namespace to be mid-chunk while the others upload") {
                try fromInside().count >= 2 && server.uploads.count > fromInside().count && held(pending: 2).count >= 1
            })
        try link.cut()
        let cutAt = Date()
        // Read over loopback: what it held when the wire went (a write it had under way can
        // still land until its lease runs out; none after that).
        let lost = try held(pending: 1)
        try #require(!lost.isEmpty, "the worker in the namespace held a chunk when the link was cut")

        // The others rescue its chunks once its lease runs out, while it is still cut off.
        let rescued = try waitUntil("its chunks \(lost) to be rescued by the other workers") {
            try database.execute(
                """
                SELECT count(*) AS n FROM imgpipe_chunk
                WHERE id = ANY($1::bigint[]) AND (state <> 'leased' OR split_part(owner, ':', 2) <> $2)
                """, ["{\(lost.joined(separator: ","))}", pid]
            ).first?["n"] == String(lost.count)
        }
        #expect(rescued)
        // The link stays down until it has exited: its own timeouts must end what it has
        // under way. It stops a lease after its last heartbeat, gives up its connections
        // (the calls hung in libpq end at once) and exits 1 through its ordinary end:
        // before, they waited for TCP's timeouts and then for six reconnects, and the hard
        // stop ended the process 10 s later ("a call to the database still hangs").
        let stopped = end(cutOff, within: lease + 60, "the cut-off worker")
        let took = stopped.at.timeIntervalSince(cutAt)
        try link.restore()
        #expect(stopped.result.status == 1, "\(stopped.result.stdout)\n\(stopped.result.stderr)")
        #expect(stopped.result.stderr.contains("no heartbeat reached the database"), "\(stopped.result.stderr)")
        #expect(!stopped.result.stderr.contains("still hangs"), "\(stopped.result.stderr)")
        #expect(!stopped.result.stderr.contains(cluster.password))
        // Under 10 s, the connections' `tcp_user_timeout`: a hung call ended by the kernel's
        // timeout (the sockets not shut down) would exit at about 10–11 s, and pass a looser
        // bound. The working path exits about 1 s after the lease.
        #expect(took < lease + 5, "the cut-off worker exited \(took) s after the cut")
        for other in others {
            let (result, _) = end(other, within: 180, "a worker outside the namespace")
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        }

        // Every item done once, by the run's counters and by the rows.
        let status = try ImgpipeBinary.run(["status", "pipe.json", "--json", "--state", url], in: work.path)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect(report["done"] as? Int == count && report["failed"] as? Int == 0 && report["state"] as? String == "finished")
        let chunks = try database.execute("SELECT id, state FROM imgpipe_chunk").all
        #expect(chunks.count == count / 4 && chunks.allSatisfy { $0["state"] == "done" })
        // (The link stays down until the cut-off worker has exited: what reaches the server
        // from it after the rescue is TCP retransmitting, after the restore, what it had
        // sent before, which no check here can tell from a late write. That late writes are
        // refused is `SharedRunTests.aWorkerPausedPastItsLeaseHasItsLateWritesRefused`.)
        let workers = try database.execute("SELECT name, items_done FROM imgpipe_worker").all
        #expect(workers.compactMap { $0.int("items_done") }.reduce(0, +) == Int64(count), "each item recorded once: \(workers)")

        // Each item delivered exactly once: one upload stored per item, one request per item
        // but for the replays below, each under the item's idempotency key.
        let stored = server.uploads
        #expect(stored.count == count && Set(stored.compactMap(\.filename)).count == count, "each item stored once")
        let posts = server.server.requests.filter { $0.path.hasPrefix("/once/") }
        let byKey = Dictionary(grouping: posts) { $0.headers["idempotency-key"] ?? "" }
        #expect(byKey.count == count && byKey[""] == nil, "every upload carried an idempotency key")
        // A second request for an item is the rescuer's replay of one the cut-off worker had
        // sent (in flight at the cut, or delivered without its end recorded in time).
        let twice = byKey.filter { $0.value.count > 1 }
        #expect(
            twice.values.allSatisfy { requests in
                requests.count == 2 && requests.contains { $0.peer == link.innerAddress }
                    && requests.contains { $0.peer != link.innerAddress }
            }, "\(twice.mapValues { $0.map(\.peer) })")
        print(
            "network cut: chunks \(lost) rescued, the cut-off worker exited "
                + "\(stopped.result.status) after \(String(format: "%.1f", took)) s; \(fromInside().count) of \(posts.count) "
                + "upload requests from it, \(twice.count) replayed")
    }
}
