import Foundation
import ImagePipeline
import PipelineKit
import Synchronization

/// A throwaway PostgreSQL cluster on loopback for the tests: `initdb` into a temporary
/// folder (as the `postgres` user when the tests run as root: initdb refuses root), then
/// the server on a free port of 127.0.0.1 with its socket in that folder, fsync off. One
/// cluster per test process, started on first use and stopped (folder and all) when the
/// process exits; each test makes its own database (`makeDatabase`) and drops it.
///
/// Nothing is skipped: a machine without PostgreSQL's server fails the tests that need it,
/// with the command that installs it (`make deps`).
///
/// A test that reaches the server from elsewhere (a worker in a network namespace of its
/// own) starts a cluster of its own with `dedicated(alsoOn:clients:)`: it listens on
/// another local address too, takes password logins from that subnet, and is stopped by
/// `stop()`.
public final class PostgresCluster: Sendable {
    public let port: Int
    public let user = "imgpipe"
    /// A real password: the cluster checks it (scram-sha-256 over TCP).
    public let password = "s3cret-Pass"
    private let folder: String
    private let binaries: String
    private let databaseCounter = Mutex(0)

    public static let shared: Result<PostgresCluster, Error> = Result { try PostgresCluster() }

    public static func start() throws -> PostgresCluster { try shared.get() }

    /// A cluster of the caller's own, on 127.0.0.1 and on `address` (a local address, e.g.
    /// the host's end of a veth pair), which lets in password logins from `clients` (a
    /// CIDR range) besides loopback (`url(database:host:)` names that address).
    public static func dedicated(alsoOn address: String, clients: String) throws -> PostgresCluster {
        try PostgresCluster(alsoOn: address, clients: clients)
    }

    private init(alsoOn address: String? = nil, clients: String? = nil) throws {
        guard let bin = Self.serverBinaries() else {
            throw ClusterError("PostgreSQL's server (initdb, postgres) is not installed: `make deps` installs it")
        }
        binaries = bin
        folder = NSTemporaryDirectory() + "imgpipe-pg-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let passwordFile = folder + "/pw"
        try password.write(toFile: passwordFile, atomically: true, encoding: .utf8)
        if getuid() == 0 { try Self.shell(["chown", "-R", "postgres:postgres", folder]) }
        try Self.asServerUser([
            "\(binaries)/initdb", "-D", folder + "/data", "-U", user, "--pwfile=\(passwordFile)",
            "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C.UTF-8",
        ])
        if let clients {
            let rules = try FileHandle(forWritingTo: URL(fileURLWithPath: folder + "/data/pg_hba.conf"))
            try rules.seekToEnd()
            try rules.write(contentsOf: Data("host all all \(clients) scram-sha-256\n".utf8))
            try rules.close()
        }
        // A port free now: bound by a RefusingPort, read back, let go when it is freed.
        port = try RefusingPort().port
        try Self.asServerUser([
            "\(binaries)/pg_ctl", "-D", folder + "/data", "-l", folder + "/server.log", "-w", "-t", "60",
            "-o",
            "-h 127.0.0.1\(address.map { "," + $0 } ?? "") -p \(port) -k \(folder) -c fsync=off -c synchronous_commit=off "
                + "-c full_page_writes=off -c max_connections=200", "start",
        ])
        let first = Self.atExit.withLock { commands in
            commands.append(stopCommand)
            return commands.count == 1
        }
        if first { atexit { PostgresCluster.runAtExit() } }
    }

    /// Stops the server and removes its folder (the shared cluster is stopped at exit).
    private var stopCommand: String {
        (getuid() == 0 ? "runuser -u postgres -- " : "") + "\(binaries)/pg_ctl -D \(folder)/data -m immediate stop; "
            + "rm -rf \(folder)"
    }

    /// Stops a dedicated cluster now (and at exit, where nothing is left to do).
    public func stop() { _ = try? Self.shell(["sh", "-c", stopCommand + " >/dev/null 2>&1"]) }

    /// A new, empty database on this cluster; its URL (password included). Dropped by
    /// `dropDatabase`, or with the cluster at exit.
    public func makeDatabase() throws -> String {
        let name = databaseCounter.withLock { counter in
            counter += 1
            return "t\(counter)_\(UUID().uuidString.prefix(8).lowercased())"
        }
        let admin = try PostgresConnection(url: url(database: "postgres"))
        try admin.execute("CREATE DATABASE \(name)")
        admin.close()
        return url(database: name)
    }

    public func dropDatabase(_ url: String) {
        guard let name = url.split(separator: "/").last.map(String.init),
            let admin = try? PostgresConnection(url: self.url(database: "postgres"))
        else { return }
        _ = try? admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        admin.close()
    }

    /// A database's URL on 127.0.0.1, or on another address the cluster listens on.
    public func url(database: String, host: String = "127.0.0.1") -> String {
        "postgres://\(user):\(password)@\(host):\(port)/\(database)"
    }

    // MARK: - processes

    private static let atExit = Mutex<[String]>([])

    private static func runAtExit() {
        for command in atExit.withLock({ $0 }) { _ = try? shell(["sh", "-c", command + " >/dev/null 2>&1"]) }
    }

    private static func asServerUser(_ arguments: [String]) throws {
        try shell(getuid() == 0 ? ["runuser", "-u", "postgres", "--"] + arguments : arguments)
    }

    /// Runs a command to its end with `posix_spawn` and `waitpid`, its output in a file:
    /// Foundation's `Process` never saw `pg_ctl start` end (the server it leaves running
    /// inherits the descriptors `Process` watches).
    @discardableResult
    private static func shell(_ arguments: [String]) throws -> String {
        let log = NSTemporaryDirectory() + "imgpipe-pg-command-\(UUID().uuidString.prefix(8)).log"
        defer { unlink(log) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = (["/usr/bin/env"] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/usr/bin/env", &actions, nil, argv, environ)
        guard spawned == 0 else { throw ClusterError("cannot start \(arguments[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        // WIFEXITED && WEXITSTATUS == 0, spelled out (the macros are not imported).
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw ClusterError("\(arguments.joined(separator: " ")) failed (status \(status)): \(output)")
        }
        return output
    }

    /// The newest installed server's folder (`/usr/lib/postgresql/<version>/bin`).
    private static func serverBinaries() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap(Int.init).sorted()
        return versions.reversed().map { "\(root)/\($0)/bin" }
            .first {
                FileManager.default.isExecutableFile(atPath: "\($0)/initdb")
                    && FileManager.default.isExecutableFile(atPath: "\($0)/postgres")
            }
    }

    public struct ClusterError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
