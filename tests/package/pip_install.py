#!/usr/bin/env python3
"""`pip install` of a read-only checkout, and of an sdist built from it, each into a fresh virtual environment.

    pip_install.py --source CHECKOUT --work DIR --constraints .ci/requirements.txt
    pip_install.py --self-test --work DIR

Run by the virtual environment of .ci/setup --tests (it has torch, pytest and the sdist builder). Steps:
1. copy the checkout's files (those git tracks or would track) into DIR/checkout/tree, make that copy a
   git repository with everything committed, and make it read-only (chmod -R a-w);
2. pip install it into a fresh virtual environment: the package builds its executable with CMake, in
   DIR/checkout/build (and `pip install` of its python/ folder alone is refused, saying to install from
   the top folder);
3. in that environment: `normcheck --version` is the package's __version__, normcheck.torch imports, the
   package finds its own executable (not $NORMCHECK, not PATH), checks a bundled case that passes and one
   that fails through run_check, its extension normcheck._core gives every file under cases/ the very
   report the executable gives (with and without --require-gate, by path and as text), and the project's
   own pytest runs beside the installed package;
   then `pip wheel --no-build-isolation` twice with that build folder, the second compiling nothing, and
   the wheel installs into a fresh environment with nothing fetched and nothing built, where 3 holds too;
4. build an sdist from the read-only copy, check what it holds, unpack it into DIR/sdist/tree as pip
   would, and do 2 and 3 again from there (building in DIR/sdist/build: with ccache installed, the
   same relative paths make this second build reuse the first's objects);
5. build the sdist once more as a Python without development headers would (CMake looks for them in an
   empty folder): the build says in one line that it skips normcheck._core, and 3 holds with
   normcheck.native absent and naming python3-dev;
6. the copy is unchanged: the same files, sizes, modes and times, and `git status --porcelain --ignored`
   empty (root ignores the missing write bits, so the listing is what proves nothing was written).

A fresh environment sees the running environment's packages (torch, pytest, pip itself) through a .pth file,
so that only normcheck is installed into it. Exit status 0 when every check holds, 1 otherwise.
"""

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import time

STEP_TIMEOUT = 2400  # one build of the executable: minutes, many more on a loaded machine


class Failure(Exception):
    pass


def run(command, with_stderr=False, **options):
    """Runs a command, printing it; its output (and standard error, if asked) is returned, and a non-zero exit
    is a failure."""
    print("$ " + " ".join(map(str, command)), flush=True)
    try:
        done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=STEP_TIMEOUT,
                              **options)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(map(str, command))} did not finish within {STEP_TIMEOUT} s") from None
    if done.returncode != 0:
        raise Failure(f"{' '.join(map(str, command))} exited with {done.returncode}\n{done.stdout[-6000:]}\n"
                      f"{done.stderr[-6000:]}")
    return done.stdout + done.stderr if with_stderr else done.stdout


def tracked_files(source):
    """The checkout's files that git tracks or would track (not ignored), relative to it."""
    listing = run(["git", "-C", source, "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    return sorted(p for p in listing.split("\0") if p and os.path.isfile(os.path.join(source, p)))


def snapshot(tree):
    """Every path under tree with its kind, size, mode and modification time (what a write would change)."""
    found = {}
    for folder, folders, files in os.walk(tree):
        for name in folders + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            found[os.path.relpath(path, tree)] = (stat.S_IFMT(info.st_mode), info.st_size, stat.S_IMODE(info.st_mode),
                                                  info.st_mtime_ns)
    return found


def git_status(tree):
    # --no-optional-locks: git status itself must not refresh the index of the copy it inspects.
    return run(["git", "--no-optional-locks", "-C", tree, "status", "--porcelain", "--ignored",
                "--untracked-files=all"])


def make_read_only(tree):
    for folder, folders, files in os.walk(tree):
        for name in files + folders:
            path = os.path.join(folder, name)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o222)
    os.chmod(tree, stat.S_IMODE(os.lstat(tree).st_mode) & ~0o222)


def make_writable(tree):
    if not os.path.exists(tree):
        return
    os.chmod(tree, stat.S_IMODE(os.lstat(tree).st_mode) | 0o200)
    for folder, folders, files in os.walk(tree):
        for name in files + folders:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | 0o200)


