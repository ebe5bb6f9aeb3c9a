#!/usr/bin/env bash
# Work A (local): 1000 generated 1600-px-wide JPEGs → fit 256×256 → JPEG q85 → a folder,
# by imgpipe (release build) and by vipsthumbnail on 2 processes (the libvips floor).
# Each is run RUNS times (default 3), alternating; medians of wall time and peak RSS are
# printed as a Markdown table and written to bench/results-local.md.
#
#   bench/local.sh            # from the repository root; builds release first
#   RUNS=5 COUNT=1000 bench/local.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
RUNS=${RUNS:-3}
COUNT=${COUNT:-1000}
CORPUS=bench/corpus/local-$COUNT

build_release
command -v vipsthumbnail >/dev/null || { echo "vipsthumbnail missing: make deps" >&2; exit 2; }
make_corpus "$CORPUS" "$COUNT" 1600
[ "$RUNS" -gt 0 ] || exit 0

cat > "$WORK/local.json" <<JSON
{
  "version": 1,
  "name": "bench-local",
  "source": { "type": "directory", "path": "../corpus/local-$COUNT" },
  "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85, "strip": true },
  "sink": { "type": "directory", "path": "out-imgpipe" }
}
JSON

measure() { timed "$1" "$WORK/samples.txt" "${@:2}"; }

: > "$WORK/samples.txt"
for run in $(seq 1 "$RUNS"); do
  rm -rf "$WORK/out-imgpipe" "$WORK/state"
  measure imgpipe "$BIN" run "$WORK/local.json" --state "$WORK/state/local.sqlite" --quiet
  [ "$(ls "$WORK/out-imgpipe" | wc -l)" -eq "$COUNT" ] || { echo "imgpipe wrote $(ls "$WORK/out-imgpipe" | wc -l) files" >&2; exit 1; }
  rm -rf "$WORK/out-vips"; mkdir -p "$WORK/out-vips"
  measure vipsthumbnail sh -c "ls '$CORPUS'/*.jpg | xargs -P 2 -n 25 vipsthumbnail --size '256x256>' -o '$PWD/$WORK/out-vips/%s.jpg[Q=85,strip]'"
  [ "$(ls "$WORK/out-vips" | wc -l)" -eq "$COUNT" ] || { echo "vipsthumbnail wrote $(ls "$WORK/out-vips" | wc -l) files" >&2; exit 1; }
done

python3 - "$WORK/samples.txt" "$COUNT" "$RUNS" <<'PY' | tee bench/results-local.md
import statistics, sys, collections, platform, subprocess, datetime
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, wall, rss = line.split()
    rows[label].append((float(wall), int(rss)))
count, runs = int(sys.argv[2]), int(sys.argv[3])
floor = statistics.median(w for w, _ in rows["vipsthumbnail"])
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
vips = subprocess.run(["pkg-config", "--modversion", "vips"], capture_output=True, text=True).stdout.strip()
print(f"Work A, local: {count} JPEGs 1600 px wide → fit 256×256 → JPEG q85; median of {runs} alternating runs.")
print(f"{datetime.date.today()}, {cpu}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores, libvips {vips}.\n")
print("| tool | wall (s) | images/s | peak RSS (MB) | wall vs vipsthumbnail |")
print("|---|---|---|---|---|")
for label in ["imgpipe", "vipsthumbnail"]:
    wall = statistics.median(w for w, _ in rows[label])
    rss = statistics.median(r for _, r in rows[label]) / 1024
    print(f"| {label} | {wall:.2f} | {count / wall:.0f} | {rss:.0f} | {wall / floor:.2f}× |")
print(f"\nAll runs (wall s, peak RSS KB): " + "; ".join(f"{k}: {v}" for k, v in rows.items()))
PY
