import Foundation
import ImagePipelineTesting
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// Shared runs as a new user met them ("first day, round two", point 12).
extension SharedWorkTests {
    /// A folder source and a folder sink: no server needed.
    func folderPipeline(_ count: Int) throws {
        try images(count)
        try work.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "in"},
             "filters": [{"op": "fit", "width": 32, "height": 32}], "sink": {"type": "directory", "path": "out"}}
            """, to: "pipe.json")
    }

    /// Each worker's progress line counts the whole run: once the feed is listed the total
    /// is its 12 items, not the items this worker was given so far (`4/6+`), and the last
    /// line of each says so.
    @Test func eachWorkersProgressLineShowsTheRunsTotal() throws {
        try folderPipeline(12)
        let workers = try (0..<2).map { _ in
            try ImgpipeBinary.launch(
                ["work", "pipe.json", "--state", url, "--chunk-size", "2", "-j", "1"], in: work.path,
                environment: ["IMGPIPE_PROGRESS_INTERVAL": "0"])
        }
        for result in workers.map({ $0.wait() }) {
            #expect(result.status == 0, "\(result.stderr)")
            let lines = result.stderr.split(separator: "\n").filter { $0.hasPrefix("progress: ") }
            let last = try #require(lines.last, "no progress line: \(result.stderr)")
            #expect(last.hasPrefix("progress: 12/12 done"), "\(lines)")
            // Lines never count down, nor show a total under the feed's.
            let totals = lines.compactMap { $0.split(separator: "/").dropFirst().first?.split(separator: " ").first }
            #expect(totals.allSatisfy { $0 == "12" || $0.hasSuffix("+") }, "\(lines)")
        }
    }

    /// `status`, `resume` and `export` given no state say where the pipeline's shared run
    /// is, without its password, from the pipeline's folder and from another; the note
    /// holds no password either. A state file older than the shared run is shown with a
    /// note that a later run is in PostgreSQL.
    @Test func commandsGivenNoStateSayWhereTheSharedRunIs() throws {
        try folderPipeline(3)
        let worked = try ImgpipeBinary.run(["work", "pipe.json", "--state", url], in: work.path)
        #expect(worked.status == 0, "\(worked.stderr)")
        let place = url.replacingOccurrences(of: ":\(cluster.password)@", with: "@")
        #expect(place != url)

        try work.folder("sub")
        let unset = ["IMGPIPE_STATE": ""]
        for (command, folder, pipeline) in [
            ("status", work.path, "pipe.json"), ("status", work.url("sub"), "../pipe.json"),
            ("resume", work.path, "pipe.json"), ("export", work.path, "pipe.json"),
        ] {
            let result = try ImgpipeBinary.run([command, pipeline], in: folder, environment: unset)
            #expect(result.status == 2, "\(command): \(result.stderr)")
            #expect(result.stderr.contains("this pipeline's run is in PostgreSQL at \(place)"), "\(command): \(result.stderr)")
            #expect(!result.stderr.contains(cluster.password) && !result.stderr.contains("nothing has run yet"))
        }
        #expect(!FileManager.default.fileExists(atPath: work.url("sub/.imgpipe")), "a command given no state made a folder")
        let noted = try String(contentsOfFile: work.url(".imgpipe/pipe.postgres"), encoding: .utf8)
        #expect(!noted.contains(cluster.password) && noted.contains(place), "\(noted)")

        // A run on a state file, then the shared run again: status shows the state file's
        // run, and says a later one is in PostgreSQL.
        #expect(try ImgpipeBinary.run(["run", "pipe.json"], in: work.path, environment: unset).status == 0)
        #expect(try ImgpipeBinary.run(["work", "pipe.json", "--new", "--state", url], in: work.path).status == 0)
        let older = try ImgpipeBinary.run(["status", "pipe.json"], in: work.path, environment: unset)
        #expect(older.status == 0 && older.stdout.contains("run #1"), "\(older.stdout)\(older.stderr)")
        #expect(older.stderr.contains("a later run of this pipeline is in PostgreSQL at \(place)"), "\(older.stderr)")
    }

    /// What the note keeps: the location with no password in any form, the rest as written.
    @Test func aLocationWithoutItsPasswordKeepsTheRest() {
        let cases = [
            ("postgres://ann:p%40ss:w0rd@db.example:5432/imgpipe", "postgres://ann@db.example:5432/imgpipe"),
            ("postgres://ann@db/x", "postgres://ann@db/x"),
            ("postgresql://db/x?user=ann&password=hunter2&sslmode=require", "postgresql://db/x?user=ann&sslmode=require"),
            ("postgres://db/x?sslpassword=K3y", "postgres://db/x"),
            ("host=db.example dbname=imgpipe user=ann password=hunter2", "host=db.example dbname=imgpipe user=ann"),
            ("host=db password = S3cr3tPw user=ann", "host=db user=ann"),
            (#"host=db password='secret \' pass' user=ann sslpassword=K3yPassw0rd"#, "host=db user=ann"),
        ]
        for (given, kept) in cases { #expect(StateLocation(given).withoutPassword == kept, "\(given)") }
    }
}
