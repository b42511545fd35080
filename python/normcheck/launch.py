"""Start W ranks on this machine, run a step function on each, and bring back what they returned.

``launch(step, world_size)`` forks (or spawns) W processes with ``torch.multiprocessing``, joins them in
one process group through ``env://`` on loopback (a free port, tried again with another when it was
taken meanwhile), and calls ``step(rank, world_size, probe)`` on each, where ``probe(model)`` attaches
a ``normcheck.torch.Probe`` configured for this launch. Every launch has a time limit: a rank that
hangs (in a collective another rank never joins) is killed and the launch fails instead of hanging.
Workers leave through ``os._exit`` once their result is written and their output flushed: gloo can
hang in interpreter teardown.

A ``NormcheckFailure`` raised by the step (by ``probe.check()``) is raised again here with its
diagnosis; any other exception on a rank becomes a ``LaunchError`` that carries every rank's traceback.
"""

from __future__ import annotations

import datetime
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from .check import NormcheckFailure

__all__ = ["launch", "LaunchError", "ProbeFactory", "free_port", "exit_process"]


class LaunchError(RuntimeError):
    """A launch that did not complete: a rank raised, crashed, or passed the time limit."""


class ProbeFactory:
    """Passed to the step as ``probe``: ``probe(model, **options)`` attaches a configured ``Probe``."""

    def __init__(self, rank: int, world_size: int, executable: Optional[str], directory: Optional[str]) -> None:
        self.rank = rank
        self.world_size = world_size
        self.executable = executable
        self.directory = directory

    def __call__(self, module: Any, **options: Any) -> Any:
        """A ``normcheck.torch.Probe`` on ``module`` that writes its dumps into this launch's folder."""
        from .torch import Probe

        options.setdefault("executable", self.executable)
        options.setdefault("directory", self.directory)
        return Probe(module, **options)


def exit_process(status: int) -> NoReturn:
    """Flush standard output and standard error, then end this process at once with ``status``.

    A rank that is done should leave this way (``os._exit``) rather than return from its script: gloo can
    hang in interpreter teardown. Nothing else is run at exit, so write every result before calling it.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(4)
        time.sleep(0.2)


def _write_result(folder: str, rank: int, outcome: Dict[str, Any]) -> None:
    path = os.path.join(folder, f"rank-{rank}.pickle")
    try:
        data = pickle.dumps(outcome)
    except Exception as e:  # an unpicklable return value or exception
        data = pickle.dumps({"kind": "error", "text": f"rank {rank}: cannot send its result back: {e!r}\n"
                                                      f"{outcome.get('text', '')}"})
    with open(path + ".tmp", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def _worker(rank: int, world_size: int, port: int, step: Callable[..., Any], args: Sequence[Any],
            settings: Dict[str, Any], folder: str, parent: int) -> None:
    """One rank: joins the group, runs the step, writes its outcome, leaves through os._exit."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    status = 0
    joined = False
    try:
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                           "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                           "LOCAL_WORLD_SIZE": str(world_size)})
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(settings["threads"])
        dist.init_process_group(settings["backend"], init_method="env://", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=settings["collective_timeout"]))
        joined = True
        factory = ProbeFactory(rank, world_size, settings["executable"], settings["directory"])
        value = step(rank, world_size, factory, *args)
        outcome: Dict[str, Any] = {"kind": "ok", "value": value}
    except NormcheckFailure as e:
        outcome = {"kind": "failure", "failure": e}
    except BaseException as e:
        status = 1
        # A group that could not form (the port taken between choosing and binding it, a connection
        # reset while the ranks meet) is worth another attempt on another port; a step that failed is not.
        outcome = {"kind": "error", "text": traceback.format_exc(), "retry": not joined}
    try:
        _write_result(folder, rank, outcome)
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_process(status)


def _kill(processes: List[Any]) -> List[int]:
    killed = []
    started = [(rank, process) for rank, process in enumerate(processes) if process.pid is not None]
    for rank, process in started:
        if process.exitcode is None:
            process.kill()
            killed.append(rank)
    for _, process in started:
        process.join(5)
    return killed


