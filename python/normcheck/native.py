"""normcheck's library inside this process: check documents without running the executable.

``pip install .`` of the repository builds the extension ``normcheck._core`` (nanobind) beside the
executable; it links the same library the executable does and returns the same normcheck-report/1
JSON that ``normcheck check --json`` prints, read into the same ``Verdict``. Used from a checkout
(``PYTHONPATH=python``), or installed by a Python without its development headers (Debian's python3
without python3-dev), the package has no extension: ``available()`` is False and the functions raise
``NormcheckError`` saying how to get one; ``normcheck.check.run_check`` runs the executable instead.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from types import ModuleType
from typing import Any, Dict, List, Optional, Sequence, Union

from . import __version__
from .check import NormcheckError, PathLike, Verdict, verdicts_of, well_shaped_reports

__all__ = ["available", "check", "check_text", "names"]


def _extension() -> Optional[ModuleType]:
    try:
        return importlib.import_module(f"{__package__}._core")
    except ImportError:
        return None


def available() -> bool:
    """True when this package holds the extension (it was installed by ``pip install`` of the repository)."""
    return _extension() is not None


def _core() -> Any:
    extension = _extension()
    if extension is None:
        raise NormcheckError("this normcheck package has no native extension (normcheck._core): `pip install .` "
                             "of the repository builds it where the interpreter has its development headers "
                             "(Debian: apt-get install python3-dev, then reinstall); normcheck.check.run_check "
                             "runs the executable instead, on every install and from a checkout")
    if extension.version != __version__:
        raise NormcheckError(f"the extension normcheck._core is version {extension.version}, the package "
                             f"{__version__}: reinstall the package")
    return extension


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise NormcheckError(f"normcheck._core returned text that is not JSON: {text[:2000]}") from None


def check(paths: Union[PathLike, Sequence[PathLike]], *, require_gate: bool = True, jobs: int = 1) -> List[Verdict]:
    """``run_check`` in this process: one ``Verdict`` per file (folders walked for ``*.json``, sorted).

    The same verdicts as ``normcheck check --json`` (with ``--require-gate`` unless told otherwise) on
    the same paths; reports of earlier runs found in folders are left out with a warning naming each,
    as the executable leaves them out saying so. ``jobs``: files checked at once. Raises ``NormcheckError``
    when there is nothing to check or the extension is missing.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = [os.fspath(p) for p in paths]
    if not files:
        raise NormcheckError("nothing to check: no files given")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= 1024:
        raise ValueError(f"jobs is a number of files from 1 to 1024, not {jobs!r}")
    text, skipped = _core().check_paths_json(files, require_gate, jobs)
    for report in skipped:  # as the executable says on stderr
        warnings.warn(f"normcheck: skipped {report}: a report normcheck wrote (format normcheck-report/…), "
                      "not a document to check", stacklevel=2)
    result = _parsed(text)
    return verdicts_of(well_shaped_reports(result, files, "normcheck._core"), require_gate)


def check_text(text: str, *, name: str = "<text>", require_gate: bool = True) -> Verdict:
    """The ``Verdict`` on one normcheck/1 (or scenario) document given as text, ``name`` standing for its file."""
    if not isinstance(text, str):
        raise TypeError(f"the document is text (str), not {type(text).__name__}")
    result = _parsed(_core().check_text_json(text, name, require_gate))
    [verdict] = verdicts_of(well_shaped_reports(result, [name], "normcheck._core"), require_gate)
    return verdict


def names() -> Dict[str, Any]:
    """``normcheck names --json`` in this process: every name the core reads and gives, by kind."""
    listed = _parsed(_core().names_json())
    if not isinstance(listed, dict) or listed.get("format") != "normcheck-names/1":
        raise NormcheckError("normcheck._core listed names that are not normcheck-names/1: "
                             f"{json.dumps(listed)[:2000]}")
    return listed
