#!/usr/bin/env python3
"""Every source of the library, the teaching library and the command line compiles on its own.

    includes.py --compiler CXX --root CHECKOUT -I DIR ... [--jobs N] [--heavy HEADER]
    includes.py --self-test --compiler CXX

The build compiles the sources sixteen to a unit (CMake's unity builds, NORMCHECK_UNITY), where a file can
use a header that only an earlier file of its batch included, and still compile. This test runs the
compiler on each file of src/ alone (-fsyntax-only: parsed and checked, no code generated), so that every
file includes what it uses and the batches can be cut anywhere. src/python/ is left out: it is built alone
already, and only where Python's headers are.

Most of the time of such a check is spent parsing one header, the heavy one (--heavy; by default
boost/multiprecision/gmp.hpp, about 3.5 of the 4 seconds a file takes), again for every file. So the
check precompiles it, once for each way the files come to it, and compiles a file against the
precompiled header only where that is the same program: the file's preprocessed text must begin with
the precompiled text, word for word and #define for #define (g++ -E -dD, line markers aside). Its own
lines and everything it includes after the heavy header are still parsed for it alone. How a file comes
to the heavy header is read from its line markers: the headers it had finished before it (errors.hpp,
say), then the heavy header; a way at least three files share is precompiled. A file whose text differs,
that does not reach the heavy header, whose way is its own or whose precompiled header does not build is
compiled plainly, as before.

--self-test plants, with <vector> as the heavy header, a file that uses std::vector without including
<vector> and one that uses it before including it (which a precompiled <vector> would hide), and
requires the check to name exactly those two while compiling the others against precompiled headers.
Exit status 0 when every file compiles, 1 otherwise.
"""

import argparse
import concurrent.futures
import dataclasses
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

HEAVY = "boost/multiprecision/gmp.hpp"
LINE_MARKER = re.compile(r'^# \d+ "((?:[^"\\]|\\.)*)"((?: \d)*)$')
IMPLICIT = ("<built-in>", "<command-line>", "/usr/include/stdc-predef.h")


@dataclasses.dataclass(frozen=True)
class Options:
    compiler: str
    includes: Tuple[str, ...]
    heavy: str
    jobs: int

    def command(self, *arguments: str) -> List[str]:
        return [self.compiler, "-std=c++20", "-DBOOST_ALL_NO_LIB", *(f"-I{d}" for d in self.includes), *arguments]


def sources(root: pathlib.Path) -> List[pathlib.Path]:
    """The C++ sources the unity builds batch: src/**/*.cpp but src/python/."""
    return sorted(p for p in (root / "src").rglob("*.cpp") if "python" not in p.relative_to(root / "src").parts)