def _attempt(context: Any, step: Callable[..., Any], world_size: int, args: Sequence[Any],
             settings: Dict[str, Any], timeout: float, folder: str) -> Dict[str, Any]:
    from multiprocessing.connection import wait

    port = free_port()
    processes = [context.Process(target=_worker, name=f"normcheck-rank-{rank}",
                                 args=(rank, world_size, port, step, args, settings, folder, os.getpid()))
                 for rank in range(world_size)]
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.start()
        while True:
            codes = [p.exitcode for p in processes]
            if all(code is not None for code in codes):
                return {"codes": codes, "killed": [], "timed_out": False, "port": port}
            if any(code not in (None, 0) for code in codes):
                return {"codes": codes, "killed": _kill(processes), "timed_out": False, "port": port}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {"codes": codes, "killed": _kill(processes), "timed_out": True, "port": port}
            wait([p.sentinel for p in processes if p.exitcode is None], timeout=min(remaining, 0.5))
    finally:
        _kill(processes)


def launch(step: Callable[..., Any], world_size: int = 2, *, args: Sequence[Any] = (), timeout: float = 120.0,
           backend: str = "gloo", start_method: str = "fork", executable: Optional[str] = None,
           directory: Optional[str] = None, threads: int = 1, attempts: int = 3) -> List[Any]:
    """Runs ``step(rank, world_size, probe, *args)`` on ``world_size`` fresh ranks; returns their values.

    ``timeout`` (seconds) bounds the whole launch: past it every rank still running is killed and
    ``LaunchError`` names them. ``start_method`` 'fork' (fast; the step may be a closure) or 'spawn'
    (the step must be importable). ``executable`` and ``directory`` configure the probes the step
    attaches (the normcheck executable; where dumps go). A group that cannot form (its port taken
    between choosing and binding it, a connection reset while the ranks meet) is tried again on another
    port, up to ``attempts`` times. Raises ``NormcheckFailure`` when the step's check failed.
    """
    if world_size < 1:
        raise ValueError("world_size must be at least 1")
    import torch.multiprocessing

    context = torch.multiprocessing.get_context(start_method)
    if directory is None:
        directory = tempfile.mkdtemp(prefix="normcheck-gate-")  # kept: the dumps the diagnosis names
    settings = {"backend": backend, "executable": executable, "directory": directory, "threads": threads,
                "collective_timeout": timeout + 60}
    started = time.monotonic()
    for attempt in range(attempts):
        folder = tempfile.mkdtemp(prefix="normcheck-launch-")
        try:
            record = _attempt(context, step, world_size, args, settings, timeout, folder)
            outcomes: List[Optional[Dict[str, Any]]] = []
            for rank in range(world_size):
                path = os.path.join(folder, f"rank-{rank}.pickle")
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        outcomes.append(pickle.load(f))
                else:
                    outcomes.append(None)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if any(o is not None and o.get("retry") for o in outcomes) and attempt + 1 < attempts:
            continue
        break
    seconds = time.monotonic() - started
    errors = [f"rank {r}:\n{o['text']}" for r, o in enumerate(outcomes) if o is not None and o["kind"] == "error"]
    if record["timed_out"]:
        raise LaunchError(
            f"the launch of {world_size} ranks passed its time limit of {timeout:g} s: killed rank(s) "
            f"{', '.join(map(str, record['killed']))} (a rank that waits in a collective another rank never "
            "joins hangs forever)" + ("".join("\n" + e for e in errors)))
    if errors or record["killed"]:
        gone = [r for r, (o, code) in enumerate(zip(outcomes, record["codes"])) if o is None and r not in record["killed"]]
        message = f"the launch of {world_size} ranks failed after {seconds:.1f} s"
        if record["killed"]:
            message += f"; killed rank(s) {', '.join(map(str, record['killed']))} still waiting"
        if gone:
            message += f"; rank(s) {', '.join(map(str, gone))} exited with {[record['codes'][r] for r in gone]}"
        raise LaunchError(message + "".join("\n" + e for e in errors))
    missing = [r for r, o in enumerate(outcomes) if o is None]
    if missing:
        raise LaunchError(f"rank(s) {', '.join(map(str, missing))} exited with "
                          f"{[record['codes'][r] for r in missing]} without a result")
    failures = [o["failure"] for o in outcomes if o is not None and o["kind"] == "failure"]
    if failures:
        raise failures[0]
    return [o["value"] for o in outcomes if o is not None]
