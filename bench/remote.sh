#!/usr/bin/env bash
# Remote feeds: 1000 JPEGs (the bench corpus, 1600 px wide) from a loopback HTTP server
# (bench/server.py), url-list → fit 256×256 → JPEG q85 → a folder, release build:
#   cold    — cache on, empty cache: every image downloaded;
#   cached  — the same pipeline again: everything from the disk cache;
#   503     — cache off, 20 % of first requests answered 503 (retried with backoff).
# Each RUNS times (default 3); medians go to bench/results-remote.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
RUNS=${RUNS:-3}
COUNT=${COUNT:-1000}
CORPUS=bench/corpus/local-$COUNT
build_release
make_corpus "$CORPUS" "$COUNT" 1600
pipeline() { # cache(true|false) → $WORK/remote.json
  ls "$CORPUS" | sed "s|^|http://127.0.0.1:$PORT/images/|" > "$WORK/urls.txt"
  cat > "$WORK/remote.json" <<JSON
{ "version": 1, "name": "bench-remote",
  "source": { "type": "url-list", "path": "urls.txt", "cache": $1 },
  "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85 },
  "sink": { "type": "directory", "path": "out-remote" } }
JSON
}
measure() { # label
  rm -rf "$WORK/out-remote" "$WORK/state-remote"
  /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "$BIN" run "$WORK/remote.json" --state "$WORK/state-remote/r.sqlite" --quiet \
    || { echo "$1: imgpipe failed" >&2; exit 1; }
  [ "$(ls "$WORK/out-remote" | wc -l)" -eq "$COUNT" ] || { echo "$1: wrong output count" >&2; exit 1; }
  echo "$1 $(cat "$WORK/time.txt") $(curl -s "http://127.0.0.1:$PORT/stats" | tr -d ' ')" >> "$WORK/remote-samples.txt"
}

: > "$WORK/remote-samples.txt"
for run in $(seq 1 "$RUNS"); do
  start_server "$CORPUS"
  pipeline '{ "path": "cache-remote" }'
  rm -rf "$WORK/cache-remote"
  measure cold
  measure cached
  stop_server
  start_server "$CORPUS" --fail-first 20
  pipeline false
  measure 503
  stop_server
done

python3 - "$WORK/remote-samples.txt" "$COUNT" "$RUNS" <<'PY' | tee bench/results-remote.md
import collections, datetime, json, statistics, subprocess, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, wall, rss, stats = line.split(maxsplit=3)
    rows[label].append((float(wall), int(rss), json.loads(stats)))
count, runs = int(sys.argv[2]), int(sys.argv[3])
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
print(f"Remote: {count} JPEGs (1600 px wide) from a loopback server → fit 256×256 → JPEG q85; median of {runs} runs.")
print(f"{datetime.date.today()}, {cpu}, 2 cores, limits.downloads 16, retry attempts 3, backoff 0.5 s.\n")
print("| run | wall (s) | images/s | peak RSS (MB) | server: requests / images sent / 503s |")
print("|---|---|---|---|---|")
for label, title in [("cold", "cold (empty cache)"), ("cached", "cached rerun"), ("503", "20 % of first attempts 503, cache off")]:
    wall = statistics.median(w for w, _, _ in rows[label])
    rss = statistics.median(r for _, r, _ in rows[label]) / 1024
    s = rows[label][-1][2]
    print(f"| {title} | {wall:.2f} | {count / wall:.0f} | {rss:.0f} | {s['requests']} / {s['images']} / {s['503']} (cumulative per server) |")
PY
