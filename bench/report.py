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
print(f"Medians of {runs} alternating rounds (works A and B twice a round, in a quad A B B A); ratios are to the\n"
      "floor/peer measured in the same runs. imgpipe makes its pixels in helper processes (one per worker); its\n"
      "peak RSS, as /usr/bin/time reports it, is the largest of the run and each helper, not their sum.\n")
print("## Work A: 1000 web-sized JPEGs (640–1600 px) → fit 256×256 → JPEG q85, local folder\n")
print("| tool | wall (s) | images/s | peak RSS (MB) | wall vs vipsthumbnail |")
print("|---|---|---|---|---|")
floor = median("A vipsthumbnail")
for label, name in [("A imgpipe", "imgpipe"), ("A imgpipe scalar", "imgpipe, `VIPS_NOVECTOR=1` (liborc off)"),
                    ("A vipsthumbnail", "vipsthumbnail, 2 processes (floor)"), ("A mogrify", "mogrify, 2 processes")]:
    wall = median(label)
    if wall is None:
        continue
    ratio = f"{wall / floor:.2f}×" if floor else "–"
    print(f"| {name} | {wall:.2f} | {1000 / wall:.0f} | {median(label, 1) / 1024:.0f} | {ratio} |")
print("\n## Work B: the same images from a loopback HTTP server, cache off\n")
print("The origin is nginx (one process, as bench/lib.sh starts it). The row \"Python origin\" is the same")
print("run against bench/server.py, the origin of the runs before 2026-11-24's fourth session, which")
print("takes about three times nginx's CPU on the same two cores.\n")
print("| tool | wall (s) | images/s | peak RSS (MB) | wall vs img2dataset | wall vs imgpipe's work A |")
print("|---|---|---|---|---|---|")
peer, local = median("B img2dataset"), median("A imgpipe")
for label, name in [("B imgpipe", "imgpipe (url-list)"), ("B imgpipe python", "imgpipe (url-list), Python origin"),
                    ("B img2dataset", "img2dataset, 2 processes × 32 threads")]:
    wall = median(label)
    if wall is None:
        continue
    ratio = f"{wall / peer:.2f}×" if peer else "–"
    own = f"{wall / local:.2f}×" if local else "–"
    print(f"| {name} | {wall:.2f} | {1000 / wall:.0f} | {median(label, 1) / 1024:.0f} | {ratio} | {own} |")
# Works A and B run in a quad A B B A each round (bench/run.sh): the round's B ÷ A is the sum
# of its two B runs over the sum of its two A runs, in which a steady drift of the machine's
# speed during the quad cancels. The Python-origin run, once a round, is set against the
# mean of its round's two A runs.
a_walls, b_walls = [v[0] for v in rows.get("A imgpipe", [])], [v[0] for v in rows.get("B imgpipe", [])]
quads = [(b_walls[i] + b_walls[i + 1]) / (a_walls[i] + a_walls[i + 1])
         for i in range(0, min(len(a_walls), len(b_walls)) - 1, 2)]
if quads:
    print(f"\nB ÷ A, quad by quad (A B B A; nginx origin): " + ", ".join(f"{r:.3f}" for r in quads)
          + f" (median {statistics.median(quads):.3f}).")
python_walls = [v[0] for v in rows.get("B imgpipe python", [])]
python_ratios = [w / ((a_walls[2 * i] + a_walls[2 * i + 1]) / 2) for i, w in enumerate(python_walls) if 2 * i + 1 < len(a_walls)]
if python_ratios:
    print(f"\nB ÷ A round by round (Python origin, against the round's two A runs): "
          + ", ".join(f"{r:.2f}" for r in python_ratios) + f" (median {statistics.median(python_ratios):.2f}).")
print(f"\n## Scale: a generated URL list of small (320 px) images over loopback\n")
print("The origin is nginx, as in work B; the row \"Python origin\" is the same list from bench/server.py.")
print("The floor is vipsthumbnail on 2 processes over 2000 local copies of the same images (no network,")
print("no state), run just before and just after each scale run; \"vs floor\" is the run's items/s over")
print("the mean of those two floors' images/s.\n")
print("| items | run wall (s) | items/s | floor beside it (images/s) | vs floor | peak RSS (MB) | `resume` of the finished run (s) |")
print("|---|---|---|---|---|---|---|")
# The floors in the order bench/run.sh ran them: before 1000, between 1000 and SCALE, between
# SCALE and SCALE from Python, after it.
floors = [v[0] for v in rows.get("S vipsthumbnail 2000", [])]
def floor_beside(i):
    """The mean images/s of the floor runs just before and just after scale run i; None
    unless both were measured."""
    around = [2000 / w for w in floors[i:i + 2]]
    return statistics.mean(around) if len(around) == 2 else None
scale_ratio = None
for i, (label, n, name) in enumerate([("S run", 1000, "1000"), ("S run", scale, f"{scale}"),
                                      ("S run python", scale, f"{scale}, Python origin")]):
    wall = median(f"{label} {n}")
    if wall is None:
        continue
    beside = floor_beside(i)
    ratio = (n / wall) / beside if beside else None
    if i == 1:
        scale_ratio = ratio
    resume = median(f"S resume {n}") if label == "S run" else None
    shown_beside = f"{beside:.0f}" if beside else "–"
    shown_ratio = f"{ratio:.2f}×" if ratio else "–"
    print(f"| {name} | {wall:.2f} | {n / wall:.0f} | {shown_beside} | {shown_ratio} | {median(f'{label} {n}', 1) / 1024:.0f} | "
          + (f"{resume:.2f} |" if resume is not None else "– |"))
