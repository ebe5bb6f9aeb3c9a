import Foundation
import PipelineKit

/// A real S3-compatible server on loopback for the tests: moto's server mode
/// (`python3 -m moto.server`, from PyPI's `moto[server]`, which `make deps` installs) on a
/// port of its choosing, stopped when this value is freed.
///
/// Signatures are checked: the server starts without authentication, an IAM user with
/// an `s3:*` policy and an access key is made through moto's IAM API, then
/// `/moto-api/reset-auth 0` turns authentication on for every later request, so a request
/// signed with anything but that key and its secret is refused (`SignatureDoesNotMatch`,
/// `InvalidAccessKeyId`). Everything the tests read back goes through boto3, an
/// independent client, with the same key.
public final class MotoServer: Sendable {
    /// Started in `init`, terminated in `deinit`.
    private let process: Process
    public let endpoint: String
    public let accessKeyId: String
    public let secretAccessKey: String
    /// While this file exists, every request whose method and path (`GET /bucket/key?…`)
    /// hold its text waits (`holdParts`, `hold(matching:)`); the first one held creates
    /// `partSeenFlag`.
    private let holdFlag = NSTemporaryDirectory() + "/moto-hold-\(UUID().uuidString.prefix(8))"
    private let partSeenFlag = NSTemporaryDirectory() + "/moto-part-seen-\(UUID().uuidString.prefix(8))"
    /// The faults the server answers with (`inject`), as JSON.
    private let faultsFile = NSTemporaryDirectory() + "/moto-faults-\(UUID().uuidString.prefix(8)).json"

    /// An answer the server gives instead of its own, to requests whose method and path
    /// (`PUT /bucket/key?query`) hold `match`, `times` times: with `after`, the request is
    /// carried out first (an upload stored, its answer lost on the way).
    public struct Fault: Encodable, Sendable {
        public let match: String
        public let status: Int
        public let after: Bool
        public let times: Int

        public init(_ match: String, status: Int, after: Bool = false, times: Int = 1_000_000) {
            self.match = match
            self.status = status
            self.after = after
            self.times = times
        }
    }

    /// Answers with `faults` from now on (the first that matches a request, while its
    /// `times` last); an empty list ends them.
    public func inject(_ faults: [Fault]) throws {
        try JSONEncoder().encode(faults).write(to: URL(fileURLWithPath: faultsFile + ".tmp"))
        guard rename(faultsFile + ".tmp", faultsFile) == 0 else { throw ServerError("cannot write \(faultsFile)") }
    }

    /// Part uploads wait (up to two minutes) until this is set back to false: a test that
    /// kills imgpipe once `partSeen` knows a multipart upload is under way, and stays so,
    /// whatever the machine's load (no sleep to race).
    public var holdParts: Bool {
        get { FileManager.default.fileExists(atPath: holdFlag) }
        set {
            if newValue {
                hold(matching: "partNumber=")
            } else {
                unlink(holdFlag)
            }
        }
    }

    /// Requests whose method and path hold `text` (`"GET /bucket/tables/"`) wait as part
    /// uploads do under `holdParts`, until `holdParts` is set back to false.
    public func hold(matching text: String) {
        unlink(partSeenFlag)
        _ = FileManager.default.createFile(atPath: holdFlag, contents: Data(text.utf8))
    }

    /// Waits (two minutes at most) until a held request has reached the server, then kills
    /// `running` (SIGKILL), waits for it and lets held requests go; false, and nothing
    /// killed, if no held request came while it ran.
    public func killOnceHeld(_ running: RunningCommand) -> Bool {
        let deadline = Date().addingTimeInterval(120)
        while !partSeen, running.process.isRunning, Date() < deadline { usleep(10_000) }
        guard partSeen else { return false }
        running.signal(SIGKILL)
        _ = running.wait()
        holdParts = false
        return true
    }

    /// True once a held request has reached the server.
    public var partSeen: Bool { FileManager.default.fileExists(atPath: partSeenFlag) }

    /// The environment a pipeline with default credentials reads.
    public var credentials: [String: String] {
        ["AWS_ACCESS_KEY_ID": accessKeyId, "AWS_SECRET_ACCESS_KEY": secretAccessKey]
    }

