"""Running a script whose framework starts the ranks itself, with a time limit, and reading what they wrote.

The script gets an output folder as its first argument; each rank writes ``rank-R.json`` there (through
a temporary and ``os.replace``). The script runs in a session of its own, so that on the time limit
every process it (or its framework's launcher) started is killed with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")  # the normcheck package


def run_ranks(script: str, folder: str, world_size: int, *, timeout: float = 300.0,
              arguments: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Runs ``python SCRIPT FOLDER ARGUMENTS…`` here and returns each rank's results, rank 0 first."""
    os.makedirs(folder, exist_ok=True)
    # The package the test itself imports comes first (PYTHONPATH as given); this checkout's after it.
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), PACKAGE])),
                       GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    log_path = os.path.join(folder, "output.log")
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, os.path.join(HERE, script), folder, *arguments], cwd=HERE,
                                   env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        paths = [os.path.join(folder, f"rank-{rank}.json") for rank in range(world_size)]
        # Ranks the framework started may finish a moment after the script's own process.
        while not all(os.path.exists(p) for p in paths) and time.monotonic() - started < timeout:
            if process.poll() is not None and _group_gone(process.pid):
                break
            time.sleep(0.2)
        _end_group(process)
    with open(log_path, encoding="utf-8", errors="replace") as f:
        output = f.read()
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise AssertionError(f"{script}: no results from {', '.join(os.path.basename(p) for p in missing)} "
                             f"after {time.monotonic() - started:.0f} s (exit status {process.returncode}); "
                             f"output:\n{output[-6000:]}")
    results = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    return results


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _end_group(process: "subprocess.Popen[bytes]") -> None:
    """Kills what is left of the script's session (its own processes only: the session it was started in)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
