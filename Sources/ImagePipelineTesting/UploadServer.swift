import Foundation
import ImagePipeline
import PipelineKit

/// A loopback server that speaks both upload contracts and honours `Idempotency-Key`:
///
/// - `GET /upload` → `{"url": "<base>/once/<token>"}`, a one-shot URL;
/// - `POST /once/<token>` (multipart) → stores the file part and fields, answers
///   `{"url": "<base>/files/<id>"}`; a used token is refused with 410;
/// - `PUT /put/<name>` and multipart `POST /put/<name>` → stores the body (or file part).
///
/// A request whose `Idempotency-Key` was already stored is answered as the first one was,
/// and nothing is stored again. `mode` makes it refuse, fail now and then, or slow down.
public final class UploadServer: Sendable {
    public struct Upload: Sendable {
        public let key: String?
        public let path: String
        public let fields: [String: String]
        public let filename: String?
        public let contentType: String?
        public let data: Data
    }

    public enum Mode: Sendable {
        case normal
        /// Every upload (step 2 or PUT) answers this status.
        case refuse(Int)
        /// The first `n` attempts of each file answer 503.
        case flaky(failures: Int)
        /// Each upload takes this long.
        case slow(Double)
    }

    private struct State {
        var stored: [Upload] = []
        var byKey: [String: String] = [:]
        var tokens: [String: Bool] = [:]
        var attempts: [String: Int] = [:]
        var mode: Mode
    }
    /// Shared with the server's handler, which runs on the server's threads.
    private let state: LockedBox<State>
    public let server: TestHTTPServer

    /// Listens on a free port of `host` (127.0.0.1, or another local address).
    public init(mode: Mode = .normal, host: String = "127.0.0.1") throws {
        let state = LockedBox(State(mode: mode))
        self.state = state
        server = try TestHTTPServer(host: host) { request in Self.handle(request, state) }
    }

    public var baseURL: String { server.baseURL }
    /// Connections accepted so far.
    public var connections: Int { server.connections }
    public var mode: Mode {
        get { state.withLock { $0.mode } }
        set { state.withLock { $0.mode = newValue } }
    }

    /// Every upload stored (a replay with a known key is not stored again).
    public var uploads: [Upload] { state.withLock { $0.stored } }

    public func stop() { server.stop() }

    private static func handle(_ request: TestHTTPServer.Request, _ state: LockedBox<State>) -> TestHTTPServer.Response {
        let base = "http://\(request.headers["host"] ?? "127.0.0.1")"
        if request.method == "GET", request.path == "/upload" {
            let token = UUID().uuidString
            state.withLock { $0.tokens[token] = false }
            return .json(#"{"url": "\#(base)/once/\#(token)"}"#)
        }
        if request.method == "POST", request.path.hasPrefix("/once/") {
            let token = String(request.path.dropFirst("/once/".count))
            let known = state.withLock { state -> Bool? in
                guard let used = state.tokens[token] else { return nil }
                state.tokens[token] = true
                return used
            }
            guard known == false else { return .status(410) }
            return store(request, base: base, state)
        }
        if request.path.hasPrefix("/put/"), request.method == "PUT" || request.method == "POST" {
            return store(request, base: base, state)
        }
        return .status(404)
    }

    private static func store(
        _ request: TestHTTPServer.Request, base: String, _ state: LockedBox<State>
    ) -> TestHTTPServer.Response {
        let key = request.headers["idempotency-key"]
        var fields: [String: String] = [:]
        var file: FormPart?
        if let type = request.headers["content-type"], type.hasPrefix("multipart/") {
            guard let parts = try? MultipartParser.parse(request.body, contentType: type) else { return .status(400) }
            for part in parts {
                if part.filename != nil { file = part } else { fields[part.name] = part.text }
            }
            guard file != nil else { return .status(400) }
        }
        let identity = file?.filename ?? request.path
        let mode = state.withLock { state -> Mode in
            state.attempts[identity, default: 0] += 1
            return state.mode
        }
        switch mode {
        case .refuse(let status): return .status(status)
        case .flaky(let failures):
            if state.withLock({ $0.attempts[identity]! }) <= failures { return .status(503) }
        case .slow(let seconds): Thread.sleep(forTimeInterval: seconds)
        case .normal: break
        }
        let answer = state.withLock { state -> String in
            if let key, let earlier = state.byKey[key] { return earlier }
            let id = String(state.stored.count + 1)
            state.stored.append(
                Upload(
                    key: key, path: request.path, fields: fields, filename: file?.filename,
                    contentType: file?.contentType ?? request.headers["content-type"], data: file?.data ?? request.body))
            let url = "\(base)/files/\(id)"
            if let key { state.byKey[key] = url }
            return url
        }
        return .json(#"{"url": "\#(answer)"}"#, status: 201)
    }
}
