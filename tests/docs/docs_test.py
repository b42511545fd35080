#!/usr/bin/env python3
"""The documentation stays true.

    docs_test.py schemas NORMCHECK ROOT     every normcheck/1 file under cases/ that is meant to be read is
                                            valid against docs/schema/normcheck-1.schema.json,
                                            and `check --json` on all of them (rejections included) is valid
                                            against docs/schema/report.schema.json; a report with a member
                                            removed, renamed or mistyped is not
    docs_test.py readme NORMCHECK ROOT      README.md has at most 200 lines, every relative link in README.md and
                                            docs/ names a file that exists, the README's dump example is
                                            diagnosed as it says (gate fail, local_mean), and so is
                                            docs/format.md's auxiliary term (term mtp: main_count), every
                                            line it quotes from the report being the report's, and every
                                            command docs/recipes.md shows on a mesh and beside a term prints
                                            the lines it quotes

Needs python3-jsonschema (Debian). Exit 0 passed, 1 failed.
"""

import copy
import glob
import json
import os
import re
import shlex
import subprocess
import sys

import jsonschema


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def partition_files(root):
    """The normcheck/1 files under cases/ that are meant to be read (no expect_error)."""
    paths = sorted(glob.glob(os.path.join(root, "cases", "**", "*.json"), recursive=True))
    files = []
    for path in paths:
        try:
            document = load(path)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(document, dict) and document.get("format") == "normcheck/1" and "expect_error" not in document:
            files.append(path)
    return files


def schemas(normcheck, root):
    document_schema = load(os.path.join(root, "docs", "schema", "normcheck-1.schema.json"))
    report_schema = load(os.path.join(root, "docs", "schema", "report.schema.json"))
    jsonschema.Draft202012Validator.check_schema(document_schema)
    jsonschema.Draft202012Validator.check_schema(report_schema)
    documents = jsonschema.Draft202012Validator(document_schema)
    failures = 0
    files = partition_files(root)
    for path in files:
        for problem in documents.iter_errors(load(path)):
            print(f"FAIL {path}: {problem.message} at {list(problem.absolute_path)}")
            failures += 1
    every = sorted(glob.glob(os.path.join(root, "cases", "**", "*.json"), recursive=True) +
                   glob.glob(os.path.join(root, "tests", "*", "inputs", "*.json")))
    run = subprocess.run([normcheck, "check", "--json", *every], capture_output=True, text=True, timeout=300)
    report = json.loads(run.stdout)
    reports = jsonschema.Draft202012Validator(report_schema)
    for problem in reports.iter_errors(report):
        print(f"FAIL report: {problem.message} at {list(problem.absolute_path)}")
        failures += 1
    kinds = {(r["kind"], r["status"], "gate" in r, "recipe" in r, "error" in r) for r in report["reports"]}
    print(f"{len(files)} documents valid; a report of {len(report['reports'])} files valid, "
          f"{len(kinds)} different shapes of report")
    # The schema must be able to fail: break a real report in three ways.
    broken = []
    without_status = copy.deepcopy(report)
    del without_status["reports"][0]["status"]
    broken.append(("a report without its status", without_status))
    renamed = copy.deepcopy(report)
    renamed["reports"][0]["gradient"] = renamed["reports"][0].pop("gradients")
    broken.append(("gradients renamed", renamed))
    with_gate = next(i for i, r in enumerate(report["reports"]) if "gate" in r)
    mistyped = copy.deepcopy(report)
    mistyped["reports"][with_gate]["gate"]["bound"] = 0.5
    broken.append(("a bound written as a float", mistyped))
    for what, document in broken:
        if reports.is_valid(document):
            print(f"FAIL: the report schema accepts {what}")
            failures += 1
    return failures


LINK = re.compile(r"\]\(([^)#]+)(#[^)]*)?\)")


