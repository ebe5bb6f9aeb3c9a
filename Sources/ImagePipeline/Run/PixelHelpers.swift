import CProcess
import Foundation
import Logging

/// How a run starts its pixel helpers (`PixelHelper`): an executable that serves when given
/// `arguments` and then the run's process id.
public struct PixelHelperLaunch: Sendable {
    public let executable: String
    public let arguments: [String]

    public init(executable: String, arguments: [String]) {
        self.executable = executable
        self.arguments = arguments
    }

    /// This process's own executable, through `/proc/self/exe` (the file it was started
    /// from, even if that path has since been replaced), as a pixel helper.
    public static let thisExecutable = PixelHelperLaunch(executable: "/proc/self/exe", arguments: [PixelHelper.argument])
}

/// Where a run's items get their pixels made: on the pixel worker's own thread, or in a
/// pixel helper process that the worker waits for (the command line's runs; see
/// `PixelHelper` for why).
enum PixelWork: Sendable {
    case inProcess(ImageProcessor)
    case helpers(PixelHelpers)

    /// The item's outcome; nil when its helper ended while the run was being stopped at
    /// once (the item is left for resume, as a download cut by the abort is).
    func processOrSkip(_ input: ImageInput, fields: ItemFields) throws(ItemFailure) -> ProcessOutcome? {
        switch self {
        case let .inProcess(processor): try processor.processOrSkip(input, fields: fields)
        case let .helpers(helpers): try helpers.processOrSkip(input, fields: fields)
        }
    }

    func shutdown() {
        if case let .helpers(helpers) = self { helpers.shutdown() }
    }
}

/// The pixel helpers of one session of a run: at most one per pixel worker, each started
/// when a worker first needs one and kept until the session ends. A worker takes an idle
/// helper (or starts one), sends it the item and waits for the answer.
///
/// A helper that ends while it works on an item (a crash in a decoder, the OOM killer, a
/// kill from outside), or cannot start, is buried, its end logged as a warning, and the
/// item is given to a new helper once: a second end fails the item (`process`), naming
/// both ends. The failure is final like any pixel failure; `resume --retry-failed` tries
/// the item again.
// @unchecked because `idle` and `stopped` are guarded by `lock`.
final class PixelHelpers: @unchecked Sendable {
    private let launch: PixelHelperLaunch
    private let configuration: [UInt8]
    private let cancellation: CancellationFlag
    private let logger: Logger
    private let lock = NSLock()
    private var idle: [Helper] = []
    private var stopped = false

    /// A started helper: its process and our end of its socket.
    struct Helper {
        let pid: pid_t
        let socket: Int32
    }

    /// The helper ended (or answered what cannot be read), as `bury` describes it.
    struct Ended: Error {
        let description: String
    }

    init(launch: PixelHelperLaunch, spec: PipelineSpec, cancellation: CancellationFlag, logger: Logger) {
        self.launch = launch
        configuration = PixelMessage.configuration(spec)
        self.cancellation = cancellation
        self.logger = logger
    }

    func processOrSkip(_ input: ImageInput, fields: ItemFields) throws(ItemFailure) -> ProcessOutcome? {
        var request = PixelMessage.Request(path: nil, fields: fields)
        var payload: [Data] = []
        switch input {
        case let .file(path): request.path = path
        case let .data(data): payload = [data]
        }
        let header = request.header
        var ends: [String] = []
        while true {
            let reading: PixelMessage.Reading
            do throws(Ended) {
                let helper = try checkOut()
                reading = try exchange(helper, header: header, payload: payload)
                checkIn(helper)
            } catch {
                if cancellation.isAborted { return nil }
                ends.append(error.description)
                guard ends.count == 2 else {
                    logger.warning("pixel helper \(error.description); the item goes to a new one", metadata: [
                        "item": "\(fields.key)", "stage": "pixels"])
                    continue
                }
                throw ItemFailure(.process, "its pixel helper \(ends[0]); a second one \(ends[1])")
            }
            switch reading {
            case let .outcome(outcome): return try outcome.get()
            case let .refused(message): throw ItemFailure(.process, "the pixel helper refused the item: \(message)")
            case .ready: throw ItemFailure(.process, "the pixel helper answered out of turn")
            }
        }
    }

