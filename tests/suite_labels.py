#!/usr/bin/env python3
"""Every CTest test carries exactly one suite label, so that `ctest -L SUITE` selects each suite whole, and
its name begins with that label ("laws: ..."), so that a failure's name says which suite to look in.

    suite_labels.py --ctest CTEST --build DIR --labels "unit;laws;..."
    suite_labels.py --self-test --labels "unit;laws;..."

The first reads the build tree's tests from `ctest --show-only=json-v1` and lists every test with no
suite label or more than one; the second requires a listing with one of each to be caught, and one whose name
begins with another label.
Exit status 0 when every test has one suite label and is named by it, 1 otherwise. Standard library only.
"""

import argparse
import json
import subprocess
import sys


def labels_of(test):
    for prop in test.get("properties", []):
        if prop.get("name") == "LABELS":
            return list(prop.get("value", []))
    return []


def problems(listing, suites):
    found = []
    for test in listing.get("tests", []):
        mine = [label for label in labels_of(test) if label in suites]
        name = test.get("name", "")
        if len(mine) != 1:
            found.append(f"{name}: suite labels {mine or 'none'} (labels {labels_of(test)})")
        elif not name.startswith(mine[0] + ":"):
            found.append(f"{name}: named {name.split(':')[0]!r}, not by its suite label {mine[0]!r}")
    return found


def self_test(suites):
    listing = {"tests": [
        {"name": "unit: fine", "properties": [{"name": "LABELS", "value": ["unit"]}]},
        {"name": "python: fine on torch (torch 2.13)",
         "properties": [{"name": "LABELS", "value": ["python", "torch", "venv"]}]},
        {"name": "cli: forgotten", "properties": [{"name": "TIMEOUT", "value": 10}]},
        {"name": "gate: twice", "properties": [{"name": "LABELS", "value": ["gate", "cli"]}]},
        {"name": "properties: misnamed", "properties": [{"name": "LABELS", "value": ["laws"]}]},
    ]}
    found = problems(listing, suites)
    caught = [p.split(":")[0] + ":" + p.split(":")[1] for p in found]
    expected = ["cli: forgotten", "gate: twice", "properties: misnamed"]
    if caught != expected:
        print(f"FAILED: the check reported {found}, expected exactly {expected}")
        return 1
    print("the unlabelled, the doubly labelled and the misnamed test are caught; the labelled ones pass")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labels", required=True, help="the suite labels, separated by ';'")
    parser.add_argument("--ctest")
    parser.add_argument("--build")
    parser.add_argument("--self-test", action="store_true")
    options = parser.parse_args()
    suites = set(filter(None, options.labels.split(";")))
    if options.self_test:
        return self_test(suites)
    done = subprocess.run([options.ctest, "--show-only=json-v1"], cwd=options.build, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        print(f"FAILED: ctest --show-only=json-v1 exited with {done.returncode}: {done.stderr.strip()}")
        return 1
    listing = json.loads(done.stdout)
    count = len(listing.get("tests", []))
    if count == 0:
        print("FAILED: ctest lists no test")
        return 1
    found = problems(listing, suites)
    for problem in found:
        print(problem)
    if found:
        print(f"FAILED: {len(found)} of {count} tests have not exactly one suite label of {sorted(suites)}, "
              "or are not named by it")
        return 1
    print(f"{count} tests, each with one suite label and named by it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
