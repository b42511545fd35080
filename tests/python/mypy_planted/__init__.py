"""A module with one planted type error: the mypy check must fail on it."""


def count() -> int:
    """Returns a string where an int is declared."""
    return "one"
