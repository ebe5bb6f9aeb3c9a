import Foundation

extension String {
    /// The real path of this absolute path, or the one it would have once made: its nearest
    /// existing ancestor with `.`, `..` and symbolic links resolved, and the rest as written.
    /// Two spellings of one folder (a symbolic link, `in/sub/..`) compare equal through it.
    package var realPath: String {
        var existing = URL(fileURLWithPath: self).standardizedFileURL
        var rest: [String] = []
        while existing.path != "/", !FileManager.default.fileExists(atPath: existing.path) {
            rest.insert(existing.lastPathComponent, at: 0)
            existing.deleteLastPathComponent()
        }
        return ([existing.resolvingSymlinksInPath().path] + rest).joined(separator: "/")
    }
}
