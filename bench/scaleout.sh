#!/usr/bin/env bash
# Shared runs through PostgreSQL, measured (not a test). From the repository root:
#   bench/scaleout.sh            # ITEMS=1000000 KS="1 2 4 8" IMAGES=600 RUNS=3 (KS="": no store part)
# 1. The store alone (imgpipe-scaleout): a lister records ITEMS items in pages of 500, then
#    K simulated workers (threads, a connection each, no pixel work) claim every chunk and
#    record every item done, once with claims cut to the work left (as `imgpipe work`
#    claims) and once with whole chunks (the claim before, as a baseline in the same run); lister items/s, claims/s, item transitions/s, and the median
#    time of `status` at ITEMS items. A local server with fsync and synchronous_commit on.
# 2. The real pipeline on IMAGES web-sized JPEGs (fit 256, JPEG q85, a folder sink): one
#    process with 2 pixel workers (`run -j 2`) against two `work -j 1` processes sharing a
#    run with the default chunks of 500, alternating, RUNS rounds: medians and their ratio
#    (the cost of coordination, and of the tail: 600 items are one chunk of 500 and one of
#    100, which claims cut to the work left share out).
# 3. Four `work` processes, one killed with kill -9 a second in: wall time, and that every
#    image is done once.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ITEMS=${ITEMS:-1000000}
KS=${KS-"1 2 4 8"}  # KS="" leaves the store part out
IMAGES=${IMAGES:-600}
RUNS=${RUNS:-3}
OUT=$WORK/scaleout
rm -rf "$OUT"; mkdir -p "$OUT"

echo "scaleout: building (release)"
build_release
swift build -c release --product imgpipe-scaleout >/dev/null
SCALEOUT=.build/release/imgpipe-scaleout

# A cluster of the bench's own, fsync on, stopped at the end.
start_postgres

echo "scaleout: the store alone, $ITEMS items"
for k in $KS; do
  for claim in whole share; do
    fresh_db
    "$SCALEOUT" "$URL" "$ITEMS" "$k" 500 "$claim" | tee -a "$OUT/store.jsonl"
  done
done

echo "scaleout: the real pipeline, $IMAGES images"
web_corpus
corpus_subset "$WEB_CORPUS" "$IMAGES" "$OUT/in"
cat > "$OUT/pipe.json" <<JSON
{"version": 1, "name": "scaleout", "source": {"type": "directory", "path": "in"},
 "filters": [{"op": "fit", "width": 256, "height": 256}],
 "output": {"format": "jpeg", "quality": 85, "name": "{stem}.jpg"},
 "sink": {"type": "directory", "path": "out"}}
JSON
BINABS=$(pwd)/$BIN
one_process() {
  rm -rf "$OUT/out" "$OUT/.imgpipe"
  local start end; start=$(date +%s.%N)
  (cd "$OUT" && "$BINABS" run pipe.json -j 2 --quiet)
  end=$(date +%s.%N); echo "one $(echo "$end - $start" | bc)" >> "$OUT/pipeline.txt"
}
two_workers() {
  rm -rf "$OUT/out" "$OUT/.imgpipe"; fresh_db
  local start end; start=$(date +%s.%N)
  (cd "$OUT" && { "$BINABS" work pipe.json --state "$URL" -j 1 --quiet & "$BINABS" work pipe.json --state "$URL" -j 1 --quiet & wait; })
  end=$(date +%s.%N); echo "two $(echo "$end - $start" | bc)" >> "$OUT/pipeline.txt"
  [ "$(count_files "$OUT/out")" -eq "$IMAGES" ] || { echo "two workers wrote $(count_files "$OUT/out") files" >&2; exit 1; }
}
for _ in $(seq 1 "$RUNS"); do one_process; two_workers; done

echo "scaleout: four workers, one killed"
rm -rf "$OUT/out" "$OUT/.imgpipe"; fresh_db
start=$(date +%s.%N)
pids=()
for _ in 1 2 3 4; do (cd "$OUT" && exec "$BINABS" work pipe.json --state "$URL" -j 1 --quiet --chunk-size 25 --lease 5 --heartbeat 1) & pids+=($!); done
sleep 1; kill -9 "${pids[0]}"
for pid in "${pids[@]:1}"; do wait "$pid"; done
end=$(date +%s.%N)
done_count=$(psql -tA -h 127.0.0.1 -p "$PGPORT" -U imgpipe "b$PGDB" -c "SELECT count(*) FROM imgpipe_item WHERE status = 'done'")
echo "killed $(echo "$end - $start" | bc) $done_count $(count_files "$OUT/out")" | tee "$OUT/killed.txt"

python3 - "$OUT" "$ITEMS" "$IMAGES" <<'PY'
import json, statistics, sys
out, items, images = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(f"\n### Shared runs (bench/scaleout.sh)\n")
import os
if os.path.exists(f"{out}/store.jsonl"):
    print(f"Store alone, {items:,} items, chunks of 500, fsync on:\n")
    print("| workers | claim | lister items/s | claims made | claims/s | item transitions/s | status at {:,} items |".format(items))
    print("|---|---|---|---|---|---|---|")
    for line in open(f"{out}/store.jsonl"):
        r = json.loads(line)
        print(f"| {r['workers']} | {r.get('claim', 'whole')} | {r['listerItemsPerSecond']:,} | {r.get('claims', '')} | {r['claimsPerSecond']:,} | {r['transitionsPerSecond']:,} | {r['statusSeconds']} s |")
if os.path.exists(f"{out}/pipeline.txt"):  # RUNS=0 leaves the pipeline part out
    times = {"one": [], "two": []}
    for line in open(f"{out}/pipeline.txt"):
        kind, seconds = line.split()
        times[kind].append(float(seconds))
    one, two = statistics.median(times["one"]), statistics.median(times["two"])
    rounds = ", ".join(f"{b / a:.2f}" for a, b in zip(times["one"], times["two"]))
    print(f"\nReal pipeline, {images} images: 1 process × 2 pixel workers {one:.2f} s, "
          f"2 `work` processes × 1 pixel worker {two:.2f} s: ratio {two / one:.2f} (goal ≤ 1.15); "
          f"medians of {len(times['one'])} (rounds {rounds}).")
wall, done, files = open(f"{out}/killed.txt").read().split()[1:]
print(f"Four workers, one killed with kill -9 after 1 s: {float(wall):.2f} s, {done} of {images} items done, {files} files.")
PY
