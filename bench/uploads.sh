#!/usr/bin/env bash
# Uploads: 1000 items through the two-step `upload` sink to a loopback server
# (bench/server.py) at the default limits.uploads (8). The inputs are small (the
# 256-px outputs of bench/local.sh, fit 256 again: little pixel work), so the run is
# bound by uploads. Reports uploads/s between the server's first and last upload, and
# the whole run's wall time; medians of RUNS (3) runs → bench/results-uploads.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
RUNS=${RUNS:-3}
SMALL=bench/corpus/small-1000
build_release
make_corpus "$SMALL" 1000 256
: > "$WORK/upload-samples.txt"
for run in $(seq 1 "$RUNS"); do
  start_server "$SMALL"
  cat > "$WORK/uploads.json" <<JSON
{ "version": 1, "name": "bench-uploads",
  "source": { "type": "directory", "path": "../corpus/small-1000" },
  "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85 },
  "sink": { "type": "upload", "endpoint": "http://127.0.0.1:$PORT/upload", "fields": { "album": "bench" } } }
JSON
  rm -rf "$WORK/state-uploads"
  /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "$BIN" run "$WORK/uploads.json" --state "$WORK/state-uploads/u.sqlite" --quiet
  echo "$(cat "$WORK/time.txt") $(curl -s "http://127.0.0.1:$PORT/stats" | tr -d ' ')" >> "$WORK/upload-samples.txt"
  stop_server
done
python3 - "$WORK/upload-samples.txt" <<'PY' | tee bench/results-uploads.md
import datetime, json, statistics, subprocess, sys
rows = []
for line in open(sys.argv[1]):
    wall, rss, stats = line.split(maxsplit=2)
    s = json.loads(stats)
    rows.append((float(wall), int(rss), s["uploads"], s["replays"], s["uploads"] / (s["lastUpload"] - s["firstUpload"])))
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
print(f"Uploads: 1000 items (256 px JPEGs) → two-step multipart upload to a loopback server, limits.uploads 8; median of {len(rows)} runs.")
print(f"{datetime.date.today()}, {cpu}, 2 cores.\n")
print("| run wall (s) | uploads/s (server, first→last) | uploads stored | replays | peak RSS (MB) |")
print("|---|---|---|---|---|")
print(f"| {statistics.median(r[0] for r in rows):.2f} | {statistics.median(r[4] for r in rows):.0f} | {rows[-1][2]} | {rows[-1][3]} | {statistics.median(r[1] for r in rows) / 1024:.0f} |")
PY
