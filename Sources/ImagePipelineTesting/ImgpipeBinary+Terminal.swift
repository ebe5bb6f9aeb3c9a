import Foundation
import PipelineKit

extension ImgpipeBinary {
    /// util-linux `script`, which runs a command on a pseudo-terminal of its own.
    public static let scriptTool = "/usr/bin/script"

    /// True when `runOnTerminal` can run (`script` is installed).
    public static var canRunOnTerminal: Bool { FileManager.default.isExecutableFile(atPath: scriptTool) }

    /// Runs to completion with standard output and standard error on a pseudo-terminal
    /// (`script -q -e -c … /dev/null`), as a user at a terminal would see it. The terminal
    /// reports no size (so programs fall back to their default width) and turns each
    /// `\n` into `\r\n`. Returns what was written to the terminal and the exit status.
    public static func runOnTerminal(
        _ arguments: [String], in directory: String,
        environment: [String: String] = [:]
    ) throws -> (status: Int32, output: String) {
        let command = ([path] + arguments).map(shellQuoted).joined(separator: " ")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: scriptTool)
        process.arguments = ["-q", "-e", "-c", command, "/dev/null"]
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var env = ProcessInfo.processInfo.environment
        env["TERM"] = "xterm"
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let out = NSTemporaryDirectory() + "/imgpipe-tty-\(UUID().uuidString.prefix(8))"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: out) }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        let output = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        return (process.terminationStatus, output)
    }

    private static func shellQuoted(_ word: String) -> String {
        "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
