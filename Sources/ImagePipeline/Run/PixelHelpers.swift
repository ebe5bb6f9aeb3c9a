import CProcess
import Foundation
import Logging
import PipelineKit
import Synchronization

/// How a run starts its pixel helpers (`PixelHelper`): an executable that serves when given
/// `arguments` and then the run's process id.
public struct PixelHelperLaunch: Sendable {
    public let executable: String
    public let arguments: [String]

    /// The helper's `argv[0]`: what `ps -f` shows.
    public let name: String

    public init(executable: String, arguments: [String], name: String? = nil) {
        self.executable = executable
        self.arguments = arguments
        self.name = name ?? executable
    }

    /// The environment a helper starts with: only what the pixels read (locale, fonts,
    /// temporary files, libvips', GLib's and malloc's settings), never the
    /// run's secrets. A helper decodes hostile files; whatever the run read from its
    /// environment for headers, tokens, credentials or the state's URL stays out of its
    /// `/proc/PID/environ`. The `${…}` values its filters need come in its configuration.
    static func helperEnvironment(_ environment: [String: String]) -> [String] {
        environment.filter { name, _ in
            keptNames.contains(name) || keptPrefixes.contains { name.hasPrefix($0) }
        }.map { "\($0)=\($1)" }.sorted()
    }

    static let keptNames: Set<String> = [
        "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "MALLOC_ARENA_MAX",
    ]
    static let keptPrefixes = ["LC_", "VIPS_", "G_", "FONTCONFIG_", "FC_", "XDG_"]

    /// This process's own executable, through `/proc/self/exe` (the file it was started
    /// from, even if that path has since been replaced by another build), as a pixel helper,
    /// shown under the path it was started from.
    public static let thisExecutable = PixelHelperLaunch(
        executable: "/proc/self/exe", arguments: [PixelHelper.argument],
        name: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "imgpipe")
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
        case .inProcess(let processor): try processor.processOrSkip(input, fields: fields)
        case .helpers(let helpers): try helpers.processOrSkip(input, fields: fields)
        }
    }

    func shutdown() {
        if case .helpers(let helpers) = self { helpers.shutdown() }
    }

    /// Starts this thread's helper ahead of its first item (`PixelHelpers.warm`).
    func warm() {
        if case .helpers(let helpers) = self { helpers.warm() }
    }

    func abort() {
        if case .helpers(let helpers) = self { helpers.abort() }
    }
}

/// The pixel helpers of one session of a run: one per pixels thread, started when the
/// thread first needs it and kept until the session ends. The thread sends its item and
/// waits for the answer. A helper belongs to the thread that started it because the kernel
/// ends it when that thread ends (`PR_SET_PDEATHSIG`).
///
/// A helper that ends at work (a decoder's SIGSEGV, the OOM killer, kill -9), or is killed
/// as it starts, is reaped, its end logged as a warning, and the item is given to a new
/// helper once: a second end fails the item (`process`), naming both ends. The failure is
/// final like any pixel failure; `resume --retry-failed` tries the item again. A helper that
/// cannot start at all (the executable cannot be run, it exits or crashes before it is
/// ready, it refuses the run's processor) is no fault of the item: the session makes its pixels on
/// the workers' own threads instead, with one warning, as it would without helpers, but
/// never an item whose helper already ended (it fails).
///
/// An abort (`abort`: a second Ctrl-C, the grace period over) kills every helper at once,
/// started or starting, and the items they had are left for resume. Only the thread that
/// talks to a helper closes its socket and reaps it (`busy`); `shutdown` kills such a one
/// and reaps the idle ones.
final class PixelHelpers: Sendable {
    private let launch: PixelHelperLaunch
    /// The first frame to a helper: the run's processor (`PixelMessage.configuration`).
    private let configuration: Data
    /// `NAME=value` lines: the environment a helper starts with.
    private let helperEnvironment: [String]
    /// The run's own processor, for when helpers cannot start.
    private let fallback: ImageProcessor
    private let cancellation: CancellationFlag
    private let logger: Logger
    private let redact: @Sendable (String) -> String
    private let metrics: RunMetrics?
    private struct State {
        /// Each pixels thread's helper.
        var helpers: [pthread_t: Helper] = [:]
        /// The helpers whose thread is talking to them: only that thread closes their socket.
        var busy: Set<pid_t> = []
        /// Helpers started and not yet ready (nor reaped).
        var starting: Set<pid_t> = []
        var stopped = false
        /// Why helpers cannot start in this session, once one could not.
        var unavailable: String?
    }
    private let state = Mutex(State())