    /// Ends the idle helpers; the busy ones end when their workers give them back.
    func shutdown() {
        let helpers = lock.withLock {
            stopped = true
            defer { idle.removeAll() }
            return idle
        }
        for helper in helpers { close(helper) }
    }

    private func checkOut() throws(Ended) -> Helper {
        if let helper = lock.withLock({ idle.popLast() }) { return helper }
        return try start()
    }

    private func checkIn(_ helper: Helper) {
        let keep = lock.withLock {
            guard !stopped else { return false }
            idle.append(helper)
            return true
        }
        if !keep { close(helper) }
    }

    /// Sends one request and reads its answer; a helper that ends meanwhile is buried.
    private func exchange(_ helper: Helper, header: [UInt8], payload: [Data]) throws(Ended) -> PixelMessage.Reading {
        guard PixelWire.write(helper.socket, header: header, payload: payload),
              let frame = PixelWire.read(helper.socket) else {
            throw Ended(description: bury(helper))
        }
        do {
            return try PixelMessage.read(frame.header, payload: frame.payload)
        } catch {
            _ = bury(helper, kill: true)
            throw Ended(description: "answered what cannot be read")
        }
    }

    /// Starts a helper on a socket pair and hands it the pipeline.
    private func start() throws(Ended) -> Helper {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw Ended(description: "could not start (socketpair: \(String(cString: strerror(errno)))")
        }
        // The helper's end is its standard input; no other descriptor of the run goes with it.
        let name = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "imgpipe"
        let argv = ([name] + launch.arguments + ["\(getpid())"]).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = ip_spawn_helper(launch.executable, argv, environ, pair[1], &pid)
        Glibc.close(pair[1])
        guard spawned == 0 else {
            Glibc.close(pair[0])
            throw Ended(description: "could not start (\(launch.executable): \(String(cString: strerror(spawned))))")
        }
        let helper = Helper(pid: pid, socket: pair[0])
        guard PixelWire.write(helper.socket, header: configuration), let frame = PixelWire.read(helper.socket) else {
            throw Ended(description: bury(helper))
        }
        switch try? PixelMessage.read(frame.header, payload: frame.payload) {
        case .ready:
            return helper
        case let .refused(message):
            _ = bury(helper, kill: true)
            throw Ended(description: "refused the pipeline: \(message)")
        default:
            _ = bury(helper, kill: true)
            throw Ended(description: "answered what cannot be read")
        }
    }

    /// Closes a helper that is done with: its socket's end makes it exit; it is killed all
    /// the same (it holds nothing to save) and reaped.
    private func close(_ helper: Helper) {
        _ = bury(helper, kill: true)
    }

    /// Closes the socket and reaps the helper, and says how it ended. A helper that closed
    /// its end is ending: it gets a second before it is killed (`kill`: at once).
    private func bury(_ helper: Helper, kill killNow: Bool = false) -> String {
        Glibc.close(helper.socket)
        if killNow { Glibc.kill(helper.pid, SIGKILL) }
        var status: Int32 = 0
        var waited = 0
        while true {
            let reaped = waitpid(helper.pid, &status, WNOHANG)
            if reaped == helper.pid { break }
            if reaped < 0, errno != EINTR { return "ended (not reaped: \(String(cString: strerror(errno))))" }
            if waited == 100 { Glibc.kill(helper.pid, SIGKILL) }
            usleep(10_000)
            waited += 1
        }
        let signal = status & 0x7F
        if signal == 0 { return "exited with status \((status >> 8) & 0xFF)" }
        let name = strsignal(signal).map { String(cString: $0) } ?? "unknown"
        return "ended by signal \(signal) (\(name))"
    }
}
