import Foundation
import PipelineKit

/// A fresh folder under the system temp directory, removed when this value is freed.
public final class TemporaryDirectory: Sendable {
    public let path: String

    public init(_ prefix: String = "imgpipe-test") throws {
        let base = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        path = base.path
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// `relative` below this folder.
    public func url(_ relative: String) -> String { path + "/" + relative }

    /// Creates a sub-folder (and its parents) and returns its path.
    @discardableResult
    public func folder(_ relative: String) throws -> String {
        let folder = url(relative)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    /// Writes text to `relative` and returns the path.
    @discardableResult
    public func write(_ text: String, to relative: String) throws -> String {
        try write(Data(text.utf8), to: relative)
    }

    /// Writes bytes to `relative` and returns the path.
    @discardableResult
    public func write(_ data: Data, to relative: String) throws -> String {
        let target = url(relative)
        try FileManager.default.createDirectory(
            atPath: (target as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: target))
        return target
    }

    /// Files below this folder (relative paths, sorted), hidden ones included.
    public func files(under relative: String = "") -> [String] {
        let root = relative.isEmpty ? path : url(relative)
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        var result: [String] = []
        while let next = enumerator.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: root + "/" + next, isDirectory: &isDirectory), !isDirectory.boolValue {
                result.append(next)
            }
        }
        return result.sorted()
    }

    /// The inode and modification time of each file below `relative`, by relative path:
    /// a file imgpipe wrote again (to a new file renamed into place) has another.
    public func stamps(under relative: String) -> [String: String] {
        var stamps: [String: String] = [:]
        for name in files(under: relative) {
            var info = stat()
            guard stat(url(relative + "/" + name), &info) == 0 else { continue }
            stamps[name] = "\(info.st_ino) \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }
        return stamps
    }
}
