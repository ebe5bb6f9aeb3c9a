import Foundation
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// `FolderStats`, the `stat` of `plan` and `run --incremental` through folders kept open:
/// it must give what `stat` of the whole path gives, whatever the folders and names.
@Suite("stat through folders kept open")
struct FolderStatsTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-folderstats") }

    /// Files of more folders than are kept open, looked at in turns (the source's folder and
    /// the sink's alternate for each item): each answer is the file's own size and time.
    @Test func eachFileIsFoundInItsFolderWhateverTheTurns() throws {
        let folders = FolderStats.keptFolders + 6
        var paths: [String] = []
        for folder in 0..<folders {
            for file in 0..<3 {
                let path = "f\(folder)/\(file).jpg"
                try work.write(String(repeating: "x", count: folder * 3 + file + 1), to: path)
                paths.append(work.url(path))
            }
        }
        let stats = FolderStats()
        for round in 0..<2 {
            for (index, path) in (round == 0 ? paths : paths.reversed()).enumerated() {
                let found = try #require(stats.sizeAndTime(path), "\(path)")
                let attributes = try FileManager.default.attributesOfItem(atPath: path)
                #expect(found.size == attributes[.size] as? Int, "\(path) in turn \(index)")
                let modified = try #require(attributes[.modificationDate] as? Date).timeIntervalSince1970
                #expect(abs(found.modified - modified) < 0.001, "\(path)")
            }
        }
        // A file that is gone, in a folder kept open, and one in a folder that is not there.
        try FileManager.default.removeItem(atPath: paths[0])
        #expect(stats.sizeAndTime(paths[0]) == nil)
        #expect(stats.sizeAndTime(work.url("nowhere/1.jpg")) == nil)
        // A file written since its folder was opened is found.
        try work.write("late", to: "f1/late.jpg")
        #expect(stats.sizeAndTime(work.url("f1/late.jpg"))?.size == 4)
    }

    /// Two threads at once, over more folders than are kept (so that one closes them all
    /// while the other looks): each answer is still its own file's.
    @Test func twoThreadsAtOnceGetTheirOwnFilesSizes() throws {
        let folders = FolderStats.keptFolders + 16
        var sizes: [String: Int] = [:]
        for folder in 0..<folders {
            let path = "t\(folder)/a.jpg"
            try work.write(String(repeating: "y", count: folder + 1), to: path)
            sizes[work.url(path)] = folder + 1
        }
        let stats = FolderStats()
        let (paths, expected) = (Array(sizes.keys), sizes)
        let wrong = LockedBox<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { thread in
            for round in 0..<40 {
                for (index, path) in paths.enumerated() where (index + round + thread) % 2 == 0 {
                    if stats.sizeAndTime(path)?.size != expected[path] { wrong.withLock { $0.append(path) } }
                }
            }
        }
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0 }.prefix(5))")
    }

    /// A name that is not UTF-8 (a location written as a `file:` URL) is looked up by its
    /// bytes; a link is followed, as `stat` follows it.
    @Test func aNameThatIsNotUTF8AndALinkAreFoundAsStatFindsThem() throws {
        try work.folder("raw")
        let path = Array(work.url("raw").utf8) + [UInt8(ascii: "/"), 0x63, 0x61, 0x66, 0xE9, 0x2E, 0x6A, 0x70, 0x67]
        let descriptor = LocalPath.withCPath(bytes: path) { open($0, O_CREAT | O_WRONLY, 0o644) }
        #expect(descriptor >= 0)
        #expect(write(descriptor, "12345", 5) == 5)
        close(descriptor)
        let location = LocalPath.location(path)
        #expect(location.hasPrefix("file://"), "\(location)")
        let stats = FolderStats()
        #expect(stats.sizeAndTime(location)?.size == 5)
        try work.write("abc", to: "raw/target.jpg")
        try FileManager.default.createSymbolicLink(atPath: work.url("raw/link.jpg"), withDestinationPath: "target.jpg")
        #expect(stats.sizeAndTime(work.url("raw/link.jpg"))?.size == 3)
        #expect(stats.info(work.url("raw/link.jpg")).map { $0.st_mode & S_IFMT } == S_IFREG)
    }
}
