#!/usr/bin/env python3
"""Loopback server for the benchmarks (binds 127.0.0.1 only):
- GET /images/<name>: the files of a folder, with an ETag; with --fail-first P, the first
  request for P % of the images (chosen by a hash of the name) is answered 503;
- GET /upload → {"url": "/once/<token>"}; POST /once/<token>: a multipart upload, stored
  once per Idempotency-Key (the two-step upload of imgpipe's `upload` sink);
- GET /stats: counts and the times of the first and last upload, as JSON;
- with --delay S, every image and upload answer waits S seconds first (a slow origin)."""
import argparse, hashlib, http.server, json, os, socketserver, threading, time, uuid

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--fail-first", type=float, default=0)
parser.add_argument("--port-file")
parser.add_argument("--delay", type=float, default=0)
args = parser.parse_args()

lock = threading.Lock()
seen = set()
stats = {"requests": 0, "images": 0, "503": 0, "uploads": 0, "replays": 0, "firstUpload": None, "lastUpload": None}
keys = set()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without these, headers and body go out in separate small packets and Nagle's
    # algorithm meets the client's delayed ACK: ~40 ms per response.
    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def log_message(self, *a):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        time.sleep(args.delay)
        if not self.path.startswith("/once/") or b'filename="' not in body:
            return self.reply(400, b"bad upload", "text/plain")
        key = self.headers.get("Idempotency-Key")
        with lock:
            now = time.time()
            if key in keys:
                stats["replays"] += 1
            else:
                keys.add(key)
                stats["uploads"] += 1
            stats["firstUpload"] = stats["firstUpload"] or now
            stats["lastUpload"] = now
        self.reply(201, json.dumps({"url": "/files/" + str(uuid.uuid4())}).encode(), "application/json")

    def do_GET(self):
        if self.path == "/upload":
            return self.reply(200, json.dumps({"url": "/once/" + str(uuid.uuid4())}).encode(), "application/json")
        if self.path == "/stats":
            body = json.dumps(stats).encode()
            return self.reply(200, body, "application/json")
        name = os.path.basename(self.path.split("?")[0])
        path = os.path.join(args.folder, name)
        with lock:
            stats["requests"] += 1
            first = name not in seen
            seen.add(name)
        if not self.path.startswith("/images/") or not os.path.isfile(path):
            return self.reply(404, b"not found", "text/plain")
        bucket = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 10000
        if first and bucket < args.fail_first * 100:
            with lock:
                stats["503"] += 1
            return self.reply(503, b"busy", "text/plain")
        time.sleep(args.delay)
        with open(path, "rb") as f:
            body = f.read()
        with lock:
            stats["images"] += 1
        self.reply(200, body, "image/jpeg", {"ETag": '"%s"' % name})

    def reply(self, status, body, kind, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256

server = Server(("127.0.0.1", args.port), Handler)
if args.port_file:
    with open(args.port_file, "w") as f:
        f.write(str(server.server_address[1]))
server.serve_forever()
