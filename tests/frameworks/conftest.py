"""The frameworks' tests: which files this environment's framework versions collect.

transformers 4.45 (before the gradient-accumulation fix) lives in an environment of its own: there
only test_transformers_445.py is collected, and elsewhere everything but it. A file named on the
command line that this environment does not collect leaves pytest with nothing to run, which the
CTest runner reports as a failure, never as a pass.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import List

# The helpers these tests share with the package's own suites (invisible.py) live in tests/python.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))


def _legacy_transformers() -> bool:
    # The installed distribution's version, without importing transformers (seconds per suite).
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) < (4, 46)


collect_ignore: List[str] = (
    ["test_transformers.py", "test_accelerate.py", "test_lightning.py", "test_fsdp.py", "test_trl.py",
     "test_trl_sft_dpo.py"]
    if _legacy_transformers() else ["test_transformers_445.py"])