small, big = median("S run 1000", 1), median(f"S run {scale}", 1)
if small and big:
    print(f"\nPeak RSS at {scale} items is {big / small:.2f}× the RSS at 1000.")
if floors:
    print(f"\nThe floor's runs, in order: " + ", ".join(f"{w:.2f} s ({2000 / w:.0f}/s)" for w in floors) + ".")
slow = {(kind, side): median(f"O {kind} {side}") for kind in ("download", "upload") for side in ("head", "base")}
if slow[("download", "head")]:
    print("\n## Slow origin: 96 items, every answer after 1 s (bench/slow-origin.sh)\n")
    print("| run | floor (s) | wall (s) |")
    print("|---|---|---|")
    print(f"| downloads, limits.downloads 16 | 6 | {slow[('download', 'head')]:.2f} |")
    print(f"| two-step uploads of the same, limits.uploads 8 | 13 | {slow[('upload', 'head')]:.2f} |")

# Issue 13's targets, each from the runs of this session.
def target(name, goal, value, fmt, met):
    shown = fmt.format(value) if value is not None else "–"
    verdict = "–" if value is None else ("yes" if met(value) else "no")
    print(f"| {name} | {goal} | {shown} | {verdict} |")
print("\n## Issue 13's targets, from these runs\n")
print("| target | goal | measured | met? |")
print("|---|---|---|---|")
target("96 one-second downloads, downloads 16", "≤ 7 s", slow[("download", "head")], "{:.2f} s", lambda v: v <= 7)
target("96 one-second two-step uploads, uploads 8", "≤ 14 s (floor 13)", slow[("upload", "head")], "{:.2f} s", lambda v: v <= 14)
a, floor_a = median("A imgpipe"), median("A vipsthumbnail")
target("work A vs vipsthumbnail (2 processes)", "≤ 1.00×", a / floor_a if a and floor_a else None, "{:.2f}×", lambda v: v <= 1.0)
scalar = median("A imgpipe scalar")
target("work A with liborc off (`VIPS_NOVECTOR=1`) vs vipsthumbnail", "(for comparison)",
       scalar / floor_a if scalar and floor_a else None, "{:.2f}×", lambda v: v <= 1.0)
target("work B vs imgpipe's work A (median of the quads A B B A)", "≤ 1.05×",
       statistics.median(quads) if quads else None, "{:.3f}×", lambda v: v <= 1.05)
target("work B from the Python origin vs imgpipe's work A (median of the rounds)", "(for comparison)",
       statistics.median(python_ratios) if python_ratios else None, "{:.2f}×", lambda v: v <= 1.05)
s_wall = median(f"S run {scale}")
target(f"{scale} small items over loopback", "≥ 200 items/s", scale / s_wall if s_wall else None, "{:.0f} items/s", lambda v: v >= 200)
target(f"{scale} small items over loopback vs the floor beside them", "(for comparison: 1.00× is the floor)", scale_ratio,
       "{:.2f}×", lambda v: v >= 1.0)

# The scale section (bench/scale.sh): "K <what> <N>" samples, one column per size, each
# figure with its ratio to the previous size (10× the items: 10.0× is linear).
def scale_section():
    sizes = sorted({int(label.split()[-1]) for label in rows if label.startswith("K ")})
    if not sizes:
        return
    print("\n## Scale: every command on a state file of N items (bench/scale.sh)\n")
    print("A folder of N links to one 1×1 PNG, fit 256×256, a folder sink. Wall seconds (and, after `→`, the")
    print("ratio to the previous size: 10× the items, so 10× is linear); the state file in MB.\n")
    print("| what | " + " | ".join(f"{n:,}" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    def line(name, label, unit=lambda wall, n: f"{wall:.2f} s"):
        cells, last = [], None
        for n in sizes:
            wall = median(f"{label} {n}")
            if wall is None:
                cells.append("–")
                continue
            ratio = f" → {wall / last:.1f}×" if last else ""
            cells.append(unit(wall, n) + ratio)
            last = wall
        print(f"| {name} | " + " | ".join(cells) + " |")
    line("`run` (items/s)", "K run", lambda wall, n: f"{n / wall:,.0f}/s ({wall:.1f} s)")
    cells = []
    for n in sizes:
        rss = median(f"K run {n}", 1)
        cells.append(f"{rss / 1024:.0f} MB" if rss else "–")
    print("| `run` peak RSS (MB) | " + " | ".join(cells) + " |")
    line("`status --json`", "K status")
    line("`resume` (finished run)", "K resume")
    line("`export --format jsonl` (records/s)", "K export-jsonl", lambda wall, n: f"{wall:.2f} s, {n / wall:,.0f}/s")
    line("`export --format csv` (records/s)", "K export-csv", lambda wall, n: f"{wall:.2f} s, {n / wall:,.0f}/s")
    line("`export --format parquet` (records/s)", "K export-parquet", lambda wall, n: f"{wall:.2f} s, {n / wall:,.0f}/s")
    line("`plan`", "K plan")
    line("no-op `run --incremental` (no run made)", "K incremental")
    line("`run --incremental` with a file more", "K incremental-one-more")
    line("floor: listing the folder (`find -printf`)", "K listing")
    line("floor: one pass over the state (sqlite3)", "K state-pass")
    line("state file after the run (MB)", "K state after-run", lambda mb, n: f"{mb:.1f} MB, {mb * 1e6 / n:.0f} B/item")
    line("state file after the no-op incremental run (MB)", "K state after-incremental",
         lambda mb, n: f"{mb:.1f} MB")
scale_section()

print("\nAll samples (label: [(wall s, peak RSS KB)]):\n")
for label, values in rows.items():
    print(f"- {label}: {values}")
