import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Makes names that come from feeds safe to use below a sink's directory.
enum SafePath {
    /// A relative path that cannot leave its base directory: no leading `/`, no `..` or
    /// `.` components, no empty components, no NUL or control characters, each component
    /// at most 255 bytes. Never empty.
    static func relative(_ name: String) -> String {
        var components: [String] = []
        for raw in name.split(separator: "/", omittingEmptySubsequences: true) {
            var component = String(String.UnicodeScalarView(raw.unicodeScalars.map { scalar in
                scalar.value < 0x20 || scalar.value == 0x7F ? "_" : scalar
            }))
            if component == "." { continue }
            if component == ".." { component = "_" }
            while component.utf8.count > 255 { component.removeFirst() }
            components.append(component)
        }
        return components.isEmpty ? "_" : components.joined(separator: "/")
    }
}

/// Plain POSIX file writing: no `fsync` (a killed process loses nothing the kernel has;
/// imgpipe's durability is the state file's), no temporary name (callers rename).
/// A local file that could not be written.
struct StageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum FileWriter {
    static func write(_ data: Data, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StageError("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw StageError("cannot write \(path): \(String(cString: strerror(errno)))")
                }
                offset += written
            }
        }
    }
}
