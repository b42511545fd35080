"""Instructions executed by normcheck and by the floor on the same files, counted by callgrind: a measure a
busy machine does not change, beside bench/run.py's times.

    python3 bench/instructions.py --normcheck PATH [--before PATH] FILE...

Runs `valgrind --tool=callgrind` on the floor (bench/out/floor, built by bench/run.py) and on
`normcheck check --jobs 1 FILE` (and on a second normcheck given by --before, e.g. a build of main), and
prints a table of the counts and their ratios to the floor's.
"""

import argparse
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FLOOR = os.path.join(HERE, "out", "floor")


def instructions(command):
    """The instructions callgrind counts for one run of `command`."""
    with tempfile.TemporaryDirectory() as folder:
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/out"] + command,
                             capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} under callgrind exited {run.returncode}: {run.stderr[-500:]}")
    return int(re.search(r"Collected : (\d+)", run.stderr).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--normcheck", required=True, help="the normcheck executable to count")
    parser.add_argument("--before", help="a second normcheck executable, counted beside it")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    header = "| file | floor | normcheck | normcheck / floor |"
    if args.before:
        header += " before | before / floor |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for path in args.files:
        floor = instructions([FLOOR, path])
        after = instructions([args.normcheck, "check", "--jobs", "1", path])
        row = f"| {os.path.basename(path)} | {floor / 1e6:.0f}M | {after / 1e6:.0f}M | {after / floor:.2f} |"
        if args.before:
            before = instructions([args.before, "check", "--jobs", "1", path])
            row += f" {before / 1e6:.0f}M | {before / floor:.2f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
