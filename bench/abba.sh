#!/usr/bin/env bash
# bench/abba.sh QUADS [BASE] — work B (the 1000 web JPEGs from nginx, cache off) against
# work A (the same images from a folder), measured in quads A B B A: each quad's B ÷ A is
# the sum of its two B runs over the sum of its two A runs, so a steady drift of the
# machine's speed during the quad cancels. With BASE (another imgpipe binary), quads of
# this tree's release build and of BASE alternate, each binary's B against its own A.
# Prints each quad's ratio (wall, and CPU: user + system) and their medians.
#
#   bench/abba.sh 12                      # this tree
#   bench/abba.sh 8 /tmp/imgpipe-before   # this tree against an earlier build
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
QUADS=${1:?usage: bench/abba.sh QUADS [BASE]}
BASE=${2:-}
OUT=$WORK/abba-samples.txt
: > "$OUT"

build_release
web_corpus
work_pipeline "$WORK/abba-a.json" bench-a '{ "type": "directory", "path": "../corpus/web-1000" }' out-abba-a
start_origin "$WEB_CORPUS"
ls "$WEB_CORPUS" | sed "s|^|http://127.0.0.1:$ORIGIN_PORT/images/|" > "$WORK/abba-urls.txt"
work_pipeline "$WORK/abba-b.json" bench-b '{ "type": "url-list", "path": "abba-urls.txt", "cache": false }' out-abba-b
sides=head; [ -n "$BASE" ] && sides="head base"
for quad in $(seq 1 "$QUADS"); do
  for side in $sides; do
    bin=$BIN; [ "$side" = base ] && bin=$BASE
    for kind in a b b a; do
      aside "$WORK/out-abba-$kind" "$WORK/state-abba"
      /usr/bin/time -f "$quad $side $kind %e %U %S" -a -o "$OUT" \
        "$bin" run "$WORK/abba-$kind.json" --state "$WORK/state-abba/s.sqlite" --quiet
      [ "$(count_files "$WORK/out-abba-$kind")" -eq 1000 ] || { echo "$side $kind: not 1000 outputs" >&2; exit 1; }
    done
  done
done
stop_origin
clear_aside
python3 - "$OUT" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    quad, side, kind, wall, user, system = line.split()
    runs[(int(quad), side)][kind].append((float(wall), float(user) + float(system)))
for side in ("head", "base"):
    quads = sorted(key for key in runs if key[1] == side)
    if not quads:
        continue
    for what, i in (("wall", 0), ("cpu", 1)):
        ratios = [sum(r[i] for r in runs[q]["b"]) / sum(r[i] for r in runs[q]["a"]) for q in quads]
        print(f"{side} B ÷ A {what}: " + " ".join(f"{r:.3f}" for r in ratios) + f"  median {statistics.median(ratios):.3f}")
PY
