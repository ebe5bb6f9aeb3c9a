import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

struct InitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Write a starting pipeline file, with a comment on each part.",
        discussion: """
            The file reads the folder photos/ and writes 1024-pixel JPEGs to out/. JSON has \
            no comments: keys that start with // are comments, in any object of a pipeline \
            file. Refuses to replace an existing file unless --force is given.
            """
    )

    @Argument(help: "The file to write.", completion: .file(extensions: ["json"]))
    var pipeline = "pipeline.json"

    @Flag(help: "Replace the file if it exists.")
    var force = false

    func run() throws {
        // lstat, not fileExists: a symbolic link to nowhere is there too, and writing "to" it
        // would create the file it points at, wherever that is.
        var info = stat()
        if !force, lstat(pipeline, &info) == 0 {
            let what =
                (info.st_mode & S_IFMT) == S_IFLNK && !FileManager.default.fileExists(atPath: pipeline)
                ? "is a symbolic link to a file that does not exist" : "exists"
            throw CommandError.usage("\(pipeline) \(what); give another name or --force to replace it")
        }
        let name = URL(fileURLWithPath: pipeline).deletingPathExtension().lastPathComponent
        do {
            try Self.write(Data(Self.starter(name: name).utf8), replacing: pipeline)
        } catch {
            throw CommandError.failure("cannot write \(pipeline): \(error.localizedDescription)")
        }
        Console.out("wrote \(pipeline). Next: put images in photos/ (beside it), then")
        Console.out("  imgpipe validate \(pipeline)   checks it")
        Console.out("  imgpipe dry-run \(pipeline)    previews the filters on a few images (contact sheet)")
        Console.out("  imgpipe run \(pipeline)        runs it over every image; Ctrl-C, then `imgpipe resume \(pipeline)`")
    }

    /// The starting pipeline: valid as it is, every part explained in a `//` key.
    static func starter(name: String) -> String {
        """
        {
          "//": "An imgpipe pipeline: a source of images, a chain of filters, an output format and sinks. Keys starting with // are comments. Paths are relative to this file. The whole format: imgpipe schema; the filters: imgpipe filters.",
          "version": 1,
          "name": \(JSONValue.string(name).serialized()),
          "source": {
            "//": "Every image in photos/ and its sub-folders. Other types: url-list (a file of URLs), json-feed, nasa-images, flickr-search. ${NAME} reads an environment variable.",
            "type": "directory",
            "path": "photos"
          },
          "filters": [
            { "//": "Turn the image upright from its EXIF orientation.", "op": "autorotate" },
            { "//": "Fit inside 1024×1024, aspect kept, never enlarged. Try fill, crop, adjust, caption, watermark …", "op": "fit", "width": 1024, "height": 1024 }
          ],
          "output": {
            "//": "jpeg, png, webp, avif, tiff or gif. name: {stem} is the input's path without its extension, {ext} the format's.",
            "format": "jpeg",
            "quality": 85,
            "strip": true,
            "name": "{stem}.{ext}"
          },
          "sink": {
            "//": "Where outputs go: a folder here; an http upload takes \\"type\\": \\"upload\\" or \\"http\\". Use \\"sinks\\": [ … ] for several.",
            "type": "directory",
            "path": "out"
          },
          "limits": {
            "//": "workers: pixel workers (0 = one per core). maxPixels and maxBytes refuse images larger than this. memory (MB, default half the machine's) bounds what items being decoded may hold at once.",
            "workers": 0,
            "maxPixels": 268402689
          }
        }

        """
    }

    /// Writes `data` to a new file beside `path` and renames it over `path`: a link there is
    /// replaced, never followed.
    static func write(_ data: Data, replacing path: String) throws {
        let url = URL(fileURLWithPath: path)
        let temporary = url.deletingLastPathComponent()
            .appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString.prefix(8)).tmp").path
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw CocoaError(.fileWriteNoPermission, userInfo: [NSLocalizedDescriptionKey: String(cString: strerror(errno))])
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: data)
            try handle.close()
        } catch {
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: reason])
        }
    }
}