def readme(normcheck, root):
    failures = 0
    readme_path = os.path.join(root, "README.md")
    with open(readme_path, encoding="utf-8") as f:
        text = f.read()
    lines = text.count("\n")
    if lines > 200:
        print(f"FAIL: README.md has {lines} lines, more than 200")
        failures += 1
    for page in [readme_path] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        with open(page, encoding="utf-8") as f:
            for target, _ in LINK.findall(f.read()):
                if re.match(r"^[a-z]+:", target):
                    continue
                if not os.path.exists(os.path.join(os.path.dirname(page), target)):
                    print(f"FAIL {os.path.relpath(page, root)}: link to {target}, which does not exist")
                    failures += 1
    example = next(block for block in re.findall(r"```json\n(.*?)```", text, re.S) if '"observed"' in block)
    checked = subprocess.run([normcheck, "check", "--json", "-"], input=example, capture_output=True, text=True,
                             timeout=60)
    gate = json.loads(checked.stdout)["reports"][0].get("gate", {})
    names = [e["name"] for e in gate.get("diagnosis", [])]
    if checked.returncode != 1 or gate.get("verdict") != "fail" or names != ["local_mean"]:
        print(f"FAIL: the README's dump example gives exit {checked.returncode}, verdict {gate.get('verdict')}, "
              f"diagnosis {names}; the README says fail with local_mean")
        failures += 1
    # Excerpts of the weight table a real run wrote into docs/python.md (a DDP test keeps that block equal
    # to the run's output): every excerpted line must be one of the block's.
    with open(os.path.join(root, "docs", "python.md"), encoding="utf-8") as f:
        run = re.search(r"<!-- weight table of [^>]*: begin -->\n```\n(.*?)```", f.read(), re.S)
    run_lines = set(run.group(1).splitlines()) if run else set()
    for page in (readme_path, os.path.join(root, "docs", "gate.md")):
        with open(page, encoding="utf-8") as f:
            excerpts = re.findall(r"<!-- excerpt of the weight table in docs/python.md -->\n```\n(.*?)```",
                                  f.read(), re.S)
        if not excerpts:
            print(f"FAIL {os.path.relpath(page, root)}: no excerpt of the real run's weight table")
            failures += 1
        for line in (line for block in excerpts for line in block.splitlines()):
            if line not in run_lines:
                print(f"FAIL {os.path.relpath(page, root)}: the excerpt line {line!r} is not in docs/python.md's run")
                failures += 1
    failures += terms_example(normcheck, root)
    failures += recipes_examples(normcheck, root)
    print(f"README.md: {lines} lines; links checked in README.md and docs/")
    return failures


def terms_example(normcheck, root):
    """docs/format.md's worked auxiliary term: diagnosed as it says, every quoted line one of the report's."""
    with open(os.path.join(root, "docs", "format.md"), encoding="utf-8") as f:
        section = f.read().split("## Auxiliary terms", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    example = next(body for language, body in blocks if language == "json")
    quoted = next(body for language, body in blocks if not language)
    text = subprocess.run([normcheck, "check", "-"], input=example, capture_output=True, text=True, timeout=60)
    checked = subprocess.run([normcheck, "check", "--json", "-"], input=example, capture_output=True, text=True,
                             timeout=60)
    gate = json.loads(checked.stdout)["reports"][0].get("gate", {})
    names = [e["name"] for e in gate.get("diagnosis", [])]
    failures = 0
    if gate.get("verdict") != "fail" or names != ["term mtp: main_count"]:
        print(f"FAIL docs/format.md: the auxiliary term's example gives verdict {gate.get('verdict')}, diagnosis "
              f"{names}; the page says fail with term mtp: main_count")
        failures += 1
    report_lines = set(text.stdout.splitlines())
    for line in quoted.splitlines():
        if line not in report_lines:
            print(f"FAIL docs/format.md: the quoted line {line!r} is not in the report of its example")
            failures += 1
    return failures


def recipes_examples(normcheck, root):
    """docs/recipes.md's worked examples on a mesh and beside a term: every `$ normcheck …` command shown prints
    every line quoted under it (`  ...` stands for lines left out)."""
    with open(os.path.join(root, "docs", "recipes.md"), encoding="utf-8") as f:
        section = f.read().split("### On a device mesh, and beside an auxiliary term", 1)[1].split("\n## ", 1)[0]
    failures = 0
    commands = 0
    for language, block in re.findall(r"```(\w*)\n(.*?)```", section, re.S):
        for run in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *quoted = run.splitlines()
            args = shlex.split(command)
            done = subprocess.run([normcheck, *args[1:]], capture_output=True, text=True, timeout=600)
            commands += 1
            printed = set(done.stdout.splitlines())
            for line in quoted:
                if line.strip() != "..." and line not in printed:
                    print(f"FAIL docs/recipes.md: {command!r} does not print the quoted line {line!r}")
                    failures += 1
    if commands == 0:
        print("FAIL docs/recipes.md: no example on a mesh or beside a term")
        failures += 1
    return failures


def main():
    what, normcheck, root = sys.argv[1:4]
    failures = schemas(normcheck, root) if what == "schemas" else readme(normcheck, root)
    print("passed" if failures == 0 else f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
