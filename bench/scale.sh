#!/usr/bin/env bash
# The scale section of `make bench` (issue "ten million items on one machine"): every
# command on a state file of N items, N = 10k, 100k, 1M by default. The feed is a folder
# of N hard links to 1×1 PNGs (50,000 links each) (made by a script, cached in bench/work/scale-N), the
# pipeline fits to 256×256 and writes JPEGs to a folder. For each N, timed with
# /usr/bin/time: the run, `status --json`, `resume` of the finished run, `export` (JSONL,
# CSV and Parquet), `plan`, a no-op `run --incremental` (which finds nothing changed and makes no run),
# one with a file more (a run that takes every other item over), and the floors of the goals: a listing of the
# folder with each file's size and time (`find -printf`), and one pass over the state's
# items, outputs and deliveries (Python's sqlite3). The state file's size after the run
# and after the no-op incremental run. Lines "K label N wall_s peak_rss_kb" (sizes: "K state
# after-run N MB 0") go to $WORK/scale-samples.txt; report.py makes the table.
#
# Knobs: SCALE_SIZES ("10000 100000 1000000"); SCALE_MAX (sizes above it are left out:
# the 1M run alone takes about 20 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SIZES=${SCALE_SIZES:-"10000 100000 1000000"}
MAX=${SCALE_MAX:-1000000}
OUT=${SCALE_SAMPLES:-$WORK/scale-samples.txt}
: > "$OUT"
[ -x "$BIN" ] || build_release

tiny_folder() { # N: bench/work/scale-N/feed, N links to one 1×1 PNG (kept when complete)
  python3 - "$WORK/scale-$1/feed" "$1" <<'PY'
import os, struct, sys, zlib
folder, n = sys.argv[1], int(sys.argv[2])
os.makedirs(folder, exist_ok=True)
if len(os.listdir(folder)) == n:
    sys.exit(0)
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(b"\x00\x80\x40\x20")) + chunk(b"IEND", b""))
# A file system allows so many links to one file (ext4: 65000): one origin per 50,000.
def origin(i):
    path = os.path.join(os.path.dirname(folder), "tiny-%d.png" % (i // 50000))
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(png)
    return path
for i in range(n):
    path = os.path.join(folder, "i%07d.png" % i)
    if not os.path.exists(path):
        os.link(origin(i), path)
PY
}

state_mb() { python3 -c "import os,sys; print(sum(os.path.getsize(p) for p in sys.argv[1:] if os.path.exists(p)) / 1e6)" "$1" "$1-wal"; }

for n in $SIZES; do
  [ "$n" -le "$MAX" ] || continue
  dir=$WORK/scale-$n
  tiny_folder "$n"
  rm -rf "$dir/out" "$dir/state" "$dir/export.jsonl" "$dir/export.csv" "$dir/export.parquet"
  work_pipeline "$dir/p.json" "scale-$n" '{ "type": "directory", "path": "feed" }' out
  state=$dir/state/s.sqlite
  timed "K run $n" "$OUT" "$BIN" run "$dir/p.json" --state "$state" --quiet
  echo "K state after-run $n $(state_mb "$state") 0" >> "$OUT"
  timed "K status $n" "$OUT" "$BIN" status "$dir/p.json" --state "$state" --json
  timed "K resume $n" "$OUT" "$BIN" resume "$dir/p.json" --state "$state" --quiet
  timed "K export-jsonl $n" "$OUT" "$BIN" export "$dir/p.json" --state "$state" --format jsonl -o "$dir/export.jsonl"
  timed "K export-csv $n" "$OUT" "$BIN" export "$dir/p.json" --state "$state" --format csv -o "$dir/export.csv"
  timed "K export-parquet $n" "$OUT" "$BIN" export "$dir/p.json" --state "$state" --format parquet -o "$dir/export.parquet"
  timed "K plan $n" "$OUT" "$BIN" plan "$dir/p.json" --state "$state"
  timed "K incremental $n" "$OUT" "$BIN" run "$dir/p.json" --state "$state" --incremental --quiet
  echo "K state after-incremental $n $(state_mb "$state") 0" >> "$OUT"
  ln "$dir/feed/i0000000.png" "$dir/feed/zz-one-more.png"
  timed "K incremental-one-more $n" "$OUT" "$BIN" run "$dir/p.json" --state "$state" --incremental --quiet
  rm "$dir/feed/zz-one-more.png"
  timed "K listing $n" "$OUT" find "$dir/feed" -type f -printf '%s %T@ %p\n'
  timed "K state-pass $n" "$OUT" python3 -c "
import sqlite3, sys
db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)
for table in ('item', 'output', 'delivery'):
    for row in db.execute('SELECT * FROM ' + table): pass
" "$state"
done
cat "$OUT"
