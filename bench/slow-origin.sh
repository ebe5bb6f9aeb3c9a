#!/usr/bin/env bash
# bench/slow-origin.sh [BASELINE_BIN] — a slow origin: every image answered after 1 s
# (bench/server.py --delay 1), 96 items, limits.downloads 16, and the same 96 outputs
# uploaded (two-step upload, each answer after 1 s) with limits.uploads 8. At full width
# from the first item, the downloads take 96 / 16 × 1 s = 6 s, and the uploads 96 / 8 × 1 s
# = 12 s after the first download (13 s; downloads overlap them). With a
# baseline build, both are run alternately and compared. RUNS (3) times; medians.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BASE=${1:-}
RUNS=${RUNS:-3}
SAMPLES="$WORK/slow-samples.txt"
: > "$SAMPLES"
TINY=bench/corpus/tiny-40

build_release
make_corpus "$TINY" 40 320
start_server "$TINY" --delay 1
url_list "$TINY" 96 "$WORK/slow-urls.txt"
for kind in download upload; do
  sink='{ "type": "directory", "path": "out-slow" }'
  [ "$kind" = upload ] && sink="{ \"type\": \"upload\", \"endpoint\": \"http://127.0.0.1:$PORT/upload\" }"
  cat > "$WORK/slow-$kind.json" <<JSON
{ "version": 1, "name": "slow-$kind", "source": { "type": "url-list", "path": "slow-urls.txt", "cache": false },
  "filters": [ { "op": "fit", "width": 64, "height": 64 } ],
  "output": { "format": "jpeg", "name": "{index}.{ext}" }, "sink": $sink,
  "limits": { "downloads": 16, "uploads": 8, "timeout": 10 } }
JSON
done
slow_one() {
  local kind=$1 side=$2 bin=$3
  rm -rf "$WORK/out-slow" "$WORK/state-slow"
  timed "$kind $side" "$SAMPLES" "$bin" run "$WORK/slow-$kind.json" --state "$WORK/state-slow/s.sqlite" --quiet
}
alternate "head ${BASE:+base}" "download upload" slow_one
stop_server
python3 - "$SAMPLES" "$RUNS" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def median(kind, side):
    values = [float(r[2]) for r in rows if r[0] == kind and r[1] == side]
    return statistics.median(values) if values else None
print(f"Slow origin (every answer after 1 s), 96 items; wall seconds, median of {sys.argv[2]}")
print("| run | floor (s) | this tree (s) | baseline (s) |")
print("|---|---|---|---|")
for kind, floor, label in (("download", 6, "downloads, limits.downloads 16"), ("upload", 13, "two-step uploads of the same, limits.uploads 8")):
    base = median(kind, "base")
    print(f"| {label} | {floor} | {median(kind, 'head'):.2f} | {'%.2f' % base if base else '—'} |")
PY
