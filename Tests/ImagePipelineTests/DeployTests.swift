import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The files of `deploy/` kept in step with the command line: the Kubernetes Job's
/// container is run as the manifest writes it (command, arguments, working directory,
/// environment) with the built binary against a real PostgreSQL database, so a flag the
/// CLI does not know, a renamed environment variable or a changed exit code fails here
/// rather than in a cluster. The Slurm script is checked with `bash -n`, run with bash as
/// one array task would run it (its state-file checks, work folder and exit codes, on any
/// machine), and submitted with `sbatch` as a 3-task array to a real one-node Slurm the
/// test starts itself (`SlurmCluster`, in `DeployTests+Slurm.swift`; root and Debian's
/// `slurm-wlm` and `munge` needed, else skipped), one task cancelled with SIGTERM while it
/// works; the Dockerfile cannot be built here (no Docker daemon) and is checked as text.
///
/// The manifest is read with PyYAML (`yaml.safe_load_all`), which `make deps` brings in
/// with moto (moto → responses → PyYAML).
@Suite("Deploy files")
struct DeployTests {
    /// The repository's root: this file is `Tests/ImagePipelineTests/DeployTests.swift`.
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    static let manifestPath = root + "/deploy/kubernetes/job.yaml"
    static let slurmScriptPath = root + "/deploy/slurm/imgpipe.sbatch"
    static let dockerfilePath = root + "/deploy/Dockerfile"

    // MARK: - the Kubernetes manifest

    /// What the test needs of the manifest: the Job's only container, as written, and the
    /// files the ConfigMaps it mounts put in the container.
    struct Manifest: Decodable {
        let command: [String]
        let args: [String]
        let workingDir: String
        let env: [EnvVar]
        let runAsUser: Int?
        /// Path in the container (mount path + key) → the file's text, for each ConfigMap
        /// volume whose ConfigMap is in the manifest.
        let configFiles: [String: String]

        struct EnvVar: Decodable {
            let name: String
            /// `value:`, when the manifest gives the value itself.
            let value: String?
            /// `secretName/key` of a `valueFrom.secretKeyRef`.
            let secret: String?
            /// The kinds of `valueFrom` (`secretKeyRef`, `configMapKeyRef`, …), for the message.
            let from: [String]
        }

        /// The full argument vector, `command` then `args`, as the container runs it.
        var argv: [String] { command + args }
    }

    struct ManifestError: Error, CustomStringConvertible {
        let description: String
    }

