#!/usr/bin/env python3
"""The tree's formatting rules, enforced: the column limit of .clang-format on C++ and flake8 on Python.

    style.py ROOT               check every file git tracks under ROOT; exit 0 when all follow the rules
    style.py ROOT --self-test   plant each kind of violation in a scratch tree and require every one caught

C++ (.cpp, .hpp, .h): no line wider than .clang-format's ColumnLimit, counted in code points (a line of
Greek letters is as wide as a line of ASCII of the same length), no tab, no trailing white space.
Python: flake8 with the configuration in .flake8 (pyflakes' findings, syntax errors, the same column
limit, trailing white space and blank lines at the end, blank lines around top-level definitions). The two
limits are one number: .flake8's max-line-length must equal ColumnLimit, or this fails.
"""

import os
import re
import subprocess
import sys
import tempfile

CXX_SUFFIXES = (".cpp", ".hpp", ".h")


def column_limit(root):
    """ColumnLimit of ROOT/.clang-format, and .flake8's max-line-length checked equal to it."""
    with open(os.path.join(root, ".clang-format"), encoding="utf-8") as f:
        found = re.search(r"^ColumnLimit:\s*(\d+)\s*$", f.read(), re.M)
    if not found:
        raise SystemExit("style: .clang-format sets no ColumnLimit")
    limit = int(found.group(1))
    with open(os.path.join(root, ".flake8"), encoding="utf-8") as f:
        python = re.search(r"^max-line-length\s*=\s*(\d+)\s*$", f.read(), re.M)
    if not python or int(python.group(1)) != limit:
        raise SystemExit(f"style: .flake8's max-line-length must equal .clang-format's ColumnLimit ({limit})")
    return limit


def tracked(root):
    """The files git tracks under ROOT, relative to it."""
    listed = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True)
    return [name for name in listed.stdout.decode("utf-8").split("\0") if name]


def cxx_findings(root, files, limit):
    """Each C++ line over the limit, with a tab, or with trailing white space, as 'file:line: what'."""
    findings = []
    for name in files:
        if not name.endswith(CXX_SUFFIXES):
            continue
        with open(os.path.join(root, name), encoding="utf-8") as f:
            for number, line in enumerate(f.read().split("\n"), 1):
                if len(line) > limit:
                    findings.append(f"{name}:{number}: {len(line)} code points, over the limit of {limit}")
                if "\t" in line:
                    findings.append(f"{name}:{number}: a tab")
                if line != line.rstrip():
                    findings.append(f"{name}:{number}: trailing white space")
    return findings


def python_findings(root, files):
    """flake8's findings on the Python files, with ROOT/.flake8 as the configuration."""
    python = [name for name in files if name.endswith(".py")]
    if not python:
        return []
    run = subprocess.run([sys.executable, "-m", "flake8", "--config", os.path.join(root, ".flake8"), *python],
                         cwd=root, capture_output=True, text=True)
    if run.returncode not in (0, 1) or (run.returncode == 1 and not run.stdout.strip()):
        raise SystemExit(f"style: flake8 did not run (exit {run.returncode}): {run.stderr.strip()}")
    return run.stdout.splitlines()


def check(root, files):
    limit = column_limit(root)
    return cxx_findings(root, files, limit) + python_findings(root, files)


def self_test(root):
    """Every planted violation is reported, and nothing else: the clean files pass."""
    limit = column_limit(root)
    wide = "Σ" * (limit - len('auto s = "";'))
    clean = {
        "src/clean.cpp": f'auto s = "{wide}";\nint f() {{ return 1; }}\n',
        "clean.py": 'import os\n\nprint(os.sep, "' + "Σ" * (limit - len('print(os.sep, "")')) + '")\n',
    }
    planted = {
        "src/long.cpp": ("x" * (limit + 1)) + "\n",
        "src/tab.hpp": "int f() {\n\treturn 1;\n}\n",
        "src/trailing.h": "int g(); \n",
        "long.py": "x = '" + "y" * limit + "'\n",
        "unused.py": "import os\n",
        "trailing.py": "x = 1   \n",
        "blank_end.py": "x = 1\n\n",
        "crowded.py": "x = 1\n\ndef f():\n    return x\n",
        "spread.py": "x = 1\n\n\n\ny = 2\n",
    }
    with tempfile.TemporaryDirectory() as scratch:
        for config in (".clang-format", ".flake8"):
            with open(os.path.join(root, config), encoding="utf-8") as f, \
                    open(os.path.join(scratch, config), "w", encoding="utf-8") as out:
                out.write(f.read())
        for name, text in {**clean, **planted}.items():
            os.makedirs(os.path.dirname(os.path.join(scratch, name)), exist_ok=True)
            with open(os.path.join(scratch, name), "w", encoding="utf-8") as f:
                f.write(text)
        findings = check(scratch, sorted(clean))
        if findings:
            print("self-test: clean files were reported:\n  " + "\n  ".join(findings))
            return 1
        missed = [name for name in planted if not any(line.startswith(name + ":") for line in check(scratch, [name]))]
        if missed:
            print("self-test: planted violations were not caught in " + ", ".join(missed))
            return 1
    print(f"self-test: {len(planted)} planted violations caught, {len(clean)} clean files passed")
    return 0


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--self-test"):
        print(__doc__)
        return 2
    root = argv[1]
    if len(argv) == 3:
        return self_test(root)
    files = tracked(root)
    counts = {kind: sum(name.endswith(suffixes) for name in files) for kind, suffixes in
              (("C++", CXX_SUFFIXES), ("Python", (".py",)))}
    if not all(counts.values()):
        print(f"style: git lists no file of some kind under {root}: {counts}")
        return 1
    findings = check(root, files)
    for line in findings:
        print(line)
    if findings:
        print(f"style: {len(findings)} findings; C++ lines are reflowed with clang-format-14 --style=file")
        return 1
    print(f"style: {counts['C++']} C++ and {counts['Python']} Python files follow the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
