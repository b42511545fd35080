#!/usr/bin/env python3
"""Runs the Python package's pytest suites for CTest, under an interpreter that has what they need.

    run_pytest.py --normcheck EXE --source DIR --basetemp DIR [--torch] -- PYTEST-ARGUMENTS...

The interpreter is the first of /usr/bin/python3 (Debian's python3-torch lives there), this one and
python3 on PATH that imports pytest (and torch, with --torch), or only $NORMCHECK_TORCH_PYTHON when
that is set; the run says which. The package is taken from DIR/python (PYTHONPATH), the executable
from --normcheck (NORMCHECK). Exit status: pytest's, except 77 (skipped, the reason printed) when no
interpreter has what the suite needs, and 1 when pytest collected nothing or skipped a test: a suite
that checked nothing must not pass.
"""

import argparse
import os
import shutil
import subprocess
import sys

SKIPPED = 77


def candidates():
    chosen = os.environ.get("NORMCHECK_TORCH_PYTHON")
    if chosen:
        return [chosen]
    found = []
    for candidate in ("/usr/bin/python3", sys.executable, shutil.which("python3")):
        if candidate and candidate not in found:
            found.append(candidate)
    return found


def interpreter(modules):
    tried = []
    probe = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    for candidate in candidates():
        if not os.path.exists(candidate):
            tried.append(f"{candidate}: does not exist")
            continue
        try:
            done = subprocess.run([candidate, "-c", probe, *modules], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            tried.append(f"{candidate}: {e}")
            continue
        if done.returncode == 0:
            return candidate
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        tried.append(f"{candidate}: {last}")
    print(f"SKIPPED: no interpreter imports {' and '.join(modules)} ({'; '.join(tried)}); install Debian's "
          f"python3-pytest{' and python3-torch' if 'torch' in modules else ''}", flush=True)
    sys.exit(SKIPPED)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--normcheck", required=True)
    parser.add_argument("--source", required=True, help="the checkout: its python/ is the package")
    parser.add_argument("--basetemp", required=True, help="pytest's temporary folder (emptied first)")
    parser.add_argument("--torch", action="store_true", help="the suite needs torch")
    parser.add_argument("pytest", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    arguments = options.pytest[1:] if options.pytest[:1] == ["--"] else options.pytest
    python = interpreter(["pytest", "torch"] if options.torch else ["pytest"])
    package = os.path.join(os.path.abspath(options.source), "python")
    environment = dict(os.environ, NORMCHECK=os.path.abspath(options.normcheck),
                       PYTHONPATH=os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")])),
                       PYTHONDONTWRITEBYTECODE="1")
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "--durations=5",
               f"--basetemp={options.basetemp}", *arguments]
    print(f"interpreter: {python}\n$ {' '.join(command)}", flush=True)
    done = subprocess.run(command, env=environment, cwd=options.source, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    print(done.stdout, end="", flush=True)
    summary = [line for line in done.stdout.splitlines() if line.startswith("=") and " in " in line]
    if done.returncode == 5:
        print("FAILED: pytest collected no test", flush=True)
        return 1
    if done.returncode == 0 and summary and "skipped" in summary[-1]:
        print("FAILED: a test was skipped where this interpreter has everything the suite needs", flush=True)
        return 1
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
