"""The package without its native core, beside an executable built on its own (build/normcheck).

Two routes, as docs/python.md says: the checkout itself on PYTHONPATH, and a pure wheel
(``pip install --config-settings wheel.cmake=false``) into a folder; both with NORMCHECK naming the
executable.
``pip install .`` with the executable built in is tests/package/pip_install.py.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PACKAGE = os.path.join(TOP, "python")


def run(command, **options):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **options)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_environment(**extra):
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    environment.update(extra)
    return environment


def cmake_version():
    with open(os.path.join(TOP, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(normcheck\s+VERSION\s+([0-9][0-9.]*)", f.read()).group(1)


def executable_version(executable):
    return re.search(r"\b([0-9]+\.[0-9]+\.[0-9]+)\b", run([executable, "--version"])).group(1)


def source_copy(tmp_path):
    """What a pure wheel is built from: the project file, its licence, the version's source and the package."""
    copy = tmp_path / "source"
    (copy / "python").mkdir(parents=True)
    for name in ("pyproject.toml", "LICENSE", "CMakeLists.txt"):
        shutil.copy2(os.path.join(TOP, name), copy / name)
    shutil.copy2(os.path.join(PACKAGE, "README.md"), copy / "python" / "README.md")
    shutil.copytree(os.path.join(PACKAGE, "normcheck"), copy / "python" / "normcheck",
                    ignore=shutil.ignore_patterns("__pycache__", "bin", "_version.py"))
    return copy


IMPORTS = ("import normcheck, normcheck.dump, normcheck.check, normcheck.launch, normcheck.pytest_plugin, "
           "normcheck.torch; import os, importlib.metadata as m; "
           "print(os.path.dirname(normcheck.__file__)); print(normcheck.__version__); "
           "print(normcheck.check.find_executable()); "
           "print(os.path.exists(os.path.join(os.path.dirname(normcheck.__file__), 'py.typed')))")

GATE_TEST = textwrap.dedent('''
    def test_the_fixture_is_there(normcheck_gate):
        assert callable(normcheck_gate)
''')


def test_the_checkout_on_pythonpath_with_normcheck_set(tmp_path, executable):
    environment = clean_environment(PYTHONPATH=PACKAGE, NORMCHECK=executable)
    lines = run([sys.executable, "-c", IMPORTS], env=environment, cwd=tmp_path).split("\n")
    # The version is read from project() in CMakeLists.txt; the executable is $NORMCHECK, the checkout has none.
    assert lines[:4] == [os.path.join(PACKAGE, "normcheck"), cmake_version(), executable, "True"]
    assert lines[1] == executable_version(executable)
    # python -m normcheck runs that executable with the arguments, in its place.
    assert run([sys.executable, "-m", "normcheck", "--version"], env=environment, cwd=tmp_path) == \
        run([executable, "--version"])
    done = subprocess.run([sys.executable, "-m", "normcheck", "frobnicate"], env=environment, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown subcommand 'frobnicate'" in done.stdout + done.stderr
    # Without $NORMCHECK nor normcheck on PATH, it says what to do instead of running something else.
    nowhere = clean_environment(PYTHONPATH=PACKAGE, PATH=os.path.dirname(sys.executable))
    nowhere.pop("NORMCHECK", None)
    done = subprocess.run([sys.executable, "-m", "normcheck", "--version"], env=nowhere, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no normcheck executable" in done.stderr


def test_a_pure_wheel_into_a_folder_with_normcheck_set(tmp_path, executable):
    target = tmp_path / "target"
    # The build requirements are pinned like the rest (.ci/requirements.txt); no CMake run, no executable.
    pip_environment = clean_environment(PIP_CONSTRAINT=os.path.join(TOP, ".ci", "requirements.txt"), PIP_NO_INPUT="1")
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--config-settings", "wheel.cmake=false",
         "--target", str(target), str(source_copy(tmp_path))], env=pip_environment, cwd=tmp_path)
    assert not (target / "normcheck" / "bin").exists()
    environment = clean_environment(PYTHONPATH=str(target), NORMCHECK=executable)
    lines = run([sys.executable, "-c", IMPORTS], env=environment, cwd=tmp_path).split("\n")
    # The version was written into the wheel at build time, from the same project() line.
    assert lines[:4] == [str(target / "normcheck"), cmake_version(), executable, "True"]
    assert (target / "normcheck" / "_version.py").is_file()
    # The entry point registers the plugin: no -p, no conftest.
    (tmp_path / "test_entry_point.py").write_text(GATE_TEST)
    output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_entry_point.py"],
                 env=environment, cwd=tmp_path)
    assert "1 passed" in output