    /// A started helper: its process and the run's end of its socket.
    struct Helper {
        let pid: pid_t
        let socket: Int32
    }

    /// A helper ended (or the run ended it), as `bury` says: the item may go to a new one.
    struct Ended: Error, CustomStringConvertible {
        let description: String
        /// The signal that ended it, when one did.
        var signal: Int32?
    }

    /// Why `start` made no helper.
    enum StartFailure: Error {
        /// It was killed as it started: an end, as at work.
        case ended(Ended)
        /// No helper can start: the pixels are made on the threads.
        case cannotStart(String)
    }

    /// What a thread is to do with its item.
    private enum Assignment {
        case helper(Helper)
        case inProcess
        case leave
    }

    init(
        launch: PixelHelperLaunch, configuration: Data, fallback: ImageProcessor,
        cancellation: CancellationFlag, logger: Logger, redact: @escaping @Sendable (String) -> String,
        metrics: RunMetrics? = nil
    ) {
        self.launch = launch
        self.configuration = configuration
        helperEnvironment = PixelHelperLaunch.helperEnvironment(ProcessInfo.processInfo.environment)
        // A helper runs as the same user: were the run dumpable, a helper taken over by a
        // hostile file could read the run's environment and memory (its secrets) through
        // /proc or ptrace. Not dumpable, the run's /proc files are root's.
        _ = ip_keep_from_same_user()
        self.fallback = fallback
        self.cancellation = cancellation
        self.logger = logger
        self.redact = redact
        self.metrics = metrics
    }

    func processOrSkip(_ input: ImageInput, fields: ItemFields) throws(ItemFailure) -> ProcessOutcome? {
        let header: [UInt8]
        let payload: [Data]
        switch input {
        case .file(let path): (header, payload) = (PixelMessage.request(path: path, fields: fields), [])
        case .data(let data): (header, payload) = (PixelMessage.request(path: nil, fields: fields), [data])
        }
        var ends: [String] = []
        while true {
            // The helper's answer; nil: made on this thread.
            let answered: Result<Result<ProcessOutcome, ItemFailure>?, Ended>
            do throws(Ended) {
                switch try assignment() {
                case .leave: return nil
                case .inProcess: answered = .success(nil)
                case .helper(let helper):
                    let reading = try exchange(helper, header: header, payload: payload)
                    release(helper)
                    answered = .success(reading)
                }
            } catch {
                answered = .failure(error)
            }
            switch answered {
            case .success(nil):
                // An input that ended its helper is never decoded in the run itself.
                guard ends.isEmpty else {
                    throw ItemFailure(.process, "its pixel helper \(ends[0]); no new one could start")
                }
                return try fallback.processOrSkip(input, fields: fields)
            case .success(let outcome?):
                return try outcome.get()
            case .failure(let ended):
                if isStopping { return nil }
                ends.append(ended.description)
                guard ends.count == 2 else {
                    logger.warning(
                        "pixel helper \(ended.description); the item goes to a new one",
                        metadata: [
                            "item": "\(fields.key)", "stage": "pixels",
                        ])
                    continue
                }
                throw ItemFailure(.process, "its pixel helper \(ends[0]); a second one \(ends[1])")
            }
        }
    }

    /// Starts this thread's helper if it has none, as its first item would. A helper that
    /// cannot start says so as it would then (and the items are made on the threads); one
    /// killed as it starts is started again by the first item.
    func warm() {
        guard case .helper(let helper)? = try? assignment() else { return }
        release(helper)
    }