def clean_environment(**extra):
    """This environment without what would point the package at another executable or source."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "PYTHONHOME", "NORMCHECK", "VIRTUAL_ENV", "NORMCHECK_TORCH_PYTHON")}
    environment["PATH"] = os.pathsep.join(p for p in environment.get("PATH", "").split(os.pathsep)
                                          if not os.path.isfile(os.path.join(p, "normcheck")))
    environment.update(extra)
    return environment


def fresh_venv(folder):
    """A new virtual environment that also sees this one's packages (torch, pytest, pip) through a .pth file.
    It gets no pip of its own: `python -m pip` there runs this environment's pip, which installs into the
    new one (its sys.prefix), and making the environment takes a tenth of a second instead of six."""
    shutil.rmtree(folder, ignore_errors=True)
    run([sys.executable, "-m", "venv", "--without-pip", folder])
    python = os.path.join(folder, "bin", "python")
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    with open(os.path.join(purelib, "running-environment.pth"), "w", encoding="utf-8") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    return python


PROBE = """
import json, os, sys
import normcheck, normcheck.check, normcheck.torch, torch
print(json.dumps({"version": normcheck.__version__, "package": os.path.dirname(normcheck.__file__),
                  "executable": normcheck.check.find_executable(), "torch": torch.__version__}))
"""

CHECK = """
import sys
import normcheck
from normcheck.check import NormcheckFailure, assert_passes
[verdict] = assert_passes(sys.argv[1])
print("pass:", verdict.file, verdict.verdict)
try:
    assert_passes(sys.argv[2])
except NormcheckFailure as e:
    print("fail:", e.verdict, ",".join(e.explanations))
else:
    sys.exit("a failing dump passed")
"""


NATIVE = """
import json, os, subprocess, sys, warnings
import normcheck, normcheck.native
from normcheck.check import find_executable, run_check
cases = sys.argv[1]
assert normcheck.native.available(), "the installed package has no extension"
extension = os.path.dirname(normcheck._core.__file__)
assert extension == os.path.dirname(normcheck.__file__), extension
compared = 0
for gate in (False, True):
    native = [v.report for v in normcheck.native.check(cases, require_gate=gate, jobs=2)]
    executable = [v.report for v in run_check(cases, require_gate=gate, timeout=600)]
    assert len(native) == len(executable) > 100, (len(native), len(executable))
    for a, b in zip(native, executable):
        assert a == b, ("the extension and the executable differ", gate, a["file"], a, b)
    compared += len(native)
    statuses = sorted({r["status"] for r in native})
for report in executable[:40]:
    with open(report["file"], encoding="utf-8") as f:
        text = f.read()
    assert normcheck.native.check_text(text, name=report["file"]).report == report, report["file"]
listed = subprocess.run([find_executable(), "names", "--json"], capture_output=True, text=True, check=True).stdout
assert normcheck.native.names() == json.loads(listed), "the extension lists other names than the executable"
print(f"native: {compared} reports equal to the executable's; statuses {statuses}; the same names")
"""

NO_NATIVE = """
import glob, os, sys
import normcheck, normcheck.native
from normcheck.check import NormcheckError
assert not normcheck.native.available(), "a build without headers holds an extension"
extensions = [f for f in glob.glob(os.path.join(os.path.dirname(normcheck.__file__), "_core*"))
              if not f.endswith(".pyi")]
assert not extensions, ("an extension file was installed", extensions)
try:
    normcheck.native.check(sys.argv[1])
except NormcheckError as e:
    assert "python3-dev" in str(e) and "run_check" in str(e), str(e)
else:
    sys.exit("normcheck.native.check ran without an extension")
