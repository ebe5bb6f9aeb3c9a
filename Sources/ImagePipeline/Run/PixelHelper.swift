import CProcess
import Foundation
import PipelineKit
import VipsKit

/// The pixel helper: a process of the imgpipe binary that makes items' pixels for a run
/// (`PixelHelpers` starts one per pixel worker), one item at a time, on its main thread.
///
/// Why processes: two pixel workers in one process wait on each other in GLib's and
/// libvips' process-wide locks (GObject's signal lock, the type system's, the malloc
/// arenas, libvips' global lock, liborc's compiler), about fifteen times an item, and leave
/// a CPU idle each time (bench/RESULTS.md, fourteenth and fifteenth sessions). A crash in a
/// decoder also ends the helper, not the run: the item goes to a new helper, and fails
/// (naming the signal) if that one ends too (`PixelHelpers`).
///
/// It is sent the run's processor as the run made it (`ProcessorSettings`: the filters
/// with their `${…}` values expanded, the watermarks checked) and makes the same one; its
/// own environment holds none of the run's secrets. Then each request is an item (its
/// file's path, or its bytes) and each answer its outcome: the encoded outputs, a skip, or
/// a failure. It writes no file.
/// It ends when the run closes its socket, and with the run: SIGKILL when the thread that
/// started it ends (`PR_SET_PDEATHSIG`), so not even kill -9 of the run leaves it behind.
/// SIGINT and SIGTERM are the run's to handle (a terminal's Ctrl-C reaches the whole
/// process group): the helper ignores them and finishes its item for the grace period.
/// Its `oom_score_adj` is raised, so that the kernel's OOM killer takes a helper (an item)
/// before the run.
public enum PixelHelper {
    /// The first argument that makes `imgpipe` a pixel helper (then the run's process id).
    public static let argument = "__pixel-helper"
    /// The helper's name in `/proc/PID/comm` (and so in `ps` and `top`).
    public static let processName = "imgpipe-pixels"

    /// What a helper may hold past what it held after its last `malloc_trim` before it
    /// trims again (32 MiB): an ordinary item's buffers (a decoded picture, the encoder's)
    /// are then used again, not given back and faulted in anew. Trimming after every item
    /// cost about 600 page faults an item on web-sized JPEGs, a third of the run's CPU time
    /// spent in the kernel (bench/RESULTS.md).
    static let keptFreeMemory = 32 << 20

    /// Whether a helper holding `resident` bytes (0: not known), which held `floor` after
    /// its last trim, gives its free memory back now.
    static func trims(resident: Int, floor: Int) -> Bool { resident == 0 || resident > floor + keptFreeMemory }

    /// Serves the run that started this process on standard input (a socket), until it
    /// closes it. `parent` is the run's process id.
    public static func serve(parent: pid_t) -> Never {
        guard ip_die_with_parent(parent) == 0 else { exit(0) }
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        // The main thread's name is the process's.
        BoundedExecutor.nameThisThread(processName)
        writeKernelFile("/proc/self/oom_score_adj", "500")
        let socket: Int32 = 0
        guard let first = PixelWire.read(socket) else { exit(0) }
        let processor: ImageProcessor
        do {
            processor = try makeProcessor(first.payload)
            try VipsRuntime.setUp()
        } catch {
            _ = PixelWire.write(socket, header: PixelMessage.refusal(String(describing: error)))
            exit(2)
        }
        guard PixelWire.write(socket, header: PixelMessage.ready) else { exit(0) }
        // What the helper held after its last trim (none yet: the first item trims).
        var floor = -keptFreeMemory
        while let frame = PixelWire.read(socket) {
            let answer: (header: [UInt8], payload: [Data])
            do {
                let (path, fields) = try PixelMessage.readRequest(frame.header)
                let input: ImageInput = path.map(ImageInput.file) ?? .data(frame.payload)
                let outcome = Result { () throws(ItemFailure) -> ProcessOutcome in
                    try processor.processOrSkip(input, fields: fields)
                }
                VipsRuntime.endThreadWork()
                answer = PixelMessage.answer(outcome)
            } catch {
                answer = (PixelMessage.refusal("a request that cannot be read"), [])
            }
            guard PixelWire.write(socket, header: answer.header, payload: answer.payload) else { exit(0) }
            // What the item's decoders freed goes back to the system now, not when malloc
            // next trims, once the helper holds more than `keptFreeMemory` past what it held
            // after its last trim: the run admits the next item against its memory budget
            // on that footing (`MemoryBudget`), and an idle helper should not sit on a
            // decode's peak. (Resident memory, not malloc's free bytes: those still count
            // chunks whose pages an earlier trim gave back.)
            if trims(resident: Int(ip_resident_bytes()), floor: floor) {
                ip_release_free_memory()
                floor = Int(ip_resident_bytes())
            }
        }
        exit(0)
    }

