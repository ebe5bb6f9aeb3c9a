#!/usr/bin/env bash
# Dedup's near-duplicate index at scale (part of `make bench`): `imgpipe-hashbench` inserts
# HASHES (1,000,000) random 64-bit perceptual hashes into `NearHashIndex`, answers QUERIES
# (200,000; half near copies of stored hashes, half new) at DISTANCE (8, dedup.similar's
# default; also 16, its largest), and checks CHECK (2,000) of the answers against a scan of
# every hash, which it times too. Prints the bench line of each distance; a disagreement
# with the scan fails the script.
# Knobs: HASHES, QUERIES, CHECK, DISTANCES ("8 16").
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
HASHES=${HASHES:-1000000}
QUERIES=${QUERIES:-200000}
CHECK=${CHECK:-2000}
swift build -c release --product imgpipe-hashbench >/dev/null
for distance in ${DISTANCES:-8 16}; do
  echo "dedup index: $(.build/release/imgpipe-hashbench "$HASHES" "$QUERIES" "$distance" "$CHECK")"
done
