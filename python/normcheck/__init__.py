"""normcheck for Python: write normcheck/1 dumps, run the normcheck executable, probe a training step.

Modules: ``normcheck.dump`` (the normcheck/1 writer), ``normcheck.check`` (runs ``normcheck check`` and
``suggest``; raises ``NormcheckFailure`` with the diagnosis), ``normcheck.native`` (the same checks in this
process, through the extension ``pip install`` builds), ``normcheck.probe`` (``Probe``, needs torch;
also importable as ``normcheck.torch``), ``normcheck.launch`` (W local ranks with a time limit) and the
pytest fixture ``normcheck_gate``; ``normcheck.due`` (``normcheck.schedule``) says which steps of a run to
judge. Every error the package raises is a ``normcheck.Error``; option names
have ``Literal`` types (``Objective``, ``Reducer``, ``CaptureMode``, ``FloatDtype``).
Importing ``normcheck`` itself needs only the standard library. ``pip install`` of the repository builds
the executable into the package (``normcheck/bin/normcheck``) and puts ``normcheck`` on PATH.
"""

from .check import NormcheckError, NormcheckFailure, Verdict, assert_passes, run_check
from .errors import Error
from .options import CaptureMode, FloatDtype, Objective, Reducer
from .schedule import due

__all__ = ["__version__", "Error", "NormcheckError", "NormcheckFailure", "Verdict", "assert_passes", "run_check",
           "Objective", "Reducer", "CaptureMode", "FloatDtype", "due"]


def _version_of_checkout() -> str:
    """The version in project() of the checkout's CMakeLists.txt, for the package used from a checkout."""
    import os
    import re

    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "CMakeLists.txt")
    try:
        with open(top, encoding="utf-8") as f:
            found = re.search(r"project\(normcheck\s+VERSION\s+([0-9][0-9.]*)", f.read())
    except OSError:
        found = None
    return found.group(1) if found else "0+unknown"


# One version for the package and its executable, from project() in CMakeLists.txt: an installed package
# has it in _version.py, written at build time; a checkout (PYTHONPATH=python) reads it from there.
def _version() -> str:
    import importlib

    try:
        return str(importlib.import_module(f"{__name__}._version").__version__)
    except ImportError:
        return _version_of_checkout()


__version__: str = _version()
"""The package's version, the same as ``normcheck --version`` of the executable built with it."""
