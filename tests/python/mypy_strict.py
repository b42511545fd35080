#!/usr/bin/env python3
"""mypy over the package with the project's configuration: every module clean, except those still pending.

    mypy_strict.py --package python/normcheck --config-file pyproject.toml --cache-dir DIR [--pending FILE...]
                   [--search-path DIR]

Runs mypy under this interpreter with the configuration file's settings (pyproject.toml's [tool.mypy]
says strict), so that the test checks what a plain ``mypy`` in the checkout checks. A module with an
error fails the test unless it is named by --pending; a pending module without errors fails it too (it is
clean now: take it off the list, in tests/python/CMakeLists.txt), so the list only shrinks. A mypy that
could not run fails.
Exit status 0 or 1. Standard library only (mypy itself excepted).
"""

import argparse
import os
import re
import subprocess
import sys

ERROR = re.compile(r"^(?P<file>[^:\n]+\.py):(?P<line>[0-9]+): error: ", re.M)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", required=True)
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--pending", nargs="*", default=[], help="modules not yet strict-clean")
    parser.add_argument("--search-path", help="where the package's imports are found (MYPYPATH)")
    options = parser.parse_args()
    package = os.path.abspath(options.package)
    command = [sys.executable, "-m", "mypy", "--config-file", os.path.abspath(options.config_file),
               "--no-error-summary", "--cache-dir", options.cache_dir, package]
    print("$ " + " ".join(command), flush=True)
    environment = dict(os.environ)
    if options.search_path:
        environment["MYPYPATH"] = os.path.abspath(options.search_path)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)
    if done.returncode not in (0, 1) or (done.returncode == 1 and not ERROR.search(done.stdout)):
        print(f"FAILED: mypy exited with {done.returncode}\n{done.stdout}\n{done.stderr}")
        return 1
    errors = {}
    for found in ERROR.finditer(done.stdout):
        path = os.path.abspath(found.group("file"))
        errors[path] = errors.get(path, 0) + 1
    pending = {os.path.abspath(p) for p in options.pending}
    modules = sorted(os.path.join(folder, name) for folder, _, names in os.walk(package)
                     for name in names if name.endswith(".py"))
    failures = []
    for module in modules:
        count = errors.get(module, 0)
        name = os.path.relpath(module, os.path.dirname(package))
        if module in pending:
            print(f"{name}: pending, {count} errors")
            if count == 0:
                failures.append(f"{name} is strict-clean now: take it off the pending list")
        else:
            print(f"{name}: {'clean' if count == 0 else f'{count} errors'}")
            if count:
                failures.append(f"{name}: {count} errors")
    outside = sorted(set(errors) - set(modules))
    failures += [f"{path}: {errors[path]} errors" for path in outside]
    unknown = sorted(pending - set(modules))
    failures += [f"{path} is pending but is not a module of the package" for path in unknown]
    if failures:
        print(done.stdout)
        print("FAILED: " + "; ".join(failures))
        return 1
    print(f"mypy: {len(modules) - len(pending)} modules clean, {len(pending)} pending")
    return 0


if __name__ == "__main__":
    sys.exit(main())
