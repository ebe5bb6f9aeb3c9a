#!/usr/bin/env bash
# Dedup's near-duplicate index at scale (part of `make bench`): `imgpipe-hashbench` inserts
# HASHES (1,000,000) random 64-bit perceptual hashes into `NearHashIndex`, answers QUERIES
# (200,000; half near copies of stored hashes, half new) at DISTANCE (8, dedup.similar's
# default; also 16, its largest), and checks CHECK (2,000) of the answers against a scan of
# every hash, which it times too. Prints the bench line of each distance; a disagreement
# with the scan fails the script.
# Then the same in a shared run's tables (PostgreSQL, a cluster of the bench's own):
# HASHES kept items, PG_QUERIES (2,000) lookups through `SharedDedup.near` (indexed hash
# bands) against PG_CHECK (20) scans of every row.
# Then a shared run with dedup (below).
# Knobs: HASHES, QUERIES, CHECK, DISTANCES ("8 16"), PG_QUERIES, PG_CHECK, NOISE_ITEMS,
# CHUNK, RUNS; PARTS ("index postgres shared") picks the parts.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
HASHES=${HASHES:-1000000}
QUERIES=${QUERIES:-200000}
CHECK=${CHECK:-2000}
swift build -c release --product imgpipe-hashbench >/dev/null
PARTS=${PARTS:-index postgres shared}
[[ " $PARTS " == *" index "* ]] && for distance in ${DISTANCES:-8 16}; do
  echo "dedup index: $(.build/release/imgpipe-hashbench "$HASHES" "$QUERIES" "$distance" "$CHECK")"
done

# A cluster of the bench's own, stopped and removed at the end.
start_postgres
[[ " $PARTS " == *" postgres "* ]] && for distance in ${DISTANCES:-8 16}; do
  fresh_db
  echo "dedup index: $(.build/release/imgpipe-hashbench postgres "$URL" \
    "$HASHES" "${PG_QUERIES:-2000}" "$distance" "${PG_CHECK:-20}")"
done

# A shared run with dedup: NOISE_ITEMS (1,000) distinct small pictures (white noise, 64×64 PNG:
# each item's own work is small, so the verdicts' round trips to the database show), fit
# 32, two `work` processes, chunks of CHUNK (100) items, dedup off and
# `{"exact": true, "similar": true}`, RUNS (3)
# rounds alternated, each on a database of its own. Prints the median wall time of each
# and their ratio.
[[ " $PARTS " == *" shared "* ]] || exit 0
swift build -c release --product imgpipe >/dev/null
NOISE=bench/corpus/noise-${NOISE_ITEMS:=1000}
if [ "$(ls "$NOISE" 2>/dev/null | wc -l)" -ne "$NOISE_ITEMS" ]; then
  rm -rf "$NOISE"; mkdir -p "$NOISE"
  # White noise from numpy (libvips' gaussnoise with consecutive seeds gives pictures
  # whose low frequencies, and so perceptual hashes, are alike), as PGM, then PNG.
  python3 - "$NOISE" "$NOISE_ITEMS" <<'PY'
import sys, numpy as np
folder, count = sys.argv[1], int(sys.argv[2])
for i in range(1, count + 1):
    pixels = np.random.default_rng(i).integers(0, 256, size=(64, 64), dtype=np.uint8)
    with open(f"{folder}/n-{i:05d}.pgm", "wb") as f:
        f.write(b"P5 64 64 255\n" + pixels.tobytes())
PY
  for pgm in "$NOISE"/*.pgm; do vips copy "$pgm" "${pgm%.pgm}.png" && rm "$pgm"; done
fi
SHARED_WORK=$(realpath "$WORK")/dedup-shared
rm -rf "$SHARED_WORK"; mkdir -p "$SHARED_WORK"
NOISE_PATH=$(realpath "$NOISE")
IMGPIPE=$(realpath "$BIN")
for kind in off on; do
  dedup=""; [ "$kind" = on ] && dedup='"dedup": {"exact": true, "similar": true},'
  cat > "$SHARED_WORK/$kind.json" <<JSON
{ "version": 1, "name": "dedup-$kind", "source": { "type": "directory", "path": "$NOISE_PATH" }, $dedup
  "filters": [ { "op": "fit", "width": 32, "height": 32 } ], "output": { "format": "png" },
  "sink": { "type": "directory", "path": "out-$kind" } }
JSON
done
: > "$SHARED_WORK/times.txt"
for run in $(seq 1 "${RUNS:-3}"); do
  for kind in off on; do
    fresh_db
    url=$URL
    rm -rf "$SHARED_WORK/out-$kind"
    start=$(date +%s.%N)
    (cd "$SHARED_WORK" && "$IMGPIPE" work "$kind.json" --state "$url" --chunk-size "${CHUNK:-100}" >/dev/null 2>w1.err) & one=$!
    (cd "$SHARED_WORK" && "$IMGPIPE" work "$kind.json" --state "$url" --chunk-size "${CHUNK:-100}" >/dev/null 2>w2.err) & two=$!
    wait "$one" "$two" || { echo "dedup: a shared run failed:" >&2; cat "$SHARED_WORK"/w?.err >&2; exit 1; }
    made=$(find "$SHARED_WORK/out-$kind" -type f | wc -l)
    echo "$kind $(echo "$(date +%s.%N) - $start" | bc) $made" >> "$SHARED_WORK/times.txt"
  done
done
python3 - "$SHARED_WORK/times.txt" "$NOISE_ITEMS" "${CHUNK:-100}" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
wall = {kind: statistics.median(float(r[1]) for r in rows if r[0] == kind) for kind in ("off", "on")}
made = {kind: [int(r[2]) for r in rows if r[0] == kind][-1] for kind in ("off", "on")}
print(f"dedup shared run: items={sys.argv[2]} workers=2 chunk={sys.argv[3]} off_s={wall['off']:.2f} on_s={wall['on']:.2f}",
      f"ratio={wall['on'] / wall['off']:.2f} made_off={made['off']} made_on={made['on']}",
      f"verdicts_per_s={int(sys.argv[2]) / wall['on']:.0f}")
PY
