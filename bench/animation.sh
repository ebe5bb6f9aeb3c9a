#!/usr/bin/env bash
# Animations (issue "quality per byte", point 4): an animated GIF kept animated, its memory
# against its frame count. GIFs of 50 and 500 frames of 800×600 (a full first frame, then a
# 64×64 patch per frame over it, 40 ms each; written by the Python below, no libraries),
# fitted to 400 px, to WebP (q80) and to GIF; the floor is libvips' own `vipsthumbnail`
# of every frame (`[n=-1]`, --size 400) to WebP. Peak RSS is the largest process's (the pixel
# helper's or the run's; GNU time's %M). Frames streamed: the 500-frame peak should sit
# near the 50-frame one, not 10× it (all 500 frames held would be 960 MB).
# Lines "A label frames round seconds peak_kb" go to $OUT; a summary after.
#
# Knobs: ROUNDS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${ROUNDS:-3}
OUT=${ANIMATION_SAMPLES:-$WORK/animation-samples.txt}
: > "$OUT"
[ -x "$BIN" ] || build_release
dir=$WORK/animation
rm -rf "$dir"; mkdir -p "$dir"

# animated_gif PATH FRAMES WIDTH HEIGHT — uncompressed LZW (9-bit codes, a clear code every
# 254 literals), a 256-colour palette, do-not-dispose frames of 40 ms, looping for ever.
animated_gif() {
  python3 - "$@" <<'PY'
import struct, sys
def lzw(pixels):
    out, acc, bits = bytearray(), 0, 0
    def emit(code):
        nonlocal acc, bits
        acc |= code << bits
        bits += 9
        while bits >= 8:
            out.append(acc & 255)
            acc >>= 8
            bits -= 8
    emit(256)
    for i, p in enumerate(pixels):
        if i and i % 254 == 0:
            emit(256)
        emit(p)
    emit(257)
    if bits:
        out.append(acc & 255)
    blocks = bytearray([8])
    for i in range(0, len(out), 255):
        blocks += bytes([len(out[i:i + 255])]) + out[i:i + 255]
    return bytes(blocks + b"\0")
path, frames, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
palette = b"".join(bytes([i, i * 3 % 256, 255 - i]) for i in range(256))
gif = bytearray(b"GIF89a" + struct.pack("<HHBBB", w, h, 0xF7, 0, 0) + palette)
gif += b"\x21\xFF\x0BNETSCAPE2.0\x03\x01\0\0\0"
base = bytes((x // 4 + y // 4) % 256 for y in range(h) for x in range(w))
for n in range(frames):
    gif += b"\x21\xF9\x04\x04" + struct.pack("<H", 4) + b"\0\0"
    if n == 0:
        gif += b"\x2C" + struct.pack("<HHHHB", 0, 0, w, h, 0) + lzw(base)
    else:
        x, y = n * 7 % (w - 64), n * 5 % (h - 64)
        gif += b"\x2C" + struct.pack("<HHHHB", x, y, 64, 64, 0) + lzw(bytes([n * 37 % 256]) * 4096)
open(path, "wb").write(gif + b"\x3B")
PY
}

for frames in 50 500; do
  mkdir -p "$dir/in-$frames"
  animated_gif "$dir/in-$frames/a.gif" "$frames" 800 600
  for format in webp gif; do
    cat > "$dir/$format-$frames.json" <<JSON
{ "version": 1, "source": { "type": "directory", "path": "in-$frames" },
  "filters": [ { "op": "fit", "width": 400, "height": 400 } ],
  "output": { "format": "$format" $( [ "$format" = webp ] && echo ', "quality": 80' ) },
  "sink": { "type": "directory", "path": "out-$format-$frames" } }
JSON
  done
done

# measure LABEL FRAMES COMMAND… — one sample line.
measure() {
  local label=$1 frames=$2 round=$3
  shift 3
  /usr/bin/time -f "%e %M" -o "$dir/time.txt" "$@" >/dev/null 2>&1
  echo "A $label $frames $round $(cat "$dir/time.txt")" >> "$OUT"
}
for round in $(seq 1 "$ROUNDS"); do
  for frames in 50 500; do
    measure vipsthumbnail "$frames" "$round" vipsthumbnail "$dir/in-$frames/a.gif[n=-1]" --size 400 -o "$PWD/$dir/floor.webp[Q=80]"
    for format in webp gif; do
      rm -rf "$dir/$format-$frames.sqlite"* "$dir/out-$format-$frames"
      measure "imgpipe-$format" "$frames" "$round" \
        "$BIN" run "$dir/$format-$frames.json" --state "$dir/$format-$frames.sqlite" --quiet
    done
  done
done
pages=$(vipsheader -f n-pages "$dir/out-webp-500/a.webp")
[ "$pages" -ge 400 ] || { echo "animation: the 500-frame WebP has $pages frames" >&2; exit 1; }

python3 - "$OUT" "$pages" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
runs = {}
for _, label, frames, _, seconds, peak in rows:
    runs.setdefault((label, int(frames)), []).append((float(seconds), int(peak)))
print("Animations: 800×600 GIF fitted to 400 px, medians of %d rounds" % (len(rows) // 6))
print("| run | frames | seconds | peak RSS MB | peak ÷ 50 frames' |")
print("|---|---|---|---|---|")
for label in ["vipsthumbnail", "imgpipe-webp", "imgpipe-gif"]:
    base = statistics.median(p for _, p in runs[(label, 50)])
    for frames in (50, 500):
        seconds = statistics.median(s for s, _ in runs[(label, frames)])
        peak = statistics.median(p for _, p in runs[(label, frames)])
        print("| %s | %d | %.2f | %.0f | %.2f |" % (label, frames, seconds, peak / 1024, peak / base))
print("(the 500-frame WebP holds %s frames: WebP merges a frame that repeats the one before)" % sys.argv[2])
PY