    public init() throws {
        let log = NSTemporaryDirectory() + "/moto-\(UUID().uuidString.prefix(8)).log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", Self.serve, "-H", "127.0.0.1", "-p", "0"]
        process.environment = ProcessInfo.processInfo.environment.merging([
            "MOTO_HOLD_FLAG": holdFlag, "MOTO_PART_SEEN": partSeenFlag, "MOTO_FAULTS": faultsFile,
        ]) { $1 }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // The port it bound, from its "Running on http://127.0.0.1:PORT" line.
        var port: String?
        for _ in 0..<600 where port == nil && process.isRunning {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let range = text.range(of: #"Running on http://127\.0\.0\.1:[0-9]+"#, options: .regularExpression) {
                port = String(text[range].split(separator: ":").last ?? "")
            } else {
                usleep(50_000)
            }
        }
        guard let port else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            Self.stop(process)
            throw ServerError(
                "moto's server did not start (is moto[server] installed? `make deps` installs it): \(text.suffix(600))")
        }
        endpoint = "http://127.0.0.1:\(port)"
        let key: String
        do {
            key = try Self.python(Self.setUp, environment: ["MOTO_ENDPOINT": endpoint])
        } catch {
            Self.stop(process)
            throw error
        }
        let parts = key.split(separator: " ")
        guard parts.count == 2 else {
            Self.stop(process)
            throw ServerError("moto's IAM set-up printed \(key)")
        }
        accessKeyId = String(parts[0])
        secretAccessKey = String(parts[1])
    }

    /// SIGKILL: moto's server does not stop on SIGTERM, and holds nothing to save.
    deinit {
        Self.stop(process)
        unlink(holdFlag)
        unlink(partSeenFlag)
        unlink(faultsFile)
    }

    static func stop(_ process: Process) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// `moto.server`, with one fix to its signature check: moto 5 recomputes a signature
    /// from the request's path and query as Werkzeug decoded them, so any request whose
    /// query holds an encoded character (`prefix=thumbs%2F`, which every client sends, boto3
    /// included) is refused. The path and query are encoded again, as SigV4's canonical
    /// request says, before moto compares; the comparison itself is moto's.
    static let serve = """
        import os, sys, time
        from urllib.parse import quote, unquote
        import moto.iam.access_control as access
        from moto.server import main

        original = access.IAMRequestBase.__init__

        def encoded(path):
            path, _, query = path.partition("?")
            path = "/".join(quote(unquote(part), safe="-_.~") for part in path.split("/"))
            if not query:
                return path
            pairs = [pair.partition("=") for pair in query.split("&")]
            return path + "?" + "&".join(quote(unquote(k), safe="-_.~") + "=" + quote(unquote(v), safe="-_.~")
                                         for k, _, v in pairs)

        def held(method, path):
            try:
                with open(os.environ["MOTO_HOLD_FLAG"]) as flag:
                    return flag.read() in method + " " + path
            except OSError:
                return False

        def init(self, account_id, method, path, *rest, **named):
            # With `holdParts` (or `hold(matching:)`), a request says it arrived and waits
            # until it is let go: a multipart upload (or a download) stays under way for as
            # long as the test needs.
            if held(method, path):
                open(os.environ["MOTO_PART_SEEN"], "a").close()
                deadline = time.time() + 120
                while os.path.exists(os.environ["MOTO_HOLD_FLAG"]) and time.time() < deadline:
                    time.sleep(0.02)
            original(self, account_id, method, encoded(path), *rest, **named)

        access.IAMRequestBase.__init__ = init

        # `inject`: the first fault that matches a request answers it instead (after carrying
        # it out, with "after"), and counts down its `times`.
        import json, threading
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication
        dispatch = DomainDispatcherApplication.__call__
        faults_lock = threading.Lock()

        def take_fault(request):
            path = os.environ["MOTO_FAULTS"]
            with faults_lock:
                try:
                    with open(path) as file:
                        faults = json.load(file)
                except (OSError, ValueError):
                    return None
                for fault in faults:
                    if fault["times"] > 0 and fault["match"] in request:
                        fault["times"] -= 1
                        with open(path + ".tmp", "w") as file:
                            json.dump(faults, file)
                        os.replace(path + ".tmp", path)
                        return fault
            return None

        def faulty(self, environ, start_response):
            query = environ.get("QUERY_STRING", "")
            request = environ["REQUEST_METHOD"] + " " + environ.get("PATH_INFO", "") + ("?" + query if query else "")
            fault = take_fault(request)
            if fault is None:
                return dispatch(self, environ, start_response)
            if fault["after"]:
                for _ in dispatch(self, environ, lambda status, headers, exc_info=None: (lambda data: None)):
                    pass
            body = b"" if environ["REQUEST_METHOD"] == "HEAD" else \\
                b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
            start_response(str(fault["status"]) + " Injected",
                           [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]

        DomainDispatcherApplication.__call__ = faulty
        main(sys.argv[1:])
        """

    /// The user, its policy and key; then authentication on for everything after.
    static let setUp = """
        import boto3, json, os, urllib.request
        ep = os.environ["MOTO_ENDPOINT"]
        iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="imgpipe")
        iam.put_user_policy(UserName="imgpipe", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="imgpipe")["AccessKey"]
        urllib.request.urlopen(urllib.request.Request(ep + "/moto-api/reset-auth", data=b"0", method="POST",
                                              headers={"Content-Type": "text/plain"})).read()
        print(key["AccessKeyId"], key["SecretAccessKey"])
        """

    public func createBucket(_ name: String) throws {
        try boto3("s3.create_bucket(Bucket=sys.argv[1])", arguments: [name])
    }

    /// What boto3 reads back of every object of a bucket (every page of the listing).
    public struct StoredObject: Decodable, Sendable, Equatable {
        public let sha256: String
        public let size: Int
        public let contentType: String
        public let metadata: [String: String]
        public let storageClass: String?
        public let etag: String
    }

    public func objects(in bucket: String) throws -> [String: StoredObject] {
        let json = try boto3(
            """
            out = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[1]):
                for item in page.get("Contents", []):
                    got = s3.get_object(Bucket=sys.argv[1], Key=item["Key"])
                    body = got["Body"].read()
                    out[item["Key"]] = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body),
                                        "contentType": got.get("ContentType", ""), "metadata": got.get("Metadata", {}),
                                        "storageClass": item.get("StorageClass"), "etag": got["ETag"].strip('"')}
            print(json.dumps(out))
            """, arguments: [bucket])
        return try JSONDecoder().decode([String: StoredObject].self, from: Data(json.utf8))
    }

    /// The keys of the multipart uploads in progress in a bucket.
    public func multipartUploads(in bucket: String) throws -> [String] {
        let json = try boto3(
            """
            print(json.dumps([u["Key"] for u in s3.list_multipart_uploads(Bucket=sys.argv[1]).get("Uploads", [])]))
            """, arguments: [bucket])
        return try JSONDecoder().decode([String].self, from: Data(json.utf8))
    }

    /// Puts each file of `folder` (relative path → key below `prefix`).
    public func upload(folder: String, to bucket: String, prefix: String = "") throws {
        try boto3(
            """
            root = sys.argv[2]
            for dirpath, _, names in os.walk(root):
                for name in names:
                    path = os.path.join(dirpath, name)
                    s3.upload_file(path, sys.argv[1], sys.argv[3] + os.path.relpath(path, root))
            """, arguments: [bucket, folder, prefix])
    }

    /// Runs a Python script with boto3's `s3` client as `s3` (path-style, this server,
    /// the test's key) and `arguments` as `sys.argv[1…]`, returning what it printed.
    @discardableResult
    public func boto3(_ script: String, environment: [String: String] = [:], arguments: [String] = []) throws -> String {
        let prelude = """
            import boto3, botocore.config, hashlib, json, os, sys
            s3 = boto3.client("s3", endpoint_url=os.environ["MOTO_ENDPOINT"], region_name="us-east-1",
                              aws_access_key_id=os.environ["MOTO_KEY"], aws_secret_access_key=os.environ["MOTO_SECRET"],
                              config=botocore.config.Config(s3={"addressing_style": "path"}))

            """
        var env = environment
        env["MOTO_ENDPOINT"] = endpoint
        env["MOTO_KEY"] = accessKeyId
        env["MOTO_SECRET"] = secretAccessKey
        return try Self.python(prelude + script, environment: env, arguments: arguments)
    }

    /// `python3 -c script arguments…`; its standard output, or an error with its standard error.
    static func python(_ script: String, environment: [String: String], arguments: [String] = []) throws -> String {
        let result = try ImgpipeBinary.launch(
            executable: "/usr/bin/env", ["python3", "-c", script] + arguments,
            in: NSTemporaryDirectory(), environment: environment
        ).wait()
        guard result.status == 0 else {
            throw ServerError("python3 (boto3) failed with status \(result.status): \(result.stderr.suffix(1200))")
        }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
