"""A module with three planted type errors: the mypy check must fail on each.

One only strict mode reports; one only the package's Literal option types catch.
"""

from normcheck.options import Objective


def count() -> int:
    """Returns a string where an int is declared."""
    return "one"


def untyped(value):
    """No annotations: an error under pyproject.toml's strict configuration only."""
    return value


def objective() -> Objective:
    """A misspelt objective name."""
    return "token_maen"
