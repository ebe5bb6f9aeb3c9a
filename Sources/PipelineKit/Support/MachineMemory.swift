import Foundation

/// The memory this process may use: the machine's (`MemTotal` in `/proc/meminfo`), or the
/// control group's limit when that is lower (cgroup v2 `memory.max`, v1
/// `memory.limit_in_bytes`), as a container sees it.
enum MachineMemory {
    /// In bytes; nil when neither can be read.
    static func available() -> Int? {
        var limits: [Int] = []
        if let meminfo = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8),
            let line = meminfo.split(separator: "\n").first(where: { $0.hasPrefix("MemTotal:") }),
            let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        {
            limits.append(kilobytes * 1024)
        }
        for path in ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"] {
            // "max" (no limit) and v1's huge "no limit" number are not limits.
            if let text = try? String(contentsOfFile: path, encoding: .utf8),
                let bytes = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), bytes > 0, bytes < 1 << 60
            {
                limits.append(bytes)
            }
        }
        return limits.min()
    }
}
