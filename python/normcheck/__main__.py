"""``python -m normcheck ARGS`` and the ``normcheck`` command of an installed package: the executable.

Runs the executable that ``normcheck.check.find_executable`` finds (the one built into the package first)
with the same arguments, in place of this process, so that its exit status, output and signals are the
executable's own.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn, Optional, Sequence

from .check import NormcheckError, find_executable


def main(arguments: Optional[Sequence[str]] = None) -> NoReturn:
    """Replaces this process with the normcheck executable run on ``arguments`` (default: sys.argv[1:])."""
    given = list(sys.argv[1:] if arguments is None else arguments)
    try:
        program = find_executable()
    except NormcheckError as e:
        print(f"normcheck: {e}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, ["normcheck", *given])


if __name__ == "__main__":
    main()