print("native: absent, and normcheck.native says python3-dev builds it")
"""


def check_installed(venv_python, checkout, work, label, native=True):
    """The installed package in venv_python: version, executable, torch, a passing and a failing check, and
    its extension (``native``) or the error that names what building one needs."""
    bin_folder = os.path.dirname(venv_python)
    # $NORMCHECK names something that is not normcheck: the package must not take it.
    environment = clean_environment(NORMCHECK="/nonexistent/normcheck")
    command = os.path.join(bin_folder, "normcheck")
    version_line = run([command, "--version"], env=environment, cwd=work).strip()
    found = re.search(r"\b([0-9]+\.[0-9]+\.[0-9]+)\b", version_line)
    if not found:
        raise Failure(f"{label}: normcheck --version printed {version_line!r}")
    probe = json.loads(run([venv_python, "-c", PROBE], env=environment, cwd=work))
    print(f"{label}: normcheck --version: {version_line!r}; package {probe}", flush=True)
    if probe["version"] != found.group(1):
        raise Failure(f"{label}: the package's __version__ {probe['version']} is not the executable's {found.group(1)}")
    expected_version = cmake_version(checkout)
    if probe["version"] != expected_version:
        raise Failure(f"{label}: version {probe['version']}, but project() in CMakeLists.txt says {expected_version}")
    if probe["executable"] != os.path.join(probe["package"], "bin", "normcheck"):
        raise Failure(f"{label}: the package runs {probe['executable']}, not its own "
                      f"{os.path.join(probe['package'], 'bin', 'normcheck')}")
    if not probe["package"].startswith(os.path.dirname(bin_folder)):
        raise Failure(f"{label}: normcheck was imported from {probe['package']}, not from the fresh environment")
    passing = os.path.join(checkout, "cases", "gate", "correct_scaled_sum_float32.json")
    failing = os.path.join(checkout, "tests", "gate", "inputs", "local_mean_no_claim.json")
    output = run([venv_python, "-c", CHECK, passing, failing], env=environment, cwd=work)
    print(output, end="", flush=True)
    if "pass: " not in output or not re.search(r"^fail: fail .*local_mean", output, re.M):
        raise Failure(f"{label}: the bundled cases were not judged as expected:\n{output}")
    output = run([venv_python, "-c", NATIVE if native else NO_NATIVE, os.path.join(checkout, "cases")],
                 env=environment, cwd=work)
    print(f"{label}: {output.strip()}", flush=True)
    # The project's own tests beside the installed package, the environment's bin/ first on PATH as when
    # it is activated: its entry point registers the plugin, the checkout's conftest must not register it a
    # second time.
    basetemp = os.path.join(work, f"pytest-{label}")
    beside = clean_environment(PYTHONPATH=os.path.join(checkout, "python"), PYTHONDONTWRITEBYTECODE="1")
    beside["PATH"] = os.pathsep.join([bin_folder, beside["PATH"]])
    # There the package is the checkout's, which has no executable built in: the normcheck command must
    # say so, not run itself for ever.
    done = subprocess.run([command, "--version"], env=beside, cwd=work, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT)
    if done.returncode != 2 or "no normcheck executable" not in done.stderr:
        raise Failure(f"{label}: normcheck with a checkout on PYTHONPATH and no $NORMCHECK exited with "
                      f"{done.returncode}: {done.stdout}{done.stderr}")
    beside["NORMCHECK"] = probe["executable"]
    output = run([venv_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}",
                  os.path.join(checkout, "tests", "python", "test_dump.py")], env=beside, cwd=work)
    if not re.search(r"\b[0-9]+ passed\b", output) or "failed" in output or "error" in output.lower():
        raise Failure(f"{label}: the project's pytest beside the installed package:\n{output}")
    print(f"{label}: pytest beside the installed package: {output.strip().splitlines()[-1]}", flush=True)


def real_cmake(work):
    """The CMake executable that `cmake` on PATH runs in the end (CMAKE_COMMAND)."""
    script = os.path.join(work, "where.cmake")
    with open(script, "w", encoding="utf-8") as f:
        f.write('message(STATUS "${CMAKE_COMMAND}")\n')
    found = run(["cmake", "-P", script]).strip()
    os.remove(script)
    if not found.startswith("-- ") or not os.path.isfile(found[3:]):
        raise Failure(f"cmake -P printed {found!r}, not its own path")
    return found[3:]


def cmake_version(checkout):
    with open(os.path.join(checkout, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(normcheck\s+VERSION\s+([0-9][0-9.]*)", f.read()).group(1)


def check_sdist(path):
    """The sdist holds what builds the executable and the package, and none of the tests or build outputs."""
    with tarfile.open(path) as archive:
        names = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
    for needed in ("pyproject.toml", "CMakeLists.txt", "src/cli/main.cpp", "src/python/core_module.cpp",
                   "python/normcheck/_core.pyi", "cmake/version.hpp.in",
                   "python/normcheck/__init__.py", "python/normcheck/check.py", "python/normcheck/py.typed",
                   "PKG-INFO", "LICENSE"):
        if needed not in names:
            raise Failure(f"the sdist {path} lacks {needed}")
    unwanted = [n for n in names if n.startswith(("tests/", "build", "bench/", ".ci/"))
                or "__pycache__" in n or n.endswith(".egg-info")]
    if unwanted:
        raise Failure(f"the sdist {path} holds {unwanted[:10]}")
    print(f"sdist {os.path.basename(path)}: {len(names)} files", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source")
    parser.add_argument("--work", required=True)
    parser.add_argument("--constraints", help="pins for pip, build requirements included")
    parser.add_argument("--self-test", action="store_true", help="only show that a write is caught")
    options = parser.parse_args()
    work = os.path.abspath(options.work)
    if options.self_test:
        return self_test(work)
    if not options.source or not options.constraints:
        parser.error("--source and --constraints are required")
    # Installs 2 to 4 build the extension, so the interpreter must have its development headers (5 builds as
    # one without them would); without them those installs would pass without ever building it.
    headers = sysconfig.get_paths().get("include") or ""
    if not os.path.isfile(os.path.join(headers, "Python.h")):
        print(f"FAILED: {sys.executable} has no development headers (no Python.h in {headers!r}), so the package "
              "test cannot build the extension normcheck._core; on Debian: apt-get install python3-dev "
              "(.ci/setup --tests installs it)")
        return 1
    make_writable(work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    checkout = os.path.join(work, "checkout", "tree")

    # 1. The read-only copy, as a git repository with everything committed.
    source = os.path.abspath(options.source)
    for relative in tracked_files(source):
        target = os.path.join(checkout, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(source, relative), target)
    git = ["git", "-C", checkout, "-c", "user.name=normcheck", "-c", "user.email=normcheck@localhost"]
    run(["git", "init", "-q", checkout])
    run(git + ["add", "-A"])
    run(git + ["commit", "-q", "-m", "copy"])
    make_read_only(checkout)
    before, status_before = snapshot(checkout), git_status(checkout)
    if status_before:
        raise Failure(f"the copy is not clean before installing:\n{status_before}")

    # Build requirements pinned like everything else; the build on both cores, through ccache if installed.
    pip_environment = clean_environment(PIP_CONSTRAINT=os.path.abspath(options.constraints),
                                        CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2),
                                        PIP_NO_INPUT="1")
    if shutil.which("ccache"):
        pip_environment.update(CMAKE_CXX_COMPILER_LAUNCHER="ccache", CCACHE_BASEDIR=work)
    # The CMake binary itself first on PATH: a wrapper in front of it (a version manager's shim) can be
    # slow enough under load for the build backend to give up asking its version.
    tools = os.path.join(work, "tools")
    os.makedirs(tools)
    os.symlink(real_cmake(work), os.path.join(tools, "cmake"))
    pip_environment["PATH"] = os.pathsep.join([tools, pip_environment["PATH"]])

    def install(python, tree, build="build", *options):
        build = os.path.join(os.path.dirname(tree), build)
        return run([python, "-m", "pip", "install", *(options or ["--quiet"]), "--config-settings",
                    f"build-dir={build}", tree], with_stderr=True, env=pip_environment, cwd=work)

    try:
        # 2 and 3: from the checkout.
        python = fresh_venv(os.path.join(work, "checkout", "venv"))
        # python/ alone cannot build the executable: `pip install ./python` says where to install from.
        done = subprocess.run([python, "-m", "pip", "install", os.path.join(checkout, "python")], env=pip_environment,
                              cwd=work, capture_output=True, text=True, timeout=STEP_TIMEOUT)
        if done.returncode == 0 or "run `pip install .` there" not in done.stdout + done.stderr:
            raise Failure(f"pip install of python/ exited with {done.returncode} without pointing to the top folder:\n"
                          f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
        print("pip install ./python: refused, pointing to the top folder", flush=True)
        install(python, checkout)
        check_installed(python, checkout, work, "checkout")

        # 3b: the cluster's route, `pip wheel`, in the build folder of 2 kept for reuse. Reuse takes
        # --no-build-isolation (scikit-build-core and nanobind installed beside pip): under isolation every pip
        # run has a new build environment, and scikit-build-core then clears the folder's CMake configuration,
        # objects included. The first wheel so built starts the folder afresh; the second compiles nothing.
        wheels = os.path.join(work, "wheels")

        def reusing_wheel():
            return run([python, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--config-settings",
                        f"build-dir={os.path.join(work, 'checkout', 'build')}", "--wheel-dir", wheels, checkout],
                       with_stderr=True, env=pip_environment, cwd=work)

        started = time.monotonic()
        reusing_wheel()
        first = time.monotonic() - started
        started = time.monotonic()
        output = reusing_wheel()
        built = time.monotonic() - started
        # CMake's build output names every object it compiles; scikit-build-core's, that the build ran.
        compiled = re.findall(r"Building CXX object \S+", output)
        if compiled or "*** Building project" not in output:
            raise Failure(f"pip wheel into a reused build folder compiled {len(compiled)} objects again "
                          f"({', '.join(compiled[:5])}) or ran no build:\n{output[-3000:]}")
        [wheel] = [os.path.join(wheels, n) for n in os.listdir(wheels) if n.endswith(".whl")]
        python = fresh_venv(os.path.join(work, "wheel-venv"))
        started = time.monotonic()
        run([python, "-m", "pip", "install", "--quiet", "--no-index", wheel], with_stderr=True, env=pip_environment,
            cwd=work)
        print(f"pip wheel without build isolation: {first:.1f} s, again reusing that build: {built:.1f} s, compiling "
              f"nothing; installing the wheel: {time.monotonic() - started:.1f} s",
              flush=True)
        check_installed(python, checkout, work, "wheel")

        # 4: from an sdist of the checkout.
        dist = os.path.join(work, "dist")
        run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", dist, checkout],
            env=pip_environment, cwd=work)
        [sdist] = [os.path.join(dist, n) for n in os.listdir(dist) if n.endswith(".tar.gz")]
        check_sdist(sdist)
        unpacked = os.path.join(work, "sdist")
        with tarfile.open(sdist) as archive:
            [top] = {n.split("/", 1)[0] for n in archive.getnames()}
            archive.extractall(unpacked)
        tree = os.path.join(unpacked, "tree")
        os.rename(os.path.join(unpacked, top), tree)
        python = fresh_venv(os.path.join(unpacked, "venv"))
        install(python, tree)
        check_installed(python, checkout, work, "sdist")

        # 5: the sdist again, built as by a Python without development headers (they are looked for in an
        # empty folder): the executable and the package install, the extension is skipped saying so.
        python = fresh_venv(os.path.join(unpacked, "venv-headerless"))
        no_headers = os.path.join(work, "no-headers")
        os.makedirs(no_headers)
        log = install(python, tree, "build-headerless", "-v", "--config-settings",
                      f"cmake.define.NORMCHECK_PYTHON_HEADERS={no_headers}")
        skipped = [line for line in log.splitlines() if "not building the extension normcheck._core" in line]
        if len(skipped) != 1 or "python3-dev" not in skipped[0]:
            raise Failure(f"a build without headers did not say once that it skips the extension: {skipped}")
        check_installed(python, checkout, work, "headerless", native=False)
    finally:
        after, status_after = snapshot(checkout), git_status(checkout)
        make_writable(checkout)

    # 6: nothing written into the checkout.
    problem = written(before, after, status_after)
    if problem:
        raise Failure(f"installing wrote into the read-only checkout: {problem}")
    print(f"the read-only checkout is unchanged ({len(before)} paths, git status clean)", flush=True)
    return 0


def written(before, after, status_after):
    """What changed between two snapshots and the git status after, or "" when nothing did."""
    changed = sorted(set(before) ^ set(after) | {p for p in set(before) & set(after) if before[p] != after[p]})
    return f"{changed[:20]}\n{status_after}".strip() if changed or status_after else ""


def self_test(work):
    """The unchanged-checkout check catches what setuptools used to leave: a build folder and an egg-info."""
    make_writable(work)
    shutil.rmtree(work, ignore_errors=True)
    tree = os.path.join(work, "tree")
    os.makedirs(os.path.join(tree, "python"))
    with open(os.path.join(tree, "python", "module.py"), "w", encoding="utf-8") as f:
        f.write("x = 1\n")
    git = ["git", "-C", tree, "-c", "user.name=normcheck", "-c", "user.email=normcheck@localhost"]
    run(["git", "init", "-q", tree])
    run(git + ["add", "-A"])
    run(git + ["commit", "-q", "-m", "tree"])
    with open(os.path.join(tree, ".gitignore"), "w", encoding="utf-8") as f:
        f.write("/python/*.egg-info/\n")
    run(git + ["add", "-A"])
    run(git + ["commit", "-q", "-m", "ignore"])
    make_read_only(tree)
    before = snapshot(tree)
    if written(before, snapshot(tree), git_status(tree)):
        raise Failure("an untouched tree is reported as written")
    egg_info = os.path.join(tree, "python", "normcheck.egg-info")  # root writes despite the missing bits
    os.makedirs(egg_info)
    with open(os.path.join(egg_info, "PKG-INFO"), "w", encoding="utf-8") as f:
        f.write("Name: normcheck\n")
    after, status = snapshot(tree), git_status(tree)
    problem = written(before, after, status)
    if "normcheck.egg-info" not in problem or "!! python/normcheck.egg-info/" not in status:
        raise Failure(f"an ignored egg-info written into the tree was not caught: {problem!r}")
    make_writable(tree)
    print("an untouched tree passes; an egg-info written into it is caught by the listing and git status")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAILED: {e}", flush=True)
        sys.exit(1)
