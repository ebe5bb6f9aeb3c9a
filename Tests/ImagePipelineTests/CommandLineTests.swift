import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// The built `imgpipe` binary, end to end: exit codes, messages, files, state.
@Suite("imgpipe command line", .serialized)
struct CommandLineTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-cli") }

    /// Writes `pipe.json` reading `in/` and writing `out/`.
    @discardableResult
    func pipeline(
        filters: String = #"[{"op": "autorotate"}, {"op": "fit", "width": 256, "height": 256}]"#,
        output: String = #"{"format": "jpeg", "quality": 85}"#, limits: String = "{}"
    ) throws -> String {
        try work.write(
            """
            {
              "version": 1,
              "source": {"type": "directory", "path": "in"},
              "filters": \(filters),
              "output": \(output),
              "sink": {"type": "directory", "path": "out"},
              "limits": \(limits)
            }
            """, to: "pipe.json")
    }

    /// `count` copies of one 1600×1200 photo-like JPEG, as `in/batch/img-0001.jpg` …
    func corpus(_ count: Int) throws -> [String] {
        let original = work.url("original.jpg")
        try ImageFixtures.write(try ImageFixtures.photo(width: 1600, height: 1200), to: original)
        try work.folder("in/batch")
        return try (1...count).map { index in
            let key = String(format: "batch/img-%04d.jpg", index)
            try FileManager.default.copyItem(atPath: original, toPath: work.url("in/" + key))
            return key
        }
    }

    func imgpipe(_ arguments: String...) throws -> CommandResult {
        try ImgpipeBinary.run(arguments, in: work.path)
    }

    func status() throws -> StatusReport {
        let result = try imgpipe("status", "pipe.json", "--json")
        #expect(result.status == 0, "status failed: \(result.stderr)")
        return try result.decoded(StatusReport.self)
    }

    func store() throws -> RunStore { try RunStore(path: work.url(".imgpipe/pipe.sqlite")) }

    /// Waits until at least `count` outputs exist (or 60 s pass).
    func waitForOutputs(_ count: Int, while running: RunningCommand) {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, running.process.isRunning {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: work.url("out/batch"))) ?? []
            if files.count >= count { return }
            usleep(5000)
        }
    }

    // MARK: run

    @Test func runWritesEveryOutputAndRecordsIt() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 800, height: 600)
        try ImageFixtures.jpeg(at: work.url("in/nested/deeper/b.JPG"), width: 300, height: 200, orientation: 6)
        try ImageFixtures.rgbaPNG(at: work.url("in/c.png"), width: 100, height: 100)
        try work.write("not listed", to: "in/notes.txt")

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stdout.contains("3 done, 0 skipped, 0 failed"))
        #expect(work.files(under: "out") == ["a.jpg", "c.jpg", "nested/deeper/b.jpg"])
        let a = try ImageFixtures.decode(work.url("out/a.jpg"))
        #expect((a.width, a.height, a.bands) == (256, 192, 3))
        let b = try ImageFixtures.decode(work.url("out/nested/deeper/b.jpg"))
        #expect((b.width, b.height) == (171, 256), "orientation 6 applied before fitting")
        let c = try ImageFixtures.decode(work.url("out/c.jpg"))
        #expect((c.width, c.height, c.bands) == (100, 100, 3))

        let report = try status()
        #expect(report.total == 3)
        #expect(report.done == 3)
        #expect(report.failed == 0)
        #expect(report.pending == 0)
        #expect(report.failures.isEmpty)
        #expect(report.sinks["directory-0"] == DeliveryCounts(done: 3, failed: 0, pending: 0))
        #expect(report.run == 1)
    }

    /// `run --json` ends with the run's report as `status --json` gives it, plus what the
    /// session did; `status` has no session.
    @Test func aSessionEndsWithTheRunsReportAndWhatItDid() throws {
        try pipeline()
        for name in ["a", "b", "c"] {
            try ImageFixtures.jpeg(at: work.url("in/\(name).jpg"), width: 64, height: 64)
        }
        try work.write("not an image", to: "in/d.jpg")
        let result = try imgpipe("run", "pipe.json", "--json")
        #expect(result.status == 1, "stderr: \(result.stderr)")
        let ended = try result.decoded(StatusReport.self)
        let status = try status()
        #expect((ended.run, ended.total, ended.done, ended.failed, ended.pending) == (status.run, 4, 3, 1, 0))
        #expect(ended.sinks == status.sinks && ended.sinks["directory-0"] == DeliveryCounts(done: 3, failed: 0, pending: 0))
        #expect(ended.failures == status.failures && ended.failures.map(\.key) == ["d.jpg"], "\(ended.failures)")
        #expect(ended.state == "finished" && ended.failuresByReason == status.failuresByReason)
        let session = try #require(ended.session)
        #expect((session.done, session.skipped, session.failed, session.ended) == (3, 0, 1, 4))
        #expect(!session.interrupted && session.listingError == nil && session.worker == nil)
        #expect(session.stateFile?.hasSuffix(".imgpipe/pipe.sqlite") == true, "\(String(describing: session.stateFile))")
        #expect(status.session == nil)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let members = try #require(json["session"] as? [String: Any])
        #expect(members["ended"] as? Int == 4 && members["itemsPerSecond"] is Double, "\(members)")
        let shown = try #require(
            try JSONSerialization.jsonObject(with: Data(imgpipe("status", "pipe.json", "--json").stdout.utf8)) as? [String: Any])
        #expect(shown["session"] == nil && Set(shown.keys).union(["session"]) == Set(json.keys), "\(shown.keys) \(json.keys)")

        // A resume of the finished run: the same report, a session that ended nothing.
        let again = try imgpipe("resume", "pipe.json", "--json").decoded(StatusReport.self)
        #expect((again.run, again.done, again.failed) == (ended.run, 3, 1) && again.session?.ended == 0)
    }

    @Test func limitTakesTheFirstItemsOfTheFeed() throws {
        try pipeline()
        for name in ["a", "b", "c", "d"] {
            try ImageFixtures.jpeg(at: work.url("in/\(name).jpg"), width: 64, height: 64)
        }
        let result = try imgpipe("run", "pipe.json", "--limit", "2", "--json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(try result.decoded(StatusReport.self).total == 2)
        #expect(work.files(under: "out") == ["a.jpg", "b.jpg"])
    }

    /// `photo.jpg` and `photo.png` both want `photo.jpg`: the first in feed order keeps it,
    /// the second gets its own (the stem and 8 hex digits of its key's SHA-256); a name that
    /// no stem changes (`"name": "same.jpg"`) still fails the second item, naming the first.
    @Test func twoItemsWithOneOutputNameGetTwoNames() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/photo.jpg"), width: 64, height: 64)
        try ImageFixtures.rgbaPNG(at: work.url("in/photo.png"), width: 64, height: 48)
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let unique = "photo-" + sha256Hex("photo.png").prefix(8) + ".jpg"
        #expect(work.files(under: "out") == [unique, "photo.jpg"].sorted())
        // The plain name holds the first item's picture (opaque quadrants, 64x64), the other
        // the PNG's (64x48, flattened).
        let kept = try ImageFixtures.decode(work.url("out/photo.jpg"))
        #expect(kept[5, 5][0] > 180 && kept[5, 5][1] < 90 && kept.height == 64)
        #expect(try ImageFixtures.decode(work.url("out/\(unique)")).height == 48)
        let exported = try imgpipe("export", "pipe.json", "--format", "jsonl").jsonLines()
        let names = exported.compactMap { (($0["outputs"] as? [String: Any])?["default"] as? [String: Any])?["name"] as? String }
        #expect(names.sorted() == [unique, "photo.jpg"].sorted(), "\(exported)")
        // Again with `run --new`: the same names, from the same items.
        #expect(try imgpipe("run", "pipe.json", "--new").status == 0)
        #expect(try ImageFixtures.decode(work.url("out/\(unique)")).height == 48)

        try pipeline(output: #"{"format": "jpeg", "name": "same.jpg"}"#)
        let fixed = try imgpipe("run", "pipe.json", "--new")
        #expect(fixed.status == 1)
        let failures = try status().failures
        #expect(failures.map(\.key) == ["photo.png"])
        #expect(failures.first?.message.contains("output name \"same.jpg\" is already used by item \"photo.jpg\"") == true)
    }

    @Test func mixedGoodAndHostileFilesExitOneWithAReasonEach() throws {
        try pipeline(limits: #"{"maxPixels": 5000000}"#)
        try ImageFixtures.jpeg(at: work.url("in/good1.jpg"), width: 640, height: 480)
        try ImageFixtures.write(try ImageFixtures.photo(width: 300, height: 200), to: work.url("in/good2.webp"))
        try ImageFixtures.write(try ImageFixtures.photo(width: 700, height: 500), to: work.url("in/whole.jpg"))
        try ImageFixtures.truncate(work.url("in/whole.jpg"), to: work.url("in/truncated.jpg"), keeping: 0.4)
        try FileManager.default.removeItem(atPath: work.url("in/whole.jpg"))
        try work.write("", to: "in/empty.jpg")
        try work.write("<html><body>Not Found</body></html>", to: "in/error-page.jpg")
        try work.write(#"<svg xmlns="http://www.w3.org/2000/svg"/>"#, to: "in/drawing.png")
        try ImageFixtures.pngHeaderOnly(at: work.url("in/bomb.png"), width: 50_000, height: 50_000)

        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 1, "stdout: \(result.stdout) stderr: \(result.stderr)")
        let bad = ["bomb.png", "drawing.png", "empty.jpg", "error-page.jpg", "truncated.jpg"]
        for key in bad {
            #expect(result.stderr.contains("failed: \(key): "), "no reason printed for \(key)")
        }
        #expect(work.files(under: "out") == ["good1.jpg", "good2.jpg"])
        let reasons = Dictionary(uniqueKeysWithValues: try status().failures.map { ($0.key, $0.reason) })
        #expect(
            reasons == [
                "bomb.png": "limit", "drawing.png": "decode", "empty.jpg": "decode",
                "error-page.jpg": "decode", "truncated.jpg": "decode",
            ])
    }

    // MARK: resume

    @Test func killNineThenResumeFinishesEveryItemExactlyOnce() throws {
        try pipeline(limits: #"{"workers": 1}"#)
        let keys = try corpus(240)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        waitForOutputs(25, while: running)
        running.signal(SIGKILL)
        #expect(running.wait().status != 0)

        let before = try store()
        let run = try #require(try before.latestRun())
        #expect(run.state == .running, "a killed run is left unfinished")
        let doneBefore = try before.items(runId: run.id).filter { $0.status == .done }
        // Files appear just before their item is recorded done, so the count can trail.
        #expect(!doneBefore.isEmpty)
        #expect(doneBefore.count < keys.count, "the run finished before it could be killed")

        // A new run refuses to start over the unfinished one.
        let refused = try imgpipe("run", "pipe.json")
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("imgpipe resume pipe.json"))

        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")

        let after = try store()
        let items = try after.items(runId: run.id)
        #expect(items.count == keys.count)
        #expect(items.allSatisfy { $0.status == .done })
        #expect(items.allSatisfy { $0.attempts == 1 }, "an item was processed twice")
        for old in doneBefore {
            let now = try #require(items.first { $0.key == old.key })
            #expect(now.updatedAt == old.updatedAt, "\(old.key) was touched again by resume")
        }
        let expected = keys.sorted()
        #expect(work.files(under: "out") == expected, "missing, extra or partial files in out/")
        for key in [keys.first!, keys[keys.count / 2], keys.last!] {
            let pixels = try ImageFixtures.decode(work.url("out/" + key))
            #expect((pixels.width, pixels.height) == (256, 192))
        }
        #expect(
            !FileManager.default.fileExists(atPath: work.url(".imgpipe/pipe.work/run-\(run.id)")),
            "staged outputs left behind")
        #expect(try after.latestRun()?.state == .finished)
    }

    @Test func interruptSavesStateAndSaysHowToResume() throws {
        try pipeline(limits: #"{"workers": 1}"#)
        let keys = try corpus(150)
        let running = try ImgpipeBinary.launch(["run", "pipe.json"], in: work.path)
        waitForOutputs(10, while: running)
        running.signal(SIGINT)
        let result = running.wait()
        #expect(result.status == 130, "stdout: \(result.stdout) stderr: \(result.stderr)")
        #expect(result.stdout.contains("imgpipe resume pipe.json"))
        let interrupted = try #require(try store().latestRun())
        #expect(interrupted.state == .interrupted)
        let partial = try store().counts(runId: interrupted.id)
        #expect(partial.done < keys.count)
        #expect(partial.done == work.files(under: "out").count, "every item marked done has its file")
        // The feed is listed as slots free up: stopped early, the run has only part of it,
        // and its counts say so rather than pass for the whole feed.
        let stopped = try status()
        #expect(!stopped.feedComplete && stopped.total < keys.count, "total \(stopped.total)")
        #expect(result.stdout.contains(" of \(stopped.total) listed so far"), "stdout: \(result.stdout)")
        let text = try imgpipe("status", "pipe.json")
        #expect(
            text.stdout.contains("items: \(stopped.total) total listed so far (the feed is not listed to its end)"),
            "stdout: \(text.stdout)")

        // Changing what outputs look like blocks resume, naming what changed.
        try pipeline(filters: #"[{"op": "fit", "width": 128, "height": 128}]"#, limits: #"{"workers": 1}"#)
        let refused = try imgpipe("resume", "pipe.json")
        #expect(refused.status == 2)
        #expect(
            refused.stderr.contains("filters changed since run #1 started (filters: autorotate, fit → fit)"),
            "stderr: \(refused.stderr)")

        try pipeline(limits: #"{"workers": 1}"#)
        let resumed = try imgpipe("resume", "pipe.json")
        #expect(resumed.status == 0, "stderr: \(resumed.stderr)")
        #expect(work.files(under: "out").count == keys.count)
        let again = try imgpipe("resume", "pipe.json")
        #expect(again.status == 0)
        #expect(again.stderr.contains("already finished"))
    }

    @Test func resumeRetriesFailedItemsOnlyWhenAsked() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/good.jpg"), width: 64, height: 64)
        try work.write("garbage", to: "in/later.jpg")
        #expect(try imgpipe("run", "pipe.json").status == 1)
        // The user fixes the file, then retries.
        try ImageFixtures.jpeg(at: work.url("in/later.jpg"), width: 64, height: 64)
        let plain = try imgpipe("resume", "pipe.json")
        #expect(plain.status == 1)
        #expect(plain.stderr.contains("--retry-failed"))

        // A sink added, removed or renamed since the run began: resume refuses, naming both
        // lists, where it failed the pending deliveries of a sink no longer there and gave
        // the new one nothing.
        let original = try String(contentsOfFile: work.url("pipe.json"), encoding: .utf8)
        try work.write(
            original.replacingOccurrences(
                of: #""sink": {"type": "directory", "path": "out"}"#,
                with: #""sinks": [{"type": "directory", "path": "more"}, {"type": "directory", "path": "out"}]"#), to: "pipe.json"
        )
        let refused = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(refused.status == 2)
        #expect(
            refused.stderr.contains("sinks changed since run #1 started (directory-0 → directory-0, directory-1)"),
            "stderr: \(refused.stderr)")
        #expect(work.files(under: "more").isEmpty, "nothing was delivered")
        #expect(try status().failed == 1, "the failed item was not requeued")
        try work.write(original, to: "pipe.json")

        let retried = try imgpipe("resume", "pipe.json", "--retry-failed")
        #expect(retried.status == 0, "stderr: \(retried.stderr)")
        #expect(work.files(under: "out") == ["good.jpg", "later.jpg"])
    }

    // MARK: other commands

    @Test func dryRunWritesPreviewsAndNoState() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("samples/one.jpg"), width: 1000, height: 500)
        try ImageFixtures.greyAlphaPNG(at: work.url("samples/two.png"), width: 100, height: 100, grey: 90)
        let result = try imgpipe("dry-run", "pipe.json", "--samples", "samples", "--out", "previews")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stdout.contains("one.jpg") && result.stdout.contains("1000×500") && result.stdout.contains("256×128"))
        #expect(
            work.files(under: "previews") == [
                "before/one.jpg.jpg", "before/two.png.png", "crop/one.jpg.png", "crop/two.png.png",
                "index.html", "one.jpg", "two.jpg",
            ])
        let preview = try ImageFixtures.decode(work.url("previews/one.jpg"))
        #expect((preview.width, preview.height) == (256, 128))
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")), "dry-run created a state file")
        #expect(!FileManager.default.fileExists(atPath: work.url("out")), "dry-run wrote to a sink")
    }

    @Test func dryRunDefaultsToThePipelinesOwnSource() throws {
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/x.jpg"), width: 300, height: 300)
        let result = try imgpipe("dry-run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(work.files(under: "preview/pipe").contains("x.jpg"))
    }

    @Test func validateExitsTwoNamingThePath() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "autorotate"}, {"op": "fit", "width": "wide"}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "bad.json")
        let bad = try imgpipe("validate", "bad.json")
        #expect(bad.status == 2)
        #expect(bad.stderr.contains(#"filters[1].width: expected an integer from 1 to 100000, got "wide""#))

        try pipeline()
        try work.folder("in")  // validate checks that the source folder exists, as run does
        let good = try imgpipe("validate", "pipe.json")
        #expect(good.status == 0)
        #expect(good.stdout.contains("valid"))

        let run = try imgpipe("run", "bad.json")
        #expect(run.status == 2, "an invalid pipeline is refused before any work")
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe/bad.sqlite")))
    }

    /// `out\xff` used to read as "" and the run wrote into the pipeline's own folder.
    @Test func validateRefusesInvalidUTF8NamingThePathLineAndColumn() throws {
        let bytes = Data(
            #"{"version": 1, "source": {"type": "directory", "path": "in"},"#.utf8 + [0x0A]
                + #" "sinks": [{"type": "directory", "path": "out"#.utf8 + [0xFF] + #""}]}"#.utf8)
        try bytes.write(to: URL(fileURLWithPath: work.url("utf8.json")))
        let result = try imgpipe("validate", "utf8.json")
        #expect(result.status == 2)
        #expect(
            result.stderr.contains("utf8.json: sinks[0].path: invalid JSON at line 2, column 46: invalid UTF-8"),
            "stderr: \(result.stderr)")
    }

    /// What a newcomer types: spellings other tools accept, a folder for a file, a
    /// negative limit, a misspelt command. Each gets an answer that says what to do.
    @Test func commonSpellingsAndMistakesGetClearAnswers() throws {
        try pipeline(
            filters: #"[{"op": "fill", "width": 32, "height": 32, "gravity": "center"}]"#,
            output: #"{"format": "jpg"}"#)
        try work.folder("in")
        let valid = try imgpipe("validate", "pipe.json")
        #expect(valid.status == 0, "stderr: \(valid.stderr)")
        for corner in ["northwest", "northeast", "southwest", "southeast"] {
            try pipeline(filters: #"[{"op": "fill", "width": 32, "height": 32, "gravity": "\#(corner)"}]"#)
            let spelt = try imgpipe("validate", "pipe.json")
            #expect(spelt.status == 0, "\(corner): \(spelt.stderr)")
        }
        try pipeline(output: #"{"format": "jepg"}"#)
        let typo = try imgpipe("validate", "pipe.json")
        #expect(
            typo.status == 2
                && typo.stderr.contains(
                    #"output.format: expected one of jpeg, png, webp, avif, tiff, gif, best, got "jepg" (did you mean "jpeg"?)"#),
            "stderr: \(typo.stderr)")
        try work.folder("jobs")
        let folder = try imgpipe("run", "jobs")
        #expect(
            folder.status == 2 && folder.stderr.contains("error: jobs: a folder, not a pipeline file"), "stderr: \(folder.stderr)"
        )
        #expect(!folder.stderr.contains("NSCocoaErrorDomain"))
        let negative = try imgpipe("run", "pipe.json", "--limit", "-1")
        #expect(
            negative.status == 2 && negative.stderr.contains("error: --limit must be a positive integer, got -1"),
            "stderr: \(negative.stderr)")
        let misspelt = try imgpipe("dryrun", "pipe.json")
        #expect(misspelt.status == 2 && misspelt.stderr.contains("unknown command `dryrun` (did you mean `dry-run`?)"))
        let workers = try imgpipe("run", "pipe.json", "-j", "-2")
        #expect(workers.status == 2 && workers.stderr.contains("--workers must be 0 (one per core) or more, got -2"))
        // Refused by every command, those that log nothing too.
        for command in ["run", "status", "validate"] {
            let level = try ImgpipeBinary.run([command, "pipe.json"], in: work.path, environment: ["IMGPIPE_LOG": "verbose"])
            #expect(
                level.status == 2 && level.stderr.contains("IMGPIPE_LOG must be one of trace, debug, info"),
                "\(command): \(level.stderr)")
        }
        let unknown = try imgpipe("frobnicate", "--help")
        #expect(unknown.status == 2 && unknown.stdout.isEmpty && unknown.stderr.contains("unknown command `frobnicate`"))
        for result in [typo, folder, negative, misspelt] { #expect(!result.stderr.contains("Error:")) }
    }

    /// `status` with nothing else finds the one state file, `--runs` lists the runs,
    /// `--run N` shows one, and the report ends with the command to run next.
    @Test func statusFindsTheStateFileListsRunsAndSaysWhatNext() throws {
        let none = try imgpipe("status")
        #expect(none.status == 2 && none.stderr.contains("nothing has run here"))
        try pipeline()
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 64, height: 64)
        try work.write("not an image", to: "in/b.jpg")
        #expect(try imgpipe("run", "pipe.json").status == 1)
        #expect(try imgpipe("run", "pipe.json", "--new").status == 1)
        let latest = try imgpipe("status")
        #expect(latest.status == 0, "stderr: \(latest.stderr)")
        #expect(latest.stdout.contains("run #2") && latest.stdout.contains("1 done, 0 skipped, 1 failed"))
        #expect(
            latest.stdout.contains(
                "  decode (1, e.g. b.jpg): remove or replace the file: it is not an image imgpipe reads, "
                    + "then `imgpipe resume pipe.json --retry-failed=decode`"),
            "stdout: \(latest.stdout)")
        #expect(latest.stdout.contains("outputs: out/ (sink directory-0)"), "stdout: \(latest.stdout)")
        let runs = try imgpipe("status", "--runs")
        #expect(runs.stdout.contains("run #2: finished") && runs.stdout.contains("run #1: finished"), "stdout: \(runs.stdout)")
        let first = try imgpipe("status", "pipe.json", "--run", "1", "--json").decoded(StatusReport.self)
        #expect(first.run == 1 && first.state == "finished" && first.failed == 1)
        let missing = try imgpipe("status", "--run", "9")
        #expect(missing.status == 2 && missing.stderr.contains("has no run #9"))
        try FileManager.default.copyItem(atPath: work.url(".imgpipe/pipe.sqlite"), toPath: work.url(".imgpipe/copy.sqlite"))
        let several = try imgpipe("status")
        #expect(several.status == 2 && several.stderr.contains("several state files"), "stderr: \(several.stderr)")
    }

    /// `${NAME}` works in filter strings as everywhere else: a caption read from the
    /// environment is drawn, and an unset one stops the run before any work, naming where.
    @Test func variablesAreExpandedInCaptions() throws {
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 200, height: 150)
        try pipeline(filters: #"[{"op": "caption", "top": "${TOP_LINE}"}]"#, output: #"{"format": "png"}"#)
        let unset = try imgpipe("run", "pipe.json")
        #expect(
            unset.status == 2 && unset.stderr.contains("filters[0].top: environment variable TOP_LINE is not set"),
            "stderr: \(unset.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.url("out/a.png")))
        let preview = try imgpipe("dry-run", "pipe.json", "--samples", "in", "--out", "preview")
        #expect(preview.status == 2 && preview.stderr.contains("TOP_LINE is not set"), "stderr: \(preview.stderr)")

        let fromVariable = try ImgpipeBinary.run(["run", "pipe.json", "--new"], in: work.path, environment: ["TOP_LINE": "WWWW"])
        #expect(fromVariable.status == 0, "stderr: \(fromVariable.stderr)")
        let drawn = try ImageFixtures.decode(work.url("out/a.png"))
        try FileManager.default.removeItem(atPath: work.url("out"))
        try pipeline(filters: #"[{"op": "caption", "top": "WWWW"}]"#, output: #"{"format": "png"}"#)
        #expect(try imgpipe("run", "pipe.json", "--new").status == 0)
        let literal = try ImageFixtures.decode(work.url("out/a.png"))
        #expect(drawn.maxDifference(from: literal, rows: 0..<drawn.height) == 0, "the variable's text was not what was drawn")
    }

    /// Captions of many texts, so in many sizes, over 300 items: libvips' autofit tries one
    /// resolution after another, each change clears Pango's font map, and Pango 1.50's own
    /// matching threads, ending, used the hash of patterns being destroyed (`CPangoGuard`).
    /// Before the guard the release binary died with SIGFPE in 5 of 9 such runs (RESULTS.md,
    /// fourteenth session); every item must be made and the run exit 0. A stress test: it
    /// failed once in three runs without the guard; the guard itself is checked by
    /// `pangosFontMatchingRunsOnTheTextThread`.
    @Test func captionsInManySizesOverAWholeBatch() throws {
        let folder = try work.folder("in")
        try ImageFixtures.write(try ImageFixtures.photo(width: 320, height: 213), to: folder + "/p0.jpg")
        for index in 1..<300 {
            try FileManager.default.linkItem(atPath: folder + "/p0.jpg", toPath: folder + "/p\(index).jpg")
        }
        try pipeline(
            filters:
                #"[{"op": "fit", "width": 256, "height": 256}, {"op": "caption", "top": "NUMBER {stem}", "bottom": "ONE DOES NOT SIMPLY"}]"#
        )
        let result = try imgpipe("run", "pipe.json")
        #expect(result.status == 0, "stderr: \(result.stderr.suffix(2000))")
        // The crash would end a pixel helper, whose item a new one then makes: still a crash.
        #expect(!result.stderr.contains("pixel helper"), "a pixel helper ended: \(result.stderr.suffix(2000))")
        #expect(work.files(under: "out").count == 300)
        #expect(try status().done == 300)
    }

    /// The bash completion offers pipeline files (`.json`) and folders for `run <Tab>`,
    /// not every file.
    @Test func completionOffersPipelineFiles() throws {
        try work.write("{}", to: "job.json")
        try work.write("notes", to: "notes.txt")
        try work.folder("jobs")
        let script = try imgpipe("--generate-completion-script", "bash")
        #expect(script.status == 0)
        try work.write(script.stdout, to: "imgpipe.bash")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [
            "-c",
            #"shopt -s extglob; source ./imgpipe.bash; COMP_WORDS=(imgpipe run ""); COMP_CWORD=2; COMP_LINE="imgpipe run "; COMP_POINT=${#COMP_LINE}; _imgpipe; printf '%s\n' "${COMPREPLY[@]}""#,
        ]
        process.currentDirectoryURL = URL(fileURLWithPath: work.path)
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        process.waitUntilExit()
        let offered = Set(
            String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .split(separator: "\n").map(String.init))
        #expect(offered == ["job.json", "jobs"], "offered: \(offered)")
    }

    @Test func usageErrorsExitTwo() throws {
        #expect(try imgpipe("run").status == 2)
        #expect(try imgpipe("run", "pipe.json", "--limit", "0").status == 2)
        #expect(try imgpipe("frobnicate").status == 2)
        let missing = try imgpipe("status", "nothing.json")
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("no state file"))
    }

    @Test func anUnsetVariableIsNamedAndNothingRuns() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "${PHOTOS_DIR}"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "env.json")
        let result = try imgpipe("run", "env.json")
        #expect(result.status == 2)
        #expect(result.stderr.contains("source.path: environment variable PHOTOS_DIR is not set"))
    }

    /// `status` names the folders a run wrote to; one read from `${NAME}` is masked there
    /// as in everything imgpipe prints.
    @Test func statusMasksAnOutputFolderReadFromTheEnvironment() throws {
        try work.folder("in")
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 64, height: 48)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "${OUT_FOLDER}"}}
            """, to: "env.json")
        let environment = ["OUT_FOLDER": "private-folder"]
        let ran = try ImgpipeBinary.run(["run", "env.json"], in: work.path, environment: environment)
        #expect(ran.status == 0, "stderr: \(ran.stderr)")
        #expect(FileManager.default.fileExists(atPath: work.url("private-folder/a.jpg")))
        let status = try ImgpipeBinary.run(["status", "env.json"], in: work.path, environment: environment)
        #expect(status.status == 0, "stderr: \(status.stderr)")
        #expect(
            status.stdout.contains("outputs: ***/ (sink directory-0)") && !status.stdout.contains("private-folder"),
            "stdout: \(status.stdout)")
    }

    /// A run started in the pipeline file's folder is found from the parent (the current
    /// directory first, then beside the pipeline file), and neither `status` nor `resume`
    /// creates a state file where there is none.
    @Test func theStateFileIsFoundBesideThePipelineFileAndNeverCreatedByResume() throws {
        try work.folder("jobs/in")
        try ImageFixtures.jpeg(at: work.url("jobs/in/a.jpg"), width: 64, height: 48)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "jobs/mixed.json")
        let ran = try ImgpipeBinary.run(["run", "mixed.json"], in: work.url("jobs"))
        #expect(ran.status == 0, "stderr: \(ran.stderr)")
        #expect(FileManager.default.fileExists(atPath: work.url("jobs/.imgpipe/mixed.sqlite")))

        let status = try imgpipe("status", "jobs/mixed.json", "--json")
        #expect(status.status == 0, "stderr: \(status.stderr)")
        #expect(try status.decoded(StatusReport.self).done == 1)
        let resumed = try imgpipe("resume", "jobs/mixed.json")
        #expect(resumed.status == 0 && resumed.stderr.contains("already finished"), "stderr: \(resumed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")), "a state file was created in the parent")

        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "jobs/never.json")
        let nothing = try imgpipe("resume", "jobs/never.json")
        #expect(nothing.status == 2)
        #expect(
            nothing.stderr.contains("no state file at .imgpipe/never.sqlite nor at jobs/.imgpipe/never.sqlite"),
            "stderr: \(nothing.stderr)")
        #expect(nothing.stderr.contains("imgpipe run jobs/never.json"))
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")))
        #expect(!FileManager.default.fileExists(atPath: work.url("jobs/.imgpipe/never.sqlite")))
        #expect(try imgpipe("status", "jobs/never.json").stderr.contains("nor at jobs/.imgpipe/never.sqlite"))
    }

    /// `validate` makes the checks `run` makes before work, lists every fault, warns (and
    /// only warns) about an unset variable unless `--strict`, and creates nothing.
    @Test func validateMakesEveryCheckRunMakesAndCreatesNothing() throws {
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "no-such-folder"},
             "filters": [{"op": "caption", "top": "${TOP_LINE}"}, {"op": "watermark", "image": "missing-logo.png"}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "broken.json")
        let broken = try ImgpipeBinary.run(["validate", "broken.json"], in: work.path)
        #expect(broken.status == 2)
        #expect(
            broken.stderr.contains("source.path: directory") && broken.stderr.contains("no-such-folder does not exist"),
            "stderr: \(broken.stderr)")
        #expect(broken.stderr.contains("filters[1].image: cannot read watermark image"), "stderr: \(broken.stderr)")
        #expect(
            broken.stderr.contains("warning: broken.json: filters[0].top: environment variable TOP_LINE is not set"),
            "stderr: \(broken.stderr)")
        // What validate passes, run accepts; what it refuses, run refuses too.
        #expect(try imgpipe("run", "broken.json").status == 2)
        // A dry-run names the missing watermark before any sample, instead of failing each.
        try work.folder("samples")
        try ImageFixtures.jpeg(at: work.url("samples/s.jpg"), width: 64, height: 48)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "samples"},
             "filters": [{"op": "watermark", "image": "missing-logo.png"}], "sink": {"type": "directory", "path": "out"}}
            """, to: "mark.json")
        let preview = try imgpipe("dry-run", "mark.json")
        #expect(
            preview.status == 2 && preview.stderr.contains("mark.json: filters[0].image: cannot read watermark image"),
            "stdout: \(preview.stdout) stderr: \(preview.stderr)")
        #expect(!preview.stdout.contains("decode"))

        try work.folder("in")
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 64, height: 48)
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "http://127.0.0.1:9/feed.json"},
             "filters": [{"op": "caption", "top": "${TOP_LINE}"}], "sink": {"type": "directory", "path": "out"}}
            """, to: "remote.json")
        let warned = try ImgpipeBinary.run(["validate", "remote.json"], in: work.path)
        #expect(warned.status == 0 && warned.stdout.contains("remote.json: valid"), "stderr: \(warned.stderr)")
        #expect(warned.stderr.contains("TOP_LINE is not set (run refuses until TOP_LINE is set"))
        let strict = try ImgpipeBinary.run(["validate", "remote.json", "--strict"], in: work.path)
        #expect(
            strict.status == 2
                && strict.stderr.contains("error: remote.json: filters[0].top: environment variable TOP_LINE is not set"))
        #expect(
            try ImgpipeBinary.run(
                ["validate", "remote.json", "--strict"], in: work.path,
                environment: ["TOP_LINE": "hello"]
            ).status == 0)
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")), "validate created .imgpipe")

        try work.write(
            """
            {"version": 1, "source": {"type": "url-list", "path": "urls.txt"}, "sink": {"type": "directory", "path": "out"}}
            """, to: "list.json")
        let list = try imgpipe("validate", "list.json")
        #expect(
            list.status == 2 && list.stderr.contains("source.path: URL list") && list.stderr.contains("urls.txt does not exist"))
    }

    /// `imgpipe thumbnail` runs the pipeline its flags make, and `--print-pipeline` prints
    /// that pipeline: saved and run, it writes the same bytes.
    @Test func theThumbnailOneLinerRunsThePipelineItPrints() throws {
        try work.folder("in")
        try ImageFixtures.write(try ImageFixtures.photo(width: 320, height: 240), to: work.url("in/a.jpg"))
        try ImageFixtures.jpeg(at: work.url("in/b.jpg"), width: 240, height: 320, orientation: 6)
        let made = try imgpipe("thumbnail", "in", "--fit", "100x100", "--to", "thumbs")
        #expect(made.status == 0, "stderr: \(made.stderr)")
        let a = try ImageFixtures.decode(work.url("thumbs/a.jpg"))
        let b = try ImageFixtures.decode(work.url("thumbs/b.jpg"))
        #expect((a.width, a.height) == (100, 75))
        #expect((b.width, b.height) == (100, 75), "EXIF orientation 6 turns 240×320 into 320×240 before the fit")

        let printed = try imgpipe("thumbnail", "in", "--fit", "100x100", "--to", "saved-out", "--print-pipeline")
        #expect(printed.status == 0)
        #expect(!FileManager.default.fileExists(atPath: work.url("saved-out")), "--print-pipeline ran something")
        try work.write(printed.stdout, to: "saved.json")
        #expect(try imgpipe("run", "saved.json").status == 0)
        for name in ["a.jpg", "b.jpg"] {
            #expect(
                try Data(contentsOf: URL(fileURLWithPath: work.url("saved-out/" + name)))
                    == Data(contentsOf: URL(fileURLWithPath: work.url("thumbs/" + name))), "\(name) differs")
        }

        #expect(try imgpipe("thumbnail", "in", "--fill", "64", "--format", "webp", "--to", "tiles").status == 0)
        let tile = try ImageFixtures.decode(work.url("tiles/a.webp"))
        #expect((tile.width, tile.height) == (64, 64))
        let bad = try imgpipe("thumbnail", "in", "--fit", "0x5")
        #expect(bad.status == 2 && bad.stderr.contains("--fit expects WIDTHxHEIGHT"), "stderr: \(bad.stderr)")
        #expect(try imgpipe("thumbnail", "in", "--fit", "9", "--fill", "9").status == 2)
    }

    /// `imgpipe init` writes a starting pipeline that validates and runs once its folder
    /// has images, and does not replace a file unless `--force`.
    @Test func initWritesAStartingPipelineThatRuns() throws {
        let written = try imgpipe("init")
        #expect(written.status == 0 && written.stdout.contains("wrote pipeline.json"))
        let missing = try imgpipe("validate", "pipeline.json")
        #expect(missing.status == 2 && missing.stderr.contains("source.path: directory"), "stderr: \(missing.stderr)")
        try work.folder("photos")
        try ImageFixtures.write(try ImageFixtures.photo(width: 2048, height: 1536), to: work.url("photos/big.jpg"))
        #expect(try imgpipe("validate", "pipeline.json").status == 0)
        #expect(try imgpipe("run", "pipeline.json").status == 0)
        let out = try ImageFixtures.decode(work.url("out/big.jpg"))
        #expect((out.width, out.height) == (1024, 768))
        let again = try imgpipe("init")
        #expect(again.status == 2 && again.stderr.contains("pipeline.json exists"))
        #expect(try imgpipe("init", "--force").status == 0)
    }

    /// A link to nowhere at the name: `init` used to write through it, creating the file it
    /// pointed at (anywhere); it refuses, and `--force` replaces the link itself.
    @Test func initNeverWritesThroughADanglingLink() throws {
        let elsewhere = try TemporaryDirectory("imgpipe-init-target")
        let target = elsewhere.url("planted.json")
        #expect(symlink(target, work.url("pipeline.json")) == 0)
        let refused = try imgpipe("init")
        #expect(refused.status == 2 && refused.stderr.contains("symbolic link"), "stderr: \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: target), "init wrote through the link")
        let forced = try imgpipe("init", "--force")
        #expect(forced.status == 0, "stderr: \(forced.stderr)")
        #expect(!FileManager.default.fileExists(atPath: target), "init --force wrote through the link")
        let kind = try FileManager.default.attributesOfItem(atPath: work.url("pipeline.json"))[.type] as? FileAttributeType
        #expect(kind == .typeRegular)
    }

    /// Two pipeline files with one stem run from one folder would share
    /// `.imgpipe/p.sqlite`: the second is refused instead of resuming, showing or adding to
    /// the first one's run; `--state` keeps them apart.
    @Test func aStateFileOfAnotherPipelineIsNeverTakenForThisOne() throws {
        for folder in ["a", "b"] {
            try ImageFixtures.jpeg(at: work.url("\(folder)/photos/\(folder).jpg"), width: 64, height: 48)
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "photos"}, "sink": {"type": "directory", "path": "out"}}
                """, to: "\(folder)/p.json")
        }
        #expect(try imgpipe("run", "a/p.json").status == 0)
        for command in ["status", "resume", "run", "export"] {
            let refused = try imgpipe(command, "b/p.json")
            #expect(refused.status == 2, "\(command): \(refused.stdout) \(refused.stderr)")
            #expect(refused.stderr.contains("holds the runs of a/p.json, not of b/p.json"), "\(command): \(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: work.url("b/out")), "b's items were run")
        #expect(try imgpipe("run", "b/p.json", "--state", "b.sqlite").status == 0)
        #expect(work.files(under: "b/out") == ["b.jpg"])
        #expect(try imgpipe("status", "a/p.json", "--json").decoded(StatusReport.self).done == 1)
    }

    /// A sink folder inside the source folder is never listed: a second run does not make
    /// outputs of outputs, and a dry-run whose previews land in its samples folder does
    /// not preview its previews; previews written over the samples are refused.
    @Test func outputsInsideTheSourceFolderAreNeverReadBack() throws {
        try ImageFixtures.jpeg(at: work.url("pics/a.jpg"), width: 64, height: 48)
        try ImageFixtures.jpeg(at: work.url("pics/b.jpg"), width: 64, height: 48)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "."}, "filters": [{"op": "fit", "width": 32}],
             "sink": {"type": "directory", "path": "out"}}
            """, to: "pics/p.json")
        #expect(try imgpipe("run", "pics/p.json", "--json").decoded(StatusReport.self).total == 2)
        #expect(try imgpipe("run", "pics/p.json", "--json").decoded(StatusReport.self).total == 2)
        for _ in 1...2 {
            let preview = try imgpipe("dry-run", "pics/p.json", "--samples", "pics", "--out", "pics/preview")
            #expect(preview.stdout.contains("2 sample(s) previewed"), "stdout: \(preview.stdout)")
        }
        let original = try Data(contentsOf: URL(fileURLWithPath: work.url("pics/a.jpg")))
        let over = try imgpipe("dry-run", "pics/p.json", "--samples", "pics", "--out", "pics")
        #expect(over.status == 2 && over.stderr.contains("previews would overwrite the originals"), "stderr: \(over.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: work.url("pics/a.jpg"))) == original)
    }

    /// A sink folder that is the source folder (by its own path, another spelling, or a
    /// symbolic link) is refused before anything is written: each output would replace
    /// the original it was made from. A reviewer's `thumbnail p --fit 10 --to p` did.
    @Test func aSinkFolderThatIsTheSourceFolderIsRefused() throws {
        try ImageFixtures.jpeg(at: work.url("p/a.jpg"), width: 300, height: 200)
        let original = try Data(contentsOf: URL(fileURLWithPath: work.url("p/a.jpg")))
        try FileManager.default.createSymbolicLink(atPath: work.url("link"), withDestinationPath: work.url("p"))
        for sink in ["p", "./p/", "link"] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "p"}, "filters": [{"op": "fit", "width": 10}],
                 "sinks": [{"type": "directory", "path": "elsewhere"}, {"type": "directory", "path": "\(sink)"}]}
                """, to: "same.json")
            for command in ["validate", "run"] {
                let refused = try imgpipe(command, "same.json")
                #expect(refused.status == 2, "\(command) with sink \(sink): \(refused.stderr)")
                #expect(
                    refused.stderr.contains("sinks[1].path: sink folder") && refused.stderr.contains("is the source folder"),
                    "\(command) with sink \(sink): \(refused.stderr)")
            }
        }
        let oneLiner = try imgpipe("thumbnail", "p", "--fit", "10", "--to", "p")
        #expect(oneLiner.status == 2 && oneLiner.stderr.contains("is the source folder"), "stderr: \(oneLiner.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: work.url("p/a.jpg"))) == original)
        #expect(work.files(under: "p") == ["a.jpg"] && !FileManager.default.fileExists(atPath: work.url("elsewhere")))

        // A sink around the source folder takes outputs, but not through a name that leads
        // into the source folder.
        for (name, into) in [("p/{stem}.jpg", true), ("p/new/{stem}.jpg", true), ("thumbs/{stem}.jpg", false)] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "p"}, "filters": [{"op": "fit", "width": 10}],
                 "output": {"format": "jpeg", "name": "\(name)"}, "sink": {"type": "directory", "path": "."}}
                """, to: "around.json")
            let result = try imgpipe("run", "around.json", "--new")
            #expect(result.status == (into ? 1 : 0), "\(name): \(result.stderr)")
            #expect(result.stderr.contains("leads into the source folder") == into, "\(name): \(result.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: work.url("p/a.jpg"))) == original)
        #expect(!FileManager.default.fileExists(atPath: work.url("p/new")), "a folder was made in the source folder")
        // Nor through a symbolic link inside the sink that leads into the source folder.
        try FileManager.default.createSymbolicLink(atPath: work.url("lnk"), withDestinationPath: work.url("p"))
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "p"}, "filters": [{"op": "fit", "width": 10}],
             "output": {"format": "jpeg", "name": "lnk/sub/{stem}.jpg"}, "sink": {"type": "directory", "path": "."}}
            """, to: "around.json")
        let linked = try imgpipe("run", "around.json", "--new")
        #expect(linked.status == 1 && linked.stderr.contains("leads into the source folder"), "stderr: \(linked.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.url("p/sub")), "a folder was made through the link")
        #expect(work.files(under: "thumbs") == ["a.jpg"])
    }

    /// A watermark that is damaged or over `limits.maxPixels` is the pipeline's fault, named
    /// before the run (exit 2), not every item's `decode` failure.
    @Test func aDamagedOrHugeWatermarkIsRefusedBeforeTheRun() throws {
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 64, height: 48)
        try ImageFixtures.pngHeaderOnly(at: work.url("huge.png"), width: 100_000, height: 100_000)
        try ImageFixtures.jpeg(at: work.url("whole.jpg"), width: 400, height: 300)
        try ImageFixtures.truncate(work.url("whole.jpg"), to: work.url("cut.jpg"), keeping: 0.4)
        for (mark, fault) in [("huge.png", "is 100000×100000, over limits.maxPixels"), ("cut.jpg", "cannot be decoded")] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "filters": [{"op": "watermark", "image": "\(mark)"}], "sink": {"type": "directory", "path": "out"}}
                """, to: "mark.json")
            for command in ["validate", "run"] {
                let refused = try imgpipe(command, "mark.json")
                #expect(refused.status == 2, "\(command) \(mark): \(refused.stderr)")
                #expect(
                    refused.stderr.contains("filters[0].image: watermark image") && refused.stderr.contains(fault),
                    "\(command) \(mark): \(refused.stderr)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: work.url("out")))
    }

    /// A key from a feed (here a file name) is shown with its control characters escaped:
    /// an escape sequence does not reach the terminal, a line feed does not forge a line,
    /// and the contact sheet's HTML holds no control bytes.
    @Test func controlCharactersFromAFeedNeverReachTheTerminal() throws {
        try work.folder("in")
        try ImageFixtures.jpeg(at: work.url("in/good.jpg"), width: 64, height: 48)
        try work.write("not an image", to: "in/esc\u{1B}[2J\u{1B}[31mred.jpg")
        try work.write("not an image", to: "in/nl\nFAKE: line.jpg")
        try pipeline(filters: #"[{"op": "fit", "width": 32, "height": 32}]"#)
        let run = try imgpipe("run", "pipe.json")
        let status = try imgpipe("status", "pipe.json")
        let preview = try imgpipe("dry-run", "pipe.json", "--samples", "in", "--out", "preview")
        #expect(run.status == 1, "stderr: \(run.stderr)")
        for (name, text) in [
            ("run", run.stderr + run.stdout), ("status", status.stdout), ("dry-run", preview.stdout + preview.stderr),
        ] {
            #expect(!text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" }, "\(name): \(text.debugDescription)")
            #expect(!text.split(separator: "\n").contains { $0.hasPrefix("FAKE") }, "\(name): \(text)")
        }
        #expect(run.stderr.contains("failed: esc\\u{1B}[2J\\u{1B}[31mred.jpg: decode"), "stderr: \(run.stderr)")
        #expect(status.stdout.contains("nl\\u{A}FAKE: line.jpg: decode"), "stdout: \(status.stdout)")
        let sheet = try String(contentsOfFile: work.url("preview/index.html"), encoding: .utf8)
        #expect(!sheet.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" && $0 != "\t" }, "control bytes in index.html")
    }

    /// A dry-run previews what the run would list (`"recursive": false` keeps subfolders
    /// out) and names its previews as the run names its outputs: `a.png` gets a name of
    /// its own beside `a.jpg`'s, and with a name no stem changes the later sample fails as
    /// its item would in a run, never writing over the first's preview.
    @Test func aDryRunListsAsTheRunWouldAndNeverWritesOverAPreview() throws {
        try ImageFixtures.jpeg(at: work.url("src/a.jpg"), width: 64, height: 48)
        try ImageFixtures.write(try ImageFixtures.photo(width: 40, height: 40), to: work.url("src/a.png"))
        try ImageFixtures.jpeg(at: work.url("src/sub/b.jpg"), width: 64, height: 48)
        func write(name: String?) throws {
            let output = name.map { #", "output": {"format": "jpeg", "name": "\#($0)"}"# } ?? ""
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "src", "recursive": false},
                 "filters": [{"op": "fit", "width": 32, "height": 32}]\(output), "sink": {"type": "directory", "path": "out"}}
                """, to: "p.json")
        }
        try write(name: nil)
        let unique = "a-" + sha256Hex("a.png").prefix(8) + ".jpg"
        let preview = try imgpipe("dry-run", "p.json", "--json")
        #expect(preview.status == 0, "stderr: \(preview.stderr)")
        #expect(!preview.stdout.contains("sub/b.jpg") && !preview.stderr.contains("sub/b.jpg"), "stdout: \(preview.stdout)")
        var made = try ImageFixtures.decode(work.url("preview/p/a.jpg"))
        #expect((made.width, made.height) == (32, 24), "a.jpg's own preview, not a.png's")
        made = try ImageFixtures.decode(work.url("preview/p/\(unique)"))
        #expect((made.width, made.height) == (32, 32), "a.png's preview")
        let run = try imgpipe("run", "p.json")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        #expect(work.files(under: "out") == [unique, "a.jpg"].sorted())

        try write(name: "{name}-x.jpg")
        try FileManager.default.removeItem(atPath: work.url("preview"))
        let clash = try imgpipe("dry-run", "p.json", "--json")
        let second = "a-" + sha256Hex("a.png").prefix(8) + "-x.jpg"
        #expect(clash.status == 0 && work.files(under: "preview/p").contains(second), "stdout: \(clash.stdout)")
        try write(name: "same.jpg")
        try FileManager.default.removeItem(atPath: work.url("preview"))
        let fixed = try imgpipe("dry-run", "p.json", "--json")
        #expect(fixed.status == 1, "stderr: \(fixed.stderr)")
        #expect(fixed.stdout.contains(#"output name \"same.jpg\" is already used by item \"a.jpg\""#), "stdout: \(fixed.stdout)")
        made = try ImageFixtures.decode(work.url("preview/p/same.jpg"))
        #expect((made.width, made.height) == (32, 24), "a.jpg's own preview, not a.png's")
    }

    /// A step that makes a picture over `limits.maxPixels` fails the item as `limit` before
    /// libvips computes it (a reviewer's `border` 100000 ran for minutes at 400 MB), a
    /// picture wider than its format holds fails as `encode` (it was `decode`), and a size
    /// past 100000 is refused by `validate` (2147483647 printed GLib warnings).
    @Test func outputsTooLargeFailAsLimitOrEncodeAndAbsurdSizesAreRefused() throws {
        try work.folder("in")
        try ImageFixtures.jpeg(at: work.url("in/a.jpg"), width: 64, height: 48)
        try pipeline(filters: #"[{"op": "border", "width": 40000}]"#, output: #"{"format": "png"}"#)
        let huge = try imgpipe("run", "pipe.json")
        #expect(huge.status == 1, "stderr: \(huge.stderr)")
        var failure = try #require(try status().failures.first)
        #expect(failure.reason == "limit" && failure.message.hasPrefix("border makes 80064×80048"), "\(failure)")
        #expect(failure.message.contains("over limits.maxPixels"), "\(failure)")

        // A small limit is said in pixels: "0.0 MP, over limits.maxPixels (0.0 MP)" said nothing.
        try pipeline(filters: "[]", output: #"{"format": "png"}"#, limits: #"{"maxPixels": 1000}"#)
        #expect(try imgpipe("run", "pipe.json", "--new").status == 1)
        failure = try #require(try status().failures.first)
        #expect(failure.message == "image is 64×48 (3072 pixels), over limits.maxPixels (1000 pixels)", "\(failure)")

        try pipeline(filters: #"[{"op": "resize", "width": 70000, "height": 10}]"#)
        #expect(try imgpipe("run", "pipe.json", "--new").status == 1)
        failure = try #require(try status().failures.first)
        #expect(
            failure.reason == "encode" && failure.message == "jpeg holds at most 65500 pixels a side; the picture is 70000×10",
            "\(failure)")

        try pipeline(filters: #"[{"op": "resize", "width": 2147483647}]"#)
        let absurd = try imgpipe("validate", "pipe.json")
        #expect(absurd.status == 2 && absurd.stderr.contains("filters[0].width"), "stderr: \(absurd.stderr)")
        #expect(!absurd.stderr.contains("GLib"))
    }

    /// `status` and `export` only read: an empty file given as the state file is refused
    /// as one with no runs and stays empty (a database was written into it).
    @Test func readingCommandsLeaveAnEmptyStateFileEmpty() throws {
        try pipeline()
        try work.write("", to: "empty.sqlite")
        for command in [["status", "pipe.json"], ["export", "pipe.json"]] {
            let refused = try ImgpipeBinary.run(command + ["--state", "empty.sqlite"], in: work.path)
            #expect(
                refused.status == 2 && refused.stderr.contains("empty.sqlite is empty: it has no runs"),
                "\(command): \(refused.stderr)")
            let size = try FileManager.default.attributesOfItem(atPath: work.url("empty.sqlite"))[.size] as? Int
            #expect(size == 0, "\(command) wrote into it")
        }
    }

    /// Comments (`//` keys) change nothing: repeated in one object, edited in `filters`
    /// or `output` between a run and its resume, or in an upload's form fields.
    @Test func commentsChangeNothing() throws {
        _ = try corpus(3)
        try pipeline(
            filters: #"[{"//": "why", "//": "and why not", "op": "fit", "width": 64, "height": 64}]"#,
            output: #"{"//": "small", "format": "jpeg"}"#)
        #expect(try imgpipe("run", "pipe.json", "--limit", "1").status == 0)
        try pipeline(
            filters: #"[{"//": "a new reason", "op": "fit", "width": 64, "height": 64}]"#, output: #"{"format": "jpeg"}"#)
        let resumed = try imgpipe("resume", "pipe.json", "--refresh-feed")
        #expect(resumed.status == 0, "a comment made resume refuse: \(resumed.stderr)")
        try pipeline(
            filters: #"[{"//": "a new reason", "op": "fit", "width": 65, "height": 64}]"#, output: #"{"format": "jpeg"}"#)
        #expect(try imgpipe("resume", "pipe.json").stderr.contains("filters[0].width: 64 → 65"))
    }

    /// What `run` would refuse or break on, `validate` refuses first, each with its path.
    @Test func validateRefusesWhatRunCannotDo() throws {
        try work.folder("in")
        try work.write("a file", to: "afile")
        try work.write("not an image", to: "logo.png")
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "file:///etc/passwd", "cache": {"path": "afile"}},
             "filters": [{"op": "watermark", "image": "logo.png"}, {"op": "fill", "width": 40000, "height": 40000}],
             "sinks": [{"type": "directory", "path": "afile/out"},
                       {"type": "http", "url": "http://127.0.0.1:9/{key}", "headers": {"X-A": "line\\r\\nX-Injected: 1"}}]}
            """, to: "bad.json")
        let result = try imgpipe("validate", "bad.json")
        #expect(result.status == 2)
        #expect(result.stderr.contains("sinks[1].headers.X-A: a header value is one line"), "stderr: \(result.stderr)")
        // A header imgpipe sets itself, in any case, would go out twice; so would a name
        // given twice in two cases.
        for (headers, message) in [
            (#"{"idempotency-KEY": "mine"}"#, "headers.idempotency-KEY: imgpipe sets idempotency-KEY itself"),
            (#"{"Content-Type": "text/plain"}"#, "headers.Content-Type: imgpipe sets Content-Type itself"),
            (#"{"X-A": "1", "x-a": "2"}"#, "headers.x-a: the header X-A is given twice"),
        ] {
            try work.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"}, "filters": [],
                 "sinks": [{"type": "http", "url": "http://127.0.0.1:9/{key}", "headers": \(headers)}]}
                """, to: "headers.json")
            let refused = try imgpipe("validate", "headers.json")
            #expect(refused.status == 2 && refused.stderr.contains("sinks[0]." + message), "stderr: \(refused.stderr)")
        }
        try work.write(
            """
            {"version": 1, "source": {"type": "json-feed", "url": "file:///etc/passwd", "cache": {"path": "afile"}},
             "filters": [{"op": "watermark", "image": "logo.png"}, {"op": "fill", "width": 40000, "height": 40000}],
             "sinks": [{"type": "directory", "path": "afile/out"}]}
            """, to: "bad.json")
        let all = try imgpipe("validate", "bad.json")
        #expect(all.status == 2)
        for fault in [
            "source.url: expected an http(s) URL", "source.cache.path: cache folder", "filters[0].image: watermark image",
            "is not a JPEG, PNG", "filters[1]: fill 40000×40000 makes images over limits.maxPixels",
            "sinks[0].path: sink folder", "afile is a file, not a folder",
        ] {
            #expect(all.stderr.contains(fault), "\(fault) missing: \(all.stderr)")
        }
        let run = try imgpipe("run", "bad.json")
        #expect(run.status == 2 && !FileManager.default.fileExists(atPath: work.url(".imgpipe/bad.sqlite")))
    }

    /// The one-liner's rough edges: its printed pipeline runs wherever it is saved, one
    /// side may be left out of `--fit`, and mistakes name the flag.
    @Test func theThumbnailOneLinerNamesItsFlagsAndPrintsAPortablePipeline() throws {
        try ImageFixtures.write(try ImageFixtures.photo(width: 320, height: 240), to: work.url("in/a.jpg"))
        let printed = try imgpipe("thumbnail", "in", "--fit", "x60", "--to", "out", "--print-pipeline")
        try work.write(printed.stdout, to: "elsewhere/saved.json")
        #expect(try ImgpipeBinary.run(["run", "saved.json"], in: work.url("elsewhere")).status == 0)
        let out = try ImageFixtures.decode(work.url("out/a.jpg"))
        #expect((out.width, out.height) == (80, 60))
        let quality = try imgpipe("thumbnail", "in", "--format", "png", "--quality", "50")
        #expect(quality.status == 2 && quality.stderr.contains("error: --quality: "), "stderr: \(quality.stderr)")
        let file = try imgpipe("thumbnail", "in/a.jpg")
        #expect(file.status == 2 && file.stderr.contains("is a file: thumbnail takes a folder"), "stderr: \(file.stderr)")
        #expect(try imgpipe("thumbnail", "in", "--fill", "x60").status == 2)
        #expect(try imgpipe("thumbnail", "in", "--to", "out-${HOME}").stderr.contains("a path with ${"))
        let missing = try imgpipe("thumbnail", "no-such-folder")
        #expect(
            missing.status == 2 && missing.stderr.contains("no-such-folder: no such folder or URL list"),
            "stderr: \(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.url(".imgpipe")), "a refused command left files behind")
    }
}
