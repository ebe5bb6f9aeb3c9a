import Foundation

/// Writes outputs below a directory. Each file appears whole: it is linked (or, across
/// file systems, copied) to a temporary name in `.imgpipe-partial/` inside the directory,
/// then renamed into place. Names never leave the directory: `..` and absolute paths are
/// neutralised by `SafePath`, and a folder on the way that is a symbolic link out of the
/// directory is refused. A file of the same name left by an earlier run is replaced.
public struct DirectorySink: Sink {
    public let name: String
    public let root: String
    static let partialFolder = ".imgpipe-partial"

    public init(name: String, root: String) {
        self.name = name
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
    }

    var partialDirectory: String { root + "/" + Self.partialFolder }

    /// Creates the directory and removes temporary files a killed run left behind.
    public func prepare() throws {
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        } catch {
            throw FeedError("sink \(name): cannot create directory \(root): \(error.localizedDescription)")
        }
        try? FileManager.default.removeItem(atPath: partialDirectory)
    }

    public func finish() {
        // Removed only when empty: another process may be delivering into it.
        rmdir(partialDirectory)
    }

    public func deliver(_ delivery: Delivery) throws(DeliveryFailure) -> DeliveryReceipt {
        do throws(ItemFailure) {
            return try write(delivery)
        } catch {
            throw DeliveryFailure(error)
        }
    }

    private func write(_ delivery: Delivery) throws(ItemFailure) -> DeliveryReceipt {
        let relative = SafePath.relative(delivery.name)
        let destination = root + "/" + relative
        let folder = (destination as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: partialDirectory, withIntermediateDirectories: true)
        } catch {
            throw ItemFailure(.upload, "cannot create \(folder): \(error.localizedDescription)")
        }
        let realRoot = URL(fileURLWithPath: root).resolvingSymlinksInPath().path
        let realFolder = URL(fileURLWithPath: folder).resolvingSymlinksInPath().path
        guard realFolder == realRoot || realFolder.hasPrefix(realRoot + "/") else {
            throw ItemFailure(.upload, "output name \"\(relative)\" leads outside \(root)")
        }
        let temporary = partialDirectory + "/\(delivery.runId)-\(UUID().uuidString).tmp"
        defer { unlink(temporary) }
        if link(delivery.stagedPath, temporary) != 0 {
            do {
                try FileManager.default.copyItem(atPath: delivery.stagedPath, toPath: temporary)
            } catch {
                throw ItemFailure(.upload, "cannot copy output to \(root): \(error.localizedDescription)")
            }
        }
        guard rename(temporary, destination) == 0 else {
            throw ItemFailure(.upload, "cannot write \(destination): \(String(cString: strerror(errno)))")
        }
        return DeliveryReceipt(remoteURL: destination)
    }
}
