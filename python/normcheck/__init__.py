"""normcheck for Python: write normcheck/1 dumps, run the normcheck executable, probe a training step.

Modules: ``normcheck.dump`` (the normcheck/1 writer), ``normcheck.check`` (runs ``normcheck check`` and
``suggest``; raises ``NormcheckFailure`` with the diagnosis), ``normcheck.torch`` (``Probe``, needs
torch), ``normcheck.launch`` (W local ranks with a time limit) and the pytest fixture ``normcheck_gate``.
Importing ``normcheck`` itself needs only the standard library.
"""

from .check import NormcheckError, NormcheckFailure, Verdict, assert_passes, run_check

__all__ = ["__version__", "NormcheckError", "NormcheckFailure", "Verdict", "assert_passes", "run_check"]

__version__ = "0.1.0"