    /// Kills every helper at once; their items are left for resume. Called once the run's
    /// `cancellation` is aborted, which keeps new helpers from starting (checked under the
    /// same lock as these kills, so a helper is either killed here or never kept).
    func abort() {
        state.withLock { state in
            for pid in state.helpers.values.map(\.pid) + state.starting { Glibc.kill(pid, SIGKILL) }
        }
    }

    /// Ends every helper: the session is over. Idle ones are reaped here; one still at work
    /// (after an abort, or a session that failed) is killed, and its thread, which owns its
    /// socket, reaps it and leaves its item for resume.
    func shutdown() {
        let idle = state.withLock { state in
            state.stopped = true
            for pid in state.starting { Glibc.kill(pid, SIGKILL) }
            var idle: [Helper] = []
            for (thread, helper) in state.helpers {
                if state.busy.contains(helper.pid) {
                    Glibc.kill(helper.pid, SIGKILL)
                } else {
                    idle.append(helper)
                    state.helpers[thread] = nil
                }
            }
            return idle
        }
        for helper in idle { retire(helper) }
    }

    /// The run stops at once, or the session is over: no new helper, and an item whose
    /// helper ended is left for resume.
    private var isStopping: Bool {
        cancellation.isAborted || state.withLock { $0.stopped }
    }

    /// This thread's helper, started if need be.
    private func assignment() throws(Ended) -> Assignment {
        let thread = pthread_self()
        let known: Assignment? = state.withLock { state in
            if cancellation.isAborted || state.stopped { return .leave }
            if let helper = state.helpers[thread] {
                state.busy.insert(helper.pid)
                return .helper(helper)
            }
            return state.unavailable == nil ? nil : .inProcess
        }
        if let known { return known }
        let helper: Helper
        do throws(StartFailure) {
            helper = try start()
        } catch {
            let reason: String
            switch error {
            case .ended(let ended): throw ended
            case .cannotStart(let why): reason = why
            }
            let first = state.withLock { state in
                defer { state.unavailable = state.unavailable ?? reason }
                return state.unavailable == nil
            }
            if first {
                logger.warning(
                    "cannot start a pixel helper (\(redact(reason))); this session makes its pixels on its workers' threads",
                    metadata: ["stage": "pixels"])
            }
            return .inProcess
        }
        let kept = state.withLock { state in
            guard !cancellation.isAborted, !state.stopped else { return false }
            state.helpers[thread] = helper
            state.busy.insert(helper.pid)
            return true
        }
        guard kept else {
            retire(helper)
            return .leave
        }
        return .helper(helper)
    }

    /// Sends one request and reads its answer; a helper that ends meanwhile, or answers
    /// what cannot be read, is buried and forgotten.
    private func exchange(_ helper: Helper, header: [UInt8], payload: [Data]) throws(Ended) -> Result<ProcessOutcome, ItemFailure>
    {
        if PixelWire.write(helper.socket, header: header, payload: payload), let frame = PixelWire.read(helper.socket) {
            let end: String
            switch try? PixelMessage.read(frame.header, payload: frame.payload) {
            case .outcome(let outcome)?: return outcome
            case .refused(let message)?: end = "refused the request (\(message)); the run ended it"
            case nil, .ready?: end = "answered what cannot be read; the run ended it"
            }
            forget(helper)
            retire(helper)
            metrics?.pixelHelperEnded()
            throw Ended(description: end)
        }
        // Forgotten before it is reaped: `abort` kills only helpers not yet reaped, so never
        // a process that took a reaped helper's pid.
        forget(helper)
        if !cancellation.isAborted { metrics?.pixelHelperEnded() }
        throw bury(helper)
    }

    /// The helper answered; after `shutdown` it goes at once.
    private func release(_ helper: Helper) {
        let late = state.withLock { state in
            state.busy.remove(helper.pid)
            guard state.stopped else { return false }
            state.helpers[pthread_self()] = nil
            return true
        }
        if late { retire(helper) }
    }

    private func forget(_ helper: Helper) {
        state.withLock { state in
            state.busy.remove(helper.pid)
            state.helpers[pthread_self()] = nil
        }
    }