    /// Loads every document of the manifest with PyYAML and prints the Job's container as
    /// JSON; fails (exit 1 with a message) unless there is exactly one Job with exactly one
    /// container that names its command and working directory.
    static let extractor = #"""
        import json, sys, yaml
        docs = [d for d in yaml.safe_load_all(open(sys.argv[1], encoding="utf-8")) if d is not None]
        jobs = [d for d in docs if d.get("apiVersion") == "batch/v1" and d.get("kind") == "Job"]
        if len(jobs) != 1:
            sys.exit("expected one batch/v1 Job, found %d" % len(jobs))
        pod = jobs[0]["spec"]["template"]["spec"]
        containers = pod["containers"]
        if len(containers) != 1:
            sys.exit("expected one container in the Job, found %d" % len(containers))
        c = containers[0]
        for key in ("command", "workingDir"):
            if key not in c:
                sys.exit("the container has no %s" % key)
        config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        files = {}
        for mount in c.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            data = config_maps.get(volume.get("configMap", {}).get("name"))
            for key, text in (data or {}).items():
                files[mount["mountPath"].rstrip("/") + "/" + key] = text
        env = []
        for e in c.get("env", []):
            source = e.get("valueFrom") or {}
            ref = source.get("secretKeyRef")
            env.append({"name": e["name"], "value": e.get("value"),
                        "secret": None if ref is None else ref["name"] + "/" + ref["key"],
                        "from": sorted(source.keys())})
        print(json.dumps({"command": c["command"], "args": c.get("args", []), "workingDir": c["workingDir"],
                          "env": env, "runAsUser": (pod.get("securityContext") or {}).get("runAsUser"),
                          "configFiles": files}))
        """#

    static func manifest() throws -> Manifest {
        let read = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["python3", "-c", extractor, manifestPath], in: root)
            .wait()
        try #require(
            read.status == 0,
            """
            could not read \(manifestPath): \(read.stderr)
            (PyYAML missing? `make deps` installs it with moto, or `python3 -m pip install pyyaml`)
            """)
        do {
            return try JSONDecoder().decode(Manifest.self, from: Data(read.stdout.utf8))
        } catch {
            // A number or a mapping where the container takes strings (an unquoted `2` in
            // args is a YAML number, which Kubernetes refuses too): say which.
            throw ManifestError(
                description: "the Job's container in \(manifestPath) is not as expected: \(error)\n\(read.stdout)")
        }
    }

    /// The one argument that names the pipeline file (ends in `.json`).
    static func pipelineArgument(of manifest: Manifest) throws -> (index: Int, path: String) {
        let candidates = manifest.argv.indices.filter { manifest.argv[$0].hasSuffix(".json") }
        try #require(candidates.count == 1, "expected one pipeline file (*.json) among \(manifest.argv)")
        return (candidates[0], manifest.argv[candidates[0]])
    }

    /// The Job's container, run as written: `imgpipe` is the built binary and the pipeline
    /// file is one written here, `--metrics` listens on a free loopback port (the pod's is
    /// its own); every other argument is passed as it stands, in a folder
    /// standing for the working directory, with the manifest's environment variables (the
    /// one from the `imgpipe-state` Secret set to a test database's URL).
    struct JobContainer {
        let workingDir: TemporaryDirectory
        /// The ConfigMap's mount (kept: the folder goes with its last reference).
        let mount: TemporaryDirectory
        let pipeline: String
        let pipelineName: String
        let url: String
        let cluster: PostgresCluster
        let argv: [String]
        let environment: [String: String]

        /// Sets the container up with `good` photos, and `corrupt` files that are not
        /// images, in the work volume's `in/`.
        init(good: Int, corrupt: Int = 0) throws {
            let manifest = try DeployTests.manifest()
            var argv = manifest.argv
            try #require(argv.first == "imgpipe", "the container runs \(argv.first ?? "nothing"), not imgpipe")
            argv[0] = ImgpipeBinary.path
            let pipelineArgument = try DeployTests.pipelineArgument(of: manifest)

            // Two folders standing for the pod's: the working directory (the work volume) and
            // the ConfigMap's mount, which holds the pipeline under the manifest's file name.
            workingDir = try TemporaryDirectory("imgpipe-deploy-work")
            mount = try TemporaryDirectory("imgpipe-deploy-pipelines")
            for index in 1...good {
                try ImageFixtures.jpeg(at: workingDir.url(String(format: "in/photo-%02d.jpg", index)), width: 64, height: 48)
            }
            for index in 0..<corrupt {
                try workingDir.write("not a photo \(index)", to: String(format: "in/corrupt-%02d.jpg", index))
            }
            // Absolute paths, as the example ConfigMap's: a pipeline's relative paths start
            // at its own folder, which in the pod is the read-only ConfigMap.
            pipelineName = (pipelineArgument.path as NSString).lastPathComponent
            pipeline = try mount.write(
                """
                {"version": 1, "source": {"type": "directory", "path": "\(workingDir.url("in"))"},
                 "filters": [{"op": "fit", "width": 32, "height": 32}],
                 "output": {"format": "jpeg", "quality": 80, "name": "{stem}.jpg"},
                 "sinks": [{"type": "directory", "path": "\(workingDir.url("out"))"}]}
                """, to: pipelineName)
            argv[pipelineArgument.index] = pipeline
            // The pod's metrics port, on this machine's loopback and a port of its own.
            if let metrics = argv.firstIndex(of: "--metrics"), metrics + 1 < argv.count {
                argv[metrics + 1] = "127.0.0.1:\(try MetricsTests.freePort())"
            }
            self.argv = argv

            cluster = try PostgresCluster.start()
            url = try cluster.makeDatabase()
            var environment: [String: String] = [:]
            for variable in manifest.env {
                if variable.secret == "imgpipe-state/url" {
                    environment[variable.name] = url
                } else if let value = variable.value {
                    environment[variable.name] = value
                } else {
                    Issue.record("\(variable.name) comes from \(variable.from): give this test a stand-in for it")
                }
            }
            self.environment = environment
            try #require(
                manifest.env.contains { $0.secret == "imgpipe-state/url" },
                "no environment variable of the Job comes from the imgpipe-state Secret's url: \(manifest.env.map(\.name))")
        }

        /// The container's process, to its end (a pod's start, or its restart).
        func run() throws -> CommandResult {
            try ImgpipeBinary.launch(
                executable: argv[0], Array(argv.dropFirst()), in: workingDir.path, environment: environment
            ).wait()
        }

        /// `imgpipe status` of the run, with `extra` arguments.
        func status(_ extra: String...) throws -> CommandResult {
            try ImgpipeBinary.run(["status", pipeline, "--state", url] + extra, in: workingDir.path)
        }

        func drop() { cluster.dropDatabase(url) }
    }

    /// The container run as written must end 0 with every item delivered, and `imgpipe
    /// status` must show the run done.
    @Test func theJobsContainerRunsAsWrittenAndFinishesTheRun() throws {
        let job = try JobContainer(good: 6)
        defer { job.drop() }
        let run = try job.run()
        // Required: the checks below only repeat this failure when the run did not happen.
        try #require(run.status == 0, "\(job.argv.dropFirst().joined(separator: " ")) exited \(run.status): \(run.stderr)")
        #expect(
            !run.stdout.contains(job.cluster.password) && !run.stderr.contains(job.cluster.password), "the password was printed")
        let outputs = job.workingDir.files(under: "out").filter { !$0.hasPrefix(".") }
        #expect(outputs.count == 6, "outputs: \(outputs)")
        // The journal went to the working directory (the pod mounts an emptyDir there).
        #expect(
            FileManager.default.fileExists(
                atPath: job.workingDir.url(".imgpipe/\((job.pipelineName as NSString).deletingPathExtension).workers")))

        let status = try job.status("--json", "--exit-code")
        #expect(status.status == 0, "\(status.stderr)")
        let report = try #require(
            try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any],
            "status --json printed \(status.stdout)")
        #expect(report["done"] as? Int == 6, "\(report)")
        #expect(report["failed"] as? Int == 0 && report["pending"] as? Int == 0, "\(report)")
        #expect(report["state"] as? String == "finished", "\(report)")
    }

    /// A batch with a few corrupt photos is a completed batch: the container, run as the
    /// Job writes it, exits 0 (the Job completes instead of restarting pods up to its
    /// `backoffLimit`), and so does a pod restarted after the run ended; `status` still
    /// tells of the failure, and `status --exit-code` exits 1 for it.
    @Test func aBatchWithCorruptPhotosCompletesTheJobAndStatusStillFails() throws {
        let job = try JobContainer(good: 4, corrupt: 2)
        defer { job.drop() }
        let run = try job.run()
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(job.workingDir.files(under: "out").filter { !$0.hasPrefix(".") }.count == 4)
        let again = try job.run()
        #expect(again.status == 0 && again.stdout.contains("already finished"), "\(again.stdout)\(again.stderr)")

        let status = try job.status("--exit-code")
        #expect(status.status == 1, "\(status.stdout)\(status.stderr)")
        #expect(status.stdout.contains("failures by reason: decode 2"), "\(status.stdout)")
        let report = try job.status("--json").decoded(StatusReport.self)
        #expect(report.failed == 2 && report.done == 4 && report.state == "finished")
    }

    /// The example pipeline of the ConfigMap is a valid pipeline, and it is the file the
    /// container's arguments name. Its absolute paths under the working directory are
    /// moved to a temporary folder for `imgpipe validate`, which checks that the source
    /// folder exists.
    @Test func theExamplePipelineIsTheOneTheArgumentsNameAndIsValid() throws {
        let manifest = try Self.manifest()
        let path = try Self.pipelineArgument(of: manifest).path
        let text = try #require(
            manifest.configFiles[path],
            "\(path) is not a file of a ConfigMap mounted in the container: \(manifest.configFiles.keys.sorted())")
        let workingDir = try TemporaryDirectory("imgpipe-deploy-validate")
        let prefix = manifest.workingDir.hasSuffix("/") ? manifest.workingDir : manifest.workingDir + "/"
        #expect(text.contains("\"" + prefix), "the example's paths are under the working directory \(manifest.workingDir)")
        try workingDir.folder("in")
        let local = try workingDir.write(
            text.replacingOccurrences(of: "\"" + prefix, with: "\"" + workingDir.path + "/"),
            to: "pipelines/" + (path as NSString).lastPathComponent)
        let validate = try ImgpipeBinary.run(["validate", local], in: workingDir.path)
        #expect(validate.status == 0, "\(validate.stdout)\(validate.stderr)")
    }

    /// The container runs as the Dockerfile's user.
    @Test func thePodRunsAsTheImagesUser() throws {
        let manifest = try Self.manifest()
        let finalStage = try Self.finalStage()
        let user = try #require(finalStage.last { $0.uppercased().hasPrefix("USER ") }, "the final stage sets no USER")
        let uid = user.dropFirst(5).split(separator: ":").first.map(String.init)
        #expect(uid != "0" && uid != "root", "the image runs as root: \(user)")
        #expect(
            manifest.runAsUser.map(String.init) == uid,
            "runAsUser \(manifest.runAsUser.map(String.init) ?? "unset") vs the Dockerfile's \(user)")
    }

    // MARK: - the Slurm script and the Dockerfile

    @Test func theSlurmScriptParsesAndRunsImgpipeWork() throws {
        let syntax = try ImgpipeBinary.launch(executable: "/usr/bin/env", ["bash", "-n", Self.slurmScriptPath], in: Self.root)
            .wait()
        #expect(syntax.status == 0, "bash -n: \(syntax.stderr)")
        let text = try String(contentsOfFile: Self.slurmScriptPath, encoding: .utf8)
        let commands = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.hasPrefix("#") }
        #expect(commands.contains { $0.contains("imgpipe work ") }, "no line runs imgpipe work")
        #expect(!commands.contains { $0.contains("--state") }, "the state URL goes by IMGPIPE_STATE, not on the command line")
        #expect(text.contains("#SBATCH --array="))
    }

    /// The Slurm script run with bash as one array task would run it, Slurm's variables
    /// set by hand: it takes the URL from a private file (and refuses one others may read),
    /// works in its task's folder and ends with imgpipe's exit code.
    @Test func theSlurmScriptRunsOneWorkerToTheEnd() throws {
        let home = try TemporaryDirectory("imgpipe-deploy-slurm")
        try home.folder("bin")
        try FileManager.default.createSymbolicLink(atPath: home.url("bin/imgpipe"), withDestinationPath: ImgpipeBinary.path)
        for index in 1...6 {
            try ImageFixtures.jpeg(at: home.url(String(format: "job/in/photo-%02d.jpg", index)), width: 64, height: 48)
        }
        // Relative paths: they start at the pipeline file's folder, wherever the task works.
        try home.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}],
             "output": {"format": "jpeg", "quality": 80, "name": "{stem}.jpg"},
             "sinks": [{"type": "directory", "path": "out"}]}
            """, to: "job/pipeline.json")
        let cluster = try PostgresCluster.start()
        let url = try cluster.makeDatabase()
        defer { cluster.dropDatabase(url) }
        let stateFile = try home.write(url + "\n", to: ".imgpipe-state")
        let environment = [
            "HOME": home.path,
            "PATH": home.url("bin") + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3", "SLURM_CPUS_PER_TASK": "2",
            // Empty counts as unset (for imgpipe too): the URL must come from the file.
            "IMGPIPE_STATE": "",
        ]
        func task() throws -> CommandResult {
            try ImgpipeBinary.launch(
                executable: "/usr/bin/env", ["bash", Self.slurmScriptPath, "job/pipeline.json"],
                in: home.path, environment: environment
            ).wait()
        }

        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: stateFile)
        let exposed = try task()
        #expect(exposed.status == 2 && exposed.stderr.contains("readable by you alone"), "\(exposed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: home.url("job/out")), "nothing ran")

        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: stateFile)
        let worked = try task()
        try #require(worked.status == 0, "\(worked.stdout)\(worked.stderr)")
        #expect(
            !worked.stdout.contains(cluster.password) && !worked.stderr.contains(cluster.password), "the password was printed")
        #expect(home.files(under: "job/out").filter { !$0.hasPrefix(".") }.count == 6)
        #expect(
            FileManager.default.fileExists(atPath: home.url("imgpipe-work/77/3/.imgpipe/pipeline.workers")),
            "the journal is in the task's folder: \(home.files(under: "imgpipe-work"))")

        // Run again (a requeued task): the run is finished, imgpipe does nothing and exits 0.
        let again = try task()
        #expect(again.status == 0 && again.stdout.contains("already finished"), "\(again.stdout)\(again.stderr)")
    }

    @Test func theDockerfilesFinalStageRunsImgpipe() throws {
        let finalStage = try Self.finalStage()
        #expect(finalStage.first?.lowercased().hasPrefix("from debian:bookworm-slim") == true, "\(finalStage.first ?? "")")
        #expect(finalStage.contains(#"ENTRYPOINT ["imgpipe"]"#), "the final stage's ENTRYPOINT is not [\"imgpipe\"]")
    }

    /// Docker cannot run here, so what the image would hold is checked against this machine,
    /// which is the runtime stage's Debian release: every shared library the built binary
    /// names (NEEDED) must come from a package the final stage installs, or from one of their
    /// dependencies, except the Swift runtime's own libraries, which `--static-swift-stdlib`
    /// links into the image's binary.
    @Test func theRuntimeStageInstallsEveryLibraryTheBinaryLinks() throws {
        #expect(
            try String(contentsOfFile: "/etc/os-release", encoding: .utf8).contains("VERSION_CODENAME=bookworm"),
            "the check below holds for the release the runtime stage uses (bookworm)")
        let stage = try Self.finalStage().joined(separator: "\n")
        let install = try #require(stage.range(of: "apt-get install"), "the final stage installs nothing with apt-get")
        let packages = stage[install.upperBound...].prefix { $0 != "&" }.split(whereSeparator: {
            $0 == " " || $0 == "\\" || $0 == "\n"
        })
        .map(String.init).filter { !$0.hasPrefix("-") }
        #expect(packages.contains("libvips42") && packages.contains("libpq5"), "\(packages)")
        let closure = Set(
            try shell(
                [
                    "apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                    "--no-breaks", "--no-replaces", "--no-enhances",
                ] + packages
            )
            .split(separator: "\n").filter { !$0.hasPrefix(" ") }.map(String.init))

        let needed = try shell(["readelf", "-d", ImgpipeBinary.path]).split(separator: "\n")
            .compactMap { line in line.contains("(NEEDED)") ? line.split(separator: "[").last?.dropLast().description : nil }
        #expect(needed.contains("libvips.so.42"), "\(needed)")
        let cache = try shell(["ldconfig", "-p"])
        var checked = 0
        for library in needed {
            let found = cache.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(library + " ") }
            guard let path = found?.components(separatedBy: " => ").last else {
                // Not a system library: the Swift toolchain's, linked in statically there.
                #expect(
                    library.hasPrefix("libswift") || library.hasPrefix("libFoundation") || library == "libdispatch.so"
                        || library == "libBlocksRuntime.so", "\(library) is neither a system library nor Swift's own")
                continue
            }
            let real = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
            let owner = (try? shell(["dpkg", "-S", path])) ?? (try? shell(["dpkg", "-S", real])) ?? ""
            let package = String(owner.prefix { $0 != ":" })
            #expect(!package.isEmpty, "no package holds \(path)")
            #expect(closure.contains(package), "\(library) comes from \(package), which the runtime stage does not install")
            checked += 1
        }
        #expect(checked >= 8, "the system libraries checked: \(checked)")
    }

    /// `arguments` run, its standard output; an error when it exits other than 0.
    func shell(_ arguments: [String]) throws -> String {
        let result = try ImgpipeBinary.launch(executable: "/usr/bin/env", arguments, in: Self.root).wait()
        guard result.status == 0 else { throw CocoaError(.fileReadUnknown) }
        return result.stdout
    }

    /// The Dockerfile's lines from its last `FROM` on, comments and blank lines left out.
    static func finalStage() throws -> [String] {
        let lines = try String(contentsOfFile: dockerfilePath, encoding: .utf8).split(separator: "\n")
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        let start = try #require(lines.lastIndex { $0.uppercased().hasPrefix("FROM ") }, "no FROM in \(dockerfilePath)")
        return Array(lines[start...])
    }
}
