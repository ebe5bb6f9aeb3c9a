import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The Slurm script submitted with `sbatch` to a real one-node Slurm (`SlurmCluster`: munged,
/// slurmctld and slurmd started by the test on free loopback ports, everything in one
/// temporary folder) as a 3-task array on a real PostgreSQL database, one task cancelled
/// with SIGTERM while it holds a chunk it has started.
extension DeployTests {
    /// What the array's tasks work on: `count` photos, a folder sink and an upload sink on a
    /// loopback server slow enough (0.2 s an upload, one at a time per worker) that the
    /// run lasts some seconds, chunks of 3 items.
    struct SlurmJob {
        let home: TemporaryDirectory
        let server: UploadServer
        let url: String
        let cluster: PostgresCluster
        let count: Int
        /// The submitting shell's: `HOME` (the state file, the work folders), `PATH` with
        /// the built imgpipe first, and `IMGPIPE_STATE` empty so the URL comes from the file.
        let environment: [String: String]

        init(count: Int) throws {
            self.count = count
            home = try TemporaryDirectory("imgpipe-deploy-sbatch")
            server = try UploadServer(mode: .slow(0.2))
            try home.folder("bin")
            try FileManager.default.createSymbolicLink(atPath: home.url("bin/imgpipe"), withDestinationPath: ImgpipeBinary.path)
            try ImageFixtures.jpegs(count, in: home.url("job/in"), prefix: "photo-")
            try home.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "in"},
                 "filters": [{"op": "fit", "width": 32, "height": 32}],
                 "output": {"format": "png", "name": "{stem}.png"},
                 "sinks": [{"type": "directory", "path": "out"}, {"type": "upload", "endpoint": "\(server.baseURL)/upload"}],
                 "limits": {"uploads": 1, "timeout": 30}, "retry": {"attempts": 3, "backoff": 0.05}}
                """, to: "job/pipeline.json")
            cluster = try PostgresCluster.start()
            url = try cluster.makeDatabase()
            let stateFile = try home.write(url + "\n", to: ".imgpipe-state")
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: stateFile)
            environment = [
                "HOME": home.path,
                "PATH": home.url("bin") + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
                "IMGPIPE_STATE": "",
            ]
        }

        func log(_ job: String, task: Int) -> String {
            (try? String(contentsOfFile: home.url("imgpipe-work-\(job)_\(task).out"), encoding: .utf8)) ?? ""
        }

        func drop() {
            server.stop()
            cluster.dropDatabase(url)
        }
    }

    /// `sbatch --array=1-3` of the script as written (one CPU a task instead of four, the
    /// machine has two; imgpipe's chunks of 3 and a lease of 300 s as arguments after the
    /// pipeline): once task 1's worker has ended an item of a chunk it holds, `scancel
    /// --signal=TERM --full` stops it. It must hand that chunk back at once (the lease
    /// would keep it for 300 s) and exit 130; tasks 2 and 3 finish the run and exit 0, and
    /// each photo is delivered exactly once: one item row done, one decoded output in the
    /// folder, one upload stored, and export shows both deliveries done.
    @Test(
        .enabled(
            if: SlurmCluster.isAvailable,
            "needs root and Slurm with munge (slurmctld, slurmd, sbatch, munged, …): `make test-deps` installs them"))
    func theSlurmArrayFinishesTheRunAfterOneTaskIsCancelled() throws {
        let slurm = try SlurmCluster()
        defer { slurm.stop() }
        let run = try SlurmJob(count: 150)
        defer { run.drop() }

        let submitted = try slurm.command(
            "sbatch",
            ["--parsable", "--array=1-3", "--cpus-per-task=1", Self.slurmScriptPath, "job/pipeline.json"]
                + ["--chunk-size", "3", "--lease", "300"],
            in: run.home.path, environment: run.environment)
        try #require(submitted.status == 0, "sbatch: \(submitted.stdout)\(submitted.stderr)")
        let job = String(submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines).prefix { $0 != ";" })
        try #require(Int(job) != nil, "sbatch --parsable printed \(submitted.stdout)")

        // Task 1's worker: its journal in the task's work folder is HOST-PID.sqlite, and its
        // name in the database is HOST:PID:NONCE.
        var pid = ""
        let journals = "imgpipe-work/\(job)/1/.imgpipe/pipeline.workers"
        try slurm.waitFor("task 1's worker to open its journal in \(journals)", seconds: 180) {
            let journal = run.home.files(under: journals).first { $0.hasSuffix(".sqlite") }
            pid = String(journal?.dropLast(".sqlite".count).split(separator: "-").last?.prefix { $0.isNumber } ?? "")
            return !pid.isEmpty
        }
        let database = try PostgresConnection(url: run.url)
        defer { database.close() }
        func chunks(of pid: String, _ condition: String) -> Int64 {
            let rows = try? database.execute(
                "SELECT count(*) AS n FROM imgpipe_chunk WHERE owner LIKE $1 AND \(condition)", ["%:\(pid):%"])
            return rows?.first?.int("n") ?? 0
        }
        try slurm.waitFor("task 1's worker to end an item of a chunk it holds", seconds: 180) {
            if chunks(of: pid, "state = 'leased' AND done > 0") > 0 { return true }
            if try slurm.queue()?.isEmpty == true {
                throw SlurmCluster.SlurmError("the array ended before task 1 held a chunk: \(run.log(job, task: 1))")
            }
            return false
        }
        let uploadsAtCancel = run.server.uploads.count

        let cancelled = try slurm.command("scancel", ["--signal=TERM", "--full", "\(job)_1"])
        #expect(cancelled.status == 0, "scancel: \(cancelled.stderr)")
        try slurm.waitFor("task 1 to end", seconds: 180) { try slurm.queue()?.contains("\(job)_1") == false }
        // Handed back as it stopped, not left to its 300 s lease.
        let leased = try database.execute("SELECT id, owner FROM imgpipe_chunk WHERE state = 'leased'").rows
        #expect(chunks(of: pid, "state = 'leased'") == 0, "task 1 (pid \(pid)) ended holding chunks; leased: \(leased)")
        #expect(try slurm.job("\(job)_1")["ExitCode"] == "130:0", "task 1: \(run.log(job, task: 1))")
        #expect(run.log(job, task: 1).contains("(pid \(pid))"), "the log names the worker's pid: \(run.log(job, task: 1))")

        try slurm.waitFor("the array to end", seconds: 600) { try slurm.queue()?.isEmpty == true }
        for task in [2, 3] {
            #expect(try slurm.job("\(job)_\(task)")["ExitCode"] == "0:0", "task \(task): \(run.log(job, task: task))")
        }
        #expect(uploadsAtCancel < run.count, "task 1 was cancelled after the run's end: \(uploadsAtCancel) uploads")

        // Every photo exactly once: item rows, the folder, the upload server, export.
        let statuses = try database.execute("SELECT status, count(*) AS n FROM imgpipe_item GROUP BY status").all
        #expect(statuses.map { "\($0["status"] ?? "")=\($0["n"] ?? "")" } == ["done=\(run.count)"], "items by status")
        let report = try ImgpipeBinary.run(["status", "job/pipeline.json", "--json", "--state", run.url], in: run.home.path)
            .decoded(StatusReport.self)
        #expect(report.done == run.count && report.pending == 0 && report.state == "finished")
        let outputs = run.home.files(under: "job/out").filter { !$0.hasPrefix(".") }
        #expect(outputs.count == run.count, "\(outputs)")
        for name in outputs {
            let image = try ImageFixtures.decode(run.home.url("job/out/" + name))
            #expect(image.width == 32 && image.height == 24, "\(name): \(image.width)×\(image.height)")
        }
        let uploads = run.server.uploads
        #expect(uploads.count == run.count, "uploads stored: \(uploads.count)")
        #expect(Set(uploads.compactMap(\.filename)) == Set(outputs), "each output uploaded once")
        #expect(Set(uploads.compactMap(\.key)).count == run.count, "one idempotency key an item")

        let exported = try ImgpipeBinary.run(["export", "job/pipeline.json", "--state", run.url], in: run.home.path)
        let records = try exported.jsonLines()
        #expect(records.count == run.count, "\(exported.stderr)")
        for record in records {
            let deliveries = record["deliveries"] as? [String: [String: [String: Any]]]
            #expect(
                deliveries?["directory-0"]?["default"]?["status"] as? String == "done"
                    && deliveries?["upload-1"]?["default"]?["status"] as? String == "done",
                "\(record)")
        }
    }
}
