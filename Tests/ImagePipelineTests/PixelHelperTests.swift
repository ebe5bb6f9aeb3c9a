import CProcess
import Foundation
import ImagePipelineTesting
import Logging
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The command line's runs make pixels in helper processes (`PixelHelper`): the same bytes
/// as on threads, and a helper's end (kill -9, a crash) costs an item at most, never the run;
/// the run's end (kill -9, Ctrl-C) takes its helpers with it.
@Suite("Pixel helper processes", .serialized)
struct PixelHelperTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-helpers") }

    /// `pipe.json`: `in/` → `out/`, fit 256 and a caption drawn from the item's stem.
    func pipeline(_ name: String = "pipe.json", out: String = "out", workers: Int) throws {
        try work.write(
            """
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
        for index in 0..<count {
            try ImageFixtures.write(large, to: folder + "/slow-\(index).png[compression=1]")
        }
        for index in 0..<small {
            try ImageFixtures.jpeg(at: folder + "/z-\(index).jpg", width: 400 + 10 * index, height: 300)
        }
    }

    func status() throws -> StatusReport {
        let result = try ImgpipeBinary.run(["status", "pipe.json", "--json"], in: work.path)
        #expect(result.status == 0, "status failed: \(result.stderr)")
        return try result.decoded(StatusReport.self)
    }

    /// The helpers of `running` seen until it ends or `until` says so, polled every 2 ms;
    /// `each` is called for every helper seen, every time.
    @discardableResult
    func helpers(
        of running: RunningCommand, until: (Set<pid_t>) -> Bool = { _ in false },
        each: (pid_t) -> Void = { _ in }
    ) -> Set<pid_t> {
        var seen: Set<pid_t> = []
        let deadline = Date().addingTimeInterval(120)
        while running.process.isRunning, Date() < deadline {
            for helper in ChildProcesses.pixelHelpers(of: running.process.processIdentifier) {
                seen.insert(helper)
                each(helper)
            }
            if until(seen) { break }
            usleep(2000)
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
        #expect((1...2).contains(seen.count), "helpers seen: \(seen)")
        #expect(allEnd(seen), "a helper outlived its run")

        // The same pipeline with the pixels on threads: no helper, the same bytes.
        try pipeline("threads.json", out: "threads", workers: 2)
        let threads = try ImgpipeBinary.launch(
            ["run", "threads.json", "--state", "threads.sqlite"], in: work.path,
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

    /// A helper keeps what an item freed for the next one (up to `keptFreeMemory`) instead
    /// of giving it all back after each and faulting it in again: measured by the minor page
    /// faults of runs of 4 and of 24 JPEGs of 1600×1200 with one worker. When the helper gave
    /// everything back, each item past the fourth cost 860–970 faults (the decoded picture
    /// and libvips' buffers, 4 KiB at a time); kept, about 40.
    @Test func aHelperUsesTheMemoryItsLastItemFreed() throws {
        var faults: [Int: Int] = [:]
        for count in [4, 24] {
            try ImageFixtures.jpegs(count, in: try work.folder("in-\(count)"), width: 1600, height: 1200)
            try work.write(
                """
                {
                  "version": 1,
                  "source": {"type": "directory", "path": "in-\(count)"},
                  "filters": [{"op": "fit", "width": 256, "height": 256}],
                  "output": {"format": "jpeg", "quality": 85},
                  "sink": {"type": "directory", "path": "out-\(count)"},
                  "limits": {"workers": 1}
                }
                """, to: "faults-\(count).json")
            let measured = try ImgpipeBinary.runMeasured(
                ["run", "faults-\(count).json", "--state", "faults-\(count).sqlite", "--quiet"], in: work.path)
            #expect(measured.result.status == 0, "stderr: \(measured.result.stderr)")
            #expect(work.files(under: "out-\(count)").count == count)
            faults[count] = measured.minorFaults
        }
        #expect(faults.values.allSatisfy { $0 > 1000 }, "the faults were counted: \(faults)")
        let perItem = (faults[24, default: 0] - faults[4, default: 0]) / 20
        #expect(perItem < 300, "minor faults: \(faults), \(perItem) an item")
    }

    /// CPU seconds after which a helper is surely at work on a slow PNG: more than starting
    /// and reading the pipeline take (0.04 s here), well short of what the PNG takes (a helper
    /// of the debug build that `make test` runs used 0.42–0.48 s in all). CPU time, unlike the
    /// clock, does not stretch when the machine is busy.
    static let atWork = 0.12

    static func isAtWork(_ helper: pid_t) -> Bool { (ChildProcesses.cpuSeconds(of: helper) ?? 0) >= atWork }

    /// kill -9 of the helper at work: the item goes to a new helper and is made; nothing fails.
    /// `--metrics` counts the restart.
    @Test func aHelperKilledAtWorkIsReplacedAndItsItemMade() throws {
        try inputs(slow: 1, small: 3)
        try pipeline(workers: 1)
        let port = try MetricsTests.freePort()
        let running = try ImgpipeBinary.launch(
            ["run", "pipe.json", "--metrics", "\(port)", "--metrics-linger", "5"], in: work.path)
        var killed: pid_t?
        helpers(
            of: running, until: { _ in killed != nil },
            each: { helper in
                if killed == nil, Self.isAtWork(helper) {
                    kill(helper, SIGKILL)
                    killed = helper
                }
            })
        let end = MetricsTests.poll(port: port) { $0.value("imgpipe_session_active") == 0 }
        #expect(end?.value("imgpipe_pixel_helper_restarts_total") == 1, "\(end?.text ?? "no scrape")")
        let result = running.wait()
        #expect(killed != nil)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(
            result.stderr.contains("pixel helper ended by signal 9 (SIGKILL); the item goes to a new one"),
            "stderr: \(result.stderr)")
        #expect(work.files(under: "out") == ["slow-0.jpg", "z-0.jpg", "z-1.jpg", "z-2.jpg"])
        let report = try status()
        #expect(report.done == 4 && report.failures.isEmpty)
    }

    /// Helpers killed at work, every one: their items fail, each after a second helper, not
    /// the run; `resume --retry-failed` makes them.
    @Test func helpersThatKeepEndingFailTheirItemsAndTheBatchGoesOn() throws {
        try inputs(slow: 2)
        try pipeline(workers: 1)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let seen = helpers(
            of: running,
            each: { helper in
                if Self.isAtWork(helper) { kill(helper, SIGKILL) }
            })
        let result = running.wait()
        #expect(result.status == 1, "stderr: \(result.stderr)")
        #expect(seen.count == 4, "two helpers an item: \(seen)")
        let report = try status()
        #expect(report.done == 0 && report.failures.map(\.key).sorted() == ["slow-0.png", "slow-1.png"])
        for failure in report.failures {
            #expect(failure.reason == "process")
            #expect(
                failure.message == "its pixel helper ended by signal 9 (SIGKILL); a second one ended by signal 9 (SIGKILL)",
                "\(failure.message)")
        }

        let again = try ImgpipeBinary.run(["resume", "pipe.json", "--retry-failed"], in: work.path)
        #expect(again.status == 0, "stderr: \(again.stderr)")
        #expect(work.files(under: "out") == ["slow-0.jpg", "slow-1.jpg"])
    }

    /// kill -9 of the run: its helpers end with it, killed by the kernel (the parent-death
    /// signal), even stopped (SIGSTOP) where they could not see their socket close; a resume
    /// makes what was left. This process adopts the orphaned helpers for the test (a child
    /// subreaper), so it reads how each ended. (Process-wide while the test runs: with other
    /// tests at once it would adopt their orphans too; `make test` runs one test at a time.)
    @Test func killingTheRunEndsItsHelpers() throws {
        try inputs(slow: 4)
        try pipeline(workers: 2)
        #expect(ip_set_child_subreaper(1) == 0)
        defer { _ = ip_set_child_subreaper(0) }
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        let seen = helpers(of: running, until: { $0.count == 2 })
        #expect(seen.count == 2)
        for helper in seen { kill(helper, SIGSTOP) }
        running.signal(SIGKILL)
        running.process.waitUntilExit()
        for helper in seen {
            var status: Int32 = 0
            var reaped: pid_t = 0
            let deadline = Date().addingTimeInterval(10)
            // ECHILD until the kernel has handed it over.
            while reaped != helper, Date() < deadline {
                reaped = waitpid(helper, &status, WNOHANG)
                if reaped != helper { usleep(10_000) }
            }
            #expect(
                reaped == helper && status & 0x7F == SIGKILL,
                "helper \(helper): \(reaped == helper ? PixelHelpers.ending(status).description : "still running")")
            if reaped != helper { kill(helper, SIGKILL) }
        }

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
        #expect(
            report.failures.isEmpty && report.processed == 1 && report.done == 0,
            "processed \(report.processed), done \(report.done), failed \(report.failures)")

        let resumed = try ImgpipeBinary.run(["resume", "pipe.json"], in: work.path)
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out") == ["slow-0.jpg", "z-0.jpg", "z-1.jpg", "z-2.jpg"])
    }

    // MARK: - in process

    /// Log lines as given, for the warnings a session logs.
    struct CapturedLog: LogHandler {
        let lines: LockedBox<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .warning
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            lines.withLock { $0.append("\(event.message)") }
        }
    }

    /// One session of `pipe.json` (workers 2) in this process, its helpers started as `launch`
    /// says, its spec changed by `change` after it is read; the summary and what was logged.
    func session(
        _ launch: PixelHelperLaunch, change: (inout PipelineSpec) -> Void = { _ in }
    ) throws -> (StatusReport, [String]) {
        var spec = try PipelineSpec.load(path: work.url("pipe.json"))
        change(&spec)
        let pipeline = try BuiltPipeline.build(spec, path: work.url("pipe.json"), environment: Environment([:]))
        let lines = LockedBox<[String]>([])
        let logger = Logger(label: "test") { _ in CapturedLog(lines: lines) }
        var options = PipelineRunner.Options()
        options.pixelHelper = launch
        let store = try RunStore(path: work.url("state-\(UUID().uuidString.prefix(8)).sqlite"))
        let runner = PipelineRunner(
            pipeline: pipeline, store: store, reporter: SilentReporter(), logger: logger, options: options)
        let summary = try runner.execute(.fresh(limit: nil, replaceUnfinished: false))
        return (summary, lines.withLock { $0 })
    }

    /// A helper that cannot be run, exits before it is ready or crashes as it starts is no
    /// fault of the items: the session makes them on its threads, saying so once.
    @Test func helpersThatCannotStartLeaveThePixelsToTheThreads() throws {
        try inputs(slow: 0, small: 4)
        try pipeline(workers: 2)
        let launches = [
            (PixelHelperLaunch(executable: "/nonexistent/imgpipe", arguments: []), "No such file or directory"),
            (PixelHelperLaunch(executable: "/bin/false", arguments: []), "it exited with status 1 before it was ready"),
            (
                PixelHelperLaunch(executable: "/bin/sh", arguments: ["-c", "kill -SEGV $$"]),
                "it ended by signal 11 (SIGSEGV) before it was ready"
            ),
        ]
        for (launch, reason) in launches {
            try? FileManager.default.removeItem(atPath: work.url("out"))
            let (summary, lines) = try session(launch)
            #expect(summary.done == 4 && summary.failed == 0, "\(launch.executable): \(summary)")
            #expect(work.files(under: "out").count == 4)
            let warnings = lines.filter { $0.hasPrefix("cannot start a pixel helper") }
            #expect(warnings.count == 1 && warnings[0].contains(reason), "\(launch.executable): \(lines)")
        }
    }

    /// A helper killed as it starts is an end like one at work: with every one killed so, the
    /// items fail after two, naming both ends.
    @Test func helpersKilledAsTheyStartFailTheItems() throws {
        try inputs(slow: 0, small: 2)
        try pipeline(workers: 1)
        let (summary, lines) = try session(PixelHelperLaunch(executable: "/bin/sh", arguments: ["-c", "kill -9 $$"]))
        #expect(summary.done == 0 && summary.failed == 2, "\(summary)")
        let report = try RunStore(path: try #require(summary.session?.stateFile)).failures(runId: summary.run)
        #expect(
            report.map(\.message)
                == Array(
                    repeating: "its pixel helper ended by signal 9 (SIGKILL); a second one ended by signal 9 (SIGKILL)",
                    count: 2), "\(report)")
        #expect(lines.filter { $0.hasPrefix("pixel helper ended by signal 9") }.count == 2, "\(lines)")
    }

    /// The helper in this process's tests: the built binary, started as the command line
    /// starts it; the same outputs as the threads make.
    @Test func theBinarysHelperServesAnInProcessSession() throws {
        try inputs(slow: 0, small: 3)
        try pipeline(workers: 2)
        let (summary, lines) = try session(PixelHelperLaunch(executable: ImgpipeBinary.path, arguments: [PixelHelper.argument]))
        #expect(summary.done == 3 && summary.failed == 0 && lines.isEmpty, "\(summary) \(lines)")
        for name in work.files(under: "out") {
            let made = try ImageFixtures.decode(work.url("out/" + name))
            #expect(made.width == 256, "\(name): \(made.width)×\(made.height)")
        }
    }

    /// A helper makes the processor the run made, not one of its own from the pipeline
    /// file: with the spec changed after it was read (the output's quality), the helpers'
    /// bytes are the run's processor's, not the file's.
    @Test func aHelperMakesTheRunsProcessorNotOneOfTheFiles() throws {
        try inputs(slow: 0, small: 3)
        try pipeline(workers: 2)
        let change = { (spec: inout PipelineSpec) in spec.outputs[0].quality = 20 }
        let (summary, lines) = try session(
            PixelHelperLaunch(executable: ImgpipeBinary.path, arguments: [PixelHelper.argument]), change: change)
        #expect(summary.done == 3 && summary.failed == 0 && lines.isEmpty, "\(summary) \(lines)")
        var spec = try PipelineSpec.load(path: work.url("pipe.json"))
        change(&spec)
        let processor = try BuiltPipeline.build(spec, path: work.url("pipe.json"), environment: Environment([:])).processor
        let asWritten = try BuiltPipeline.build(
            try PipelineSpec.load(path: work.url("pipe.json")), path: work.url("pipe.json"), environment: Environment([:])
        ).processor
        for index in 0..<3 {
            let input = ImageInput.file(work.url("in/z-\(index).jpg"))
            let fields = ItemFields(key: "z-\(index).jpg", stem: "z-\(index)", metadata: nil)
            let made = FileManager.default.contents(atPath: work.url("out/z-\(index).jpg"))
            #expect(made == (try processor.process(input, fields: fields).data), "z-\(index).jpg")
            #expect(made != (try asWritten.process(input, fields: fields).data), "z-\(index).jpg is the file's quality")
        }
    }

    /// The settings a helper is sent come back as the run's: most kinds of filter step, several
    /// outputs with their own steps, limits (an infinite timeout, as a program may set) and
    /// `accept`; a filter's arguments as written (`1.0` keeps its fraction, which `==` of
    /// `JSONValue` does not look at).
    @Test func processorSettingsRoundTripThroughTheirJSON() throws {
        try inputs(slow: 0)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "autorotate"}, {"op": "crop", "aspect": "4:3", "gravity": "attention"},
               {"op": "adjust", "brightness": 0.1, "contrast": 1.2}, {"op": "rotate", "angle": 12.5, "background": "#ff000080"},
               {"op": "pad", "top": 2, "right": 3, "bottom": 4, "left": 5, "color": "#00ff00"},
               {"op": "caption", "top": "a \\"quoted\\" ${LABEL}", "bottom": "{stem}"},
               {"op": "text", "text": "東京", "gravity": "south-east", "opacity": 0.5}, {"op": "sharpen", "sigma": 1.5}],
             "outputs": [
               {"id": "small", "format": "webp", "quality": 70, "filters": [{"op": "fit", "width": 64, "height": 64}, {"op": "sharpen", "sigma": 2.0}]},
               {"id": "big", "format": "png", "name": "{key}-{width}x{height}.{ext}", "filters": [{"op": "fill", "width": 300, "height": 200}]}],
             "accept": {"minWidth": 10, "formats": ["jpeg", "png"]},
             "limits": {"maxPixels": 1000000, "timeout": 12.5},
             "sink": {"type": "directory", "path": "out"}}
            """, to: "all.json")
        var spec = try PipelineSpec.load(path: work.url("all.json"))
        spec.limits.timeout = .infinity
        let settings = try BuiltPipeline.build(
            spec, path: work.url("all.json"), environment: Environment(["LABEL": "label"])
        ).processor.settings
        #expect(settings.filters.count == 8 && settings.outputs.count == 2)
        let payload = try PixelMessage.configuration(settings)
        let read = try PixelHelper.makeProcessor(payload).settings
        #expect(read == settings)
        #expect(read.limits.timeout == .infinity && read.limits.maxPixels == 1_000_000)
        // An output's filters go expanded (`OutputPlan.filters`); the file's own, unexpanded, are
        // not sent at all.
        #expect(read.outputs.map(\.filters.count) == [2, 1])
        #expect(read.outputs.allSatisfy { $0.spec.filters.isEmpty })
        #expect(read.outputs[1].spec.name.raw == "{key}-{width}x{height}.{ext}")
        guard case .caption(let caption) = read.filters[5] else {
            Issue.record("not a caption: \(read.filters[5])")
            return
        }
        #expect(caption.top == "a \"quoted\" label", "the value the run expanded")
    }

    // MARK: - the wire

    /// Answers read back as written; a frame cut short, or saying more than it holds, is
    /// refused rather than read past its end.
    @Test func answersRoundTripAndMalformedOnesAreRefused() throws {
        let image = ProcessedImage(
            output: "thumb", data: Data([1, 2, 3]), width: 3, height: 1, inputWidth: 30, inputHeight: 10,
            inputFormat: .png, sha256: "ab", inputBytes: 99, inputSHA256: "cd")
        let answer = PixelMessage.answer(.success(.processed([image, image])))
        let payload = answer.payload.reduce(Data(), +)
        guard case .outcome(.success(.processed(let images))) = try PixelMessage.read(answer.header, payload: payload) else {
            Issue.record("not read back as processed")
            return
        }
        #expect(
            images.count == 2
                && images.allSatisfy {
                    $0.output == "thumb" && $0.data == Data([1, 2, 3]) && $0.width == 3 && $0.inputHeight == 10
                        && $0.inputFormat == .png
                        && $0.sha256 == "ab" && $0.inputBytes == 99 && $0.inputSHA256 == "cd"
                })
        let failure = PixelMessage.answer(.failure(ItemFailure(.decode, "cut short", httpStatus: nil)))
        guard case .outcome(.failure(let read)) = try PixelMessage.read(failure.header, payload: Data()) else {
            Issue.record("not read back as a failure")
            return
        }
        #expect(read == ItemFailure(.decode, "cut short"))

        #expect(throws: WireReader.Malformed.self) { try PixelMessage.read(Array(answer.header.dropLast()), payload: payload) }
        #expect(throws: WireReader.Malformed.self) { try PixelMessage.read(answer.header, payload: payload.dropLast()) }
        #expect(throws: WireReader.Malformed.self) { try PixelMessage.read(answer.header, payload: payload + Data([0])) }
        // A quality search's choice and a chosen format come back as sent; an SSIM that is
        // not a finite number, or one without a quality, or an unknown format is refused.
        let searched = ProcessedImage(
            output: "thumb", data: Data([1, 2, 3]), width: 3, height: 1, inputWidth: 30, inputHeight: 10,
            inputFormat: .png, sha256: "ab", inputBytes: 99, inputSHA256: "cd", choice: QualityChoice(quality: 61, ssim: 0.97),
            format: .avif)
        let chosen = PixelMessage.answer(.success(.processed([searched])))
        guard case .outcome(.success(.processed(let back))) = try PixelMessage.read(chosen.header, payload: Data([1, 2, 3]))
        else {
            Issue.record("not read back as processed")
            return
        }
        #expect(back.first?.choice == QualityChoice(quality: 61, ssim: 0.97) && back.first?.format == .avif)
        for (quality, ssim, format) in [(61, "nan", ""), (61, "inf", ""), (-1, "0.97", ""), (61, "0.97", "bmp"), (101, "", "")] {
            var fields = WireFields()
            fields.put(PixelMessage.Kind.processed.rawValue)
            fields.put(1)
            fields.put("thumb")
            for number in [3, 1, 30, 10, 99, 3] { fields.put(number) }
            fields.put("png")
            fields.put("ab")
            fields.put("cd")
            fields.put(quality)
            fields.put(ssim)
            fields.put(format)
            #expect(throws: WireReader.Malformed.self, "\(quality) \(ssim) \(format)") {
                try PixelMessage.read(fields.bytes, payload: Data([1, 2, 3]))
            }
        }
        var huge = WireFields()
        huge.put(PixelMessage.Kind.skipped.rawValue)
        huge.put(Int.max)
        #expect(throws: WireReader.Malformed.self) { try PixelMessage.read(huge.bytes, payload: Data()) }
    }
}