def preprocessed(options: Options, source: pathlib.Path) -> Optional[str]:
    """`source` preprocessed with its #define lines kept and line markers in; None when that fails."""
    done = subprocess.run(options.command("-E", "-dD", str(source)), capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


@dataclasses.dataclass(frozen=True)
class Prefix:
    way: Tuple[str, ...]  # the headers finished, outermost first, when the heavy header was entered
    digest: bytes  # of what the compiler parses up to the heavy header's end: lines but markers and blanks


def prefix(text: str, heavy: str) -> Optional[Prefix]:
    """How preprocessed text came to the heavy header, and what it held up to that header's end; None if it
    never entered it. One pass over the line markers: flag 1 enters a file, flag 2 returns to one."""
    stack: List[str] = []
    finished: List[Tuple[int, str]] = []  # (depth, path) of finished headers not inside a finished one
    way: Optional[Tuple[str, ...]] = None
    depth_of_heavy = 0
    digest = hashlib.sha256()
    for line in text.splitlines():
        marker = LINE_MARKER.match(line)
        if not marker:
            if line.strip():
                digest.update(line.encode() + b"\n")
            continue
        path, flags = marker.group(1), marker.group(2).split()
        if "1" in flags:
            if way is None and path.endswith("/" + heavy):
                way, depth_of_heavy = tuple(p for _, p in finished if p not in IMPLICIT), len(stack)
            stack.append(path)
        elif "2" in flags:
            while stack and stack[-1] != path:
                depth, left = len(stack), stack.pop()
                finished = [f for f in finished if f[0] <= depth] + [(depth, left)]
            if way is not None and len(stack) <= depth_of_heavy:
                return Prefix(way, digest.digest())
    return None


def read(options: Options, source: pathlib.Path) -> Optional[Prefix]:
    text = preprocessed(options, source)
    return prefix(text, options.heavy) if text is not None else None


@dataclasses.dataclass
class Precompiled:
    header: pathlib.Path  # the header to -include; its .gch beside it
    digest: bytes  # of what the header preprocesses to


def precompile(options: Options, folder: pathlib.Path, index: int, way: Tuple[str, ...]) -> Optional[Precompiled]:
    """The heavy header precompiled after the headers of `way`; None when it does not build."""
    header = folder / f"prefix{index}.hpp"
    header.write_text("".join(f'#include "{os.path.abspath(p)}"\n' for p in way) + f"#include <{options.heavy}>\n")
    read_back = read(options, header)
    built = subprocess.run(options.command("-x", "c++-header", str(header), "-o", f"{header}.gch"),
                           capture_output=True, text=True, check=False)
    if read_back is None or built.returncode != 0:
        return None
    return Precompiled(header, read_back.digest)


def compile_alone(options: Options, source: pathlib.Path, precompiled: Optional[Precompiled]) -> str:
    """The compiler's complaints about `source` compiled on its own ("" when it compiles)."""
    extra = ["-include", str(precompiled.header)] if precompiled else []
    done = subprocess.run(options.command("-fsyntax-only", *extra, str(source)), capture_output=True, text=True,
                          check=False)
    return "" if done.returncode == 0 else (done.stderr or done.stdout or f"exit {done.returncode}")


def check(options: Options, files: Sequence[pathlib.Path]) -> Tuple[List[str], int]:
    """One failure message per file that does not compile alone, and how many files were compiled against
    a precompiled header."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool, \
            tempfile.TemporaryDirectory() as folder:
        prefixes = list(pool.map(lambda f: read(options, f), files))
        ways = [p.way if p is not None else None for p in prefixes]
        # Precompiling takes about as long as parsing the heavy header for two files (it writes 200 MB).
        shared = sorted({w for w in ways if w is not None and ways.count(w) >= 3})
        built = list(pool.map(lambda i: precompile(options, pathlib.Path(folder), i, shared[i]), range(len(shared))))
        by_way: Dict[Tuple[str, ...], Precompiled] = {w: p for w, p in zip(shared, built) if p is not None}

        def against(i: int) -> Optional[Precompiled]:
            own = prefixes[i]
            if own is None:
                return None
            found = by_way.get(own.way)
            return found if found is not None and found.digest == own.digest else None

        chosen = [against(i) for i in range(len(files))]
        errors = list(pool.map(lambda i: compile_alone(options, files[i], chosen[i]), range(len(files))))
    failures = []
    for source, message in zip(files, errors):
        if message:
            first = "\n".join(message.splitlines()[:12])
            failures.append(f"{source} does not compile on its own:\n{first}")
    return failures, sum(c is not None for c in chosen)


def self_test(compiler: str) -> int:
    planted = {
        "fine.cpp": "#include <vector>\nstd::vector<int> v;\n",
        "also_fine.cpp": '#include "first.hpp"\n#include <vector>\nstd::vector<int> v;\n',
        "fine_too.cpp": '#include "first.hpp"\n#include <vector>\nstd::vector<long> v;\n',
        "same.cpp": "#include <vector>\nstd::vector<char> v;\n",
        "third.cpp": "#include <vector>\nstd::vector<short> v;\n",
        "leans.cpp": "std::vector<int> w;\n",  # <vector> from a batch-mate
        "early.cpp": '#include "first.hpp"\nstd::vector<int>* early;\n#include <vector>\n',  # hidden by <vector>
    }
    with tempfile.TemporaryDirectory() as folder:
        root = pathlib.Path(folder)
        (root / "src" / "core").mkdir(parents=True)
        (root / "src" / "python").mkdir()
        (root / "include").mkdir()
        (root / "include" / "first.hpp").write_text("#pragma once\n#include <cstddef>\nusing size = std::size_t;\n")
        for name, text in planted.items():
            (root / "src" / "core" / name).write_text(text)
        (root / "src" / "python" / "module.cpp").write_text("#include <Python.h>\n")  # left out
        found = [p.name for p in sources(root)]
        options = Options(compiler, (str(root / "include"),), "vector", 2)
        failures, precompiled = check(options, sources(root))
    if found != sorted(planted):
        print(f"self-test: the sources are {found}, not {sorted(planted)}")
        return 1
    named = sorted(n for n in planted if any(f"{n} does not compile" in f for f in failures))
    if named != ["early.cpp", "leans.cpp"] or len(failures) != 2:
        print("self-test: the check did not name exactly early.cpp and leans.cpp:\n" + "\n".join(failures))
        return 1
    if precompiled != 5:
        print(f"self-test: {precompiled} files were compiled against a precompiled <vector>, not the 5 that can be")
        return 1
    print("self-test: a file that leans on a batch-mate's include is named, and one that a precompiled header "
          "would hide; 5 files compiled against precompiled headers")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--root", type=pathlib.Path)
    parser.add_argument("-I", dest="includes", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--heavy", default=HEAVY, help="the header to precompile, as it is #included")
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
    failures, precompiled = check(Options(args.compiler, tuple(args.includes), args.heavy, args.jobs), files)
    for failure in failures:
        print(failure)
    print(f"{len(files) - len(failures)} of {len(files)} sources compile on their own "
          f"({precompiled} against a precompiled {args.heavy})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
