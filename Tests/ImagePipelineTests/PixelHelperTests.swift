import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

/// The command line's runs make pixels in helper processes (`PixelHelper`): the same bytes
/// as on threads, and a helper's end (kill -9, a crash) costs an item at most, never the run;
/// the run's end (kill -9, Ctrl-C) takes its helpers with it.
@Suite("Pixel helper processes", .serialized)
struct PixelHelperTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-helpers") }

    /// `pipe.json`: `in/` → `out/`, fit 256 and a caption drawn from the item's stem.
    func pipeline(_ name: String = "pipe.json", out: String = "out", workers: Int) throws {
        try work.write("""
            {
              "version": 1,
              "source": {"type": "directory", "path": "in"},
              "filters": [{"op": "fit", "width": 256, "height": 256}, {"op": "caption", "bottom": "{stem}"}],
              "output": {"format": "jpeg", "quality": 85},
              "sink": {"type": "directory", "path": "\(out)"},
              "limits": {"workers": \(workers)}
            }
            """, to: name)
    }

    /// `count` 3000×3000 PNGs (`in/slow-N.png`, a decode of a tenth of a second or more
    /// each), then `small` small JPEGs (`in/z-N.jpg`), in the order a directory lists them.
    func inputs(slow count: Int, small: Int = 0) throws {
        let folder = try work.folder("in")
        let large = try ImageFixtures.photo(width: 300, height: 300).resized(horizontal: 10, vertical: 10)
        for index in 0 ..< count {
            try ImageFixtures.write(large, to: folder + "/slow-\(index).png[compression=1]")
        }
        for index in 0 ..< small {
            try ImageFixtures.jpeg(at: folder + "/z-\(index).jpg", width: 400 + 10 * index, height: 300)
        }
    }

    func status() throws -> StatusReport {
        let result = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: work.path)
        #expect(result.status == 0, "status failed: \(result.stderr)")
        return try result.decoded(StatusReport.self)
    }

    /// The helpers of `running` seen until it ends or `until` says so, polled every
    /// millisecond; `each` is called for every helper seen, every time.
    @discardableResult
    func helpers(of running: RunningCommand, until: (Set<pid_t>) -> Bool = { _ in false },
                 each: (pid_t) -> Void = { _ in }) -> Set<pid_t> {
        var seen: Set<pid_t> = []
        let deadline = Date().addingTimeInterval(120)
        while running.process.isRunning, Date() < deadline {
            for helper in ChildProcesses.pixelHelpers(of: running.process.processIdentifier) {
                seen.insert(helper)
                each(helper)
            }
            if until(seen) { break }
            usleep(1000)
        }
        return seen
    }

    /// Waits up to 10 s for every one of `pids` to stop running.
    func allEnd(_ pids: Set<pid_t>) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while pids.contains(where: ChildProcesses.isRunning) {
            guard Date() < deadline else { return false }
            usleep(10_000)
        }
        return true
    }

    @Test func aRunsPixelsAreMadeInHelpersAndComeOutAsOnThreads() throws {
        try inputs(slow: 1, small: 5)
        try pipeline(workers: 2)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let seen = helpers(of: running)
        let result = running.wait()
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect((1 ... 2).contains(seen.count), "helpers seen: \(seen)")
        #expect(allEnd(seen), "a helper outlived its run")

        // The same pipeline with the pixels on threads: no helper, the same bytes.
        try pipeline("threads.json", out: "threads", workers: 2)
        let threads = try ImgpipeBinary.launch(["run", "threads.json", "--state", "threads.sqlite"], in: work.path,
                                               environment: ["IMGPIPE_PIXEL_HELPERS": "0"])
        #expect(helpers(of: threads).isEmpty)
        #expect(threads.wait().status == 0)
        let made = work.files(under: "out")
        #expect(made.count == 6 && made == work.files(under: "threads"))
        for name in made {
            let helped = try Data(contentsOf: URL(fileURLWithPath: work.url("out/" + name)))
            let threaded = try Data(contentsOf: URL(fileURLWithPath: work.url("threads/" + name)))
            #expect(helped == threaded, "\(name) differs")
        }
        let decoded = try ImageFixtures.decode(work.url("out/slow-0.jpg"))
        #expect((decoded.width, decoded.height) == (256, 256))
    }

    /// kill -9 of the helper at work: the item goes to a new helper and is made; nothing fails.
    @Test func aHelperKilledAtWorkIsReplacedAndItsItemMade() throws {
        try inputs(slow: 1, small: 3)
        try pipeline(workers: 1)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        var killed: pid_t?
        let seen = helpers(of: running, until: { !$0.isEmpty }, each: { helper in
            if killed == nil {
                kill(helper, SIGKILL)
                killed = helper
            }
        })
        let result = running.wait()
        #expect(killed != nil && seen.count == 1)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stderr.contains("pixel helper ended by signal 9"), "stderr: \(result.stderr)")
        #expect(result.stderr.contains("the item goes to a new one"))
        #expect(work.files(under: "out") == ["slow-0.jpg", "z-0.jpg", "z-1.jpg", "z-2.jpg"])
        let report = try status()
        #expect(report.done == 4 && report.failures.isEmpty)
    }

    /// Helpers that are killed as soon as they appear fail their items (each after a second
    /// helper), not the run; `resume --retry-failed` makes them.
    @Test func helpersThatKeepEndingFailTheirItemsAndTheBatchGoesOn() throws {
        try inputs(slow: 2)
        try pipeline(workers: 1)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let seen = helpers(of: running, each: { kill($0, SIGKILL) })
        let result = running.wait()
        #expect(result.status == 1, "stderr: \(result.stderr)")
        #expect(seen.count == 4, "two helpers an item: \(seen)")
        let report = try status()
        #expect(report.done == 0 && report.failures.map(\.key).sorted() == ["slow-0.png", "slow-1.png"])
        for failure in report.failures {
            #expect(failure.reason == "process")
            #expect(failure.message == "its pixel helper ended by signal 9 (Killed); a second one ended by signal 9 (Killed)",
                    "\(failure.message)")
        }

        let again = try ImgpipeBinary.run(["resume", "pipe.json", "--retry-failed"], in: work.path)
        #expect(again.status == 0, "stderr: \(again.stderr)")
        #expect(work.files(under: "out") == ["slow-0.jpg", "slow-1.jpg"])
    }

    /// kill -9 of the run: its helpers end with it (the kernel's parent-death signal), and a
    /// resume makes what was left.
    @Test func killingTheRunEndsItsHelpers() throws {
        try inputs(slow: 4)
        try pipeline(workers: 2)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let seen = helpers(of: running, until: { $0.count == 2 })
        #expect(seen.count == 2)
        running.signal(SIGKILL)
        running.process.waitUntilExit()
        #expect(allEnd(seen), "helpers left running: \(seen.filter(ChildProcesses.isRunning))")

        let resumed = try ImgpipeBinary.run(["resume", "pipe.json"], in: work.path)
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out").count == 4)
    }

    /// Ctrl-C reaches the whole process group: the helper ignores it and finishes its item in
    /// the grace period; the run saves it and exits 130; resume delivers it and makes the rest.
    @Test func anInterruptLetsTheHelperFinishItsItem() throws {
        try inputs(slow: 1, small: 3)
        try pipeline(workers: 1)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let seen = helpers(of: running, until: { !$0.isEmpty })
        // The helper has the slow PNG (the first item, one worker) when SIGINT comes.
        usleep(50_000)
        for helper in seen { kill(helper, SIGINT) }
        running.signal(SIGINT)
        let result = running.wait()
        #expect(result.status == 130, "stderr: \(result.stderr)")
        #expect(!result.stderr.contains("pixel helper ended"), "stderr: \(result.stderr)")
        #expect(allEnd(seen))
        // The item in flight was made and saved (a stopping run delivers nothing more).
        let report = try status()
        #expect(report.failures.isEmpty && report.processed == 1 && report.done == 0,
                "processed \(report.processed), done \(report.done), failed \(report.failures)")

        let resumed = try ImgpipeBinary.run(["resume", "pipe.json"], in: work.path)
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out") == ["slow-0.jpg", "z-0.jpg", "z-1.jpg", "z-2.jpg"])
    }
}
