#!/usr/bin/env bash
# Quality per byte (issue "quality per byte", point 1): each image's own quality chosen for
# an SSIM target, against the one fixed quality that brings 95 % of the same images to it.
#
# The corpus is the 80 distinct photos of the web corpus (each sample of samples/ at 640,
# 800, 1024, 1280 and 1600 px, as is and mirrored; JPEG q90), fitted to 512 px. Per round:
# - `search`: `"quality": { "ssim": T }`, its CPU (user + system seconds) and bytes; the
#   export gives each image's chosen quality q_i and the SSIM reached;
# - the fixed quality Q95 that brings 95 % of the images to T: the 95th percentile of q_i
#   (an image reaches T at a fixed quality q when q >= q_i: SSIM grows with the quality,
#   the search's own assumption), then a run at Q95 for its bytes, and one at q85 for the
#   CPU of an everyday fixed-quality run.
# Rounds alternate the runs. Lines "Q label round cpu_s bytes" go to $OUT; a summary after.
#
# Knobs: TARGET (0.97), ROUNDS (3), QUALITY_FORMAT (jpeg).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
TARGET=${TARGET:-0.97}
ROUNDS=${ROUNDS:-3}
FORMAT=${QUALITY_FORMAT:-jpeg}
OUT=${QUALITY_SAMPLES:-$WORK/quality-samples.txt}
CORPUS=bench/corpus/quality-80
: > "$OUT"
[ -x "$BIN" ] || build_release
make_corpus "$CORPUS" 80 640 800 1024 1280 1600

dir=$WORK/quality
rm -rf "$dir"; mkdir -p "$dir"
pipeline() { # FILE QUALITY_JSON
  cat > "$1" <<JSON
{ "version": 1, "source": { "type": "directory", "path": "$PWD/$CORPUS" },
  "filters": [ { "op": "fit", "width": 512, "height": 512 } ],
  "output": { "format": "$FORMAT", "quality": $2 }, "sink": { "type": "directory", "path": "out" } }
JSON
}
# cpu_run NAME — runs $dir/NAME.json on a fresh state; prints "cpu_seconds bytes".
cpu_run() {
  local run=$dir/$1
  rm -rf "$run.sqlite"* "$run.work" "$dir/out"
  /usr/bin/time -f "%U %S" -o "$dir/time.txt" "$BIN" run "$run.json" --state "$run.sqlite" --quiet >/dev/null
  echo "$(awk '{ print $1 + $2 }' "$dir/time.txt") $(du -sb --apparent-size "$dir/out" | cut -f1)"
}

pipeline "$dir/search.json" "{ \"ssim\": $TARGET }"
pipeline "$dir/q85.json" 85
for round in $(seq 1 "$ROUNDS"); do
  read -r cpu bytes < <(cpu_run search)
  echo "Q search $round $cpu $bytes" >> "$OUT"
  "$BIN" export "$dir/search.json" --state "$dir/search.sqlite" --format jsonl -o "$dir/search.jsonl"
  q95=$(python3 - "$dir/search.jsonl" "$TARGET" <<'PY'
import json, math, sys
chosen = sorted(json.loads(line)["outputs"]["default"]["quality"] for line in open(sys.argv[1]))
print(chosen[max(0, math.ceil(0.95 * len(chosen)) - 1)])
PY
)
  python3 - "$dir/search.jsonl" "$TARGET" >> "$OUT" <<'PY'
import json, sys
records = [json.loads(line)["outputs"]["default"] for line in open(sys.argv[1])]
reached = sum(1 for r in records if r["ssim"] >= float(sys.argv[2]))
print(f"Q reached 0 {reached} {len(records)}")
PY
  pipeline "$dir/fixed.json" "$q95"
  read -r cpu bytes < <(cpu_run fixed)
  echo "Q fixed-q$q95 $round $cpu $bytes" >> "$OUT"
  read -r cpu bytes < <(cpu_run q85)
  echo "Q fixed-q85 $round $cpu $bytes" >> "$OUT"
done
python3 - "$OUT" "$TARGET" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.startswith("Q ")]
def median(label, column):
    values = [float(r[column]) for r in rows if r[1] == label]
    return statistics.median(values) if values else None
fixed = sorted({r[1] for r in rows if r[1].startswith("fixed-q") and r[1] != "fixed-q85"})
search_cpu, search_bytes = median("search", 3), median("search", 4)
q85_cpu = median("fixed-q85", 3)
reached = [r for r in rows if r[1] == "reached"][-1]
print(f"target SSIM {sys.argv[2]}: {reached[3]} of {reached[4]} images reach it with the search")
for label in fixed:
    print(f"bytes: search {search_bytes:.0f} / {label} {median(label, 4):.0f} = {search_bytes / median(label, 4):.3f}")
print(f"CPU: search {search_cpu:.2f} s / fixed-q85 {q85_cpu:.2f} s = {search_cpu / q85_cpu:.2f}x")
PY
