#!/usr/bin/env bash
# WebDataset shards against a folder: the same 1,000 web JPEGs (640–1600 px; fit 256×256,
# JPEG q85) through a `directory` sink and through a `webdataset` sink (250 samples a
# shard), alternated ROUNDS times (3), each run on a new state file. Prints each run's
# wall time and peak memory, then the medians and the ratio shards/folder, and the bytes
# each wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${ROUNDS:-3}
[ -x "$BIN" ] || build_release
web_corpus
work_pipeline "$WORK/shards-folder.json" shards-folder "{\"type\": \"directory\", \"path\": \"../corpus/web-1000\"}" shards-out
sed 's|"sink": { "type": "directory", "path": "shards-out" }|"sink": { "type": "webdataset", "path": "shards-tar", "samplesPerShard": 250 }|' \
  "$WORK/shards-folder.json" > "$WORK/shards-tar.json"
grep -q webdataset "$WORK/shards-tar.json"

declare -A times
for round in $(seq 1 "$ROUNDS"); do
  for kind in folder tar; do
    [ "$kind" = folder ] && out=shards-out || out=shards-tar
    rm -rf "${WORK:?}/$out" "$WORK/shards-$kind.sqlite"*
    line=$(/usr/bin/time -f "%e %M" "$BIN" run "$WORK/shards-$kind.json" --state "$WORK/shards-$kind.sqlite" --quiet 2>&1 >/dev/null | tail -1)
    echo "shards $kind round $round: ${line% *} s, ${line#* } KiB peak"
    times[$kind]="${times[$kind]:-} ${line% *}"
  done
done
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
folder=$(median "${times[folder]}")
tar=$(median "${times[tar]}")
echo "shards median: folder $folder s, webdataset $tar s, ratio $(awk -v a="$tar" -v b="$folder" 'BEGIN {printf "%.3f", a/b}')"
echo "shards bytes: folder $(du -sb "$WORK/shards-out" | cut -f1), webdataset $(du -sb "$WORK/shards-tar" | cut -f1) in $(ls "$WORK/shards-tar" | grep -c '\.tar$') shards"
