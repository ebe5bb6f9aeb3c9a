import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The PostgreSQL shared-run core (`SharedRun`) on a real server: a throwaway cluster this
/// test process starts on loopback (`PostgresCluster`), one database per test. Nothing is
/// skipped when the server is missing: the tests fail, naming `make deps`.
@Suite("Shared runs on PostgreSQL")
final class SharedRunTests: @unchecked Sendable {
    // @unchecked: every stored property is a constant set in init.
    let cluster: PostgresCluster
    let url: String

    init() throws {
        cluster = try PostgresCluster.start()
        url = try cluster.makeDatabase()
    }

    deinit { cluster.dropDatabase(url) }

    func worker(
        _ name: String, pipeline: String = "photos", fingerprint: [String: String] = ["filters": "[]"],
        chunkSize: Int = 3, lease: Double = 60
    ) throws -> SharedRun {
        try SharedRun(
            connection: PostgresConnection(url: url), pipelineName: pipeline, fingerprint: fingerprint,
            chunkSize: chunkSize, leaseSeconds: lease, worker: name)
    }

    /// `count` items keyed `k0`, `k1`, … listed as one page by `run`.
    func list(_ count: Int, by run: SharedRun, from start: Int = 0, cursor: String? = "end", complete: Bool = true) throws -> Int
    {
        let lease = try #require(try run.acquireLister())
        return try run.recordPage(
            (start..<start + count).map { FeedItem(key: "k\($0)", location: "in/\($0).jpg") },
            cursor: cursor, complete: complete, lease: lease
        ).added
    }

    func itemStatuses() throws -> [String: String] {
        let rows = try PostgresConnection(url: url).execute("SELECT key, status FROM imgpipe_item")
        return Dictionary(uniqueKeysWithValues: rows.all.map { ($0["key"]!, $0["status"]!) })
    }

    /// The array literals every fenced write sends come back from the server as written:
    /// quotes, backslashes, commas, braces, spaces, `NULL` as text, the empty string, and
    /// letters beyond ASCII; a nil is SQL's NULL.
    @Test func textArraysReachTheServerAsWritten() throws {
        let values: [String?] = [
            "plain", #"a "quoted" word"#, #"back\slash\"#, "a,b {c} d", "NULL", "", nil, "Zürich 東京 🙂", #"\""#,
        ]
        let rows = try PostgresConnection(url: url).execute(
            "SELECT v, v IS NULL AS missing FROM unnest($1::text[]) WITH ORDINALITY AS t(v, n) ORDER BY n",
            [postgresTextArray(values)])
        #expect(rows.all.map { $0["missing"] == "t" ? nil : $0["v"] } == values)
        #expect(postgresTextArray([]) == "{}")
    }

    // MARK: - the state URL

