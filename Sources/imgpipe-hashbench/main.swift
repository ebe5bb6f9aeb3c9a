import Foundation
import PipelineKit
import VipsKit

// Two benchmarks for `bench/dedup.sh`. Not a product.
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

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
guard arguments.count == 4, arguments[0] > 0, arguments[1] > 0, (0...16).contains(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: imgpipe-hashbench N QUERIES DISTANCE CHECK\n".utf8))
    exit(2)
}
let (count, queryCount, distance, checked) = (arguments[0], arguments[1], arguments[2], min(arguments[3], arguments[1]))

/// SplitMix64: the same hashes on every run.
struct Generator {
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

var random = Generator(state: 2026)
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
