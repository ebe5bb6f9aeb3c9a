import Foundation
import ImagePipeline
import PipelineKit

/// A process's children as `/proc` shows them: what a run's pixel helpers are seen by.
public enum ChildProcesses {
    /// The children of `pid` (every thread's, from `/proc/PID/task/*/children`).
    public static func of(_ pid: pid_t) -> [pid_t] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.flatMap { task -> [pid_t] in
            let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/children", encoding: .utf8)) ?? ""
            return text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
    }

    /// The kernel's name of a process (`/proc/PID/comm`), nil once it is gone.
    public static func name(of pid: pid_t) -> String? {
        (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The pixel helpers of a running `imgpipe` (children named `PixelHelper.processName`).
    public static func pixelHelpers(of pid: pid_t) -> [pid_t] {
        of(pid).filter { name(of: $0) == PixelHelper.processName }
    }

    /// True while `pid` runs (not once it is a zombie or gone).
    public static func isRunning(_ pid: pid_t) -> Bool {
        guard let state = stat(of: pid)?.first else { return false }
        return state != "Z" && state != "X"
    }

    /// The CPU time a process has used (user and system), in seconds; nil once it is gone.
    public static func cpuSeconds(of pid: pid_t) -> Double? {
        // utime and stime are fields 14 and 15 of `stat`, 12 and 13 after the name.
        guard let fields = stat(of: pid), fields.count > 12,
            let user = Double(fields[11]), let system = Double(fields[12])
        else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// `/proc/PID/stat`'s fields after the name (which may hold spaces): the state first.
    private static func stat(of pid: pid_t) -> [Substring]? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }
}
