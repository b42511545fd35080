"""The per-shape summary of a bench/run.py result, as docs/performance.md shows it:

    python3 bench/summarize.py [bench/RESULTS.md]

Reads the Ratios table(s) of the results file and prints, for each literal shape and file size, the range
over its file shapes of normcheck's time over the floor's with --jobs 1 and --jobs 2 and over the checked
read's with --jobs 1, wall (CPU), and on how many files each target holds by wall time.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {"dec": "dec (shortest repr)", "short": "short (six places)", "exp": "exp (`%e`)", "int": "int",
          "hex": "hex (`float.hex()`)"}
TARGET_ONE_CORE, TARGET_TWO_CORES = 0.8, 0.5
NAME = re.compile(r"^v\d+_t(\d+)M_r(\d+)_(flat|mb\d+)_(\w+)\.json$")
PAIR = re.compile(r"^([\d.]+) \(([\d.]+)\)$")


def ratios(path):
    """(tokens in millions, ranks, literal) → list of the row's ratio pairs, from every Ratios table."""
    rows = {}
    with open(path) as lines:
        for line in lines:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            match = NAME.match(cells[0]) if cells else None
            if not match or len(cells) < 6 or not all(PAIR.match(cell) for cell in cells[1:6]):
                continue  # a row of another table
            millions, ranks, _, literal = match.groups()
            pairs = [tuple(float(x) for x in PAIR.match(cell).groups()) for cell in cells[1:6]]
            rows.setdefault((int(millions), int(ranks) == 2, literal), []).append(pairs)
    return rows


def span(values):
    low, high = min(values), max(values)
    return f"{low:.2f}" if low == high else f"{low:.2f} to {high:.2f}"


def column(group, index):
    return f"{span([r[index][0] for r in group])} ({span([r[index][1] for r in group])})"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "RESULTS.md")
    rows = ratios(path)
    print("| literals | tokens | `--jobs 1` / floor | `--jobs 2` / floor | `--jobs 1` / checked read "
          f"| ≤ {TARGET_ONE_CORE} / ≤ {TARGET_TWO_CORES} met (wall) |")
    print("|---|---|---|---|---|---|")
    for literal, name in SHAPES.items():
        for (millions, two_ranks, shape), group in sorted(rows.items()):
            if shape != literal:
                continue
            one = sum(r[0][0] <= TARGET_ONE_CORE for r in group)
            two = sum(r[1][0] <= TARGET_TWO_CORES for r in group)
            tokens = f"{millions}M" + (" on 2 ranks" if two_ranks else "")
            print(f"| {name} | {tokens} | {column(group, 0)} | {column(group, 1)} | {column(group, 2)} "
                  f"| {one}/{len(group)}, {two}/{len(group)} |")


if __name__ == "__main__":
    main()
