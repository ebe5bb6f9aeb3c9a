import ArgumentParser
import Foundation
import ImagePipeline

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
        if !force, FileManager.default.fileExists(atPath: pipeline) {
            throw CommandError.usage("\(pipeline) exists; give another name or --force to replace it")
        }
        let name = URL(fileURLWithPath: pipeline).deletingPathExtension().lastPathComponent
        do {
            try Data(Self.starter(name: name).utf8).write(to: URL(fileURLWithPath: pipeline))
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
}
