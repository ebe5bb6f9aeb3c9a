#!/usr/bin/env bash
# `make bench`: the benchmark of issue "at the libvips floor, ahead of img2dataset".
# Release build; no network but loopback. Writes bench/RESULTS.md.
#
#   Work A, local: 1000 web-sized JPEGs (640–1600 px wide, made from samples/, cached in
#     bench/corpus/web-1000) → fit 256×256 → JPEG q85 → a folder; imgpipe against
#     vipsthumbnail --size '256x256>' on 2 processes (the floor) and mogrify on 2 processes.
#   Work B, feed: the same images as a URL list from a loopback origin (nginx; and again from
#     bench/server.py, the origin of earlier runs),
#     cache off; imgpipe against img2dataset (PyPI, in bench/work/venv; 2 processes × 32
#     threads, keep_ratio, resize_only_if_bigger, 256, quality 85) on the same URLs.
#   Each RUNS (3) times, alternating; works A and B twice a round, back to back in a quad
#     A B B A; medians, ratios to the floor/peer of the same run, and B ÷ A of each quad.
#   Scale: peak RSS at 1k and 20k items (a generated URL list of small images from nginx;
#     20k again from bench/server.py), and the time of `imgpipe resume` on the finished
#     20k-item run; items/s against the floor of the same small images, vipsthumbnail on 2
#     processes over 2000 local copies, measured just before and just after each run.
#   Vector off: work A again with VIPS_NOVECTOR=1 (libvips' own switch: liborc's vector code
#     off; it is on by default, as in vipsthumbnail).
#   Slow origin: bench/slow-origin.sh (96 one-second answers, downloads 16, uploads 8).
#   Issue 13's targets are checked against the runs of this same session (report.py).
#
# Scale section: bench/scale.sh (SCALE_SIZES, SCALE_MAX). Shards: bench/shards.sh and
# bench/datasets.sh (a Parquet table to shards against img2dataset; a million rows listed).
# Quality per byte: bench/quality.sh (an SSIM target against a fixed quality) and
# bench/animation.sh (an animated GIF's memory against its frame count). Dedup:
# bench/dedup.sh (the near-duplicate index at a million hashes, against a scan).
# Knobs: RUNS, SCALE (20000), SKIP_PEERS=1 (no mogrify, no img2dataset; the vipsthumbnail
# floor always runs).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
# A run that fails stops the bench (set -e): its origins stop with it.
trap '[ -z "${SERVER_PID:-}" ] || stop_server; [ -z "${ORIGIN_PID:-}" ] || stop_origin' EXIT
RUNS=${RUNS:-3}
SCALE=${SCALE:-20000}
WEB=$WEB_CORPUS
TINY=bench/corpus/tiny-40
SAMPLES="$WORK/run-samples.txt"

