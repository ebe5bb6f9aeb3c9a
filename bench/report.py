#!/usr/bin/env python3
"""Turns bench/run.sh's samples ("label wall_s peak_rss_kb" lines) into RESULTS.md."""
import collections, datetime, statistics, sys

samples, runs, scale, cpu, vips = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = collections.defaultdict(list)
for line in open(samples):
    *label, wall, rss = line.split()
    rows[" ".join(label)].append((float(wall), int(rss)))

def median(label, index=0):
    values = [v[index] for v in rows.get(label, [])]
    return statistics.median(values) if values else None

print("# Benchmark results\n")
print(f"Made by `make bench` (bench/run.sh) on {datetime.date.today()}: {cpu}, 2 cores, libvips {vips}, release build.")
print(f"Medians of {runs} alternating runs; ratios are to the floor/peer measured in the same runs.\n")
print("## Work A: 1000 web-sized JPEGs (640–1600 px) → fit 256×256 → JPEG q85, local folder\n")
print("| tool | wall (s) | images/s | peak RSS (MB) | wall vs vipsthumbnail |")
print("|---|---|---|---|---|")
floor = median("A vipsthumbnail")
for label, name in [("A imgpipe", "imgpipe"), ("A vipsthumbnail", "vipsthumbnail, 2 processes (floor)"), ("A mogrify", "mogrify, 2 processes")]:
    wall = median(label)
    if wall is None:
        continue
    ratio = f"{wall / floor:.2f}×" if floor else "–"
    print(f"| {name} | {wall:.2f} | {1000 / wall:.0f} | {median(label, 1) / 1024:.0f} | {ratio} |")
print("\n## Work B: the same images from a loopback HTTP server, cache off\n")
print("| tool | wall (s) | images/s | peak RSS (MB) | wall vs img2dataset |")
print("|---|---|---|---|---|")
peer = median("B img2dataset")
for label, name in [("B imgpipe", "imgpipe (url-list)"), ("B img2dataset", "img2dataset, 2 processes × 32 threads")]:
    wall = median(label)
    if wall is None:
        continue
    ratio = f"{wall / peer:.2f}×" if peer else "–"
    print(f"| {name} | {wall:.2f} | {1000 / wall:.0f} | {median(label, 1) / 1024:.0f} | {ratio} |")
print(f"\n## Scale: a generated URL list of small (320 px) images over loopback\n")
print("| items | run wall (s) | items/s | peak RSS (MB) | `resume` of the finished run (s) |")
print("|---|---|---|---|---|")
for n in [1000, scale]:
    wall = median(f"S run {n}")
    if wall is None:
        continue
    print(f"| {n} | {wall:.2f} | {n / wall:.0f} | {median(f'S run {n}', 1) / 1024:.0f} | {median(f'S resume {n}'):.2f} |")
small, big = median("S run 1000", 1), median(f"S run {scale}", 1)
if small and big:
    print(f"\nPeak RSS at {scale} items is {big / small:.2f}× the RSS at 1000.")
print("\nAll samples (label: [(wall s, peak RSS KB)]):\n")
for label, values in rows.items():
    print(f"- {label}: {values}")
