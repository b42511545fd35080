"""``python -m normcheck ARGS`` and the ``normcheck`` command of an installed package: the executable.

Runs the executable that ``normcheck.check.find_executable`` finds (the one built into the package first)
with the same arguments, in place of this process, so that its exit status, output and signals are the
executable's own. The ``normcheck`` command never runs itself: where PATH leads back to it (the package
imported from a checkout that has no executable built in), the next ``normcheck`` on PATH is taken.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn, Optional, Sequence

from .check import NormcheckError, find_executable

_ENTERED = "NORMCHECK_COMMAND_ENTERED"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _executable_other_than(command: str) -> str:
    """The executable find_executable finds, or, where that is ``command`` itself, the next on PATH."""
    program = find_executable()
    if not _same_file(program, command):
        return program
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder or os.curdir, "normcheck")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and not _same_file(candidate, command):
            return os.path.abspath(candidate)
    raise NormcheckError("no normcheck executable: this package has none built in, $NORMCHECK is not set, and "
                         f"the only normcheck on PATH is this command ({command})")


def main(arguments: Optional[Sequence[str]] = None) -> NoReturn:
    """Replaces this process with the normcheck executable run on ``arguments`` (default: sys.argv[1:])."""
    given = list(sys.argv[1:] if arguments is None else arguments)
    if os.environ.get(_ENTERED):
        print(f"normcheck: {os.environ[_ENTERED]} led back to a normcheck command, not to the executable; "
              "set $NORMCHECK to the executable", file=sys.stderr)
        sys.exit(2)
    try:
        program = _executable_other_than(sys.argv[0])
    except NormcheckError as e:
        print(f"normcheck: {e}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, ["normcheck", *given], dict(os.environ, **{_ENTERED: program}))


if __name__ == "__main__":
    main()
