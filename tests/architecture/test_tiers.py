#!/usr/bin/env python3
"""The test presets of CMakePresets.json split the suite into tiers that CI can run cheapest first.

    test_tiers.py --presets CMakePresets.json --ctest CTEST --build DIR
    test_tiers.py --presets CMakePresets.json --self-test

Every test is in exactly one of `quick` and `slow`; `quick` holds no test that needs torch, the virtual
environment or a browser; every test of `asan-quick` is in `quick`; `torch` holds exactly the tests
labelled torch. The labels come from `ctest --show-only=json-v1`, the tiers' filters from the presets
as CTest reads them (a label regex matching any of a test's labels). The self-test plants a tier that
drops tests, one that lets torch into `quick` and an `asan-quick` wider than `quick`, and requires each
caught. Exit status 0 when the tiers hold, 1 otherwise. Standard library only.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from suite_labels import labels_of  # noqa: E402  (tests/suite_labels.py reads the same listing)

HEAVY = ("torch", "venv", "browser")


def selects(preset, labels):
    """Whether a test preset's label filter selects a test with these labels."""
    found = lambda regex: any(re.search(regex, label) for label in labels)
    criteria = preset.get("filter", {})
    include = criteria.get("include", {}).get("label")
    exclude = criteria.get("exclude", {}).get("label")
    return (include is None or found(include)) and (exclude is None or not found(exclude))


def problems(presets, tests):
    tiers = {p["name"]: p for p in presets.get("testPresets", [])}
    missing = [name for name in ("quick", "slow", "asan-quick", "torch") if name not in tiers]
    if missing:
        return [f"no test preset {name}" for name in missing]
    found = []
    for name, labels in tests:
        quick, slow = selects(tiers["quick"], labels), selects(tiers["slow"], labels)
        if quick == slow:
            found.append(f"{name}: in {'both quick and slow' if quick else 'neither quick nor slow'} (labels {labels})")
        if quick and any(label in HEAVY for label in labels):
            found.append(f"{name}: in quick but labelled {labels}")
        if selects(tiers["asan-quick"], labels) and not quick:
            found.append(f"{name}: in asan-quick but not in quick (labels {labels})")
        if selects(tiers["torch"], labels) != ("torch" in labels):
            found.append(f"{name}: the torch tier and the torch label disagree (labels {labels})")
    return found


def self_test(presets):
    tests = [("unit: a", ["unit"]), ("docs: b", ["docs"]), ("python: c (torch 2.13)", ["python", "torch", "venv"]),
             ("browser: d", ["browser"]), ("ddp: e (torch 1.13)", ["ddp", "torch"])]
    if problems(presets, tests):
        print("the presets fail the planted listing they should pass:", problems(presets, tests))
        return 1

    def planted(change):
        wrong = copy.deepcopy(presets)
        change({p["name"]: p for p in wrong["testPresets"]})
        return problems(wrong, tests)

    def drop_docs(t):
        t["slow"]["filter"]["exclude"]["label"] = t["quick"]["filter"]["include"]["label"].replace("docs", "cases")
    def torch_in_quick(t): t["quick"]["filter"]["include"]["label"] = "^(unit|docs|python)$"
    def asan_wider(t): t["asan-quick"]["filter"]["include"]["label"] = "^(unit|ddp)$"
    uncaught = [f.__name__ for f in (drop_docs, torch_in_quick, asan_wider) if not planted(f)]
    if uncaught:
        print("planted tiers not caught:", uncaught)
        return 1
    print("3 planted tiers caught")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--presets", required=True)
    parser.add_argument("--ctest")
    parser.add_argument("--build")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    with open(args.presets, encoding="utf-8") as f:
        presets = json.load(f)
    if args.self_test:
        return self_test(presets)
    listing = json.loads(subprocess.run([args.ctest, "--show-only=json-v1", "--test-dir", args.build],
                                        capture_output=True, text=True, check=True).stdout)
    tests = [(t.get("name"), labels_of(t)) for t in listing.get("tests", [])]
    found = problems(presets, tests)
    for problem in found:
        print(problem)
    print(f"{len(tests)} tests, {len(found)} problems with the tiers")
    return 1 if found or not tests else 0


if __name__ == "__main__":
    sys.exit(main())
