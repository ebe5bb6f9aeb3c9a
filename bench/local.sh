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
RUNS=${RUNS:-3}
COUNT=${COUNT:-1000}
WORK=bench/work
CORPUS=bench/corpus/local-$COUNT
BIN=.build/release/imgpipe

swift build -c release >/dev/null
command -v vipsthumbnail >/dev/null || { echo "vipsthumbnail missing: make deps" >&2; exit 2; }

# The corpus: the samples scaled to 1600 px wide, in 5 variants each (as is, mirrored,
# three crops), copied round-robin to COUNT files. Cached between runs.
if [ "$(ls "$CORPUS" 2>/dev/null | wc -l)" -ne "$COUNT" ]; then
  rm -rf "$CORPUS" "$CORPUS.base"; mkdir -p "$CORPUS" "$CORPUS.base"
  n=0
  for sample in samples/*.jpg samples/*.png samples/*.webp; do
    base=$(basename "${sample%.*}")
    vips thumbnail "$sample" "$CORPUS.base/$base-0.v" 1600 --height 100000 --size both
    vips flip "$CORPUS.base/$base-0.v" "$CORPUS.base/$base-1.v" horizontal
    w=$(vipsheader -f width "$CORPUS.base/$base-0.v"); h=$(vipsheader -f height "$CORPUS.base/$base-0.v")
    for k in 2 3 4; do
      vips crop "$CORPUS.base/$base-0.v" "$CORPUS.base/$base-c.v" $((w / (k * 8))) $((h / (k * 8))) $((w - w / (k * 4))) $((h - h / (k * 4)))
      vips resize "$CORPUS.base/$base-c.v" "$CORPUS.base/$base-$k.v" "$(python3 -c "print(1600/$((w - w / (k * 4))))")"
    done
    for k in 0 1 2 3 4; do
      vips colourspace "$CORPUS.base/$base-$k.v" "$CORPUS.base/$base-$k.jpg[Q=90,strip]" srgb
      n=$((n + 1))
    done
  done
  bases=("$CORPUS.base"/*.jpg)
  for i in $(seq 1 "$COUNT"); do
    cp "${bases[$(( (i - 1) % ${#bases[@]} ))]}" "$CORPUS/$(printf 'img-%05d.jpg' "$i")"
  done
  rm -rf "$CORPUS.base"
fi

mkdir -p "$WORK"
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

measure() { # label, command… → appends "label wall rss" to $WORK/samples.txt
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/stderr.txt" || {
    echo "$label failed:" >&2; cat "$WORK/stderr.txt" >&2; exit 1; }
  echo "$label $(cat "$WORK/time.txt")" >> "$WORK/samples.txt"
}

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
