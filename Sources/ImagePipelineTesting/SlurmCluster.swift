import Foundation
import ImagePipeline
import PipelineKit

#if canImport(Glibc)
    import Glibc
#endif

/// A throwaway single-node Slurm for the tests, started by the test itself: `munged` with
/// a key, socket and pid file of its own, `slurmctld` and `slurmd` in the foreground (`-D`)
/// as children of the test process, on two free loopback ports, with a `slurm.conf` whose
/// state, spool, pid and log files are all in one temporary folder (no cgroups, no
/// accounting, `proctrack/linuxproc`, `task/none`). Nothing system-wide is read or
/// written: the daemons and the client commands find the configuration through
/// `SLURM_CONF` and munge through `AuthInfo=socket=…`, so a leftover cluster of an earlier
/// run (other ports, other folder) cannot answer in this one's place.
///
/// The node claims `cpus` CPUs and 8 GiB whatever the machine has
/// (`SlurmdParameters=config_overrides`), so a job script's `--cpus-per-task` and `--mem`
/// fit on a small machine. `stop()` (also run when the value is freed) cancels every job,
/// waits for them to end, then ends the daemons and removes the folder.
public final class SlurmCluster: Sendable {
    /// The programs the cluster needs, found in `PATH` or the `sbin` folders.
    static let programs = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol"]

    /// True when every program is installed and the tests run as root (`slurmd` starts
    /// jobs as their user, which needs root).
    public static let isAvailable = getuid() == 0 && programs.allSatisfy { find($0) != nil }

    public let folder: TemporaryDirectory
    /// The node's name in `slurm.conf` (`slurmd -N`).
    public let node = "imgpipe-node"
    public let configPath: String
    /// The daemons' pids, in the order they started.
    private let daemons: LockedBox<[pid_t]>

    /// What a client command needs to reach this cluster: merge it into a submission's
    /// environment (`sbatch` passes its environment to the job, and so `srun` finds it too).
    public var environment: [String: String] { ["SLURM_CONF": configPath] }

    public init(cpus: Int = 4) throws {
        for program in Self.programs where Self.find(program) == nil {
            throw SlurmError("\(program) is not installed: `make test-deps` installs slurm-wlm and munge")
        }
        folder = try TemporaryDirectory("imgpipe-slurm")
        // munged checks that everyone can reach its socket's folder, and that nobody but
        // its user can write to its key's.
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder.path)
        for sub in ["state", "spool"] { try folder.folder(sub) }
        configPath = folder.url("slurm.conf")
        daemons = LockedBox([])

