#!/usr/bin/env bash
# bench/orc-stress.sh [BIN] — liborc's vector code under many images at once: ROUNDS (20)
# runs of a pipeline over 400 small JPEGs of varied sizes (80–890 px, so every image builds
# vector programs of its own shape), fit + blur + resize (reducev and convi compile liborc
# programs per image, and free them when the image goes), limits.workers 32 on 2 cores,
# vector code on (the default). It did not crash even without the lock (2026-11-22), so a
# clean run is no evidence either way: bench/orc-race.c is the reproduction. A round fails when imgpipe dies on a signal or exits non-zero,
# or when an output differs from a reference run made with one worker (same vector code,
# no concurrency): liborc writing two programs into the same code memory crashes, or
# silently computes with the other image's program. Not a test: it takes minutes and
# shows a race by repetition. Prints "crashes: C, wrong outputs: W, rounds: R".
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BIN=${1:-$BIN}
ROUNDS=${ROUNDS:-20}
WORKERS=${WORKERS:-32}
VARIED=${VARIED:-bench/corpus/varied-400}
[ "${1:-}" ] || build_release
[ -d "$VARIED" ] || make_corpus "$VARIED" 400 80 130 210 340 550 890
pipeline() { # name, workers
  cat > "$WORK/orc-$1.json" <<JSON
{ "version": 1, "name": "orc-stress", "source": { "type": "directory", "path": "../corpus/$(basename "$VARIED")" },
  "filters": [ { "op": "fit", "width": ${FIT:-96}, "height": ${FIT:-96} }, { "op": "blur", "sigma": 1.2 }, { "op": "resize", "scale": 0.6 } ],
  "output": { "format": "jpeg", "quality": 85 }, "sink": { "type": "directory", "path": "out-orc-$1" },
  "limits": { "workers": $2 } }
JSON
}
digest() { (cd "$1" && sha256sum -- * | sort -k2) > "$2"; }
pipeline ref 1
pipeline stress "$WORKERS"
rm -rf "$WORK/out-orc-ref" "$WORK/state-orc"
"$BIN" run "$WORK/orc-ref.json" --state "$WORK/state-orc/ref.sqlite" --quiet \
  || { echo "reference run failed" >&2; exit 2; }
digest "$WORK/out-orc-ref" "$WORK/orc-ref.sha"
crashes=0 wrong=0
for round in $(seq 1 "$ROUNDS"); do
  rm -rf "$WORK/out-orc-stress" "$WORK/state-orc/stress.sqlite"*
  "$BIN" run "$WORK/orc-stress.json" --state "$WORK/state-orc/stress.sqlite" --quiet \
    >"$WORK/orc-stdout.txt" 2>"$WORK/orc-stderr.txt"
  status=$?
  if [ "$status" -ne 0 ]; then
    crashes=$((crashes + 1))
    echo "round $round: exit $status$([ "$status" -gt 128 ] && echo " (signal $((status - 128)))")"
    continue
  fi
  digest "$WORK/out-orc-stress" "$WORK/orc-stress.sha"
  if ! cmp -s "$WORK/orc-ref.sha" "$WORK/orc-stress.sha"; then
    wrong=$((wrong + 1))
    echo "round $round: $(diff "$WORK/orc-ref.sha" "$WORK/orc-stress.sha" | grep -c '^>') outputs differ from the reference"
  fi
done
echo "crashes: $crashes, wrong outputs: $wrong, rounds: $ROUNDS"
[ "$crashes" -eq 0 ] && [ "$wrong" -eq 0 ]
