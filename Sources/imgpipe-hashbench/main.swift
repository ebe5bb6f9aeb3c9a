import Foundation
import ImagePipeline
import PipelineKit
import VipsKit

// Three benchmarks for `bench/dedup.sh`. Not a product.
//
//   imgpipe-hashbench fingerprints FOLDER
//
// fingerprints every image in FOLDER as the pixel helper fingerprints an output
// (`ImageFingerprint.of(encoded:width:height:)`), three times over, and prints the median
// milliseconds per image.
//
// The near-duplicate index (`NearHashIndex`) at scale: inserts N
// random 64-bit hashes, then answers Q queries, half of them stored hashes with up to
// DISTANCE bits flipped (near copies) and half random (new pictures), and checks the
// answers of the first CHECK queries against a scan of every hash. Not a product.
//
//   imgpipe-hashbench N Q DISTANCE CHECK
//
// Prints one line of `name=value` pairs: seconds to insert, queries per second, the mean
// candidates a query examined and their share of the index, the scan's queries per second,
// and the peak resident set.
//
//   imgpipe-hashbench postgres URL N Q DISTANCE CHECK
//
// The same in a shared run's tables (`imgpipe_kept`, four indexed 16-bit bands): N kept
// items with pseudo-random hashes written by one statement, then Q lookups through
// `SharedDedup.matches` (a shared run's own query), half near copies of stored hashes and half
// new, and the first CHECK checked against a scan of the run's rows (`bit_count`), timed too.

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "fingerprints" {
    let folder = CommandLine.arguments[2]
    let files = try FileManager.default.contentsOfDirectory(atPath: folder).sorted().map {
        try Data(contentsOf: URL(fileURLWithPath: folder + "/" + $0))
    }
    let images = try files.map { data in
        let header = try VipsImage.open(data: data)
        return (data, header.width, header.height)
    }
    var rounds: [Double] = []
    for _ in 0..<3 {
        let start = DispatchTime.now()
        for (data, width, height) in images { _ = try ImageFingerprint.of(encoded: data, width: width, height: height) }
        rounds.append(Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6 / Double(images.count))
    }
    print("fingerprints images=\(images.count) ms_per_image=\(String(format: "%.3f", rounds.sorted()[1]))")
    exit(0)
}