build_release
web_corpus
make_corpus "$TINY" 40 320
[ -n "${SKIP_PEERS:-}" ] || command -v mogrify >/dev/null || { echo "mogrify missing: make bench-deps" >&2; exit 2; }
VENV=$WORK/venv
if [ -z "${SKIP_PEERS:-}" ] && [ ! -x "$VENV/bin/img2dataset" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q img2dataset
fi
: > "$SAMPLES"

pipeline_a() { work_pipeline "$WORK/a.json" bench-a '{ "type": "directory", "path": "../corpus/web-1000" }' out-a; }
pipeline_b() { # url list file, out folder, pipeline file [name template]
  work_pipeline "$3" bench-b "{ \"type\": \"url-list\", \"path\": \"$(basename "$1")\", \"cache\": false }" "$2" "${4:-}"
}
check() { [ "$(count_files "$1")" -ge "$2" ] || { echo "$1: $(count_files "$1") files, expected $2" >&2; exit 1; }; }
run_work() { # a or b: work A or B (nginx origin), timed as "A imgpipe" or "B imgpipe"
  aside "$WORK/out-$1" "$WORK/state-$1"
  timed "${1^^} imgpipe" "$SAMPLES" "$BIN" run "$WORK/$1.json" --state "$WORK/state-$1/$1.sqlite" --quiet
  check "$WORK/out-$1" 1000
}

pipeline_a
start_origin "$WEB"
ls "$WEB" | sed "s|^|http://127.0.0.1:$ORIGIN_PORT/images/|" > "$WORK/urls.txt"
pipeline_b "$WORK/urls.txt" out-b "$WORK/b.json"
# The same list from bench/server.py, as every B run before nginx was the origin.
start_server "$WEB"
ls "$WEB" | sed "s|^|http://127.0.0.1:$PORT/images/|" > "$WORK/urls-python.txt"
pipeline_b "$WORK/urls-python.txt" out-b "$WORK/b-python.json"
for run in $(seq 1 "$RUNS"); do
  # Works A and B back to back in a quad A B B A (as bench/abba.sh): the round's B ÷ A is
  # (B + B) ÷ (A + A), in which a steady drift of the machine's speed during the quad cancels.
  run_work a; run_work b; run_work b; run_work a
  aside "$WORK/out-vips"; mkdir -p "$WORK/out-vips"
  timed "A vipsthumbnail" "$SAMPLES" sh -c "ls '$WEB'/*.jpg | xargs -P 2 -n 25 vipsthumbnail --size '256x256>' -o '$PWD/$WORK/out-vips/%s.jpg[Q=85,strip]'"
  check "$WORK/out-vips" 1000
  aside "$WORK/out-a" "$WORK/state-a"
  timed "A imgpipe scalar" "$SAMPLES" env VIPS_NOVECTOR=1 "$BIN" run "$WORK/a.json" --state "$WORK/state-a/a.sqlite" --quiet
  check "$WORK/out-a" 1000
  if [ -z "${SKIP_PEERS:-}" ]; then
    aside "$WORK/out-magick"; mkdir -p "$WORK/out-magick"
    timed "A mogrify" "$SAMPLES" sh -c "ls '$WEB'/*.jpg | xargs -P 2 -n 25 mogrify -path '$WORK/out-magick' -resize '256x256>' -quality 85 -strip"
    check "$WORK/out-magick" 1000
  fi
  aside "$WORK/out-b" "$WORK/state-b"
  timed "B imgpipe python" "$SAMPLES" "$BIN" run "$WORK/b-python.json" --state "$WORK/state-b/b.sqlite" --quiet
  check "$WORK/out-b" 1000
  if [ -z "${SKIP_PEERS:-}" ]; then
    aside "$WORK/out-i2d"
    timed "B img2dataset" "$SAMPLES" "$VENV/bin/img2dataset" --url_list "$WORK/urls.txt" --input_format txt \
      --output_folder "$WORK/out-i2d" --output_format files --processes_count 2 --thread_count 32 --image_size 256 \
      --resize_mode keep_ratio --resize_only_if_bigger True --encode_quality 85 --enable_wandb False
    check "$WORK/out-i2d" 1000
  fi
done
stop_server
stop_origin

# Scale: the same small image SCALE times over loopback, from nginx (as work B; the origin's
# CPU is the machine's too, and bench/server.py's is about five times nginx's for these
# small images), then SCALE again from bench/server.py (the origin of the runs before the
# fourteenth session). The floor of these small images (vipsthumbnail on 2 processes over
# 2000 local copies, no network, no state) runs before, between and after them, so that each
# scale run has one measured just before and just after it: this machine's speed drifts by
# 30 % within a bench.
rm -rf "$WORK/tiny-local"; mkdir -p "$WORK/tiny-local"
tiny=("$TINY"/*.jpg)
for i in $(seq 0 1999); do ln "${tiny[$(( i % ${#tiny[@]} ))]}" "$WORK/tiny-local/t$i.jpg"; done
tiny_floor() {
  aside "$WORK/out-tiny-vips"; mkdir -p "$WORK/out-tiny-vips"
  timed "S vipsthumbnail 2000" "$SAMPLES" sh -c "ls '$WORK/tiny-local'/*.jpg | xargs -P 2 -n 25 vipsthumbnail --size '256x256>' -o '$PWD/$WORK/out-tiny-vips/%s.jpg[Q=85,strip]'"
  check "$WORK/out-tiny-vips" 2000
}
scale_run() { # label, items, origin port
  url_list "$TINY" "$2" "$WORK/scale-$2.txt" "$3"
  pipeline_b "$WORK/scale-$2.txt" "out-scale-$2" "$WORK/scale-$2.json" "{index}.{ext}"
  aside "$WORK/out-scale-$2" "$WORK/state-scale-$2"
  timed "$1 $2" "$SAMPLES" "$BIN" run "$WORK/scale-$2.json" --state "$WORK/state-scale-$2/s.sqlite" --quiet
  check "$WORK/out-scale-$2" "$2"
}
start_origin "$TINY"
tiny_floor
for n in 1000 "$SCALE"; do
  scale_run "S run" "$n" "$ORIGIN_PORT"
  for run in $(seq 1 "$RUNS"); do
    timed "S resume $n" "$SAMPLES" "$BIN" resume "$WORK/scale-$n.json" --state "$WORK/state-scale-$n/s.sqlite" --quiet
  done
  tiny_floor
done
stop_origin
start_server "$TINY"
scale_run "S run python" "$SCALE" "$PORT"
stop_server
tiny_floor

# Slow origin: its own script, its samples carried over ("O download head …").
RUNS=$RUNS bench/slow-origin.sh
sed 's/^/O /' "$WORK/slow-samples.txt" >> "$SAMPLES"

# Scale: every command on state files of 10k, 100k and 1M items (SCALE_MAX caps them).
SCALE_SAMPLES="$WORK/scale-samples.txt" bench/scale.sh >/dev/null
cat "$WORK/scale-samples.txt" >> "$SAMPLES"

# Quality per byte: an SSIM target against the fixed quality that meets it for 95 %.
ROUNDS=$RUNS bench/quality.sh | tee "$WORK/quality.txt"
# Animations: 50 and 500 frames of 800×600 to WebP and GIF, against vipsthumbnail.
ROUNDS=$RUNS bench/animation.sh | tee "$WORK/animation.txt"
# Dedup: the near-duplicate index at a million hashes, against a scan of every hash.
bench/dedup.sh | tee "$WORK/dedup.txt"

# WebDataset shards against a folder, the same images: bench/shards.sh prints its own lines.
ROUNDS=$RUNS bench/shards.sh | tee "$WORK/shards.txt"
# A URL table to shards against img2dataset, and a million-row table listed: the same.
ROUNDS=$RUNS SKIP_PEERS=${SKIP_PEERS:-} bench/datasets.sh | tee "$WORK/datasets.txt"

clear_aside
python3 bench/report.py "$SAMPLES" "$RUNS" "$SCALE" "$(cpu_name)" "$(pkg-config --modversion vips)" > bench/RESULTS.md.new
python3 - <<'PY'
# Keep what is written by hand below the new table: every section with a date in its heading
# and the tuning log, from the first of them on.
import os, re
new = open("bench/RESULTS.md.new").read()
old = open("bench/RESULTS.md").read() if os.path.exists("bench/RESULTS.md") else ""
kept = re.search(r"^## (Tuning log|.*\d{4}-\d{2}-\d{2})", old, re.M)
log = old[kept.start():] if kept else ""
open("bench/RESULTS.md", "w").write(new + ("\n" + log if log else ""))
os.remove("bench/RESULTS.md.new")
PY
cat bench/RESULTS.md
