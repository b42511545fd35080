"""What building costs: the executable (and, with --tests, every test) from a clean build directory, at two
commits side by side.

    python3 bench/build_cost.py --before REV --after REV [--tests] [--jobs 2] [--repeats 1] [--output FILE]

bench/BUILD_RESULTS.md holds the last figures.

Each commit is checked out (git worktree, outside the checkout) once; each repeat configures a fresh build
directory as the README's Quick start does (RelWithDebInfo, tests off; --tests: the `dev` preset's tests
on) without ccache, builds the target `normcheck` (or everything) with --jobs, and records the build's wall
time, the CPU seconds (user + system) of every compiler and linker it ran, and the peak memory of the
largest one. The commits alternate (before, after, after, before, …) so that a busy machine weighs on both.
The table gives the medians and the ratio after / before.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(command: List[str], cwd: str) -> None:
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "CCACHE_DISABLE": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}:\n{done.stderr[-4000:]}")


def build(tree: str, tests: bool, jobs: int) -> Tuple[float, float, float]:
    """(wall seconds, CPU seconds of the children, peak RSS in MiB of the largest child) of one clean build."""
    folder = tempfile.mkdtemp(prefix="normcheck-build-")
    try:
        configure = ["cmake", "-S", tree, "-B", folder, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                     f"-DNORMCHECK_BUILD_TESTS={'ON' if tests else 'OFF'}"]
        run(configure, tree)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        command = ["cmake", "--build", folder, "-j", str(jobs)] + ([] if tests else ["--target", "normcheck"])
        run(command, tree)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu, after.ru_maxrss / 1024
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--tests", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="normcheck-build-cost-")
    trees: Dict[str, str] = {}
    results: Dict[str, List[Tuple[float, float, float]]] = {"before": [], "after": []}
    try:
        for role in ("before", "after"):
            trees[role] = os.path.join(work, role)
            run(["git", "worktree", "add", "--detach", trees[role], getattr(args, role)], ROOT)
        for i in range(args.repeats):
            for role in (("before", "after") if i % 2 == 0 else ("after", "before")):
                results[role].append(build(trees[role], args.tests, args.jobs))
                print(f"{role} {i + 1}: wall {results[role][-1][0]:.1f} s, CPU {results[role][-1][1]:.1f} s",
                      file=sys.stderr)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)
    what = "every target (tests on)" if args.tests else "the executable (target normcheck)"
    lines = [f"build of {what} from a clean directory, -j {args.jobs}, no ccache, median of {args.repeats}:",
             "| commit | wall s | CPU s | peak RSS of one process MiB |", "|---|---|---|---|"]
    medians = {}
    for role in ("before", "after"):
        wall, cpu, rss = (statistics.median(r[k] for r in results[role]) for k in range(3))
        medians[role] = (wall, cpu)
        lines.append(f"| {role} {getattr(args, role)} | {wall:.1f} | {cpu:.1f} | {rss:.0f} |")
    lines.append(f"after / before: wall {medians['after'][0] / medians['before'][0]:.2f}, "
                 f"CPU {medians['after'][1] / medians['before'][1]:.2f}")
    text = "\n".join(lines)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
