import Foundation
import PipelineKit

/// Colour on a terminal: a few words imgpipe writes itself (`error:`, `warning:`,
/// `failed:`, a summary's failed count) in red or yellow, the rest as it is. Only when
/// the stream is a terminal, `TERM` is not `dumb` and `NO_COLOR` is unset or empty (the
/// convention of no-color.org); never in a pipe or a file, so logs and scripts see plain
/// text. Text from a feed is never painted: it is made printable first and then left alone.
enum TerminalStyle {
    enum Colour: String {
        case red = "31"
        case yellow = "33"
    }

    /// Whether standard error takes colour.
    static let onStandardError = takesColour(STDERR_FILENO)
    /// Whether standard output takes colour.
    static let onStandardOutput = takesColour(STDOUT_FILENO)

    static func takesColour(
        _ descriptor: Int32, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        guard isatty(descriptor) == 1, environment["TERM"] != "dumb" else { return false }
        return environment["NO_COLOR"].map(\.isEmpty) ?? true
    }

    /// `text` in `colour` (bold) when `enabled`, else `text`.
    static func paint(_ text: String, _ colour: Colour, when enabled: Bool) -> String {
        enabled ? "\u{1B}[1;\(colour.rawValue)m" + text + "\u{1B}[0m" : text
    }
}