        let key = FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 1024) ?? Data()
        guard key.count == 1024 else { throw SlurmError("cannot read a key for munged from /dev/urandom") }
        let keyPath = folder.url("munge.key")
        try key.write(to: URL(fileURLWithPath: keyPath))
        try FileManager.default.setAttributes([.posixPermissions: 0o400], ofItemAtPath: keyPath)
        let socket = folder.url("munge.socket")
        try start(
            "munged",
            [
                "-F", "--force", "--key-file=\(keyPath)", "--socket=\(socket)", "--pid-file=\(folder.url("munged.pid"))",
                "--log-file=\(folder.url("munged.log"))", "--seed-file=\(folder.url("munged.seed"))",
            ])
        try waitFor("munged's socket \(socket)", seconds: 60) { FileManager.default.fileExists(atPath: socket) }

        // Two ports free now, held together so that they differ, let go before the
        // daemons bind them.
        let (controllerPort, nodePort) = try { () throws -> (Int, Int) in
            let first = try RefusingPort()
            let second = try RefusingPort()
            return (first.port, second.port)
        }()
        try folder.write(
            Self.configuration(
                folder: folder.path, socket: socket, controllerPort: controllerPort, nodePort: nodePort, node: node,
                cpus: cpus),
            to: "slurm.conf")
        // -i: start without the state an earlier controller saved (there is none here).
        try start("slurmctld", ["-D", "-i", "-f", configPath])
        try start("slurmd", ["-D", "-N", node, "-f", configPath])
        try waitFor("node \(node) idle (logs in \(folder.path))", seconds: 120) {
            let state = try command("sinfo", ["-h", "-n", node, "-o", "%T"])
            return state.status == 0 && state.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "idle"
        }
    }

    deinit { stop() }

    /// `slurm.conf` of a one-node cluster, every file in `folder`.
    static func configuration(
        folder: String, socket: String, controllerPort: Int, nodePort: Int, node: String, cpus: Int
    ) -> String {
        var name = [CChar](repeating: 0, count: 256)
        gethostname(&name, name.count)
        let host = String(cString: name).split(separator: ".").first.map(String.init) ?? "localhost"
        return """
            ClusterName=imgpipetest
            SlurmctldHost=\(host)(127.0.0.1)
            SlurmctldPort=\(controllerPort)
            SlurmdPort=\(nodePort)
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            CredType=cred/munge
            AuthInfo=socket=\(socket)
            StateSaveLocation=\(folder)/state
            SlurmdSpoolDir=\(folder)/spool
            SlurmctldPidFile=\(folder)/slurmctld.pid
            SlurmdPidFile=\(folder)/slurmd.pid
            SlurmctldLogFile=\(folder)/slurmctld.log
            SlurmdLogFile=\(folder)/slurmd.log
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            JobCompType=jobcomp/none
            MpiDefault=none
            SwitchType=switch/none
            SchedulerType=sched/builtin
            SelectType=select/cons_tres
            SelectTypeParameters=CR_CPU
            SlurmdParameters=config_overrides
            ReturnToService=2
            KillWait=30
            NodeName=\(node) NodeAddr=127.0.0.1 NodeHostname=\(host) CPUs=\(cpus) RealMemory=8192 State=UNKNOWN
            PartitionName=test Nodes=\(node) Default=YES MaxTime=INFINITE State=UP

            """
    }

    /// A client command (`sbatch`, `squeue`, `scancel`, …) run against this cluster to its
    /// end (killed after `timeout` seconds), in `directory`, with `environment` added to the
    /// test's.
    public func command(
        _ program: String, _ arguments: [String], in directory: String? = nil, environment: [String: String] = [:],
        timeout: Double = 120
    ) throws -> CommandResult {
        let output = folder.url("command-\(UUID().uuidString.prefix(8))")
        defer { for suffix in [".out", ".err"] { unlink(output + suffix) } }
        let pid = try spawn(
            program, arguments, in: directory ?? folder.path, environment: environment, output: output + ".out",
            errors: output + ".err")
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid || (reaped < 0 && errno != EINTR) { break }
            if Date() > deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                throw SlurmError("\(program) \(arguments.joined(separator: " ")) still ran after \(Int(timeout)) s")
            }
            usleep(10_000)
        }
        return CommandResult(
            // A signal's number, negated, when it did not exit (WIFEXITED spelled out).
            status: status & 0x7f == 0 ? (status >> 8) & 0xff : -(status & 0x7f),
            stdout: (try? String(contentsOfFile: output + ".out", encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "")
    }

    /// The ids (`123_1`, …) of the jobs and array tasks not yet ended; nil when `squeue`
    /// failed (the controller not answering for a moment, under load).
    public func queue() throws -> [String]? {
        let listed = try command("squeue", ["-h", "-o", "%i"])
        guard listed.status == 0 else { return nil }
        return listed.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// A job's fields as `scontrol show job` prints them (`JobState`, `ExitCode`, …); the
    /// controller keeps an ended job for `MinJobAge` (300 s).
    public func job(_ id: String) throws -> [String: String] {
        let shown = try command("scontrol", ["show", "job", "-o", id])
        guard shown.status == 0 else { throw SlurmError("scontrol show job \(id): \(shown.stderr)") }
        var fields: [String: String] = [:]
        for pair in shown.stdout.split(whereSeparator: \.isWhitespace) {
            guard let equals = pair.firstIndex(of: "=") else { continue }
            fields[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
        return fields
    }

    /// Cancels every job, waits at most 60 s for them to end, then ends the daemons
    /// (SIGTERM, SIGKILL 10 s later) and removes the folder. Safe to call twice.
    public func stop() {
        let running = daemons.withLock { daemons in
            defer { daemons = [] }
            return daemons
        }
        guard !running.isEmpty else { return }
        if (try? queue())??.isEmpty == false {
            _ = try? command("scancel", ["--partition", "test"])
            _ = try? waitFor("the jobs' end", seconds: 60) { (try queue())?.isEmpty == true }
        }
        for daemon in running.reversed() {
            kill(daemon, SIGTERM)
            var status: Int32 = 0
            let deadline = Date().addingTimeInterval(10)
            while waitpid(daemon, &status, WNOHANG) == 0 {
                if Date() > deadline {
                    kill(daemon, SIGKILL)
                    _ = waitpid(daemon, &status, 0)
                    break
                }
                usleep(20_000)
            }
        }
        try? FileManager.default.removeItem(atPath: folder.path)
    }

    /// Polls `condition` every 0.2 s for at most `seconds`; throws, naming `what`, when it
    /// never came true.
    public func waitFor(_ what: String, seconds: Double, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return }
            usleep(200_000)
        }
        throw SlurmError("waited \(Int(seconds)) s for \(what)")
    }

    /// Starts a daemon, its output in `<program>.out` in the folder.
    private func start(_ program: String, _ arguments: [String]) throws {
        let log = folder.url(program + ".out")
        let pid = try spawn(program, arguments, in: folder.path, output: log, errors: log)
        daemons.withLock { $0.append(pid) }
        // A daemon that cannot start (a port taken after all, a bad option) exits at once.
        usleep(300_000)
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid {
            daemons.withLock { $0.removeAll { $0 == pid } }
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw SlurmError("\(program) ended at its start (status \(status)): \(output)")
        }
    }

    /// Starts `program` with `posix_spawn`: standard input `/dev/null`, output and errors to
    /// files, this cluster's `SLURM_CONF` and `environment` added to the test's, and the
    /// signals a daemon or a job acts on unblocked and at their defaults. Not Foundation's
    /// `Process`: its children inherit the test thread's mask, SIGTERM and SIGCHLD blocked
    /// (munged and slurmd then ignored SIGTERM, and the jobs slurmd starts would too), and
    /// it never saw a client command end once the daemons ran.
    private func spawn(
        _ program: String, _ arguments: [String], in directory: String, environment: [String: String] = [:],
        output: String, errors: String
    ) throws -> pid_t {
        guard let path = Self.find(program) else { throw SlurmError("\(program) is not installed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        if errors == output {
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, errors, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGUSR1, SIGUSR2] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        // `env -C` changes directory and execs the program in the same process.
        let argv = (["/usr/bin/env", "-C", directory, path] + arguments).map { strdup($0) } + [nil]
        // A test run inside a Slurm job of its own leaves that job's SLURM_* variables out.
        let merged = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SLURM_") }
            .merging(environment) { _, given in given }
            .merging(self.environment) { _, ours in ours }
        let envp = merged.map { strdup("\($0)=\($1)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/usr/bin/env", &actions, &attributes, argv, envp)
        guard spawned == 0 else { throw SlurmError("cannot start \(program): \(String(cString: strerror(spawned)))") }
        return pid
    }

    /// `program`'s path: in `PATH`, else in `/usr/sbin` or `/sbin` (the daemons are there,
    /// and a non-login shell's `PATH` may leave them out).
    static func find(_ program: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return (path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin", "/usr/bin"])
            .map { "\($0)/\(program)" }
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    public struct SlurmError: Error, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }
}