    /// Starts a helper on a socket pair and hands it the run's processor. Killed as it starts
    /// (SIGKILL: the OOM killer, a kill -9, `abort`) is an end, as at work, and so is a
    /// shortage the next item may not meet (descriptors, processes, memory); anything else
    /// (it cannot be run, it exits or crashes before it is ready, it refuses the processor)
    /// means no helper can start.
    private func start() throws(StartFailure) -> Helper {
        var pair: [Int32] = [-1, -1]
        // In C: which module Swift finds glibc's `SOCK_*` names in depends on the build (a
        // release build found them in none).
        guard ip_socket_pair(&pair) == 0 else {
            throw .ended(Ended(description: "could not start (socketpair: \(String(cString: strerror(errno))))"))
        }
        // The helper's end is its standard input; no other descriptor of the run goes with it.
        let argv = ([launch.name] + launch.arguments + ["\(getpid())"]).map { strdup($0) } + [nil]
        let envp = helperEnvironment.map { strdup($0) } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let spawned = ip_spawn_helper(launch.executable, argv, envp, pair[1], &pid)
        Glibc.close(pair[1])
        guard spawned == 0 else {
            Glibc.close(pair[0])
            let reason = "\(launch.executable): \(String(cString: strerror(spawned)))"
            guard [EAGAIN, ENOMEM].contains(spawned) else { throw .cannotStart(reason) }
            throw .ended(Ended(description: "could not start (\(reason))"))
        }
        let helper = Helper(pid: pid, socket: pair[0])
        // Until it is ready, `abort` and `shutdown` find it here; it leaves before it is reaped.
        state.withLock { state in
            state.starting.insert(pid)
            if cancellation.isAborted || state.stopped { Glibc.kill(pid, SIGKILL) }
        }
        let settle = { [self] in state.withLock { _ = $0.starting.remove(pid) } }
        guard PixelWire.write(helper.socket, header: [], payload: [configuration]),
            let frame = PixelWire.read(helper.socket)
        else {
            settle()
            let end = bury(helper)
            throw end.signal == SIGKILL ? .ended(end) : .cannotStart("it \(end) before it was ready")
        }
        settle()
        switch try? PixelMessage.read(frame.header, payload: frame.payload) {
        case .ready:
            return helper
        case .refused(let message):
            retire(helper)
            throw .cannotStart("it refused the run's processor: \(message)")
        default:
            retire(helper)
            throw .cannotStart("it answered what cannot be read")
        }
    }

    /// Closes the run's end of the socket and reaps the helper, and says how it ended. It
    /// closed its end, or its socket failed, so it is ending: it gets a second before the
    /// run ends it.
    private func bury(_ helper: Helper) -> Ended {
        Glibc.close(helper.socket)
        var status: Int32 = 0
        for _ in 0..<100 {
            let reaped = waitpid(helper.pid, &status, WNOHANG)
            if reaped == helper.pid { return Self.ending(status) }
            if reaped < 0, errno != EINTR { return Ended(description: "ended (not reaped: \(String(cString: strerror(errno))))") }
            usleep(10_000)
        }
        Self.killAndReap(helper.pid)
        return Ended(description: "stopped answering (the run ended it)")
    }

    /// Ends a helper the run is done with (it holds nothing to save) and reaps it.
    private func retire(_ helper: Helper) {
        Glibc.close(helper.socket)
        Self.killAndReap(helper.pid)
    }

    private static func killAndReap(_ pid: pid_t) {
        Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
    }

    /// How a reaped process ended, from `waitpid`'s status.
    static func ending(_ status: Int32) -> Ended {
        let signal = status & 0x7F
        if signal == 0 { return Ended(description: "exited with status \((status >> 8) & 0xFF)") }
        let names: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP", SIGABRT: "SIGABRT",
            SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGSEGV: "SIGSEGV", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM",
            SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGSYS: "SIGSYS",
        ]
        return Ended(description: "ended by signal \(signal)" + (names[signal].map { " (\($0))" } ?? ""), signal: signal)
    }
}