    /// The processor of a configuration frame's payload: the run's, as `ProcessorSettings`.
    static func makeProcessor(_ payload: Data) throws -> ImageProcessor {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = PixelMessage.nonFinite.decoding
        let settings = try decoder.decode(ProcessorSettings.self, from: payload)
        // What the run sends always has an output; anything else is refused, not trapped on.
        guard !settings.outputs.isEmpty else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "a processor with no output"))
        }
        return ImageProcessor(settings)
    }
}

/// The messages of `PixelWire`'s frames, as both ends write and read them.
enum PixelMessage {
    /// The kind of an answer, its first field.
    enum Kind: Int {
        case processed = 0
        case skipped
        case failed
        case refused
        case ready
    }

    /// The first frame's payload to a helper (its header is empty): the run's processor
    /// (`ProcessorSettings`) as JSON. Made as a session starts (`PipelineRunner.execute`):
    /// settings that cannot be sent fail the session, never leave the pixels to the run's own
    /// process.
    static func configuration(_ settings: ProcessorSettings) throws -> Data {
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = nonFinite.encoding
        return try encoder.encode(settings)
    }

    /// The most notes an answer may carry for one output (a processor keeps
    /// `ItemNotes.most` and one saying more were left out).
    static let maxNotes = 64

    /// An output's fingerprint as the answer carries it: three texts, all empty for none;
    /// each is checked for its form (a helper decodes hostile input: its answer is read as
    /// carefully as the rest).
    static func readFingerprint(_ reader: inout WireReader) throws(WireReader.Malformed) -> ImageFingerprint? {
        let phash = try reader.string()
        let thumbhash = try reader.string()
        let dominant = try reader.string()
        if phash.isEmpty, thumbhash.isEmpty, dominant.isEmpty { return nil }
        let hex = Set("0123456789abcdef".utf8)
        let base64 = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=".utf8)
        guard phash.utf8.count == 16, phash.utf8.allSatisfy(hex.contains),
            (1...40).contains(thumbhash.utf8.count), thumbhash.utf8.allSatisfy(base64.contains),
            dominant.utf8.count == 7, dominant.hasPrefix("#"), dominant.utf8.dropFirst().allSatisfy(hex.contains)
        else { throw WireReader.Malformed() }
        return ImageFingerprint(phash: phash, thumbhash: thumbhash, dominant: dominant)
    }

    /// Numbers JSON has no text for, as a program may set them (`limits.timeout` infinite):
    /// written as these strings, read back as the numbers.
    static let nonFinite = (
        encoding: JSONEncoder.NonConformingFloatEncodingStrategy.convertToString(
            positiveInfinity: "+inf", negativeInfinity: "-inf", nan: "nan"),
        decoding: JSONDecoder.NonConformingFloatDecodingStrategy.convertFromString(
            positiveInfinity: "+inf", negativeInfinity: "-inf", nan: "nan")
    )

    static var ready: [UInt8] {
        var fields = WireFields()
        fields.put(Kind.ready.rawValue)
        return fields.bytes
    }

    /// The helper cannot go on: its configuration failed, or a request made no sense.
    static func refusal(_ message: String) -> [UInt8] {
        var fields = WireFields()
        fields.put(Kind.refused.rawValue)
        fields.put(message)
        return fields.bytes
    }

    /// One item to make: its file (nil: its bytes are the frame's payload) and its fields.
    static func request(path: String?, fields item: ItemFields) -> [UInt8] {
        var fields = WireFields()
        fields.put(path)
        fields.put(item.key)
        fields.put(item.stem)
        fields.put(item.metadata)
        return fields.bytes
    }

    static func readRequest(_ header: [UInt8]) throws(WireReader.Malformed) -> (path: String?, fields: ItemFields) {
        var reader = WireReader(header)
        let path = try reader.optionalString()
        return (path, ItemFields(key: try reader.string(), stem: try reader.string(), metadata: try reader.optionalString()))
    }

