#!/usr/bin/env bash
# Tuning experiments behind bench/RESULTS.md's tuning log: work A on the first COUNT (300)
# images of the web corpus, each variant RUNS (3) times, alternating; medians of wall time
# and peak RSS. Variants change one thing against the default:
#   default          workers = cores (2), 1 libvips thread per image, leading fit fused, 2 arenas
#   3 workers        limits.workers 3 (one more image in flight than cores)
#   arenas=16        MALLOC_ARENA_MAX=16, glibc's default on 2 cores (imgpipe itself sets 2)
#   threads          IMGPIPE_PIXEL_HELPERS=0: the pixels on the workers' threads in one process
#                    instead of in helper processes
# Peak RSS is /usr/bin/time's: the largest of the run and each of its pixel helpers, not
# their sum. The fusion and libvips-threads variants of the tuning log are gone with their
# switches (IMGPIPE_FUSE, IMGPIPE_VIPS_THREADS): both lost, and only the winner is built.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
RUNS=${RUNS:-3}
COUNT=${COUNT:-300}
WEB=$WEB_CORPUS
SUBSET=$WORK/tune-in
build_release
web_corpus
corpus_subset "$WEB" "$COUNT" "$SUBSET"
tune_pipeline() { # file, limits
  cat > "$1" <<JSON
{ "version": 1, "source": { "type": "directory", "path": "tune-in" }, "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85 }, "sink": { "type": "directory", "path": "tune-out" }, "limits": $2 }
JSON
}
tune_pipeline "$WORK/tune.json" '{}'
tune_pipeline "$WORK/tune-3w.json" '{"workers": 3}'
: > "$WORK/tune-samples.txt"
variant() { # label, env…, pipeline
  local label=$1 file=${*: -1}; shift
  rm -rf "$WORK/tune-out" "$WORK/tune-state"
  timed "$label" "$WORK/tune-samples.txt" env "${@:1:$#-1}" "$BIN" run "$file" --state "$WORK/tune-state/t.sqlite" --quiet
}
for run in $(seq 1 "$RUNS"); do
  variant "default" "$WORK/tune.json"
  variant "3 workers" "$WORK/tune-3w.json"
  variant "arenas=16" MALLOC_ARENA_MAX=16 "$WORK/tune.json"
  variant "threads" IMGPIPE_PIXEL_HELPERS=0 "$WORK/tune.json"
done
python3 - "$WORK/tune-samples.txt" "$COUNT" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    *label, wall, rss = line.split()
    rows[" ".join(label)].append((float(wall), int(rss)))
count = int(sys.argv[2])
base = statistics.median(w for w, _ in rows["default"])
print(f"| variant ({count} images) | wall (s) | images/s | peak RSS (MB) | vs default |")
print("|---|---|---|---|---|")
for label, values in rows.items():
    wall = statistics.median(w for w, _ in values)
    rss = statistics.median(r for _, r in values) / 1024
    print(f"| {label} | {wall:.2f} | {count / wall:.0f} | {rss:.0f} | {wall / base:.2f}× |")
PY
