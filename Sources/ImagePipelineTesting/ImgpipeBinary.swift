import Foundation

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
        for _ in 0 ..< 4 {
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
    public static func run(_ arguments: [String], in directory: String,
                           environment: [String: String] = [:]) throws -> CommandResult {
        let process = try launch(arguments, in: directory, environment: environment)
        process.process.waitUntilExit()
        return process.result()
    }

    /// Starts without waiting (for signals and kills).
    public static func launch(_ arguments: [String], in directory: String,
                              environment: [String: String] = [:]) throws -> RunningCommand {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let id = UUID().uuidString.prefix(8)
        let out = NSTemporaryDirectory() + "/imgpipe-out-\(id)"
        let err = NSTemporaryDirectory() + "/imgpipe-err-\(id)"
        FileManager.default.createFile(atPath: out, contents: nil)
        FileManager.default.createFile(atPath: err, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return RunningCommand(process: process, stdoutPath: out, stderrPath: err)
    }
}

/// A started `imgpipe` process.
public struct RunningCommand: @unchecked Sendable {
    // @unchecked: Process is used from the test's thread only.
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
