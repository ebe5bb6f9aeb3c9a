import Foundation
import ImagePipeline
import ImagePipelineTesting
import Testing

@testable import PipelineKit

@Suite("Pipeline file decoding")
struct SpecDecodingTests {
    static let base = "/pipelines"

    func decode(_ text: String) throws -> PipelineSpec { try decode(Data(text.utf8)) }

    /// Bytes as written, so that a test can hold what a Swift string cannot (invalid UTF-8).
    func decode(_ bytes: Data) throws -> PipelineSpec {
        let directory = try TemporaryDirectory()
        try bytes.write(to: URL(fileURLWithPath: directory.url("pipe.json")))
        return try PipelineSpec.load(path: directory.url("pipe.json"))
    }

    func error(_ text: String) -> SpecError? { error(Data(text.utf8)) }

    func error(_ bytes: Data) -> SpecError? {
        do {
            _ = try decode(bytes)
            return nil
        } catch let error as SpecError {
            return error
        } catch {
            return SpecError(path: "?", message: "unexpected \(error)")
        }
    }

    static let minimal = """
        "version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "out"}
        """

    @Test func minimalFileGetsDefaults() throws {
        let spec = try decode("{\(Self.minimal)}")
        #expect(spec.name == "pipe")
        #expect(spec.filters.isEmpty)
        #expect(spec.output.format == .jpeg)
        #expect(spec.output.quality == 85)
        #expect(spec.output.strip)
        #expect(spec.output.name.raw == "{stem}.{ext}")
        #expect(spec.sinks.map(\.name) == ["directory-0"])
        #expect(spec.limits.maxPixels == 268_402_689)
        #expect(spec.limits.memory == nil)
        #expect(spec.limits.maxBytes == 52_428_800)
        #expect(spec.retry.attempts == 3)
    }

    @Test func badParameterNamesItsPath() {
        let error = error(
            """
            {\(Self.minimal), "filters": [{"op": "autorotate"}, {"op": "fit", "width": "wide", "height": 10}]}
            """)
        #expect(error?.path == "filters[1].width")
        #expect(error?.description == #"filters[1].width: expected an integer from 1 to 100000, got "wide""#)
    }

