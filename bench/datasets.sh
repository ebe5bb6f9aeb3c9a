#!/usr/bin/env bash
# Datasets: a URL table to WebDataset shards, imgpipe against img2dataset, and a table of a
# million rows listed.
#
#   Shards: the 1,000 web JPEGs of work A served by nginx on loopback, as a Parquet table
#     (url, key, caption; written by pyarrow) → fit 256×256, JPEG q85 → shards of 250
#     samples. imgpipe (`table` source, `webdataset` sink) against img2dataset's webdataset
#     writer (2 processes × 32 threads, keep_ratio, resize_only_if_bigger, the same shard
#     size), alternated ROUNDS times (3), each on a new state file and folder. Wall time and
#     peak RSS (of the largest process, as GNU time reports it for both), medians, and the
#     ratio imgpipe ÷ img2dataset; and the floor of the same pixel work, vipsthumbnail on 2
#     processes over the same files on disk (no network, no shards).
#   Listing: a table of ROWS (1,000,000) rows (url, key, caption, a kept int64 column) as
#     Parquet and as gzipped CSV, and its URLs alone as a plain URL list (the baseline),
#     each through `imgpipe plan` (every row read and planned as a new item, nothing
#     fetched): seconds, rows/s and peak RSS, median of ROUNDS.
#   BINS: several builds of imgpipe (their paths, space-separated) alternated in the shards
#     part, each with its own median and ratio (default: $BIN alone).
# Knobs: ROUNDS, ROWS, BINS, SKIP_PEERS=1 (no img2dataset), SKIP_LISTING=1 (no table of ROWS).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
trap '[ -z "${ORIGIN_PID:-}" ] || stop_origin; clear_aside' EXIT
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-1000000}
BINS=${BINS:-$BIN}
[ -x "$BIN" ] || build_release
web_corpus
VENV=$WORK/venv
if [ -z "${SKIP_PEERS:-}" ] && [ ! -x "$VENV/bin/img2dataset" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q img2dataset
fi
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# measure LABEL COMMAND… — runs COMMAND; sets SECONDS_TAKEN and PEAK_KIB, prints a line.
measure() {
  local label=$1 line; shift
  line=$(/usr/bin/time -f "%e %M" "$@" 2>&1 >/dev/null | tail -1)
  SECONDS_TAKEN=${line% *}
  PEAK_KIB=${line#* }
  echo "datasets $label: $SECONDS_TAKEN s, $PEAK_KIB KiB peak"
}

start_origin "$WEB_CORPUS"
python3 - "$WEB_CORPUS" "$ORIGIN_PORT" "$WORK/web.parquet" <<'PY'
import os, sys, pyarrow as pa, pyarrow.parquet as pq
names = sorted(os.listdir(sys.argv[1]))
pq.write_table(pa.table({
    "url": [f"http://127.0.0.1:{sys.argv[2]}/images/{n}" for n in names],
    "key": [f"{i:06d}" for i in range(len(names))],
    "caption": [f"web image {n}" for n in names],
}), sys.argv[3])
PY
cat > "$WORK/datasets.json" <<JSON
{ "version": 1, "name": "bench-datasets",
  "source": { "type": "table", "path": "web.parquet", "columns": { "url": "url", "key": "key", "caption": "caption" },
              "cache": false },
  "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85 },
  "sink": { "type": "webdataset", "path": "datasets-imgpipe", "samplesPerShard": 250 } }
JSON

declare -A times peaks
read -r -a builds <<<"$BINS"
for round in $(seq 1 "$ROUNDS"); do
  # Each round starts with another build (none is always first or last), and the files of
  # the run before are moved aside, not deleted: on a journal-less ext4 a run pays for the
  # inodes freed just before it (`aside`).
  for index in "${!builds[@]}"; do
    bin=${builds[$(( (index + round - 1) % ${#builds[@]} ))]}
    aside "$WORK/datasets-imgpipe" "$WORK/datasets.sqlite"* "$WORK/datasets.work"
    measure "imgpipe $bin round $round" "$bin" run "$WORK/datasets.json" --state "$WORK/datasets.sqlite" --quiet
    times[$bin]="${times[$bin]:-} $SECONDS_TAKEN"; peaks[$bin]="${peaks[$bin]:-} $PEAK_KIB"
    [ "$(ls "$WORK/datasets-imgpipe" | grep -c '^[0-9]*\.tar$')" -eq 4 ] || { echo "imgpipe wrote no 4 shards" >&2; exit 1; }
  done
  if [ -z "${SKIP_PEERS:-}" ]; then
    aside "$WORK/datasets-i2d"
    measure "img2dataset round $round" "$VENV/bin/img2dataset" --url_list "$WORK/web.parquet" --input_format parquet \
      --url_col url --caption_col caption --output_folder "$WORK/datasets-i2d" --output_format webdataset \
      --number_sample_per_shard 250 --processes_count 2 --thread_count 32 --image_size 256 --resize_mode keep_ratio \
      --resize_only_if_bigger True --encode_quality 85 --enable_wandb False
    times[i2d]="${times[i2d]:-} $SECONDS_TAKEN"; peaks[i2d]="${peaks[i2d]:-} $PEAK_KIB"
    [ "$(ls "$WORK/datasets-i2d" | grep -c '\.tar$')" -eq 4 ] || { echo "img2dataset wrote no 4 shards" >&2; exit 1; }
  fi
  aside "$WORK/datasets-floor"; mkdir -p "$WORK/datasets-floor"
  measure "vipsthumbnail round $round" sh -c "ls '$WEB_CORPUS'/*.jpg | xargs -P 2 -n 25 vipsthumbnail --size '256x256>' -o '$PWD/$WORK/datasets-floor/%s.jpg[Q=85,strip]'"
  times[floor]="${times[floor]:-} $SECONDS_TAKEN"
done
stop_origin
floor=$(median "${times[floor]}")
if [ -z "${SKIP_PEERS:-}" ]; then
  i2d=$(median "${times[i2d]}")
  echo "datasets shards median: img2dataset $i2d s, $(median "${peaks[i2d]}") KiB peak"
fi
for bin in $BINS; do
  imgpipe=$(median "${times[$bin]}")
  label=imgpipe
  if [ "$BINS" != "$BIN" ]; then label="imgpipe $bin"; fi
  echo "datasets shards median: $label $imgpipe s, $(median "${peaks[$bin]}") KiB peak;" \
    "floor (vipsthumbnail) $floor s, ratio imgpipe/floor $(awk -v a="$imgpipe" -v b="$floor" 'BEGIN {printf "%.3f", a/b}')"
  if [ -z "${SKIP_PEERS:-}" ]; then
    echo "datasets shards median: $label ratio imgpipe/img2dataset $(awk -v a="$imgpipe" -v b="$i2d" 'BEGIN {printf "%.3f", a/b}')"
  fi
done
if [ -n "${SKIP_LISTING:-}" ]; then exit 0; fi

# A table of ROWS rows, listed.
python3 - "$ROWS" "$WORK/rows.parquet" "$WORK/rows.csv.gz" "$WORK/rows.txt" <<'PY'
import csv, gzip, sys, pyarrow as pa, pyarrow.parquet as pq
n = int(sys.argv[1])
table = pa.table({
    "url": [f"http://127.0.0.1:9/images/{i % 5000}/photo-{i}.jpg" for i in range(n)],
    "key": [f"{i:09d}" for i in range(n)],
    "caption": [f"a caption for row {i}, with words" for i in range(n)],
    "width": pa.array([(i * 7) % 4000 for i in range(n)], pa.int64()),
})
pq.write_table(table, sys.argv[2])
with gzip.open(sys.argv[3], "wt", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(table.column_names)
    for row in zip(*[table.column(c).to_pylist() for c in table.column_names]):
        writer.writerow(row)
open(sys.argv[4], "w").write("\n".join(table.column("url").to_pylist()) + "\n")
PY
for format in parquet csv.gz txt; do
  if [ "$format" = txt ]; then
    source='{ "type": "url-list", "path": "rows.txt" }'
  else
    source="{ \"type\": \"table\", \"path\": \"rows.$format\",
              \"columns\": { \"url\": \"url\", \"key\": \"key\", \"caption\": \"caption\" }, \"keep\": [\"width\"] }"
  fi
  cat > "$WORK/rows-$format.json" <<JSON
{ "version": 1, "name": "bench-rows-$format", "source": $source, "sink": { "type": "directory", "path": "rows-out" } }
JSON
  list=""; peak=""
  for round in $(seq 1 "$ROUNDS"); do
    rm -f "$WORK/rows-$format.sqlite"*
    measure "list $format round $round" "$BIN" plan "$WORK/rows-$format.json" --state "$WORK/rows-$format.sqlite"
    list="$list $SECONDS_TAKEN"; peak="$peak $PEAK_KIB"
  done
  seconds=$(median "$list")
  echo "datasets listing $format median: $ROWS rows in $seconds s," \
    "$(awk -v n="$ROWS" -v s="$seconds" 'BEGIN {printf "%d", n/s}') rows/s, $(median "$peak") KiB peak"
done
