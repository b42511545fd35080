#!/usr/bin/env python3
"""Runs one of the Python package's pytest suites for CTest, under the interpreter that runs this script.

    run_pytest.py --normcheck EXE --source DIR --basetemp DIR [--torch MAJOR.MINOR] [--deadline SECONDS]
                  -- PYTEST-ARGUMENTS...

CTest picks the interpreter (Debian's /usr/bin/python3 or the virtual environment's python, see
normcheck_python_test in tests/CMakeLists.txt). The package is taken from DIR/python (PYTHONPATH), the
executable from --normcheck (NORMCHECK). With --torch the interpreter must import that torch: the test's
name says which torch it runs on, and a missing or different one fails it.

pytest's output is passed on line by line as it comes. With --deadline (CTest gives the test's time
limit less a margin) a pytest still running at the deadline is asked for the Python stacks of all its
threads (faulthandler, registered on SIGUSR1 on a copy of the original standard error, so that pytest's
capture does not swallow them), then killed: a hung suite shows where it waited instead of being cut
off silently by CTest.

Exit status: pytest's, except 1 when pytest or the named torch cannot be imported, when pytest collected
nothing, when it skipped a test, or when it passed the deadline: a suite that checked nothing must not
pass, nor one that ran on another torch than its name says.
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

# pytest's own entry point, after a handler that dumps every thread's stack on SIGUSR1 to a duplicate of
# file descriptor 2 (pytest redirects 2 itself while a test runs).
BOOT = ("import faulthandler, os, signal, sys\n"
        "faulthandler.register(signal.SIGUSR1, file=os.fdopen(os.dup(2), 'w'), all_threads=True)\n"
        "import pytest\n"
        "sys.exit(pytest.console_main())\n")


def fail(message):
    print(f"FAILED: {message}", flush=True)
    return 1


def check_interpreter(torch_version):
    """None when this interpreter has pytest and the named torch; else what is missing."""
    try:
        import pytest  # noqa: F401
    except ImportError as e:
        return f"{sys.executable} cannot import pytest ({e})"
    if torch_version is None:
        return None
    try:
        import torch
    except ImportError as e:
        return f"{sys.executable} cannot import torch ({e}); this test runs on torch {torch_version}"
    found = torch.__version__
    if (found != torch_version and not found.startswith(torch_version + ".")
            and not found.startswith(torch_version + "+")):
        return f"{sys.executable} has torch {found}, but this test runs on torch {torch_version}"
    print(f"torch {found}", flush=True)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--normcheck", required=True)
    parser.add_argument("--source", required=True, help="the checkout: its python/ is the package")
    parser.add_argument("--basetemp", required=True, help="pytest's temporary folder (emptied first)")
    parser.add_argument("--torch", metavar="MAJOR.MINOR", help="the torch this suite runs on")
    parser.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="dump pytest's stacks and fail when it runs longer than this")
    parser.add_argument("pytest", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    arguments = options.pytest[1:] if options.pytest[:1] == ["--"] else options.pytest
    missing = check_interpreter(options.torch)
    if missing:
        return fail(missing)
    package = os.path.join(os.path.abspath(options.source), "python")
    environment = dict(os.environ, NORMCHECK=os.path.abspath(options.normcheck),
                       PYTHONPATH=os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")])),
                       PYTHONDONTWRITEBYTECODE="1")
    flags = ["-p", "no:cacheprovider", "-rfEs", "--durations=5", f"--basetemp={options.basetemp}", *arguments]
    print(f"interpreter: {sys.executable}\n$ {sys.executable} -m pytest {' '.join(flags)}", flush=True)
    process = subprocess.Popen([sys.executable, "-c", BOOT, *flags], env=environment, cwd=options.source,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []

    def pass_on():
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)

    reader = threading.Thread(target=pass_on, daemon=True)
    reader.start()
    try:
        returncode = process.wait(timeout=options.deadline)
    except subprocess.TimeoutExpired:
        print(f"\n--- pytest passed its deadline of {options.deadline:g} s: the stacks of its threads ---",
              flush=True)
        process.send_signal(signal.SIGUSR1)
        time.sleep(3)
        process.kill()
        process.wait()
        reader.join(10)  # processes pytest started may hold the pipe a moment longer
        return fail(f"pytest still ran at its deadline of {options.deadline:g} s; the stacks above show where")
    reader.join()
    summary = [line for line in lines if line.startswith("=") and " in " in line]
    if returncode == 5:
        return fail("pytest collected no test")
    if returncode == 0 and summary and "skipped" in summary[-1]:
        return fail("a test was skipped where this interpreter has everything the suite needs")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