/// What a helper is given: the run's processor with the values its filters use, not the
/// run's environment (it decodes hostile files: `/proc/PID/environ` must hold no secret);
/// and a pipeline file of any size makes its pixels in helpers.
@Suite("Pixel helpers hold no secret", .serialized)
struct PixelHelperEnvironmentTests {
    let work: TemporaryDirectory

    init() throws {
        work = try TemporaryDirectory("imgpipe-helper-env")
        for index in 0..<3 {
            try ImageFixtures.jpeg(at: work.url("in/img-\(index).jpg"), width: 640, height: 480)
        }
    }

    @Test func aHelpersEnvironmentHoldsNoneOfTheRunsValues() throws {
        let secret = "secret-\(UUID().uuidString.prefix(10))"
        let label = "label-\(UUID().uuidString.prefix(10))"
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 200, "height": 200}, {"op": "caption", "bottom": "${CAPTION_LABEL}"}],
             "sink": {"type": "directory", "path": "out"}, "limits": {"workers": 1}}
            """, to: "pipe.json")
        let environment = [
            "UPLOAD_TOKEN": secret, "AWS_SECRET_ACCESS_KEY": secret, "IMGPIPE_STATE": "postgres://u:\(secret)@h/d",
            "CAPTION_LABEL": label,
        ]
        // The run on a state file of its own (IMGPIPE_STATE would name another).
        let running = try ImgpipeBinary.launch(
            ["run", "pipe.json", "--state", "pipe.sqlite"], in: work.path,
            environment: environment)
        var environs: [pid_t: String] = [:]
        let deadline = Date().addingTimeInterval(60)
        while running.process.isRunning, Date() < deadline {
            for helper in ChildProcesses.pixelHelpers(of: running.process.processIdentifier) where environs[helper] == nil {
                if let data = FileManager.default.contents(atPath: "/proc/\(helper)/environ"), !data.isEmpty {
                    environs[helper] = String(decoding: data, as: UTF8.self)
                }
            }
            usleep(2000)
        }
        let result = running.wait()
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(!result.stderr.contains("cannot start a pixel helper"), "the pixels were made on threads: \(result.stderr)")
        #expect(!environs.isEmpty, "no helper was seen")
        for (helper, text) in environs {
            #expect(!text.contains(secret) && !text.contains(label), "helper \(helper)'s environment: \(text)")
            #expect(text.contains("PATH="), "helper \(helper) lost what it needs: \(text)")
        }
        // The caption's value reached the helper all the same: the same bytes as on threads.
        let document = try String(contentsOfFile: work.url("pipe.json"), encoding: .utf8)
        try work.write(document.replacingOccurrences(of: #""path": "out""#, with: #""path": "threads""#), to: "threads.json")
        let threads = try ImgpipeBinary.run(
            ["run", "threads.json", "--state", "threads.sqlite"], in: work.path,
            environment: environment.merging(["IMGPIPE_PIXEL_HELPERS": "0"]) { $1 })
        #expect(threads.status == 0, "stderr: \(threads.stderr)")
        #expect(work.files(under: "out").count == 3)
        for file in work.files(under: "out") {
            #expect(
                FileManager.default.contents(atPath: work.url("out/" + file))
                    == FileManager.default.contents(atPath: work.url("threads/" + file)),
                "\(file) differs from the threads' output")
        }
    }

    /// A helper runs as the run's user: it could read the run's own environment (and its
    /// memory) through /proc while the run was dumpable. Run as `nobody`, another process
    /// of that user cannot read the run's `/proc/PID/environ`.
    @Test(.enabled(if: PixelHelperEnvironmentTests.nobodyCanRun, "needs setpriv and a binary that nobody may run"))
    func anotherProcessOfTheRunsUserCannotReadItsEnvironment() throws {
        let secret = "secret-\(UUID().uuidString.prefix(10))"
        let large = try ImageFixtures.photo(width: 300, height: 300).resized(horizontal: 10, vertical: 10)
        for index in 0..<3 { try ImageFixtures.write(large, to: work.url("in/slow-\(index).png[compression=1]")) }
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 200, "height": 200}],
             "sink": {"type": "directory", "path": "out"}, "limits": {"workers": 1}}
            """, to: "pipe.json")
        chmod(work.path, 0o777)
        let running = try ImgpipeBinary.launch(
            executable: "/usr/bin/setpriv",
            Self.asNobody + [ImgpipeBinary.path, "run", "pipe.json", "--state", "pipe.sqlite"],
            in: work.path, environment: ["UPLOAD_TOKEN": secret])
        let run = running.process.processIdentifier
        let deadline = Date().addingTimeInterval(60)
        while running.process.isRunning, Date() < deadline, ChildProcesses.pixelHelpers(of: run).isEmpty { usleep(2000) }
        #expect(!ChildProcesses.pixelHelpers(of: run).isEmpty, "no helper was seen")
        let reader = Process()
        reader.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        reader.arguments = Self.asNobody + ["cat", "/proc/\(run)/environ"]
        let output = Pipe()
        reader.standardOutput = output
        reader.standardError = FileHandle.nullDevice
        try reader.run()
        let read = output.fileHandleForReading.readDataToEndOfFile()
        reader.waitUntilExit()
        let result = running.wait()
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(
            reader.terminationStatus != 0 && read.range(of: Data(secret.utf8)) == nil,
            "another process of the run's user read its environment")
    }

    static let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]

    /// Whether the binary can be run as `nobody` here (setpriv exists, every folder on the
    /// way to the binary may be entered by others).
    static let nobodyCanRun: Bool = {
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return false }
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        probe.arguments = asNobody + [ImgpipeBinary.path, "--version"]
        probe.standardOutput = FileHandle.nullDevice
        probe.standardError = FileHandle.nullDevice
        guard (try? probe.run()) != nil else { return false }
        probe.waitUntilExit()
        return probe.terminationStatus == 0
    }()

    /// A configuration with no output (never sent by a run) is refused with an error, where
    /// the processor's precondition used to trap the helper.
    @Test func aConfigurationWithoutOutputsIsRefused() throws {
        let empty = ProcessorSettings(filters: [], outputs: [], limits: Limits(), baseDirectory: "/", accept: AcceptRules())
        let payload = try PixelMessage.configuration(empty)
        #expect(throws: DecodingError.self) { try PixelHelper.makeProcessor(payload) }
    }

    /// The helper is sent the run's processor, not the pipeline file: a file with a 64 MiB
    /// comment (more than a helper's message may hold) still has its pixels made in helpers.
    @Test func aHugePipelineFileStillMakesItsPixelsInHelpers() throws {
        let filler = String(repeating: "x", count: (64 << 20) + 1024)
        try work.write(
            """
            {"version": 1, "//": "\(filler)", "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "sink": {"type": "directory", "path": "out"}, "limits": {"workers": 1}}
            """, to: "big.json")
        let result = try ImgpipeBinary.run(["run", "big.json"], in: work.path)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(!result.stderr.contains("cannot start a pixel helper"), "the pixels were made on threads: \(result.stderr)")
        #expect(work.files(under: "out").count == 3)
    }
}
