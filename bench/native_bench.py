"""The extension against the executable: ``normcheck.native.check`` beside ``run_check`` on the same files.

    python bench/native_bench.py [--rounds 200]

Run by the python of an environment where the package was installed with ``pip install .`` (so that it
has normcheck._core and its own executable); from a checkout there is no extension and the script says
so. Inputs: one scalar gate case, one per-group dump (a Trainer mistake's weight table), and the whole
cases/ folder. The two routes run interleaved (native, executable, executable, native, …) and the table
gives each one's median wall time per call and their ratio; the reports are compared first, so that
what is timed is the same work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    options = parser.parse_args()
    import normcheck
    from normcheck import native
    from normcheck.check import run_check

    if not native.available():
        print("this environment's normcheck has no extension: install the package with `pip install .`",
              file=sys.stderr)
        return 2
    inputs = [("scalar gate case", os.path.join(ROOT, "cases", "gate", "correct_scaled_sum_float32.json"), 1),
              ("per-group dump", os.path.join(ROOT, "cases", "groups", "microbatch_mean.json"), 1),
              ("cases/ (every file)", os.path.join(ROOT, "cases"), 10)]
    print(f"normcheck {normcheck.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print("| input | files | native (ms) | executable (ms) | executable / native |")
    print("|---|---|---|---|---|")
    for label, path, divisor in inputs:
        native_reports = [v.report for v in native.check(path, require_gate=False)]
        executable_reports = [v.report for v in run_check(path, require_gate=False, timeout=600)]
        if native_reports != executable_reports:
            print(f"{label}: the two routes' reports differ", file=sys.stderr)
            return 1
        native_times: List[float] = []
        executable_times: List[float] = []
        for round_ in range(max(1, options.rounds // divisor)):
            pair = [(native_times, lambda: native.check(path, require_gate=False)),
                    (executable_times, lambda: run_check(path, require_gate=False, timeout=600))]
            for times, call in (pair if round_ % 2 == 0 else pair[::-1]):
                times.append(timed(call))
        a, b = statistics.median(native_times), statistics.median(executable_times)
        print(f"| {label} | {len(native_reports)} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
