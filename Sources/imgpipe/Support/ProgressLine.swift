import Foundation
import ImagePipeline
import PipelineKit

/// The words of one progress report — `67/1000 done, 0 failed, 24.1 items/s, ETA 38s` —
/// and, for a terminal, the same after a bar, fitted to its width.
///
/// The total reads `1000` when it is known (the feed counted its items, or listing is
/// over), `~1000` while a remote API's own count is being listed (an estimate: the API
/// may list fewer), and `95+` when nothing has said how many are to come (the items
/// listed so far). The ETA carries the same mark: `ETA ~38s` after an estimate, `ETA --`
/// when it cannot be told (no total, or nothing finished yet).
struct ProgressLine {
    let progress: RunProgress

    init(_ progress: RunProgress) { self.progress = progress }

    var total: String {
        switch progress.total {
        case .exact(let count): "\(count)"
        case .estimate(let count): "~\(count)"
        case .atLeast(let count): "\(count)+"
        }
    }

    var eta: String {
        guard let seconds = progress.eta else { return "ETA --" }
        if case .estimate = progress.total { return "ETA ~" + Self.duration(seconds) }
        return "ETA " + Self.duration(seconds)
    }

    /// The line without a bar: what piped output gets.
    var text: String {
        "\(progress.done)/\(total) done, " + (progress.skipped > 0 ? "\(progress.skipped) skipped, " : "")
            + "\(progress.failed) failed, "
            + String(format: "%.1f items/s", progress.itemsPerSecond) + ", " + eta
    }

    /// A bar and `text`, in fewer than `columns` characters (a line that reaches the last
    /// column wraps on some terminals, and `\r` would then redraw only its second half).
    /// The bar is at most 40 wide and is left out below 10; the text is cut last.
    func fitted(columns: Int) -> String {
        let room = max(1, columns - 1)
        let text = self.text
        let barWidth = min(40, room - text.count - 3)
        guard barWidth >= 10 else { return String(text.prefix(room)) }
        return bar(width: barWidth) + " " + text
    }

    /// `[####......]`: the share of the total finished (done, skipped or failed); empty while the
    /// total is only a lower bound.
    func bar(width: Int) -> String {
        var filled = 0
        if progress.total != .atLeast(progress.total.count), progress.total.count > 0 {
            let share = Double(progress.done + progress.skipped + progress.failed) / Double(progress.total.count)
            filled = min(width, Int(Double(width) * share))
        }
        return "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
    }

    /// `45s`, `1m20s`, `2h05m`.
    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        if total >= 3600 { return String(format: "%dh%02dm", total / 3600, total / 60 % 60) }
        if total >= 60 { return String(format: "%dm%02ds", total / 60, total % 60) }
        return "\(total)s"
    }
}
