#!/usr/bin/env bash
# Several outputs per item (issue "what a run hands over"): one pipeline with three outputs
# (fit 320, 640 and 1280, in FORMAT: jpeg by default, or webp/avif, quality 80) against the three one-output pipelines it replaces, on
# the same N images of the web corpus (default 300), release build, RUNS (3) alternating
# rounds. Prints the medians and the ratio of the 3-output run to the sum of the three
# single runs of the same round (goal: ≤ 0.6), in the form of bench/RESULTS.md. (Earlier
# versions also timed the three-output run encoded one after another and with every resample
# left to libvips; both lost, and their switches are gone: RESULTS.md has the figures.)
# A run's previous outputs are
# moved aside (`aside` in bench/lib.sh), not deleted, and deleted at the end: deleting the
# 300 files of the three-output run just before it charged it 10 % of its CPU in
# ext4_create (perf), the single runs (100 files) a third of that per file. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
RUNS=${RUNS:-3}
N=${N:-300}
FORMAT=${FORMAT:-jpeg}
build_release
web_corpus
corpus_subset "$WEB_CORPUS" "$N" "$WORK/outputs-corpus"
single() { # width
  cat > "$WORK/out-$1.json" <<JSON
{ "version": 1, "source": { "type": "directory", "path": "outputs-corpus" },
  "filters": [ { "op": "fit", "width": $1, "height": $1 } ],
  "output": { "format": "$FORMAT", "quality": 80 }, "sink": { "type": "directory", "path": "out-single-$1" } }
JSON
}
for w in 320 640 1280; do single $w; done
cat > "$WORK/out-three.json" <<JSON
{ "version": 1, "source": { "type": "directory", "path": "outputs-corpus" },
  "outputs": [
    { "id": "w320", "filters": [ { "op": "fit", "width": 320, "height": 320 } ], "format": "$FORMAT", "quality": 80 },
    { "id": "w640", "filters": [ { "op": "fit", "width": 640, "height": 640 } ], "format": "$FORMAT", "quality": 80 },
    { "id": "w1280", "filters": [ { "op": "fit", "width": 1280, "height": 1280 } ], "format": "$FORMAT", "quality": 80 } ],
  "sink": { "type": "directory", "path": "out-three" } }
JSON
SAMPLES=$WORK/outputs-samples.txt
: > "$SAMPLES"
one_run() { # kind (320, 640, 1280 or three), side, binary
  local config=$1
  aside "$WORK/out-single-$config" "$WORK/out-three" "$WORK/state-out-$1"
  timed "$1" "$SAMPLES" "$3" run "$WORK/out-$config.json" --state "$WORK/state-out-$1/s.sqlite" --quiet
  if [ "$config" = three ] && [ "$(count_files "$WORK/out-three")" -ne $((N * 3)) ]; then
    echo "3-output run made $(count_files "$WORK/out-three") files" >&2; exit 1
  fi
}
alternate head "320 640 1280 three" one_run
clear_aside
python3 - "$SAMPLES" "$RUNS" "$N" "$FORMAT" <<'PY'
import statistics, sys
path, runs, n, fmt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [line.split() for line in open(path)]
by = {}
for label, wall, rss in rows: by.setdefault(label, []).append((float(wall), int(rss)))
ratios = [by["three"][i][0] / (by["320"][i][0] + by["640"][i][0] + by["1280"][i][0]) for i in range(runs)]
med = lambda k: statistics.median(w for w, _ in by[k])
rss = lambda k: max(r for _, r in by[k]) // 1024
print(f"### Several outputs: {n} web-sized JPEGs → fit 320, 640, 1280 ({fmt} q80), local folder\n")
print("| run | wall (s), median | peak RSS (MB) |\n|---|---|---|")
for k, name in [("320", "one output: fit 320"), ("640", "one output: fit 640"), ("1280", "one output: fit 1280"),
                ("three", "three outputs in one pipeline")]:
    print(f"| {name} | {med(k):.2f} | {rss(k)} |")
print(f"\nThree outputs vs the sum of the three single runs of the same round: "
      + ", ".join(f"{r:.3f}" for r in ratios) + f" (median {statistics.median(ratios):.3f}; goal ≤ 0.6).")
PY
