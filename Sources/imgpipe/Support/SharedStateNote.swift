import Foundation
import ImagePipeline
import PipelineKit

/// Where a pipeline's run shared through PostgreSQL is, noted where its state file would
/// be (`.imgpipe/<stem>.postgres`, beside `<stem>.sqlite`) when a run or a worker starts on
/// it, so that `status`, `resume` and `export` without `IMGPIPE_STATE` can say where the
/// run is instead of "nothing has run yet".
///
/// The note holds the location without its password (`postgres://user@host:port/db`) and
/// is only ever told, never connected to: a command that was given no state does not reach
/// a database on its own (the note may be old, its server gone or holding another run, and
/// `resume` would write there), and a password is not kept on disk.
enum SharedStateNote {
    private struct Note: Codable {
        let pipeline: String
        let state: String
    }

    /// Notes that `pipeline`'s run is at `url`; a folder that cannot be written keeps no
    /// note (it is a convenience: the run goes on).
    static func remember(_ url: String, pipeline: String) {
        let folder = StateFiles.folder(explicit: nil, pipeline: pipeline)
        let note = Note(pipeline: Console.realPath(pipeline), state: StateLocation.postgres(url: url).withoutPassword)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(note) else { return }
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try? data.write(to: URL(fileURLWithPath: folder + "/" + fileName(pipeline)), options: .atomic)
    }

    /// The shared run noted for `pipeline` in one of the places its state file is looked
    /// for: where it is (no password) and when it was noted.
    static func find(pipeline: String) -> (state: String, noted: Date)? {
        for place in StateFiles.candidates(pipeline: pipeline) {
            let path = (place as NSString).deletingLastPathComponent + "/" + fileName(pipeline)
            guard let data = FileManager.default.contents(atPath: path),
                let note = try? JSONDecoder().decode(Note.self, from: data),
                StateFiles.sameFile(note.pipeline, pipeline),
                let noted = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date
            else { continue }
            return (note.state, noted)
        }
        return nil
    }

    /// "this pipeline's run is in PostgreSQL at …", for a command that found no state file
    /// (`doing`: "to see it", "to resume it"…); nil when no shared run is noted.
    static func message(pipeline: String, doing: String) -> String? {
        find(pipeline: pipeline).map { told($0.state, doing: doing) }
    }

    /// What a command that found no state file says of the shared run at `state`.
    static func told(_ state: String, doing: String) -> String {
        "this pipeline's run is in PostgreSQL at \(state) (noted when it started); "
            + "set IMGPIPE_STATE to that, with its password, or give it as --state, \(doing)"
    }

    private static func fileName(_ pipeline: String) -> String {
        URL(fileURLWithPath: pipeline).deletingPathExtension().lastPathComponent + ".postgres"
    }
}
