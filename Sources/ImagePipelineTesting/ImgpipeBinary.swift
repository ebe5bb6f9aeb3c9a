import Foundation
import PipelineKit

/// What a finished command printed and how it ended.
public struct CommandResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// The built `imgpipe` executable, run as a user would.
public enum ImgpipeBinary {
    /// `$IMGPIPE_BIN`, else `imgpipe` beside the test bundle (SwiftPM builds it there).
    public static var path: String {
        if let explicit = ProcessInfo.processInfo.environment["IMGPIPE_BIN"] { return explicit }
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("imgpipe").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        let fallback = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../.build/debug/imgpipe").standardizedFileURL.path
        return fallback
    }

    /// Runs to completion in `directory`; output is collected through files, so a chatty
    /// command cannot block on a full pipe.
    public static func run(
        _ arguments: [String], in directory: String,
        environment: [String: String] = [:]
    ) throws -> CommandResult {
        let process = try launch(arguments, in: directory, environment: environment)
        process.process.waitUntilExit()
        return process.result()
    }

    /// Starts without waiting (for signals and kills).
    public static func launch(
        _ arguments: [String], in directory: String,
        environment: [String: String] = [:]
    ) throws -> RunningCommand {
        try launch(executable: path, arguments, in: directory, environment: environment)
    }

    /// Starts another program the same way (a helper script, `env -u …` around imgpipe).
    public static func launch(
        executable: String, _ arguments: [String], in directory: String,
        environment: [String: String] = [:]
    ) throws -> RunningCommand {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let id = UUID().uuidString.prefix(8)
        let out = NSTemporaryDirectory() + "/imgpipe-out-\(id)"
        let err = NSTemporaryDirectory() + "/imgpipe-err-\(id)"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return RunningCommand(process: process, stdoutPath: out, stderrPath: err)
    }
}

/// A started `imgpipe` process.
public struct RunningCommand: Sendable {
    public let process: Process
    let stdoutPath: String
    let stderrPath: String

    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    public func wait() -> CommandResult {
        process.waitUntilExit()
        return result()
    }

    func result() -> CommandResult {
        let stdout = (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: stdoutPath)
        try? FileManager.default.removeItem(atPath: stderrPath)
        return CommandResult(status: process.terminationStatus, stdout: stdout, stderr: stderr)
    }
}

/// How a measured run ended, and the most memory the child held at once.
public struct MeasuredResult: Sendable {
    public let result: CommandResult
    /// The terminating signal, when the child did not exit normally.
    public let signal: Int32?
    /// The child's peak resident set size (its `VmHWM`), with its pixel helpers' added, in
    /// bytes.
    public let peakRSS: Int
    /// The run's own peak (its `VmHWM`), without its helpers: for what only the run holds
    /// (a download, an upload's answer).
    public let ownPeakRSS: Int
    /// The most the run and its helpers held at one reading (the sum of their `VmRSS`):
    /// what a memory budget shared by the helpers bounds. `peakRSS` adds peaks that
    /// may have come one after the other (each helper keeps its own high-water mark).
    public let concurrentPeakRSS: Int
    /// The hang guard fired: the child was killed after `timeout` seconds.
    public let timedOut: Bool

    public var peakRSSMegabytes: Int { peakRSS / 1_048_576 }
    public var concurrentPeakRSSMegabytes: Int { concurrentPeakRSS / 1_048_576 }
    /// The largest peak (`VmHWM`) of one pixel helper, in bytes.
    public let helperPeakRSS: Int
    public var helperPeakRSSMegabytes: Int { helperPeakRSS / 1_048_576 }
    /// Minor page faults of the run and of the helpers it reaped (`wait4`'s `ru_minflt`):
    /// memory touched for the first time, which a process that reuses what it freed avoids.
    public let minorFaults: Int
}