    @Test func unknownKeysAreRefusedEverywhere() {
        #expect(error("{\(Self.minimal), \"filter\": []}")?.path == "filter")
        #expect(error("{\(Self.minimal), \"filter\": []}")?.message.contains("did you mean \"filters\"") == true)
        #expect(
            error("{\(Self.minimal), \"filters\": [{\"op\": \"fit\", \"width\": 5, \"hieght\": 5}]}")?.path == "filters[0].hieght"
        )
        #expect(error("{\(Self.minimal), \"output\": {\"fromat\": \"png\"}}")?.path == "output.fromat")
        #expect(error("{\(Self.minimal), \"limits\": {\"worker\": 2}}")?.path == "limits.worker")
        let source = error(
            """
            {"version": 1, "source": {"type": "directory", "path": "in", "recursve": false}, "sink": {"type": "directory", "path": "o"}}
            """)
        #expect(source?.path == "source.recursve")
    }

    @Test func unknownOpIsRefusedWithASuggestion() {
        let error = error("{\(Self.minimal), \"filters\": [{\"op\": \"fitt\", \"width\": 5}]}")
        #expect(error?.path == "filters[0].op")
        #expect(error?.message.contains("unknown op \"fitt\"") == true)
        #expect(error?.message.contains("did you mean \"fit\"") == true)
    }

    @Test func syntaxErrorsGiveLineAndColumn() {
        let error = error("{\n  \"version\": 1,\n  \"source\": {\"type\": \"directory\" \"path\": \"x\"}\n}")
        #expect(error?.message.contains("line 3, column 34") == true, "\(String(describing: error))")
    }

    /// 200,000 keys in one object: the old duplicate-key check scanned the earlier keys for
    /// each key, which took hours here; a hashed set takes a second. (No timing asserted.)
    @Test func anObjectWithManyKeysIsReadInLinearTime() {
        let keys = (0..<200_000).map { "\"k\($0)\": \($0)" }.joined(separator: ", ")
        #expect(error("{\(Self.minimal), \(keys)}")?.path == "k0")
        let duplicate = error("{\(Self.minimal), \(keys), \"k199999\": 0}")
        #expect(duplicate?.message.contains(#"duplicate key "k199999""#) == true, "\(String(describing: duplicate))")
    }

    /// A string with invalid UTF-8 used to become "" (a sink path `out\xff` wrote to the
    /// pipeline's own folder); it is refused, naming the JSON path, line and column.
    @Test func invalidUTF8InAStringIsRefusedWithItsPathAndPosition() {
        func file(_ sink: [UInt8]) -> Data {
            Data(
                #"{"version": 1, "source": {"type": "directory", "path": "in"},"#.utf8 + [0x0A]
                    + #" "sinks": [{"type": "directory", "#.utf8 + sink + "}]}".utf8)
        }
        let value = error(file(Array(#""path": "out"#.utf8) + [0xFF, 0x22]))
        #expect(value?.description == "sinks[0].path: invalid JSON at line 2, column 46: invalid UTF-8 in a string (byte 0xFF)")
        let truncated = error(file(Array(#""path": "caf"#.utf8) + [0xC3, 0x22]))
        #expect(truncated?.path == "sinks[0].path")
        #expect(truncated?.message.contains("column 46: invalid UTF-8") == true, "\(String(describing: truncated))")
        let key = error(file(Array(#""pa"#.utf8) + [0xC3] + Array(#"th": "out""#.utf8)))
        #expect(key?.description == "sinks[0]: invalid JSON at line 2, column 37: invalid UTF-8 in a key (byte 0xC3)")
    }

    /// NUL would cut a path or name short where it reaches C; lone surrogates are not text.
    @Test func nulAndLoneSurrogatesAreRefusedWithTheirPath() {
        let sink = #"{"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "#
        let nul = error(sink + #""out\u0000/x"}}"#)
        #expect(nul?.path == "sink.path")
        #expect(nul?.message.contains("column 105: NUL") == true, "\(String(describing: nul))")
        #expect(error(#"{"version": 1, "name": "a\u0000", "source": {"type": "directory", "path": "in"}}"#)?.path == "name")
        #expect(error(sink + #""out\udc00"}}"#)?.message.contains("unpaired surrogate") == true)
        #expect(error(sink + #""out\ud800x"}}"#)?.path == "sink.path")
    }

    @Test func versionIsChecked() {
        #expect(
            error(#"{"version": 2, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "o"}}"#)?
                .path == "version")
        #expect(
            error(#"{"source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "o"}}"#)?.description
                == "version: missing (required)")
    }

    @Test func rangesAndRequiredParametersAreChecked() {
        #expect(
            error("{\(Self.minimal), \"output\": {\"quality\": 101}}")?.description
                == "output.quality: expected an integer from 1 to 100, got 101")
        #expect(error("{\(Self.minimal), \"output\": {\"format\": \"png\", \"quality\": 80}}")?.path == "output.quality")
        #expect(error("{\(Self.minimal), \"output\": {\"format\": \"bmp\"}}")?.path == "output.format")
        #expect(error("{\(Self.minimal), \"filters\": [{\"op\": \"fill\", \"width\": 10}]}")?.path == "filters[0].height")
        #expect(
            error("{\(Self.minimal), \"filters\": [{\"op\": \"fill\", \"width\": 10, \"height\": 10, \"gravity\": \"middle\"}]}")?
                .path
                == "filters[0].gravity")
        #expect(error("{\(Self.minimal), \"filters\": [{\"op\": \"fit\"}]}")?.message.contains("width, height or both") == true)
        #expect(error("{\(Self.minimal), \"filters\": [{\"op\": \"fit\", \"width\": 0}]}")?.path == "filters[0].width")
        #expect(error("{\(Self.minimal), \"filters\": [{\"op\": \"fit\", \"width\": 2.5}]}")?.path == "filters[0].width")
        #expect(error("{\(Self.minimal), \"output\": {\"name\": \"{stem}-{size}.{ext}\"}}")?.path == "output.name")
        #expect(error("{\(Self.minimal), \"output\": {\"name\": \"../{stem}.{ext}\"}}")?.path == "output.name")
        // A `/` and a combining mark after it are one Character: `..` is still seen.
        #expect(error("{\(Self.minimal), \"output\": {\"name\": \"a/../\u{301}{stem}.{ext}\"}}")?.path == "output.name")
    }

    @Test func sinkIsOneSinkAndNotBothForms() throws {
        let spec = try decode(
            #"{"version": 1, "source": {"type": "directory", "path": "in"}, "sinks": [{"type": "directory", "path": "a"}, {"type": "directory", "name": "copy", "path": "b"}]}"#
        )
        #expect(spec.sinks.map(\.name) == ["directory-0", "copy"])
        #expect(
            error(
                #"{"version": 1, "source": {"type": "directory", "path": "in"}, "sink": {"type": "directory", "path": "a"}, "sinks": []}"#
            )?.path == "sink")
        #expect(error(#"{"version": 1, "source": {"type": "directory", "path": "in"}}"#)?.path == "sinks")
    }

    @Test func environmentIsExpandedAtRunTimeAndNeverStored() throws {
        let directory = try TemporaryDirectory()
        try directory.folder("photos-2024")
        let path = try directory.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "photos-${YEAR}"}, "sink": {"type": "directory", "path": "out/${YEAR}"}}
            """, to: "p.json")
        let spec = try PipelineSpec.load(path: path)
        #expect(spec.document.serialized().contains("photos-${YEAR}"))

        let built = try BuiltPipeline.build(spec, path: path, environment: Environment(["YEAR": "2024"]))
        let feed = try #require(built.feed as? DirectoryFeed)
        #expect(feed.root == directory.url("photos-2024"))
        let sink = try #require(built.sinks.first as? DirectorySink)
        #expect(sink.root == directory.url("out/2024"))

        #expect(throws: SpecError(path: "source.path", message: "environment variable YEAR is not set", unsetVariable: "YEAR")) {
            try BuiltPipeline.build(spec, path: path, environment: Environment([:]))
        }
    }

    @Test func pathsAreRelativeToThePipelineFile() throws {
        let directory = try TemporaryDirectory()
        try directory.folder("samples")
        let path = try directory.write(
            """
            {"version": 1, "source": {"type": "directory", "path": "../samples"}, "sink": {"type": "directory", "path": "/abs/out"}}
            """, to: "pipelines/p.json")
        let spec = try PipelineSpec.load(path: path)
        #expect(spec.baseDirectory == directory.url("pipelines"))
        let built = try BuiltPipeline.build(spec, path: path, environment: Environment([:]))
        #expect((built.feed as? DirectoryFeed)?.root == directory.url("samples"))
        #expect((built.sinks.first as? DirectorySink)?.root == "/abs/out")
    }

    /// `s3` sinks and sources: the fields and their defaults, and what is refused with its path.
    @Test func s3SinksAndSourcesAreReadStrictly() throws {
        let source = #""source": {"type": "directory", "path": "in"}"#
        func sink(_ fields: String) -> String {
            #"{"version": 1, \#(source), "sink": {"type": "s3", "bucket": "acme-thumbs"\#(fields)}}"#
        }
        let spec = try decode(sink(#", "prefix": "thumbs", "storageClass": "standard_ia", "metadata": {"project": "demo"}"#))
        guard let s3 = spec.sinks[0].parameters as? S3SinkParameters else {
            Issue.record("not an s3 sink")
            return
        }
        let (name, location, options) = (spec.sinks[0].name, s3.location, s3.options)
        #expect(name == "s3-0" && location.bucket.raw == "acme-thumbs" && location.prefix?.raw == "thumbs")
        #expect(location.region == nil && location.pathStyle == nil && location.secretAccessKey == nil)
        #expect(options.storageClass == "STANDARD_IA" && options.key == nil)
        #expect(options.multipartThreshold == 16 << 20 && options.partSize == 8 << 20)
        #expect(options.metadata.map(\.name) == ["project"])

        #expect(
            error(sink(#", "secretAccessKey": "wJalrXUtnFEMI""#))?.description.hasPrefix(
                "sink.secretAccessKey: a credential is written as a reference") == true)
        #expect(error(sink(#", "accessKeyId": "${A}x""#))?.path == "sink.accessKeyId")
        #expect(error(sink(#", "storageClass": "GLACIR""#))?.description.contains(#"did you mean "GLACIER"?"#) == true)
        #expect(error(sink(#", "partSize": 1048576"#))?.path == "sink.partSize", "parts are 5 MiB at least")
        #expect(error(sink(#", "buckt": "x""#))?.description.contains(#"did you mean "bucket"?"#) == true)
        #expect(
            error(sink(#", "metadata": {"note": "caf\u00e9"}"#))?.description
                == "sink.metadata.note: S3 metadata values are ASCII on one line")
        for bad in ["ab", "Acme", "acme_thumbs", "-acme", "acme..thumbs", "192.168.1.20"] {
            let text = #"{"version": 1, \#(source), "sink": {"type": "s3", "bucket": "\#(bad)"}}"#
            #expect(error(text)?.description.contains("is not a valid bucket name") == true, "\(bad)")
        }

        let s3Source = try decode(
            #"{"version": 1, "source": {"type": "s3", "bucket": "photos", "endpoint": "http://127.0.0.1:9000", "pageSize": 50}, "sink": {"type": "directory", "path": "out"}}"#
        )
        guard let s3 = s3Source.source.parameters as? S3SourceParameters else {
            Issue.record("not an s3 source")
            return
        }
        let (pageSize, maxItems, remote) = (s3.pageSize, s3.maxItems, s3.remoteOptions)
        #expect(pageSize == 50 && maxItems == nil && remote.cache != nil && !remote.respectOptOut && !remote.robots)
        #expect(
            error(
                #"{"version": 1, "source": {"type": "s3", "bucket": "photos", "robots": true}, "sink": {"type": "directory", "path": "out"}}"#
            )?.path == "source.robots")
        #expect(
            error(
                #"{"version": 1, "source": {"type": "s3", "bucket": "photos", "pageSize": 5000}, "sink": {"type": "directory", "path": "out"}}"#
            )?.path == "source.pageSize")
        #expect(
            error(
                #"{"version": 1, "source": {"type": "json-feed", "url": "http://h/f", "fallback": {"type": "s3", "bucket": "photos"}}, "sink": {"type": "directory", "path": "out"}}"#
            )?.path == "source.fallback.type")
    }
}
