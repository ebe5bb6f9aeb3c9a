import Foundation
import ImagePipeline
import PipelineKit
import Synchronization

/// A sink that batches: it holds the items it is handed in memory and commits each batch
/// as one JSON file, `batch-N.json` in `folder` (N counting the batches already there),
/// written under a temporary name and renamed into place. The file names each item with
/// its key, metadata and outputs, and the SHA-256 of each output's staged file as read at
/// the commit (so a test sees that staged outputs lived until their batch committed).
///
/// With a `Pause`, the sink stops in `accept` once its open batch holds `heldItems` items:
/// it writes the keys of that batch, one a line, to `marker`, and waits until `proceed`
/// exists; a test inspects the run meanwhile, then kills the process or lets it go on.
public final class MemoryBatchSink: Sink {
    /// Which batch of this process (from 1) to pause in, once it holds `heldItems` items;
    /// the file to write its keys to, and the file whose existence lets it go on.
    public typealias Pause = (batch: Int, heldItems: Int, marker: String, proceed: String)

    /// One item of a committed batch file.
    public struct CommittedItem: Codable, Sendable, Equatable {
        public let key: String
        public let metadata: String?
        public let outputs: [CommittedOutput]
    }

    public struct CommittedOutput: Codable, Sendable, Equatable {
        public let output: String
        public let name: String
        public let sha256: String
        public let bytes: Int
    }

    public let name: String
    public let folder: String
    public let batchSize: Int
    public let pause: Pause?
    /// The open batch, and how many batches this process has opened.
    private let state = Mutex<(open: [BatchItem], opened: Int)>(([], 0))

    public var takesWholeItems: Bool { true }

    public init(name: String, folder: String, batchSize: Int, pause: Pause? = nil) {
        self.name = name
        self.folder = folder
        self.batchSize = max(1, batchSize)
        self.pause = pause
    }

    public func prepare(workRoot: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        } catch {
            throw SinkError("sink \(name): cannot make folder \(folder): \(error.localizedDescription)")
        }
    }

    public func accept(_ item: BatchItem, attempt: Int) throws(DeliveryFailure) -> Acceptance {
        let (held, batch) = state.withLock { state -> (Int, Int) in
            if state.open.isEmpty { state.opened += 1 }
            state.open.append(item)
            return (state.open.count, state.opened)
        }
        if let pause, pause.batch == batch, pause.heldItems == held {
            let keys = state.withLock { $0.open.map(\.key) }
            try? Data(keys.map { $0 + "\n" }.joined().utf8).write(to: URL(fileURLWithPath: pause.marker), options: .atomic)
            while !FileManager.default.fileExists(atPath: pause.proceed) { usleep(10_000) }
        }
        return .held(full: held >= batchSize)
    }

    public func commit() throws(DeliveryFailure) -> [String: DeliveryReceipt] {
        let items = state.withLock { state in
            defer { state.open.removeAll() }
            return state.open
        }
        guard !items.isEmpty else { return [:] }
        var committed: [CommittedItem] = []
        for item in items {
            var outputs: [CommittedOutput] = []
            for delivery in item.deliveries {
                guard let data = FileManager.default.contents(atPath: delivery.stagedPath) else {
                    throw DeliveryFailure(ItemFailure(.upload, "staged output \(delivery.stagedPath) is gone"))
                }
                outputs.append(
                    CommittedOutput(
                        output: delivery.output, name: delivery.name,
                        sha256: sha256Hex(data), bytes: data.count))
            }
            committed.append(CommittedItem(key: item.key, metadata: item.metadata, outputs: outputs))
        }
        let file: String
        do {
            let existing = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".json") }
            file = "batch-\(existing.count).json"
            let partial = folder + "/." + file + ".partial"
            try JSONEncoder().encode(committed).write(to: URL(fileURLWithPath: partial))
            guard rename(partial, folder + "/" + file) == 0 else {
                throw SinkError("cannot rename \(partial): \(String(cString: strerror(errno)))")
            }
        } catch {
            throw DeliveryFailure(ItemFailure(.upload, "cannot write a batch in \(folder): \(error)"))
        }
        let receipt = DeliveryReceipt(remoteURL: folder + "/" + file)
        return Dictionary(items.map { ($0.key, receipt) }, uniquingKeysWith: { first, _ in first })
    }

    public func discard() {
        state.withLock { $0.open.removeAll() }
    }

    /// The items of every batch file in `folder`, by file name.
    public static func batches(in folder: String) throws -> [String: [CommittedItem]] {
        var batches: [String: [CommittedItem]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: folder) where name.hasSuffix(".json") {
            let data = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name))
            batches[name] = try JSONDecoder().decode([CommittedItem].self, from: data)
        }
        return batches
    }
}
