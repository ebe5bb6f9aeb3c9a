// imgpipe-scaleout: the shared-run store alone, for bench/scaleout.sh (not a test).
//
//   imgpipe-scaleout URL ITEMS WORKERS CHUNK [share|whole]
//
// On an empty database: one lister records ITEMS items in pages of CHUNK (one
// transaction each, as `imgpipe work` lists); then WORKERS threads, each with its own
// connection and no pixel work, claim chunks (`share`, the default: as `imgpipe work`
// claims, cut to the work left; `whole`: each chunk as listed), read their items, record every item done in
// one fenced transaction per chunk (with the counters `status` reads: sink, output, tier)
// and complete the chunk, as workers do; then `status`
// is read five times. Prints one JSON object: lister items/s, claims/s, item
// transitions/s, the median status time.
import Foundation
import ImagePipeline
import PipelineKit

let arguments = CommandLine.arguments
guard arguments.count == 5 || arguments.count == 6, let items = Int(arguments[2]), let workers = Int(arguments[3]),
    let chunk = Int(arguments[4]), ["share", "whole"].contains(arguments.count == 6 ? arguments[5] : "share")
else {
    FileHandle.standardError.write(Data("usage: imgpipe-scaleout URL ITEMS WORKERS CHUNK [share|whole]\n".utf8))
    exit(2)
}
let whole = arguments.count == 6 && arguments[5] == "whole"
/// Long: nothing here renews a lease (no heartbeat), and a loaded machine once listed 1M
/// items for longer than a minute. Workers stay live for a claim's share as long.
let leaseLength = 3600.0
let url = arguments[1]
/// What a real worker adds to `status`'s counters for a done item of one output and one sink.
let tally = ["tier/remote": 1, "sink/out/done": 1, "output/default/done": 1]

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

do {
    let lister = try SharedRun(
        connection: PostgresConnection(url: url), pipelineName: "scaleout",
        fingerprint: ["filters": "[]"], chunkSize: chunk, leaseSeconds: leaseLength, worker: "lister")
    guard let lease = try lister.acquireLister() else { throw SharedWorkerError("the lister's lease is held") }
    let listing = try seconds {
        var next = 0
        while next < items {
            let count = min(chunk, items - next)
            let page = (next..<next + count).map { FeedItem(key: "item-\($0)", location: "/data/in/item-\($0).jpg") }
            next += count
            try lister.recordPage(
                page, cursor: "{\"key\":\"item-\(next - 1)\",\"listed\":\(next)}", complete: next >= items,
                lease: lease)
        }
    }

    let claims = LockedBox(0)
    let transitions = LockedBox(0)
    let failures = LockedBox<[String]>([])
    let working = try seconds {
        let runs = try (0..<workers).map { index in
            try SharedRun(
                connection: PostgresConnection(url: url), pipelineName: "scaleout", fingerprint: ["filters": "[]"],
                chunkSize: chunk, leaseSeconds: leaseLength, worker: "worker-\(index)")
        }
        let threads = runs.map { run in
            let done = DispatchSemaphore(value: 0)
            let thread = Thread {
                defer { done.signal() }
                do {
                    while let claimed = try whole ? run.claim(1).first : run.claimShare() {
                        let pending = try run.items(of: claimed)
                        let written = try run.record(pending.map { .init(seq: $0.seq, status: .done, tally: tally) }, in: claimed)
                        try run.complete(claimed)
                        claims.withLock { $0 += 1 }
                        transitions.withLock { $0 += written }
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            thread.start()
            return done
        }
        for done in threads { done.wait() }
    }
    if let failure = failures.withLock({ $0.first }) { throw SharedWorkerError(failure) }

    var statusTimes: [Double] = []
    for _ in 0..<5 {
        statusTimes.append(try seconds { _ = try StatusReport.shared(at: url, pipelineName: "scaleout") })
    }
    let counts = try lister.counts()
    let median = statusTimes.sorted()[statusTimes.count / 2]
    print(
        """
        {"items": \(items), "workers": \(workers), "chunk": \(chunk), "claim": "\(whole ? "whole" : "share")", \
        "done": \(counts.done), "claims": \(claims.withLock { $0 }), \
        "listerItemsPerSecond": \(Int(Double(items) / listing)), "claimsPerSecond": \(Int(Double(claims.withLock { $0 }) / working)), \
        "transitionsPerSecond": \(Int(Double(transitions.withLock { $0 }) / working)), "statusSeconds": \(String(format: "%.3f", median))}
        """)
} catch {
    FileHandle.standardError.write(Data("imgpipe-scaleout: \(error)\n".utf8))
    exit(1)
}
