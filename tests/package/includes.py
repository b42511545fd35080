#!/usr/bin/env python3
"""Every source of the library, the teaching library and the command line compiles on its own.

    includes.py --compiler CXX --root CHECKOUT -I DIR ... [--jobs N]
    includes.py --self-test --compiler CXX

The build compiles the sources sixteen to a unit (CMake's unity builds, NORMCHECK_UNITY), where a file can
use a header that only an earlier file of its batch included, and still compile. This test runs the
compiler on each file of src/ alone (-fsyntax-only: parsed and checked, no code generated), so that every
file includes what it uses and the batches can be cut anywhere. src/python/ is left out: it is built alone
already, and only where Python's headers are.

--self-test plants a file that uses std::vector without including <vector> and requires the check to
name it. Exit status 0 when every file compiles, 1 otherwise.
"""

import argparse
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import List, Sequence, Tuple


def sources(root: pathlib.Path) -> List[pathlib.Path]:
    """The C++ sources the unity builds batch: src/**/*.cpp but src/python/."""
    return sorted(p for p in (root / "src").rglob("*.cpp") if "python" not in p.relative_to(root / "src").parts)


def compile_alone(compiler: str, includes: Sequence[str], source: pathlib.Path) -> Tuple[pathlib.Path, str]:
    """The compiler's complaints about `source` compiled on its own ("" when it compiles)."""
    command = [compiler, "-std=c++20", "-fsyntax-only", "-DBOOST_ALL_NO_LIB"]
    command += [f"-I{d}" for d in includes] + [str(source)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return source, "" if done.returncode == 0 else (done.stderr or done.stdout or f"exit {done.returncode}")


def check(compiler: str, includes: Sequence[str], files: Sequence[pathlib.Path], jobs: int) -> List[str]:
    """One failure message per file that does not compile alone."""
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for source, errors in pool.map(lambda f: compile_alone(compiler, includes, f), files):
            if errors:
                first = "\n".join(errors.splitlines()[:12])
                failures.append(f"{source} does not compile on its own:\n{first}")
    return failures


def self_test(compiler: str) -> int:
    with tempfile.TemporaryDirectory() as folder:
        root = pathlib.Path(folder)
        (root / "src" / "core").mkdir(parents=True)
        (root / "src" / "python").mkdir()
        (root / "src" / "core" / "fine.cpp").write_text("#include <vector>\nstd::vector<int> v;\n")
        (root / "src" / "core" / "leans.cpp").write_text("std::vector<int> w;\n")  # <vector> from a batch-mate
        (root / "src" / "python" / "module.cpp").write_text("#include <Python.h>\n")  # left out
        found = [p.name for p in sources(root)]
        failures = check(compiler, [], sources(root), 2)
    if found != ["fine.cpp", "leans.cpp"]:
        print(f"self-test: the sources are {found}, not fine.cpp and leans.cpp")
        return 1
    if len(failures) != 1 or "leans.cpp" not in failures[0]:
        print("self-test: the check did not name exactly leans.cpp:\n" + "\n".join(failures))
        return 1
    print("self-test: a file that leans on a batch-mate's include is named")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--root", type=pathlib.Path)
    parser.add_argument("-I", dest="includes", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.compiler)
    if args.root is None:
        parser.error("--root is required")
    files = sources(args.root)
    if not files:
        print(f"no sources under {args.root / 'src'}: nothing was checked")
        return 1
    failures = check(args.compiler, args.includes, files, args.jobs)
    for failure in failures:
        print(failure)
    print(f"{len(files) - len(failures)} of {len(files)} sources compile on their own")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
