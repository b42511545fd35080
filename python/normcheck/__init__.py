"""normcheck for Python: write normcheck/1 dumps for the normcheck executable to judge.

``normcheck.dump`` is the normcheck/1 writer. Importing ``normcheck`` needs only the standard library.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
