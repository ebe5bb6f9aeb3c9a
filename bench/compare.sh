#!/usr/bin/env bash
# bench/compare.sh BASELINE_BIN — this tree's release imgpipe against another build of
# imgpipe (an earlier commit), on the same work in the same run, alternating: work A (1000
# web-sized JPEGs from a folder → fit 256 → JPEG q85) and work B (the same images as a URL
# list from a loopback server, cache off), and work S (SMALL (2000) 320-px JPEGs as a URL
# list from a loopback server: per-item overhead). RUNS (5) times each; medians, and the
# ratio of this tree to the baseline. For a change of shape that must cost no speed.
#
# Build a baseline once, e.g.:
#   git worktree add /tmp/imgpipe-base <commit> && (cd /tmp/imgpipe-base && swift build -c release)
#   bench/compare.sh /tmp/imgpipe-base/.build/release/imgpipe
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BASE=${1:?usage: bench/compare.sh BASELINE_BIN}
RUNS=${RUNS:-5}
SMALL=${SMALL:-2000}
TINY=bench/corpus/tiny-40
SAMPLES="$WORK/compare-samples.txt"
: > "$SAMPLES"

build_release
web_corpus
make_corpus "$TINY" 40 320
work_pipeline "$WORK/cmp-a.json" cmp-a '{ "type": "directory", "path": "../corpus/web-1000" }' out-cmp-a
start_server "$WEB_CORPUS"
ls "$WEB_CORPUS" | sed "s|^|http://127.0.0.1:$PORT/images/|" > "$WORK/cmp-urls.txt"
work_pipeline "$WORK/cmp-b.json" cmp-b '{ "type": "url-list", "path": "cmp-urls.txt", "cache": false }' out-cmp-b

WEB_SERVER=$SERVER_PID
start_server "$TINY"
TINY_SERVER=$SERVER_PID
url_list "$TINY" "$SMALL" "$WORK/cmp-small.txt"
cat > "$WORK/cmp-s.json" <<JSON
{ "version": 1, "name": "cmp-s", "source": { "type": "url-list", "path": "cmp-small.txt", "cache": false },
  "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85, "name": "{index}.{ext}" }, "sink": { "type": "directory", "path": "out-cmp-s" } }
JSON

compare_one() {
  local work=$1 side=$2 bin=$3
  rm -rf "$WORK/out-cmp-$work" "$WORK/state-cmp"
  timed "$work $side" "$SAMPLES" "$bin" run "$WORK/cmp-$work.json" --state "$WORK/state-cmp/s.sqlite" --quiet
  local expected=1000; [ "$work" = s ] && expected=$SMALL
  [ "$(count_files "$WORK/out-cmp-$work")" -eq "$expected" ] || { echo "$work $side: wrong output count" >&2; exit 1; }
}
alternate "base head" "${WORKS:-a b s}" compare_one
for SERVER_PID in $WEB_SERVER $TINY_SERVER; do stop_server; done

python3 - "$SAMPLES" "$RUNS" "$SMALL" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def median(work, side, field):
    return statistics.median(float(r[2 + field]) for r in rows if r[0] == work and r[1] == side)
print(f"{sys.argv[2]} alternating runs each; wall seconds and peak RSS, medians")
print("| work | baseline (s) | this tree (s) | ratio | baseline RSS (MB) | this tree RSS (MB) |")
print("|---|---|---|---|---|---|")
for work, label in (("a", "A: 1000 JPEGs from a folder"), ("b", "B: the same from a loopback URL list"),
                    ("s", f"S: {sys.argv[3]} 320-px JPEGs from a loopback URL list")):
    if not any(r[0] == work for r in rows):
        continue
    base, head = median(work, "base", 0), median(work, "head", 0)
    print(f"| {label} | {base:.2f} | {head:.2f} | {head / base:.3f} | "
          f"{median(work, 'base', 1) / 1024:.0f} | {median(work, 'head', 1) / 1024:.0f} |")
PY