    @Test func aPostgresURLIsSharedStateAndItsPasswordIsNeverShown() {
        #expect(StateLocation("runs.sqlite") == .sqlite(path: "runs.sqlite"))
        #expect(StateLocation("./postgres://x") == .sqlite(path: "./postgres://x"))
        let url = "postgres://ann:p%40ss:w0rd@db.example:5432/imgpipe"
        #expect(StateLocation(url) == .postgres(url: url))
        #expect(StateLocation(url).displayed == "postgres://ann:***@db.example:5432/imgpipe")
        #expect(
            StateLocation("POSTGRESQL://db/x?user=ann&password=hunter2&sslmode=require").displayed
                == "POSTGRESQL://db/x?user=ann&password=***&sslmode=require")
        #expect(StateLocation("postgres://ann@db/x").displayed == "postgres://ann@db/x")
        // libpq's key=value form is PostgreSQL too, never a file named after the password.
        let words = "host=db.example dbname=imgpipe user=ann password=hunter2"
        #expect(StateLocation(words) == .postgres(url: words))
        #expect(StateLocation(words).displayed == "host=db.example dbname=imgpipe user=ann password=***")
        // Spaces around '=' and a quoted value: the whole value (both were shown, or half of one).
        #expect(
            StateLocation("host = 127.0.0.1 port = 1 password = hunter2secret")
                == .postgres(url: "host = 127.0.0.1 port = 1 password = hunter2secret"), "not a file named after the password")
        let ssl = "port=1 connect_timeout=2 sslpassword=K3yPassw0rd"
        #expect(
            StateLocation(ssl) == .postgres(url: ssl)
                && StateLocation(ssl).displayed == "port=1 connect_timeout=2 sslpassword=***")
        let spaced = "host=db password = S3cr3tPw user=ann"
        #expect(StateLocation(spaced).displayed == "host=db password = *** user=ann")
        #expect(StateLocation.masking(in: "failed for S3cr3tPw", url: spaced) == "failed for ***")
        let quoted = #"host=db password='secret \' pass' user=ann"#
        #expect(StateLocation(quoted).displayed == "host=db password=*** user=ann")
        #expect(StateLocation.masking(in: #"saw secret \' pass"#, url: quoted) == "saw ***")
        // Any message quoting the URL or the password, percent-encoded or not, is masked.
        let message = "cannot connect to \(url): user ann, password p@ss:w0rd, raw p%40ss:w0rd"
        #expect(
            StateLocation.masking(in: message, url: url)
                == "cannot connect to postgres://ann:***@db.example:5432/imgpipe: user ann, password ***, raw ***")
        #expect(StateLocation.masking(in: "secret is hunter2", url: "postgres://db/x?password=hunter2") == "secret is ***")
        // A password holding '/', '?', '#' or '@' as it is cannot be handed to libpq.
        for bad in [
            "postgres://u:LEAKpart/rest@h:5432/d", "postgres://u:pw/a?LEAKME@h/d", "postgres://u:Sec:ret@/p w?#1@h/d",
            "postgres://u:p@ss@h/d", "postgres://localhost:5432/topsecretXY@127.0.0.1:55432/url",
        ] {
            #expect(StateLocation.unencodedPassword(in: bad) != nil, "\(bad)")
        }
        for good in [
            url, "postgres://h:5432/d?sslrootcert=/a@b", "postgres://u@h/d", "postgres://u:pw@h/d?x=a%40b",
            "postgres://u:pw@h/d?application_name=a@b", "postgres://[::1]:5432/d?user=u&application_name=x@y",
            "postgres://u@h1:5432,[::1]:5432/d?password=p&application_name=ops@team", "host=h password=a/b@c",
        ] {
            #expect(StateLocation.unencodedPassword(in: good) == nil, "\(good)")
        }
    }

    @Test func theClusterChecksThePasswordAndTheErrorDoesNotShowIt() throws {
        let wrong = url.replacingOccurrences(of: cluster.password, with: "not-the-Password")
        try #require(wrong != url, "the test's wrong password is the right one")
        do {
            _ = try PostgresConnection(url: wrong)
            Issue.record("a wrong password was accepted")
        } catch let error as PostgresError {
            #expect(error.description.contains("password authentication failed"), "\(error)")
            #expect(!error.description.contains("not-the-Password"))
        }
        let rows = try PostgresConnection(url: url).execute(
            "SELECT $1::int + 1 AS n, $2::text AS t, ($3::text[])[1] AS first, ($3::text[])[2] IS NULL AS second, ($3::text[])[3] AS third",
            ["41", "a'b\"c", postgresTextArray(["x\u{0}y", nil, "{\\\"}"])])
        #expect(rows.first?["n"] == "42" && rows.first?["t"] == "a'b\"c")
        // Quotes, backslashes and braces survive the array literal; a NUL cannot cut it short.
        #expect(
            rows.first?["first"] == "x\u{FFFD}y" && rows.first?.bool("second") == true && rows.first?["third"] == "{\\\"}",
            "\(rows.first.map { [$0["first"], $0["third"]] } ?? [])")
    }

    // MARK: - joining a run

    @Test func workersRacingToStartTheRunMakeExactlyOne() throws {
        let ids = LockedBox<[Int64]>([])
        let errors = LockedBox<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            do {
                let run = try worker("w\(index)")
                ids.withLock { $0.append(run.runId) }
            } catch {
                errors.withLock { $0.append("\(error)") }
            }
        }
        #expect(errors.withLock { $0 } == [])
        #expect(ids.withLock { Set($0) }.count == 1 && ids.withLock { $0.count } == 8)
        let runs = try PostgresConnection(url: url).execute("SELECT count(*) AS n FROM imgpipe_run")
        #expect(runs.first?["n"] == "1")
        let workers = try PostgresConnection(url: url).execute("SELECT count(*) AS n FROM imgpipe_worker")
        #expect(workers.first?["n"] == "8")
    }

    @Test func aFinishedRunIsNotJoinedAndOtherVersionsDoNotJoin() throws {
        let first = try worker("a", fingerprint: ["filters": "[]", "libvips": "8.14.1", "imgpipe": "1.0"])
        #expect(throws: SharedRun.SharedRunError.fingerprintDiffers(id: first.runId, fields: ["libvips"])) {
            try self.worker("b", fingerprint: ["filters": "[]", "libvips": "8.15.0", "imgpipe": "1.0"])
        }
        // A run an older imgpipe made did not record the source, sinks, … : a worker that
        // records them joins it on what it recorded (it was refused, with the pipeline as it was).
        let newer = try worker(
            "e",
            fingerprint: [
                "filters": "[]", "libvips": "8.14.1", "imgpipe": "1.0", "source": "{}",
                "sinks": "[]", "accept": "null",
            ])
        #expect(newer.runId == first.runId)
        #expect(throws: SharedRun.SharedRunError.fingerprintDiffers(id: first.runId, fields: ["libvips"])) {
            try self.worker("f", fingerprint: ["filters": "[]", "libvips": "8.15.0", "imgpipe": "1.0", "source": "{}"])
        }
        try first.connection.execute("UPDATE imgpipe_run SET state = 'finished' WHERE id = $1", [String(first.runId)])
        #expect(throws: SharedRun.SharedRunError.runFinished(id: first.runId)) {
            try self.worker("c", fingerprint: ["filters": "[]", "libvips": "8.14.1", "imgpipe": "1.0"])
        }
        // Another pipeline in the same database is its own run.
        let other = try worker("d", pipeline: "other")
        #expect(other.runId != first.runId)
    }

    // MARK: - claims

    @Test func eightClaimersOverTenThousandChunksClaimEachExactlyOnce() throws {
        let lister = try worker("lister", chunkSize: 1)
        #expect(try list(10_000, by: lister) == 10_000)
        #expect(try lister.counts().chunksPending == 10_000)
        let claimed = LockedBox<[SharedRun.Chunk]>([])
        let failures = LockedBox<[String]>([])
        // Eight threads of their own (not `concurrentPerform`, which runs as many at once as
        // there are cores): each connects, then all start claiming together.
        let connected = LockedBox(0)
        let finished = DispatchGroup()
        for index in 0..<8 {
            finished.enter()
            Thread { [self] in
                defer { finished.leave() }
                do {
                    let run = try worker("claimer-\(index)", chunkSize: 1)
                    connected.withLock { $0 += 1 }
                    let deadline = Date().addingTimeInterval(60)
                    while connected.withLock({ $0 }) < 8, Date() < deadline { usleep(1000) }
                    var mine: [SharedRun.Chunk] = []
                    while true {
                        let got = try run.claim(3)
                        if got.isEmpty { break }
                        mine += got
                    }
                    claimed.withLock { $0 += mine }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }.start()
        }
        finished.wait()
        #expect(failures.withLock { $0 } == [])
        let chunks = claimed.withLock { $0 }
        #expect(chunks.count == 10_000)
        #expect(Set(chunks.map(\.id)).count == 10_000, "a chunk was claimed twice")
        #expect(Set(chunks.map(\.token)).count == 10_000, "a lease token was handed out twice")
        let counts = try lister.counts()
        #expect(counts.chunksLeased == 10_000 && counts.chunksPending == 0)
        let owners = try lister.connection.execute("SELECT count(DISTINCT owner) AS n FROM imgpipe_chunk")
        #expect(Int(owners.first?["n"] ?? "") ?? 0 >= 2, "the claimers worked side by side")
    }

    @Test func theClaimIsAnIndexScanThatStopsAtItsLiteralLimit() throws {
        let lister = try worker("lister", chunkSize: 2)
        _ = try list(20_000, by: lister)
        // Half the chunks done, as in a run under way: the claim must not walk over them.
        try lister.connection.execute("UPDATE imgpipe_chunk SET state = 'done' WHERE id < 5000")
        try lister.connection.execute("ANALYZE imgpipe_chunk")
        #expect(SharedRun.claimSQL(4).contains("LIMIT 4 FOR UPDATE SKIP LOCKED"))
        let plan = try lister.connection.execute("EXPLAIN " + SharedRun.claimSQL(4), [String(lister.runId), "w", "60"])
            .all.compactMap { $0["QUERY PLAN"] }.joined(separator: "\n")
        #expect(plan.contains("Index Scan using imgpipe_chunk_pending"), "\(plan)")
        #expect(!plan.contains("Seq Scan"), "\(plan)")
        #expect(plan.contains("Limit"), "\(plan)")
    }

    /// `dedup`'s queries in a shared run are index scans at 20,000 items: the floor on
    /// `imgpipe_item_unjudged` (most items ended), a kept hash on `imgpipe_kept_sha256`, and
    /// near copies through the four band indexes alone.
    @Test func dedupsQueriesReadTheirIndexes() throws {
        let lister = try worker("lister", chunkSize: 2)
        _ = try list(20_000, by: lister)
        let run = String(lister.runId)
        try lister.connection.execute("UPDATE imgpipe_item SET status = 'done' WHERE run_id = $1 AND seq < 19000", [run])
        try lister.connection.execute(
            """
            INSERT INTO imgpipe_kept (run_id, seq, key, sha256, phash, band0, band1, band2, band3)
            SELECT $1, g, 'item-' || g, md5(g::text), h, (h >> 48) & 65535, (h >> 32) & 65535, (h >> 16) & 65535, h & 65535
            FROM (SELECT g, ('x' || substr(md5(g::text), 1, 16))::bit(64)::bigint AS h FROM generate_series(0, 19999) g) s
            """, [run])
        try lister.connection.execute("ANALYZE imgpipe_item")
        try lister.connection.execute("ANALYZE imgpipe_kept")
        func plan(_ sql: String, _ parameters: [String?]) throws -> String {
            try lister.connection.execute("EXPLAIN " + sql, parameters).all.compactMap { $0["QUERY PLAN"] }
                .joined(separator: "\n")
        }
        let floor = try plan(SharedDedup.floorSQL, [run, "19500", "{19001,19002}"])
        #expect(floor.contains("imgpipe_item_unjudged") && !floor.contains("Seq Scan"), "\(floor)")
        let kept = try plan(SharedDedup.keptSQL, [run, "c4ca4238a0b923820dcc509a6f75849b", "item-2"])
        #expect(kept.contains("imgpipe_kept_sha256") && !kept.contains("Seq Scan"), "\(kept)")
        let probes = (0..<4).map { band in
            postgresTextArray(NearHashIndex<Int>.probes(of: UInt16(band * 1000), radius: 2).map { String($0) })
        }
        let matches = try plan(SharedDedup.matchesSQL, [run] + probes + ["1234567", "8", "c4ca4238a0b923820dcc509a6f75849b"])
        // Each band's arm takes the distance in its index, reading no row.
        for band in 0..<4 { #expect(matches.contains("Index Only Scan using imgpipe_kept_band\(band)"), "\(matches)") }
        #expect(matches.contains("imgpipe_kept_sha256") && matches.contains("imgpipe_kept_pkey"), "\(matches)")
        #expect(!matches.contains("Seq Scan"), "\(matches)")
    }

    // MARK: - claims sized to the work left

    /// Two workers of equal speed over 600 items in chunks of 500: each claims again when it
    /// has done what it holds (a clock counts one tick per item). Whole chunks gave one 500
    /// and the other 100; claims cut to the work left end them together.
    @Test func twoWorkersOverSixHundredItemsInChunksOfFiveHundredFinishTogether() throws {
        let lister = try worker("a", chunkSize: 500)
        #expect(try list(600, by: lister) == 600)
        let workers = [lister, try worker("b", chunkSize: 500)]
        var free = [0, 0]
        var done = [0, 0]
        var seen: [Int64: Int64] = [:]  // seq → the chunk it was claimed in
        var claims: [[Int]] = [[], []]
        while true {
            let next = free[0] <= free[1] ? 0 : 1
            guard let chunk = try workers[next].claimShare() else { break }
            let items = try workers[next].items(of: chunk)
            #expect(items.count == chunk.items && items.first?.seq == chunk.firstSeq && items.last?.seq == chunk.lastSeq)
            for item in items {
                #expect(seen.updateValue(chunk.id, forKey: item.seq) == nil, "item \(item.seq) was claimed twice")
            }
            try workers[next].record(items.map { .init(seq: $0.seq, status: .done) }, in: chunk)
            #expect(try workers[next].complete(chunk))
            free[next] += items.count
            done[next] += items.count
            claims[next].append(items.count)
        }
        #expect(seen.count == 600 && Set(seen.keys) == Set(0..<600))
        #expect(claims[0].first == 150, "the first claim is 600 / (2 × 2 workers): \(claims)")
        #expect(abs(done[0] - done[1]) <= SharedRun.smallestShare, "\(done), claims \(claims)")
        #expect(max(free[0], free[1]) <= 300 + SharedRun.smallestShare, "\(free)")
        // The rows agree with the claims: each item in the chunk it was claimed in, each
        // chunk's counters its own items', and the run's counts whole.
        let rows = try lister.connection.execute("SELECT seq, chunk FROM imgpipe_item WHERE run_id = $1", [String(lister.runId)])
        for row in rows.all { #expect(seen[row.int("seq") ?? -1] == row.int("chunk")) }
        let chunks = try lister.connection.execute(
            """
            SELECT c.id, c.items, c.done, c.first_seq, c.last_seq, count(i.seq) AS n, min(i.seq) AS lo, max(i.seq) AS hi
            FROM imgpipe_chunk c JOIN imgpipe_item i ON i.run_id = c.run_id AND i.chunk = c.id
            WHERE c.run_id = $1 GROUP BY c.run_id, c.id
            """, [String(lister.runId)])
        #expect(chunks.count == claims.joined().count)
        for chunk in chunks.all {
            #expect(chunk.int("items") == chunk.int("n") && chunk.int("done") == chunk.int("n"))
            #expect(chunk.int("first_seq") == chunk.int("lo") && chunk.int("last_seq") == chunk.int("hi"))
        }
        let counts = try lister.counts()
        #expect(counts.items == 600 && counts.done == 600 && counts.chunksDone == chunks.count && counts.chunksPending == 0)
    }

    /// A chunk given back half done and cut by the next claim: both parts keep the counters
    /// and tallies of their own items, so `status` stays whole.
    @Test func aChunkGivenBackHalfDoneIsCutWithItsCountersAndTalliesOnEachSide() throws {
        let a = try worker("a", chunkSize: 100)
        #expect(try list(100, by: a) == 100)
        let whole = try #require(try a.claim().first)
        let ended: [SharedRun.Outcome] =
            (0..<6).map { .init(seq: Int64($0), status: .done, tally: ["sink/out/done": 1]) }
            + [.init(seq: 50, status: .failed, reason: "decode", message: "bad", tally: ["sink/out/failed": 1])]
        #expect(try a.record(ended, in: whole) == 7)
        try a.handBack(whole)
        // One live worker: its share is half of the 93 items left, 47; the 47th pending
        // item is seq 53 (0-5 and 50 have ended), so the claimed part is 0...53.
        let part = try #require(try a.claimShare())
        #expect(part.id != whole.id && part.firstSeq == 0 && part.lastSeq == 53 && part.items == 54, "\(part)")
        #expect(try a.items(of: part).count == 47)
        let rows = try a.connection.execute(
            "SELECT id, state, items, done, failed, first_seq, tally::text AS tally FROM imgpipe_chunk ORDER BY id")
        let byId = Dictionary(uniqueKeysWithValues: rows.all.map { ($0.int("id") ?? -1, $0) })
        let rest = try #require(byId[whole.id])
        #expect(rest["state"] == "pending" && rest.int("items") == 46 && rest.int("first_seq") == 54)
        #expect(rest.int("done") == 0 && rest.int("failed") == 0 && rest["tally"] == "{}")
        let head = try #require(byId[part.id])
        #expect(head["state"] == "leased" && head.int("done") == 6 && head.int("failed") == 1)
        #expect(head["tally"] == #"{"sink/out/done": 6, "sink/out/failed": 1}"#)
        let counts = try a.counts()
        #expect(counts.items == 100 && counts.done == 6 && counts.failed == 1 && counts.pending == 93)
        // The old lease wrote nothing more: the chunk it named is pending under no lease.
        #expect(throws: SharedRun.SharedRunError.leaseLost(chunk: whole.id)) {
            try a.record([.init(seq: 60, status: .done)], in: whole)
        }
    }

    /// A worker paused past its lease, its chunk cut by another's claim, then the rest of
    /// it claimed back here under the same number: the items the other worker took must
    /// stay lost to this one (their deliveries dropped), or both would deliver them.
    @Test func aChunkCutWhileItsHolderWasPausedIsLostToItForTheItemsTheOtherTook() throws {
        let w = try worker("w", chunkSize: 20, lease: 1)
        #expect(try list(20, by: w) == 20)
        let ledger = ChunkLedger(leaseSeconds: 1)
        let first = try #require(try w.claim().first)
        ledger.add(first, items: try w.items(of: first))
        Thread.sleep(forTimeInterval: 1.2)  // paused past its lease
        let v = try worker("v", chunkSize: 20, lease: 60)
        #expect(try v.rescueExpired() == [first.id])
        let head = try #require(try v.claimShare())
        #expect(head.id != first.id && head.firstSeq == 0 && head.lastSeq == 7, "two live workers: a share of 8")
        // w wakes and claims the rest of its old chunk, which kept its number.
        let rest = try #require(try w.claim().first)
        #expect(rest.id == first.id && rest.token != first.token && rest.firstSeq == 8)
        ledger.add(rest, items: try w.items(of: rest))
        // Its heartbeat: the old claim is not renewed (the chunk is held under the new one).
        let before = ledger.unfinished()
        let held = try w.heartbeat(tokens: before.map(\.token))
        #expect(held == [rest.id: rest.token])
        let lost = before.filter { held[$0.id] != $0.token }
        #expect(lost.map(\.token) == [first.token])
        #expect(lost.allSatisfy { ledger.markLost($0) }, "the old claim is known, and lost")
        ledger.renewed(at: Date())
        #expect(ledger.deliveryGate("k0") == .drop, "k0 is v's now")
        #expect(ledger.deliveryGate("k7") == .drop)
        #expect(ledger.deliveryGate("k8") == .go, "k8 is w's again, under the new claim")
        #expect(ledger.unfinished().map(\.token) == [rest.token])
    }

    // MARK: - leases and fencing

    @Test func aWorkerPausedPastItsLeaseHasItsLateWritesRefused() throws {
        let slow = try worker("slow", lease: 2)
        _ = try list(3, by: slow)
        let chunk = try #require(try slow.claim().first)
        #expect(try slow.items(of: chunk).map(\.key) == ["k0", "k1", "k2"])
        #expect(try slow.record([.init(seq: 0, status: .done)], in: chunk) == 1)

        Thread.sleep(forTimeInterval: 2.3)  // paused past its lease (a SIGSTOP, a stall)
        #expect(throws: SharedRun.SharedRunError.leaseLost(chunk: chunk.id)) {
            try slow.record([.init(seq: 1, status: .failed, reason: "decode", message: "late")], in: chunk)
        }
        let other = try worker("other", lease: 60)
        #expect(try other.rescueExpired() == [chunk.id])
        let taken = try #require(try other.claim().first)
        #expect(taken.id == chunk.id && taken.token != chunk.token)
        #expect(try other.items(of: taken).map(\.key) == ["k1", "k2"], "the item done before the pause stays done")
        #expect(
            try other.record([.init(seq: 1, status: .done), .init(seq: 2, status: .skipped, reason: "opt-out")], in: taken) == 2)

        // The slow worker wakes up: every write it tries is refused, nothing is rewritten.
        #expect(throws: SharedRun.SharedRunError.leaseLost(chunk: chunk.id)) {
            try slow.record([.init(seq: 1, status: .failed, reason: "upload", message: "late")], in: chunk)
        }
        #expect(throws: SharedRun.SharedRunError.leaseLost(chunk: chunk.id)) { try slow.complete(chunk) }
        #expect(throws: SharedRun.SharedRunError.leaseLost(chunk: chunk.id)) { try slow.handBack(chunk) }
        #expect(try other.complete(taken))
        #expect(try itemStatuses() == ["k0": "done", "k1": "done", "k2": "skipped"])
        let counts = try other.counts()
        #expect(counts.done == 2 && counts.skipped == 1 && counts.failed == 0 && counts.chunksDone == 1)
    }

    @Test func anItemIsWrittenOnlyFromPendingSoItNeverEndsBothDoneAndFailed() throws {
        let run = try worker("w")
        _ = try list(3, by: run)
        let chunk = try #require(try run.claim().first)
        #expect(try run.record([.init(seq: 0, status: .done)], in: chunk) == 1)
        #expect(try run.record([.init(seq: 0, status: .failed, reason: "upload", message: "again")], in: chunk) == 0)
        #expect(try itemStatuses()["k0"] == "done")
        #expect(try !run.complete(chunk), "two items are still pending")
        #expect(try run.counts().done == 1 && run.counts().failed == 0)
    }

    /// The worker's count of items done is written in the fenced transaction that ends the
    /// items: a connection lost while counting rolls both back, and the replay writes both.
    /// (Counted after the commit, the count was lost with the connection while the items
    /// stayed done: `status` and the network-cut test saw one item fewer.)
    @Test func aConnectionLostWhileCountingLosesNeitherTheItemsNorTheirCount() throws {
        let run = try worker("w")
        _ = try list(3, by: run)
        let chunk = try #require(try run.claim().first)
        // The first change of the worker's count kills its own connection; a sequence,
        // not a row, says "once", since the kill rolls back what the transaction wrote.
        let database = try PostgresConnection(url: url)
        try database.execute("CREATE SEQUENCE cut_once")
        try database.execute(
            """
            CREATE FUNCTION cut_counting() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('cut_once') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
                RETURN NEW;
            END $$
            """)
        try database.execute(
            """
            CREATE TRIGGER cut_counting BEFORE UPDATE OF items_done ON imgpipe_worker
            FOR EACH ROW WHEN (OLD.items_done IS DISTINCT FROM NEW.items_done) EXECUTE FUNCTION cut_counting()
            """)
        _ = try? run.record([.init(seq: 0, status: .done), .init(seq: 1, status: .done)], in: chunk)
        #expect(try database.execute("SELECT last_value FROM cut_once").first?.int("last_value") ?? 0 >= 1, "the cut happened")
        let done = try database.execute("SELECT count(*) AS n FROM imgpipe_item WHERE status = 'done'").first?.int("n")
        let counted = try database.execute("SELECT items_done FROM imgpipe_worker").first?.int("items_done")
        #expect(done == 2 && counted == 2, "items done \(String(describing: done)), counted \(String(describing: counted))")
    }

    @Test func aRescueNeverRewritesAChunkFinishedAMomentBefore() throws {
        let run = try worker("w", lease: 1)
        _ = try list(3, by: run)
        let chunk = try #require(try run.claim().first)
        try run.record((0..<3).map { .init(seq: Int64($0), status: .done) }, in: chunk)
        #expect(try run.complete(chunk))
        Thread.sleep(forTimeInterval: 1.2)
        #expect(try run.rescueExpired() == [])
        let state = try run.connection.execute("SELECT state, owner FROM imgpipe_chunk WHERE id = $1", [String(chunk.id)]).first
        #expect(state?["state"] == "done" && state?["owner"] == nil)
        #expect(try run.claim().isEmpty)
    }

    @Test func aClaimWhoseAnswerWasLostIsNotRenewedAndRunsOut() throws {
        let run = try worker("w", lease: 1.5)
        _ = try list(6, by: run)
        let known = try #require(try run.claim().first)
        _ = try run.claim()  // committed, but its answer "lost": the worker does not know it holds chunk 1
        for _ in 0..<4 {
            Thread.sleep(forTimeInterval: 0.5)
            #expect(try run.heartbeat(tokens: [known.token]).keys.sorted() == [known.id])
        }
        #expect(try run.rescueExpired() == [1], "only the unknown claim ran out")
        #expect(try run.claim().first?.id == 1)
    }

    @Test func aHeartbeatKeepsTheLeaseAndAHandBackFreesTheChunkAtOnce() throws {
        let a = try worker("a", lease: 2)
        let b = try worker("b", lease: 2)
        _ = try list(6, by: a)
        let first = try #require(try a.claim().first)
        for _ in 0..<3 {
            Thread.sleep(forTimeInterval: 0.5)
            #expect(try a.heartbeat()[first.id] == first.token)
            #expect(try b.rescueExpired() == [], "a renewed lease is not rescued")
        }
        #expect(try a.record([.init(seq: first.firstSeq, status: .done)], in: first) == 1)
        // An interrupted worker hands back what it did not finish: the other claims it at once.
        try a.handBack(first)
        let claimed = try b.claim(2)
        #expect(claimed.map(\.id).sorted() == [0, 1])
        let again = try #require(claimed.first { $0.id == first.id })
        #expect(try b.items(of: again).count == 2)
        #expect(try a.heartbeat().isEmpty, "a holds nothing after handing back")
    }

    @Test func aChunkWhoseItemsAllEndedIsGivenBackDoneSoTheRunCanFinish() throws {
        // Its holder recorded every item, then lost the write that marks the chunk done (a
        // cut connection) or its lease: handed back or rescued, the chunk is done, not
        // pending for a worker that would find nothing in it.
        let a = try worker("a", lease: 1)
        _ = try list(2, by: a)
        let chunk = try #require(try a.claim().first)
        try a.record([.init(seq: 0, status: .done), .init(seq: 1, status: .failed, reason: "decode", message: "bad")], in: chunk)
        try a.handBack(chunk)
        func state(_ id: Int64, of run: SharedRun) throws -> String? {
            try run.connection.execute(
                "SELECT state FROM imgpipe_chunk WHERE run_id = $1 AND id = $2",
                [String(run.runId), String(id)]
            ).first?["state"]
        }
        #expect(try state(chunk.id, of: a) == "done")
        #expect(try a.claim().isEmpty)
        #expect(try a.markFinished(), "the feed is listed and no chunk is left")

        let b = try worker("b", pipeline: "other", chunkSize: 2, lease: 1)
        _ = try list(4, by: b)
        let partly = try #require(try b.claim().first)
        try b.record([.init(seq: partly.firstSeq, status: .done)], in: partly)
        let whole = try #require(try b.claim().first)
        try b.record((whole.firstSeq..<whole.firstSeq + 2).map { .init(seq: $0, status: .done) }, in: whole)
        Thread.sleep(forTimeInterval: 1.2)  // both leases run out
        #expect(try Set(b.rescueExpired()) == [partly.id, whole.id])
        #expect(try state(whole.id, of: b) == "done")
        #expect(try state(partly.id, of: b) == "pending", "a chunk with an item left goes to another worker")
    }

    /// A run of 3 items, all done and their chunk done, for workers `a` and `b`.
    func endedRun() throws -> (a: SharedRun, b: SharedRun, chunk: SharedRun.Chunk) {
        let a = try worker("a")
        let b = try worker("b")
        _ = try list(3, by: a)
        let chunk = try #require(try a.claim().first)
        try a.record((0..<3).map { .init(seq: Int64($0), status: .done) }, in: chunk)
        #expect(try a.complete(chunk))
        return (a, b, chunk)
    }

    /// `run`'s `markFinished`, called while another session holds the run's row in a
    /// transaction made of `statements`, which then commits; returns what it answered.
    func markFinished(by run: SharedRun, whileHolding statements: [(String, [String?])]) throws -> Bool? {
        let other = try PostgresConnection(url: url)
        try other.execute("BEGIN")
        for (sql, parameters) in statements { try other.execute(sql, parameters) }
        let answer = LockedBox<Bool?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            answer.withLock { $0 = try? run.markFinished() }
            done.signal()
        }.start()
        // The marking waits on that lock (seen by the server, not guessed by a sleep).
        let deadline = Date().addingTimeInterval(20)
        while try other.execute(
            """
            SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()
            """
        ).first?.int("n") == 0, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        try other.execute("COMMIT")
        done.wait()
        return answer.withLock { $0 }
    }

    @Test func aWorkerEndingJustAfterAnotherMarkedTheRunFinishedSaysItIsFinished() throws {
        // Two workers end at once: the first marks the run finished; the second's marking
        // waits for the first's commit. It must see the run finished (it exited 1 with "not
        // finished (0 items pending)" when it read the state from a snapshot taken before
        // that commit).
        let (a, b, _) = try endedRun()
        let answer = try markFinished(
            by: b,
            whileHolding: [
                ("UPDATE imgpipe_run SET state = 'finished', finished_at = now() WHERE id = $1", [String(a.runId)])
            ])
        #expect(answer == true, "the run is finished, by the other worker")
        #expect(try b.state() == "finished")
    }

    @Test func aRunReopenedWhileAWorkerMarksItStaysOpen() throws {
        // `resume --retry-failed` puts a done chunk back to pending and reopens the run in
        // one transaction; a worker marking the run meanwhile must see that chunk once it
        // has the row, and leave the run running (else its items were stranded in a run
        // marked finished, which `work` and `resume` would not go back to).
        let (a, b, chunk) = try endedRun()
        let answer = try markFinished(
            by: b,
            whileHolding: [
                (
                    "UPDATE imgpipe_chunk SET state = 'pending' WHERE run_id = $1 AND id = $2",
                    [String(a.runId), String(chunk.id)]
                ),
                ("UPDATE imgpipe_run SET state = 'running', finished_at = NULL WHERE id = $1", [String(a.runId)]),
            ])
        #expect(answer == false, "a chunk is pending again")
        #expect(try b.state() == "running")
        #expect(try b.claim().first?.id == chunk.id, "the chunk is there to claim")
    }

    @Test func aRetryOfFailedItemsSaysWhichItLeftBecauseTheirChunkIsStillWorkedOn() throws {
        // One chunk done with a failed item, one still leased with a failed item recorded:
        // `resume --retry-failed` puts back the first and says how many it left.
        let a = try worker("a", chunkSize: 2)
        _ = try list(4, by: a)
        let done = try #require(try a.claim().first)
        try a.record([.init(seq: 0, status: .done), .init(seq: 1, status: .failed, reason: "decode", message: "bad")], in: done)
        #expect(try a.complete(done))
        let open = try #require(try a.claim().first)
        try a.record([.init(seq: 2, status: .failed, reason: "decode", message: "bad")], in: open)

        let retry = try SharedRun(
            connection: PostgresConnection(url: url), pipelineName: "photos",
            fingerprint: ["filters": "[]"], worker: "r", joining: .resume(retryFailed: true))
        #expect(retry.failedOutOfReach == 1, "the failed item of the leased chunk is left")
        #expect(try itemStatuses() == ["k0": "done", "k1": "pending", "k2": "failed", "k3": "pending"])
    }

    // MARK: - listing

    @Test func oneListerAtATimeAndTheNextContinuesFromTheCursor() throws {
        let a = try worker("a", chunkSize: 2, lease: 2)
        let b = try worker("b", chunkSize: 2, lease: 2)
        let lease = try #require(try a.acquireLister())
        #expect(lease.cursor == nil)
        #expect(try b.acquireLister() == nil, "one lister at a time")
        #expect(
            try a.recordPage(
                [FeedItem(key: "k0", location: "u0"), FeedItem(key: "k1", location: "u1"), FeedItem(key: "k2", location: "u2")],
                cursor: "page=2", complete: false, lease: lease
            ).added == 3)
        #expect(try a.counts().items == 3 && a.counts().chunksPending == 2, "three items make chunks of two and one")

        // The lister stops answering (killed): its lease runs out, the next takes over where it stopped.
        Thread.sleep(forTimeInterval: 2.3)
        let next = try #require(try b.acquireLister())
        #expect(next.cursor == "page=2")
        #expect(throws: SharedRun.SharedRunError.listerLeaseLost) {
            try a.recordPage([FeedItem(key: "k3", location: "u3")], cursor: "page=3", complete: false, lease: lease)
        }
        // Redoing a page changes nothing; the last page ends the listing.
        #expect(
            try b.recordPage(
                [FeedItem(key: "k1", location: "u1"), FeedItem(key: "k2", location: "u2")], cursor: "page=2", complete: false,
                lease: next) == .init(added: 0, items: 3), "a page listed again adds nothing")
        #expect(
            try b.recordPage(
                [FeedItem(key: "k3", location: "u3"), FeedItem(key: "k4", location: "u4")], cursor: nil, complete: true,
                lease: next) == .init(added: 2, items: 5))
        #expect(try b.acquireLister() == nil, "the feed is listed to its end")
        let counts = try b.counts()
        #expect(counts.items == 5 && counts.feedComplete)
        let pages = try b.connection.execute("SELECT pages_listed, next_seq FROM imgpipe_run").first
        #expect(pages?["pages_listed"] == "3")
        let seqs = try b.connection.execute("SELECT key, seq FROM imgpipe_item ORDER BY seq").all.map { $0["key"]! }
        #expect(seqs == ["k0", "k1", "k2", "k3", "k4"], "feed order kept")
    }

    @Test func statusCountersAgreeWithTheItemRows() throws {
        let run = try worker("w", chunkSize: 7)
        _ = try list(50, by: run)
        while let chunk = try run.claim().first {
            let items = try run.items(of: chunk)
            try run.record(
                items.map {
                    .init(
                        seq: $0.seq, status: $0.seq % 5 == 0 ? .failed : $0.seq % 7 == 0 ? .skipped : .done,
                        reason: $0.seq % 5 == 0 ? "decode" : nil)
                }, in: chunk)
            try run.complete(chunk)
        }
        let counts = try run.counts()
        let truth = Dictionary(grouping: try itemStatuses().values, by: { $0 }).mapValues(\.count)
        #expect(counts.items == 50 && counts.chunksDone == 8 && counts.pending == 0)
        #expect(counts.done == truth["done"] && counts.failed == truth["failed"] && counts.skipped == truth["skipped"])
        #expect(counts.failed == 10 && counts.skipped == 6)
    }

    // MARK: - paged feeds resume at the cursor's page

    /// Flickr-like pages of 3 photos, 3 pages; remembers which pages were asked for.
    final class FlickrPages: PageSource, Sendable {
        let asked = LockedBox<[Int]>([])

        func page(_ url: String) throws -> (Data, Tier) {
            let number = Int(URLComponents(string: url)?.queryItems?.first { $0.name == "page" }?.value ?? "1") ?? 1
            asked.withLock { $0.append(number) }
            let photos = (1...3).map { #"{"id": "p\#(number)-\#($0)", "url_b": "https://img.example/p\#(number)-\#($0).jpg"}"# }
            let body =
                #"{"stat": "ok", "photos": {"page": \#(number), "pages": 3, "total": 9, "photo": [\#(photos.joined(separator: ","))]}}"#
            return (Data(body.utf8), .remote)
        }
    }

    @Test func aPagedFeedStartsAgainAtTheCursorsPageAfterItsKey() throws {
        let pages = FlickrPages()
        let feed = FlickrSearchFeed(
            text: "moon", apiKey: "k", endpoint: "https://api.example/rest", perPage: 3,
            maxItems: 7, size: "url_b", pages: pages)
        var all: [FeedItem] = []
        try feed.list {
            all.append($0)
            return true
        }
        #expect(all.map(\.key) == ["p1-1", "p1-2", "p1-3", "p2-1", "p2-2", "p2-3", "p3-1"], "maxItems 7")
        #expect(all.map(\.resumePage) == ["1", "1", "1", "2", "2", "2", "3"])

        pages.asked.withLock { $0.removeAll() }
        var resumed: [String] = []
        try feed.list(after: FeedCursor(key: "p2-2", listed: 5, page: "2"), expecting: { _ in }) {
            resumed.append($0.key)
            return true
        }
        #expect(resumed == ["p2-3", "p3-1"], "after the key, and maxItems counts what was listed before")
        #expect(pages.asked.withLock { $0 } == [2, 3], "the first page is not asked again")

        // The key left its page: the whole page is listed (the shared run's insert drops repeats).
        var moved: [String] = []
        try feed.list(after: FeedCursor(key: "gone", listed: 3, page: "2"), expecting: { _ in }) {
            moved.append($0.key)
            return true
        }
        #expect(moved == ["p2-1", "p2-2", "p2-3", "p3-1"])
    }
}
