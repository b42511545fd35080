#!/usr/bin/env python3
"""run_pytest.py's deadline: a hung suite is failed at the deadline with the stack of the hung test.

    deadline_check.py RUNNER SOURCE WORK

Runs RUNNER on tests/python/hung_suite.py (a test that sleeps an hour) with --deadline 5 and
requires, within a minute: exit status 1, the dumped stack naming the function the test waits in, and
the deadline named in the failure.
"""

import os
import subprocess
import sys
import time


def main(argv):
    runner, source, work = argv[1:4]
    hung = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hung_suite.py")
    started = time.monotonic()
    done = subprocess.run([sys.executable, runner, "--normcheck", "unused", "--source", source, "--basetemp", work,
                           "--deadline", "5", "--", hung], capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    print(output)
    problems = []
    if done.returncode != 1:
        problems.append(f"exit status {done.returncode}, not 1")
    if "in waits_for_a_rank_that_never_comes" not in output:
        problems.append("no dumped stack names the function the test waits in")
    if "FAILED: pytest still ran at its deadline of 5 s" not in output:
        problems.append("the failure does not name the deadline")
    if seconds < 5:
        problems.append(f"it ended after {seconds:.1f} s, before the deadline")
    for problem in problems:
        print("FAILED: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
