import CBeneath
import Foundation

/// A folder of a directory sink, open: outputs are written through its descriptor, so that
/// what its path leads to later (a folder swapped for a symbolic link mid-run) changes
/// nothing. Folders below the sink's own are reached from it by the kernel without
/// following any symbolic link (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`),
/// or, where the kernel has no `openat2`, a component at a time with `O_NOFOLLOW`, each
/// folder held open while the next is opened in it.
final class SinkFolder {
    let descriptor: Int32
    /// The folder's path when it was opened, for messages.
    let path: String

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit { close(descriptor) }

    /// The sink's own folder at `path`, the sink's path with the links it held when the sink
    /// was made already resolved (`DirectorySink.resolvedRoot`): its last component is not
    /// followed, so a folder swapped for a link mid-run (outputs sent elsewhere) fails the
    /// item; a folder removed mid-run is made again, as a user would.
    static func root(_ path: String) throws(ItemFailure) -> SinkFolder {
        let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        var descriptor = open(path, flags)
        if descriptor < 0, errno == ENOENT {
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                throw ItemFailure(.upload, "cannot create \(path): \(error.localizedDescription)")
            }
            descriptor = open(path, flags)
        }
        guard descriptor >= 0 else {
            let error = CError()
            var info = stat()
            if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK {
                throw ItemFailure(.upload, "the sink folder \(path) became a symbolic link: not followed, nothing written")
            }
            throw ItemFailure(.upload, "cannot open \(path): \(error)")
        }
        return SinkFolder(descriptor: descriptor, path: path)
    }

    /// The folder `relative` below this one when it exists and is reached without following
    /// a link; nil otherwise (nothing is made).
    func existingFolder(_ relative: String) -> SinkFolder? {
        guard !relative.isEmpty else { return self }
        var descriptor = ip_open_beneath(self.descriptor, relative, O_RDONLY | O_DIRECTORY)
        if descriptor < 0, [ENOSYS, EPERM, EAGAIN, E2BIG].contains(errno) {
            descriptor = dup(self.descriptor)
            for component in SafePath.components(of: relative).map { String(decoding: $0, as: UTF8.self) } where descriptor >= 0 {
                let next = openat(descriptor, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                close(descriptor)
                descriptor = next
            }
        }
        return descriptor >= 0 ? SinkFolder(descriptor: descriptor, path: path + "/" + relative) : nil
    }

    /// The folder `relative` (components made safe by `SafePath`) below this one, made when
    /// missing. A symbolic link on the way, or at the end, is not followed: the item fails.
    func folder(_ relative: String) throws(ItemFailure) -> SinkFolder {
        guard !relative.isEmpty else { return self }
        let descriptor = ip_open_beneath(self.descriptor, relative, O_RDONLY | O_DIRECTORY)
        if descriptor >= 0 { return SinkFolder(descriptor: descriptor, path: path + "/" + relative) }
        let error = CError()
        switch error.code {
        case ELOOP, EXDEV:
            throw linked(relative)
        case ENOENT, ENOSYS, EPERM, EAGAIN, E2BIG:
            // Missing (made here), a kernel without `openat2` (or a filter refusing it), a
            // rename racing the lookup: a component at a time.
            return try walk(relative)
        default:
            throw ItemFailure(.upload, "cannot open \(path)/\(relative): \(error)")
        }
    }

    private func walk(_ relative: String) throws(ItemFailure) -> SinkFolder {
        var current = self
        var walked = ""
        for component in SafePath.components(of: relative).map { String(decoding: $0, as: UTF8.self) } {
            walked += (walked.isEmpty ? "" : "/") + component
            var descriptor = openat(current.descriptor, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if descriptor < 0, errno == ENOENT {
                guard mkdirat(current.descriptor, component, 0o755) == 0 || errno == EEXIST else {
                    throw ItemFailure(.upload, "cannot create \(path)/\(walked): \(CError())")
                }
                descriptor = openat(current.descriptor, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            guard descriptor >= 0 else {
                let error = CError()
                var info = stat()
                if fstatat(current.descriptor, component, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFLNK {
                    throw linked(walked)
                }
                throw ItemFailure(.upload, "cannot open \(path)/\(walked): \(error)")
            }
            current = SinkFolder(descriptor: descriptor, path: path + "/" + walked)
        }
        return current
    }

    private func linked(_ relative: String) -> ItemFailure {
        ItemFailure(
            .upload,
            "\(path)/\(relative) is, or goes through, a symbolic link: not followed, nothing written "
                + "(a sink's folders are reached without following links)")
    }

    /// Where the folder is now, its links resolved (`/proc/self/fd`), whatever its path
    /// has become meanwhile; nil when that cannot be read.
    var realPath: String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
