"""The base of every error the package raises: ``except normcheck.Error`` catches each of them.

Failures (a gate that does not pass, ranks that disagree, a collective that does not match) are also
``AssertionError``s, so that pytest and ``except AssertionError`` see them as failed checks.

Standard library only.
"""

from __future__ import annotations

__all__ = ["Error", "NormcheckWarning"]


class Error(Exception):
    """An error raised by normcheck: misuse, an executable that cannot run, or a check that failed."""


class NormcheckWarning(UserWarning, Error):
    """A gate that did not pass, reported as a warning because the caller asked not to raise."""