extension ImgpipeBinary {
    /// Runs to completion, reading the child's peak RSS while it runs, and kills it if it
    /// outlives `timeout` seconds (a hang guard, not a timing assertion).
    ///
    /// The peak is `VmHWM` from `/proc/<pid>/status`, read every 10 ms: the high-water
    /// mark of the child's own address space since its `exec`, which only grows, so the
    /// last reading is the peak up to 10 ms before the end. The child's pixel helpers
    /// (`ChildProcesses.pixelHelpers`) are read the same way and the peaks of every helper
    /// seen are added: at least what the run held at once (up to a helper that lived less
    /// than one reading), as a bound for the tests' limits. Not `wait4`'s `ru_maxrss`:
    /// Linux carries the spawning process's high-water mark across `exec` into it, so a
    /// child of a 200 MB test process reported 200 MB whatever it used itself.
    public static func runMeasured(
        _ arguments: [String], in directory: String,
        timeout: TimeInterval = 300
    ) throws -> MeasuredResult {
        let id = UUID().uuidString.prefix(8)
        let out = NSTemporaryDirectory() + "/imgpipe-out-\(id)"
        let err = NSTemporaryDirectory() + "/imgpipe-err-\(id)"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // `env -C` changes directory and execs imgpipe in the same process (Glibc's
        // posix_spawn_file_actions_addchdir_np is not visible to Swift).
        let argv = (["/usr/bin/env", "-C", directory, path] + arguments).map { strdup($0) } + [nil]
        let envp = ProcessInfo.processInfo.environment.map { strdup("\($0)=\($1)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/usr/bin/env", &actions, nil, argv, envp)
        guard spawned == 0 else {
            throw CocoaError(
                .executableLoad,
                userInfo: [NSLocalizedDescriptionKey: "posix_spawn \(path): \(String(cString: strerror(spawned)))"])
        }
        var status: Int32 = 0
        var timedOut = false
        var peak = 0
        var helperPeaks: [pid_t: Int] = [:]
        var ownPeak = 0
        var concurrentPeak = 0
        var usage = rusage()
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            // The pid from posix_spawn is `env`'s, which execs imgpipe in the same process.
            var resident = residentSize(of: pid) ?? 0
            for helper in ChildProcesses.pixelHelpers(of: pid) {
                helperPeaks[helper] = max(helperPeaks[helper] ?? 0, highWaterMark(of: helper) ?? 0)
                resident += residentSize(of: helper) ?? 0
            }
            concurrentPeak = max(concurrentPeak, resident)
            let own = highWaterMark(of: pid) ?? 0
            ownPeak = max(ownPeak, own)
            peak = max(peak, own + helperPeaks.values.reduce(0, +))
            let reaped = wait4(pid, &status, WNOHANG, &usage)
            if reaped == pid { break }
            if reaped < 0, errno != EINTR { break }
            if !timedOut, Date() > deadline {
                kill(pid, SIGKILL)
                timedOut = true
            }
            usleep(10_000)
        }
        let signal = status & 0x7F
        let stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: out)
        try? FileManager.default.removeItem(atPath: err)
        return MeasuredResult(
            result: CommandResult(status: signal == 0 ? (status >> 8) & 0xFF : -1, stdout: stdout, stderr: stderr),
            signal: signal == 0 ? nil : signal, peakRSS: peak, ownPeakRSS: ownPeak,
            concurrentPeakRSS: concurrentPeak, timedOut: timedOut,
            helperPeakRSS: helperPeaks.values.max() ?? 0, minorFaults: usage.ru_minflt)
    }

    /// `VmHWM` of a running process, in bytes (nil once it has exited).
    static func highWaterMark(of pid: pid_t) -> Int? { statusField("VmHWM:", of: pid) }

    /// `VmRSS` of a running process, in bytes (nil once it has exited).
    static func residentSize(of pid: pid_t) -> Int? { statusField("VmRSS:", of: pid) }

    /// A `kB` field of `/proc/PID/status`, in bytes.
    private static func statusField(_ field: String, of pid: pid_t) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
            let kilobytes = Int(
                line.dropFirst(field.count).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
        else { return nil }
        return kilobytes * 1024
    }
}

extension CommandResult {
    /// Standard output decoded as a Codable report of the CLI (`StatusReport`): the JSON is
    /// read the way the library writes it, not as `Any`.
    public func decoded<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(stdout.utf8))
        } catch {
            throw DecodingFailure(
                description: "\(T.self) from the command's output: \(error)\nstdout: \(stdout)\nstderr: \(stderr)")
        }
    }

    /// Standard output read as JSON Lines (`export`'s format): one object per line.
    public func jsonLines() throws -> [[String: Any]] {
        try stdout.split(separator: "\n").map { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw DecodingFailure(description: "not a JSON object: \(line)")
            }
            return object
        }
    }
}

/// The command's output was not the report expected.
public struct DecodingFailure: Error, CustomStringConvertible {
    public let description: String
}
