"""The page's lab core run by node (no browser), against the command-line lab: the shared runs and a
seeded random session must give the same outcomes. Exit status 77 (skipped) when node is not installed.

    lab_core_node.py --normcheck EXE --runs tests/teaching/lab_runs.json --work DIR [--page FILE]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import lab_runs

SKIP = 77

HARNESS = lab_runs.CORE_RUNNER + r"""
const fs = require("fs");
const vm = require("vm");
const page = fs.readFileSync(process.argv[2], "utf8");
const data = JSON.parse(page.match(/<script type="application\/json" id="lab-data">([\s\S]*?)<\/script>/)[1]);
const scripts = [...page.matchAll(/<script>([\s\S]*?)<\/script>/g)];
if (scripts.length !== 1) throw new Error("expected one script in the page, found " + scripts.length);
vm.runInThisContext(scripts[0][1]);
const runs = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(runSessions(data, runs)));
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--normcheck", required=True)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--page",
                        help="use this page instead of generating one (to see the test fail on a broken page)")
    args = parser.parse_args()
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        print("node is not installed: skipped (the browser tests run the same core in Chromium)")
        return SKIP
    os.makedirs(args.work, exist_ok=True)
    page = args.page or os.path.join(args.work, "page-node.html")
    if not args.page:
        subprocess.run([args.normcheck, "demo", "--html", page], check=True, stdout=subprocess.DEVNULL, timeout=60)
    harness = os.path.join(args.work, "lab_core_harness.js")
    with open(harness, "w", encoding="utf-8") as f:
        f.write(HARNESS)

    runs = lab_runs.load_runs(args.runs)
    random_commands = lab_runs.random_commands(seed=19, count=400)
    command_lists = [lab_runs.commands_of(run) for run in runs] + [random_commands]
    result = subprocess.run([node, harness, page], input=json.dumps(command_lists), capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        print("node failed:\n" + result.stderr)
        return 1
    outcomes = [lab_runs.as_outcomes(raw) for raw in json.loads(result.stdout)]

    problems = []
    banner = lab_runs.cli_banner(args.normcheck)
    for run, got in zip(runs, outcomes):
        label = "run '%s'" % run["name"]
        want = lab_runs.expected_outcomes(run)
        problems += lab_runs.diff_outcomes(label + " in the page's lab core (node)", lab_runs.commands_of(run),
                                           want, got)
        problems += lab_runs.compare_cli(args.normcheck, banner, lab_runs.commands_of(run), want, label)
    problems += lab_runs.compare_cli(args.normcheck, banner, random_commands, outcomes[-1],
                                     "random session (seed 19) of the page's lab core (node) against the command line")
    for problem in problems:
        print(problem)
    print("%d runs and a random session of %d commands: %s" % (len(runs), len(random_commands),
                                                               "differ" if problems else "the same in both labs"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
