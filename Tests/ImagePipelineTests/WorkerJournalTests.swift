import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// Where a shared-run worker keeps its journal (`WorkerJournal`): a dead worker's journal is
/// swept, a live one's never (locked, or written lately by an imgpipe that did not lock), a
/// symbolic link is never followed, and a name held by a live process is passed over.
@Suite("Worker journals")
struct WorkerJournalTests {
    let work: TemporaryDirectory

    init() throws { work = try TemporaryDirectory("imgpipe-journal") }

    /// A journal file of `size` bytes with a log and a work folder, last written `age` seconds ago.
    func journal(_ name: String, age: TimeInterval = 0, size: Int = 4096) throws -> String {
        let path = work.url("w/\(name).sqlite")
        try work.write(String(repeating: "x", count: size), to: "w/\(name).sqlite")
        try work.write("log", to: "w/\(name).sqlite-wal")
        try work.write("spool", to: "w/\(name).work/run-1/a.part")
        if age > 0 {
            var times = [timeval(tv_sec: time(nil) - Int(age), tv_usec: 0), timeval(tv_sec: time(nil) - Int(age), tv_usec: 0)]
            for file in [path, path + "-wal"] { utimes(file, &times) }
        }
        return path
    }

    func exists(_ relative: String) -> Bool { FileManager.default.fileExists(atPath: work.url(relative)) }

    @Test func deadJournalsGoLiveOnesStayAndNoLinkIsFollowed() throws {
        let predecessor = try journal("host-1")  // this worker's own name, just killed
        _ = try journal("host-77", age: 3600)  // a worker gone an hour ago
        _ = try journal("host-78")  // an older imgpipe writing now (no lock)
        let held = try journal("host-79", age: 3600)  // a live worker, idle but locked
        let lock = try StateLock(stateFile: held)
        let victim = try work.write("precious", to: "victim.db")
        try FileManager.default.createSymbolicLink(atPath: work.url("w/host-2.sqlite"), withDestinationPath: victim)

        let claimed = try WorkerJournal.claim(folder: work.url("w"), base: "host-1")
        #expect(claimed.path == predecessor, "its own name, free again")
        #expect(try FileManager.default.attributesOfItem(atPath: predecessor)[.size] as? Int == 0, "emptied")
        #expect(!exists("w/host-1.sqlite-wal") && !exists("w/host-1.work"), "its log and work folder went")
        #expect(!exists("w/host-77.sqlite") && !exists("w/host-77.sqlite-wal") && !exists("w/host-77.work"))
        #expect(exists("w/host-78.sqlite") && exists("w/host-78.work"), "written lately: maybe alive")
        #expect(exists("w/host-79.sqlite") && exists("w/host-79.work"), "locked: alive")
        withExtendedLifetime(lock) {}

        // The name is held by a live process (another pid namespace): the next one is taken,
        // and the link at `host-2` is passed over, its target untouched.
        let second = try WorkerJournal.claim(folder: work.url("w"), base: "host-1")
        #expect(second.path == work.url("w/host-1+2.sqlite"), "\(second.path)")
        let third = try WorkerJournal.claim(folder: work.url("w"), base: "host-2")
        #expect(third.path == work.url("w/host-2+2.sqlite"), "\(third.path)")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "precious")
        withExtendedLifetime([claimed.lock, second.lock, third.lock]) {}
    }
}