    /// An item's outcome as a frame: each output's numbers in the header, its bytes in the
    /// payload.
    static func answer(_ outcome: Result<ProcessOutcome, ItemFailure>) -> (header: [UInt8], payload: [Data]) {
        var fields = WireFields()
        switch outcome {
        case .success(.processed(let images)):
            fields.put(Kind.processed.rawValue)
            fields.put(images.count)
            for image in images {
                fields.put(image.output)
                for number in [
                    image.width, image.height, image.inputWidth, image.inputHeight, image.inputBytes, image.data.count,
                ] {
                    fields.put(number)
                }
                fields.put(image.inputFormat.rawValue)
                fields.put(image.sha256)
                fields.put(image.inputSHA256)
                fields.put(image.choice?.quality ?? -1)
                fields.put(image.choice?.ssim.map { String($0) } ?? "")
                fields.put(image.format?.rawValue ?? "")
                fields.put(image.notes.count)
                for note in image.notes { fields.put(note) }
                for part in [image.fingerprint?.phash, image.fingerprint?.thumbhash, image.fingerprint?.dominant] {
                    fields.put(part ?? "")
                }
            }
            return (fields.bytes, images.map(\.data))
        case .success(.skipped(let skip)):
            fields.put(Kind.skipped.rawValue)
            fields.put(skip.reason.rawValue)
            fields.put(skip.message)
        case .failure(let failure):
            fields.put(Kind.failed.rawValue)
            fields.put(failure.reason.rawValue)
            fields.put(failure.message)
            fields.put(failure.httpStatus ?? -1)
        }
        return (fields.bytes, [])
    }

    /// What an answer says: an outcome, or the helper's refusal.
    enum Reading {
        case outcome(Result<ProcessOutcome, ItemFailure>)
        case refused(String)
        case ready
    }

    static func read(_ header: [UInt8], payload: Data) throws(WireReader.Malformed) -> Reading {
        var reader = WireReader(header)
        switch Kind(rawValue: try reader.int()) {
        case .processed:
            let count = try reader.int()
            guard (1...1 << 16).contains(count) else { throw WireReader.Malformed() }
            var images: [ProcessedImage] = []
            var offset = 0
            for _ in 0..<count {
                let output = try reader.string()
                let numbers = try (0..<6).map { _ throws(WireReader.Malformed) in try reader.int() }
                guard let format = ImageFormat(rawValue: try reader.string()),
                    numbers[5] >= 0, numbers[5] <= payload.count - offset
                else { throw WireReader.Malformed() }
                let sha256 = try reader.string()
                let inputSHA256 = try reader.string()
                let quality = try reader.int()
                let ssim = try reader.string()
                let chosen = try reader.string()
                guard quality == -1 || (1...100).contains(quality),
                    ssim.isEmpty || (quality != -1 && Double(ssim)?.isFinite == true),
                    chosen.isEmpty || OutputFormat(rawValue: chosen) != nil
                else { throw WireReader.Malformed() }
                let noteCount = try reader.int()
                guard (0...Self.maxNotes).contains(noteCount) else { throw WireReader.Malformed() }
                let notes = try (0..<noteCount).map { _ throws(WireReader.Malformed) in try reader.string() }
                let fingerprint = try Self.readFingerprint(&reader)
                // One output (the usual case) is the whole payload: not copied again.
                let data = numbers[5] == payload.count ? payload : payload.subdata(in: offset..<offset + numbers[5])
                offset += numbers[5]
                var image = ProcessedImage(
                    output: output, data: data, width: numbers[0], height: numbers[1],
                    inputWidth: numbers[2], inputHeight: numbers[3], inputFormat: format,
                    sha256: sha256, inputBytes: numbers[4], inputSHA256: inputSHA256,
                    choice: quality < 0 ? nil : QualityChoice(quality: quality, ssim: Double(ssim)),
                    format: OutputFormat(rawValue: chosen))
                image.notes = notes
                image.fingerprint = fingerprint
                images.append(image)
            }
            guard offset == payload.count else { throw WireReader.Malformed() }
            return .outcome(.success(.processed(images)))
        case .skipped:
            guard let reason = SkipReason(rawValue: try reader.string()) else { throw WireReader.Malformed() }
            return .outcome(.success(.skipped(ItemSkip(reason, try reader.string()))))
        case .failed:
            guard let reason = FailureReason(rawValue: try reader.string()) else { throw WireReader.Malformed() }
            let message = try reader.string()
            let status = try reader.int()
            return .outcome(.failure(ItemFailure(reason, message, httpStatus: status < 0 ? nil : status)))
        case .refused:
            return .refused(try reader.string())
        case .ready:
            return .ready
        case nil:
            throw WireReader.Malformed()
        }
    }
}