if CommandLine.arguments.count == 7, CommandLine.arguments[1] == "postgres" {
    let numbers = CommandLine.arguments.dropFirst(3).compactMap { Int($0) }
    guard numbers.count == 4, numbers[0] > 0, numbers[1] > 1, (0...16).contains(numbers[2]) else {
        FileHandle.standardError.write(Data("usage: imgpipe-hashbench postgres URL N QUERIES DISTANCE CHECK\n".utf8))
        exit(2)
    }
    let (count, queryCount, distance, checked) = (numbers[0], numbers[1], numbers[2], min(numbers[3], numbers[1]))
    let shared = try SharedRun(
        connection: PostgresConnection(url: CommandLine.arguments[2]), pipelineName: "hashbench",
        fingerprint: ["bench": "dedup"], joining: .fresh(replace: false))
    let run = String(shared.runId)
    // Each row's hash is the first 64 bits of the MD5 of its number: the same on every run.
    var start = DispatchTime.now()
    try shared.connection.execute(
        """
        INSERT INTO imgpipe_kept (run_id, seq, key, phash, band0, band1, band2, band3)
        SELECT $1, g, 'item-' || g, h, (h >> 48) & 65535, (h >> 32) & 65535, (h >> 16) & 65535, h & 65535
        FROM (SELECT g, ('x' || substr(md5(g::text), 1, 16))::bit(64)::bigint AS h FROM generate_series(0, $2::bigint - 1) g) s
        """, [run, String(count)])
    try shared.connection.execute("ANALYZE imgpipe_kept")
    let insertSeconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    var random = SeededHashes(state: 2026)
    let stored = try shared.connection.execute(
        "SELECT phash FROM imgpipe_kept WHERE run_id = $1 AND seq % $2 = 0", [run, String(max(1, count / queryCount))]
    ).all.compactMap { $0.int("phash").map { UInt64(bitPattern: $0) } }
    let queries: [UInt64] = (0..<queryCount).map { index in
        guard index % 2 == 0, !stored.isEmpty else { return random.next() }
        var hash = stored[Int(random.next() % UInt64(stored.count))]
        for _ in 0..<Int(random.next() % UInt64(distance + 1)) { hash ^= 1 << (random.next() % 64) }
        return hash
    }
    let dedup = try SharedDedup(reading: try shared.sibling())
    defer { dedup.stop() }
    /// The queries' answers and their rate.
    func lookups() throws -> (answers: [[String]], perSecond: Int) {
        let start = DispatchTime.now()
        var answers: [[String]] = []
        for query in queries {
            answers.append(try dedup.matches(sha256: nil, phash: query, within: distance).map(\.key).sorted())
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
        return (answers, Int(Double(queryCount) / seconds))
    }
    // Rows just written: each candidate's visibility is read from its row. Then as a run's
    // older rows are once autovacuum has been by (the visibility map set): from the index.
    let fresh = try lookups()
    try shared.connection.execute("VACUUM imgpipe_kept")
    let (answers, vacuumed) = try lookups()
    start = DispatchTime.now()
    var disagreements = zip(answers, fresh.answers).count { $0 != $1 }
    for (query, answer) in zip(queries, answers).prefix(checked) {
        let scanned = try shared.connection.execute(
            "SELECT key FROM imgpipe_kept WHERE run_id = $1 AND bit_count((phash # $2::bigint)::bit(64)) <= $3",
            [run, String(Int64(bitPattern: query)), String(distance)]
        ).all.compactMap { $0["key"] }.sorted()
        if scanned != answer { disagreements += 1 }
    }
    let scanSeconds = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    print(
        "postgres hashes=\(count) distance=\(distance) insert_s=\(String(format: "%.1f", insertSeconds))",
        "queries_per_s=\(vacuumed) fresh_queries_per_s=\(fresh.perSecond) found=\(answers.count { !$0.isEmpty })",
        "scan_queries_per_s=\(String(format: "%.2f", Double(checked) / scanSeconds)) disagreements=\(disagreements)")
    exit(disagreements == 0 ? 0 : 1)
}

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
guard arguments.count == 4, arguments[0] > 0, arguments[1] > 0, (0...16).contains(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: imgpipe-hashbench N QUERIES DISTANCE CHECK\n".utf8))
    exit(2)
}
let (count, queryCount, distance, checked) = (arguments[0], arguments[1], arguments[2], min(arguments[3], arguments[1]))

/// SplitMix64: the same hashes on every run.
struct SeededHashes {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func seconds(since start: DispatchTime) -> Double {
    Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
}

var random = SeededHashes(state: 2026)
let hashes = (0..<count).map { _ in random.next() }
let queries: [UInt64] = (0..<queryCount).map { index in
    guard index % 2 == 0 else { return random.next() }
    var hash = hashes[Int(random.next() % UInt64(count))]
    for _ in 0..<Int(random.next() % UInt64(distance + 1)) { hash ^= 1 << (random.next() % 64) }
    return hash
}

var index = NearHashIndex<Int>(distance: distance)
var start = DispatchTime.now()
for (id, hash) in hashes.enumerated() { index.insert(hash, id: id) }
let insertSeconds = seconds(since: start)

start = DispatchTime.now()
var found = 0
for query in queries where index.earliest(within: query) != nil { found += 1 }
let querySeconds = seconds(since: start)
let candidates = queries.prefix(1000).reduce(0) { $0 + index.candidates(for: $1) } / min(1000, queryCount)

// The scan the index replaces, and whether the two agree.
start = DispatchTime.now()
var disagreements = 0
for query in queries.prefix(checked) {
    var best: (id: Int, distance: Int)?
    for (id, hash) in hashes.enumerated() {
        let apart = (hash ^ query).nonzeroBitCount
        if apart <= distance, best == nil { best = (id, apart) }
    }
    let answer = index.earliest(within: query)
    if answer?.id != best?.id || answer?.distance != best?.distance { disagreements += 1 }
}
let scanSeconds = seconds(since: start)

var usage = rusage()
getrusage(RUSAGE_SELF.rawValue, &usage)
print(
    "hashes=\(count) distance=\(distance) insert_s=\(String(format: "%.2f", insertSeconds))",
    "queries_per_s=\(Int(Double(queryCount) / querySeconds)) found=\(found)",
    "candidates=\(candidates) candidate_share=\(String(format: "%.4f", Double(candidates) / Double(count)))",
    "scan_queries_per_s=\(checked > 0 ? Int(Double(checked) / scanSeconds) : 0) disagreements=\(disagreements)",
    "peak_rss_mb=\(usage.ru_maxrss / 1024)")
exit(disagreements == 0 ? 0 : 1)
