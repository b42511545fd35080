"""Installing the package offline, as docs/python.md says: pip --no-build-isolation, --target or a venv.

The source is copied to a temporary folder first, so that the build leaves nothing in the checkout.
"""

import os
import shutil
import subprocess
import sys
import textwrap


HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def source_copy(tmp_path):
    copy = tmp_path / "source"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests",
                                                               ".pytest_cache"))
    return copy


def run(command, **options):
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, **options)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_environment(**extra):
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    environment.update(extra)
    return environment


IMPORTS = ("import normcheck, normcheck.dump, normcheck.check, normcheck.launch, normcheck.pytest_plugin; "
           "import os, importlib.metadata as m; "
           "print(os.path.dirname(normcheck.__file__)); "
           "print(os.path.exists(os.path.join(os.path.dirname(normcheck.__file__), 'py.typed'))); "
           "print([e.value for e in m.entry_points(group='pytest11') if e.name == 'normcheck'])")

GATE_TEST = textwrap.dedent('''
    def test_the_fixture_is_there(normcheck_gate):
        assert callable(normcheck_gate)
''')


def test_pip_install_target_then_import(tmp_path):
    target = tmp_path / "target"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--target", str(target), str(source_copy(tmp_path))])
    environment = clean_environment(PYTHONPATH=str(target))
    lines = run([sys.executable, "-c", IMPORTS], env=environment, cwd=tmp_path).split("\n")
    assert lines[:3] == [str(target / "normcheck"), "True", "['normcheck.pytest_plugin']"]
    torch_found = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    if torch_found:
        run([sys.executable, "-c", "import normcheck.torch"], env=environment, cwd=tmp_path)
        # The entry point registers the plugin: no -p, no conftest.
        (tmp_path / "test_entry_point.py").write_text(GATE_TEST)
        output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_entry_point.py"],
                     env=environment, cwd=tmp_path)
        assert "1 passed" in output
    assert not os.path.exists(os.path.join(SOURCE, "build"))


def test_pip_install_into_a_venv_that_sees_the_system_packages(tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         str(source_copy(tmp_path))], env=clean_environment())
    lines = run([python, "-c", IMPORTS], env=clean_environment(), cwd=tmp_path).split("\n")
    assert lines[0].startswith(str(venv)) and lines[1:3] == ["True", "['normcheck.pytest_plugin']"]
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        run([python, "-c", "import normcheck.torch, torch; print(torch.__version__)"], env=clean_environment())
