import Foundation
import PipelineKit

/// A local file that could not be written.
struct StageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Plain POSIX file writing: no `fsync` (a killed process loses nothing the kernel has;
/// imgpipe's durability is the state file's), no temporary name (callers rename).
enum FileWriter {
    /// Writes `data` as the whole of the file at `path`, made when it is not there. A file
    /// already there is cut to `data`'s length when longer and written over, not emptied: on
    /// ext4, a file cut to nothing and written again is sent to the disk when it is closed
    /// (`auto_da_alloc`), and the staged folder's files are written over (`SpoolFiles`).
    static func write(_ data: Data, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StageError("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size <= data.count || ftruncate(fd, off_t(data.count)) == 0 else {
            throw StageError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
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
