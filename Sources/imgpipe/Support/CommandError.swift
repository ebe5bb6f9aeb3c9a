import ArgumentParser

/// A command's failure: what to tell the user and the exit code. Thrown by any command
/// and printed once, as `error: <message>`, by `Imgpipe.main`.
struct CommandError: Error, CustomStringConvertible {
    let message: String
    let exitCode: ExitCode

    var description: String { message }

    /// Exit 2: bad usage, an invalid pipeline, a state file that cannot be used.
    static func usage(_ message: String) -> CommandError { CommandError(message: message, exitCode: Exit.usage) }

    /// Exit 1: the command ran and failed.
    static func failure(_ message: String) -> CommandError { CommandError(message: message, exitCode: .failure) }
}
