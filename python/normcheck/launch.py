"""Start W ranks on this machine, run a step function on each, and bring back what they returned.

``launch(step, world_size)`` forks (or spawns) W processes with ``torch.multiprocessing``, joins them in
one process group through a FileStore in the launch's own temporary folder (no TCP port is chosen, so
no other program can take it meanwhile; gloo's own connections bind ports the system assigns), and
calls ``step(rank, world_size, probe)`` on each, where ``probe(model)`` attaches a
``normcheck.torch.Probe`` configured for this launch and ``probe.replicas(model, optimizer, scheduler)``
asks for the replicas to be compared (``normcheck.replicas``) when the step returns. Every launch has a
time limit: a rank that hangs (in a collective another rank never joins) is killed and the launch
fails instead of hanging, with the Python stack of every thread of each hung rank, dumped by
``faulthandler`` (on SIGUSR1) just before the kill. Workers leave through ``os._exit`` once their
result is written and their output flushed: gloo can hang in interpreter teardown.

With ``collectives=True`` every rank records its collective calls (``normcheck.collectives``) and
``normcheck collectives`` checks the traces when the launch ends, also when its time limit ended a hung
rank: a rank that skipped a collective is then reported as ``CollectiveMismatch`` naming the call, its
shape and the program's line, not only as a time-out.

A ``NormcheckFailure`` raised by the step (by ``probe.check()``) or a ``ReplicaDivergence`` is raised
again here with its diagnosis; any other exception on a rank becomes a ``LaunchError`` that carries
every rank's traceback.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
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
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

from .errors import Error

__all__ = ["launch", "launch_result", "LaunchResult", "LaunchError", "ProbeFactory", "free_port", "exit_process"]


class LaunchError(RuntimeError, Error):
    """A launch that did not complete: a rank raised, crashed, or passed the time limit."""

    def __init__(self, message: str, *, timed_out: bool = False, killed: Sequence[int] = (),
                 seconds: float = 0.0, pids: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        """True when the time limit ended the launch."""
        self.killed: Tuple[int, ...] = tuple(killed)
        """The ranks that were still running and were killed."""
        self.seconds = seconds
        self.pids: Tuple[int, ...] = tuple(pids)
        """The workers' process ids, in rank order."""


@dataclass(frozen=True)
class LaunchResult:
    """What a launch brought back: every rank's value and the evidence the launch judged."""

    values: List[Any]
    """The step's return value, in rank order."""
    replicas: List[List[Any]] = field(default_factory=list)
    """Per rank, the ``ReplicaSummary`` of each ``probe.replicas(...)`` compared after the step."""
    collectives: Optional[Any] = None
    """The ``CollectiveVerdict`` on the traces, with ``collectives=True``."""
    seconds: float = 0.0
    pids: Tuple[int, ...] = ()


class ProbeFactory:
    """Passed to the step as ``probe``: ``probe(model, **options)`` attaches a configured ``Probe``."""

    def __init__(self, rank: int, world_size: int, executable: Optional[str], directory: Optional[str]) -> None:
        self.rank = rank
        self.world_size = world_size
        self.executable = executable
        self.directory = directory
        self.replica_sets: List[Tuple[Any, Any, Any, Dict[str, Any]]] = []
        """What ``replicas`` registered: compared with ``check_replicas`` after the step returns."""

    def __call__(self, module: Any, **options: Any) -> Any:
        """A ``normcheck.torch.Probe`` on ``module`` that writes its dumps into this launch's folder."""
        from .probe import Probe

        options.setdefault("executable", self.executable)
        options.setdefault("directory", self.directory)
        return Probe(module, **options)

    def replicas(self, model: Any, optimizer: Any = None, scheduler: Any = None, **options: Any) -> None:
        """Asks for ``check_replicas(model, optimizer, scheduler, **options)`` on every rank once the step returns."""
        self.replica_sets.append((model, optimizer, scheduler, options))


def exit_process(status: int) -> NoReturn:
    """Flush standard output and standard error, then end this process at once with ``status``.

    A rank that is done should leave this way (``os._exit``) rather than return from its script: gloo can
    hang in interpreter teardown. Nothing else is run at exit, so write every result before calling it.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now (another program may take it before it is
    bound; the launcher itself needs none)."""
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


def _is_verdict(e: BaseException) -> bool:
    """normcheck's own assertions (a failed gate, diverged replicas, mismatched collectives)."""
    return isinstance(e, AssertionError) and type(e).__module__.startswith("normcheck.")


def _worker(rank: int, world_size: int, store: str, step: Callable[..., Any], args: Sequence[Any],
            settings: Dict[str, Any], folder: str, parent: int) -> None:
    """One rank: joins the group, runs the step, writes its outcome, leaves through os._exit."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # The stacks of every thread, written on SIGUSR1 by the C handler even while the rank waits inside a
    # collective: the launcher asks for them before it kills a rank at the time limit.
    stacks = open(_stacks_path(folder, rank), "w", encoding="utf-8")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    status = 0
    joined = False
    try:
        os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                           "LOCAL_WORLD_SIZE": str(world_size)})
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch
        import torch.distributed as dist

        torch.set_num_threads(settings["threads"])
        dist.init_process_group(settings["backend"], init_method="file://" + store, rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=settings["collective_timeout"]))
        joined = True
        factory = ProbeFactory(rank, world_size, settings["executable"], settings["directory"])
        with contextlib.ExitStack() as recording:
            if settings["traces"] is not None:
                from .collectives import record_collectives

                recording.enter_context(record_collectives(settings["traces"]))
            value = step(rank, world_size, factory, *args)
            if settings["replicas"] and not factory.replica_sets:
                raise ValueError("replicas=True, but the step gave no model to compare: call "
                                 "probe.replicas(model, optimizer, scheduler) in the step")
            summaries = []
            if factory.replica_sets:
                from .replicas import check_replicas

                for model, optimizer, scheduler, options in factory.replica_sets:
                    summaries.append(check_replicas(model, optimizer, scheduler, **options))
        outcome: Dict[str, Any] = {"kind": "ok", "value": value, "replicas": summaries}
    except BaseException as e:
        if _is_verdict(e):
            outcome = {"kind": "failure", "failure": e}
        else:
            status = 1
            # A group that could not form (a connection reset while the ranks meet) is worth another
            # attempt in a fresh folder; a step that failed is not.
            outcome = {"kind": "error", "text": traceback.format_exc(), "retry": not joined}
    try:
        _write_result(folder, rank, outcome)
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_process(status)


def _stacks_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank-{rank}.stacks")


def _dump_stacks(processes: List[Any], folder: str, wait: float = 3.0) -> None:
    """Ask every rank still running for its stacks (SIGUSR1) and wait, up to ``wait`` seconds, until each
    has written some. A rank that has not yet registered the handler ends on the signal: it is about to
    be killed anyway."""
    asked = [(rank, process) for rank, process in enumerate(processes)
             if process.pid is not None and process.exitcode is None]
    for _, process in asked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGUSR1)
    deadline = time.monotonic() + wait
    for rank, process in asked:
        path = _stacks_path(folder, rank)
        while time.monotonic() < deadline and process.exitcode is None and not _written(path):
            time.sleep(0.05)
    time.sleep(0.1)  # the handler writes thread by thread; let the last lines land


def _written(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _stacks(folder: str, ranks: Sequence[int]) -> str:
    """The dumped stacks of ``ranks``, as text for the launch's error message."""
    parts = []
    for rank in ranks:
        try:
            with open(_stacks_path(folder, rank), encoding="utf-8", errors="replace") as f:
                text = f.read().rstrip()
        except OSError:
            text = ""
        parts.append(f"rank {rank} was here when it was killed:\n{text}" if text
                     else f"rank {rank} wrote no stack before it was killed")
    return "".join("\n" + part for part in parts)


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
             settings: Dict[str, Any], timeout: float, folder: str,
             started: Optional[Callable[[Sequence[int]], None]]) -> Dict[str, Any]:
    from multiprocessing.connection import wait

    store = os.path.join(folder, "store")  # the FileStore the ranks meet in; a fresh folder per attempt
    processes = [context.Process(target=_worker, name=f"normcheck-rank-{rank}",
                                 args=(rank, world_size, store, step, args, settings, folder, os.getpid()))
                 for rank in range(world_size)]
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.start()
        pids = [int(p.pid) for p in processes]
        if started is not None:
            started(pids)
        while True:
            codes = [p.exitcode for p in processes]
            if all(code is not None for code in codes):
                return {"codes": codes, "killed": [], "timed_out": False, "pids": pids}
            if any(code not in (None, 0) for code in codes):
                return {"codes": codes, "killed": _kill(processes), "timed_out": False, "pids": pids}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _dump_stacks(processes, folder)
                return {"codes": codes, "killed": _kill(processes), "timed_out": True, "pids": pids}
            wait([p.sentinel for p in processes if p.exitcode is None], timeout=min(remaining, 0.5))
    finally:
        _kill(processes)


def launch(step: Callable[..., Any], world_size: int = 2, *, args: Sequence[Any] = (), timeout: float = 120.0,
           backend: str = "gloo", start_method: str = "fork", executable: Optional[str] = None,
           directory: Optional[str] = None, threads: int = 1, attempts: int = 3, replicas: bool = False,
           collectives: bool = False, started: Optional[Callable[[Sequence[int]], None]] = None) -> List[Any]:
    """Runs ``step(rank, world_size, probe, *args)`` on ``world_size`` fresh ranks; returns their values.

    ``timeout`` (seconds) bounds the whole launch: past it every rank still running is killed and
    ``LaunchError`` names them. ``start_method`` 'fork' (fast; the step may be a closure) or 'spawn'
    (the step must be importable). ``executable`` and ``directory`` configure the probes the step
    attaches (the normcheck executable; where dumps go). A group that cannot form is tried again in a
    fresh store, up to ``attempts`` times. ``replicas=True`` requires the step to name what to compare
    (``probe.replicas(model, optimizer, scheduler)``); what it names is compared after the step returns
    in any case. ``collectives=True`` records every rank's collectives into a new folder under
    ``directory`` (or a temporary folder, removed unless they do not match) and checks them when the
    launch ends. Without ``directory`` the probes write into temporary folders of their own, removed
    once each step is judged. ``started`` is called with the workers' process ids once they run, once
    per attempt. Raises ``NormcheckFailure`` when the step's check failed, ``ReplicaDivergence`` when
    the replicas differ, ``CollectiveMismatch`` when the ranks' collectives do not match (a hang
    or an error it caused is reported in its message), ``LaunchError`` otherwise.
    """
    return launch_result(step, world_size, args=args, timeout=timeout, backend=backend, start_method=start_method,
                         executable=executable, directory=directory, threads=threads, attempts=attempts,
                         replicas=replicas, collectives=collectives, started=started).values


def launch_result(step: Callable[..., Any], world_size: int = 2, *, args: Sequence[Any] = (),
                  timeout: float = 120.0, backend: str = "gloo", start_method: str = "fork",
                  executable: Optional[str] = None, directory: Optional[str] = None, threads: int = 1,
                  attempts: int = 3, replicas: bool = False, collectives: bool = False,
                  started: Optional[Callable[[Sequence[int]], None]] = None) -> LaunchResult:
    """``launch``, returning the values with the evidence judged: the replica summaries, the trace verdict."""
    if world_size < 1:
        raise ValueError("world_size must be at least 1")
    import torch.multiprocessing

    context = torch.multiprocessing.get_context(start_method)
    if start_method == "fork":
        _import_what_ddp_imports()
    settings: Dict[str, Any] = {"backend": backend, "executable": executable, "directory": directory,
                                "threads": threads, "collective_timeout": timeout + 60, "replicas": replicas,
                                "traces": None}
    began = time.monotonic()
    stacks = ""
    for attempt in range(attempts):
        folder = tempfile.mkdtemp(prefix="normcheck-launch-")
        if collectives:
            if directory is not None:
                os.makedirs(directory, exist_ok=True)
            settings["traces"] = tempfile.mkdtemp(prefix="collectives-" if directory else "normcheck-collectives-",
                                                  dir=directory)
        try:
            record = _attempt(context, step, world_size, args, settings, timeout, folder, started)
            outcomes: List[Optional[Dict[str, Any]]] = []
            for rank in range(world_size):
                path = os.path.join(folder, f"rank-{rank}.pickle")
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        outcomes.append(pickle.load(f))
                else:
                    outcomes.append(None)
            stacks = _stacks(folder, record["killed"]) if record["timed_out"] else ""
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if any(o is not None and o.get("retry") for o in outcomes) and attempt + 1 < attempts:
            continue
        break
    seconds = time.monotonic() - began
    facts = {"timed_out": record["timed_out"], "killed": record["killed"], "seconds": seconds, "pids": record["pids"]}
    errors = [f"rank {r}:\n{o['text']}" for r, o in enumerate(outcomes) if o is not None and o["kind"] == "error"]
    ending = _ending(world_size, timeout, seconds, record, outcomes, errors)
    if ending is not None:
        ending += stacks
    verdict = None
    if collectives:
        try:
            verdict = _check_traces(settings["traces"], world_size, executable,
                                    record["killed"] if record["timed_out"] else [], ending)
        except BaseException as e:
            if not isinstance(e, AssertionError):  # a mismatch names the traces: they stay
                _remove_unasked(settings["traces"], directory)
            raise
        _remove_unasked(settings["traces"], directory)
    if ending is not None:
        if verdict is not None:
            ending += (f"\n(the {verdict.calls} recorded collective calls match on every rank: the hang or error is "
                       "not a missing or mismatched collective that normcheck.collectives can see)")
        raise LaunchError(ending, **facts)
    failures = [o["failure"] for o in outcomes if o is not None and o["kind"] == "failure"]
    if failures:
        raise failures[0]
    values = [o["value"] for o in outcomes if o is not None]
    summaries = [list(o.get("replicas", [])) for o in outcomes if o is not None]
    return LaunchResult(values=values, replicas=summaries, collectives=verdict, seconds=seconds,
                        pids=tuple(record["pids"]))


def _remove_unasked(traces: str, directory: Optional[str]) -> None:
    """Removes the traces' temporary folder when no ``directory`` asked for the launch's files."""
    if directory is None:
        shutil.rmtree(traces, ignore_errors=True)


def _import_what_ddp_imports() -> None:
    """Imports torch._dynamo here, once, where torch 2 has it: DDP's constructor imports it on first use,
    which costs every forked rank seconds of start-up when the parent has not."""
    import importlib

    import torch

    if "torch._dynamo" not in sys.modules and hasattr(torch, "compile"):
        try:
            importlib.import_module("torch._dynamo")
        except Exception:  # a torch without a working _dynamo: the ranks will do without it too
            pass


def _ending(world_size: int, timeout: float, seconds: float, record: Dict[str, Any],
            outcomes: List[Optional[Dict[str, Any]]], errors: List[str]) -> Optional[str]:
    """Why the launch did not complete, or None when every rank wrote its outcome."""
    if record["timed_out"]:
        return (f"the launch of {world_size} ranks passed its time limit of {timeout:g} s: killed rank(s) "
                f"{', '.join(map(str, record['killed']))} (a rank that waits in a collective another rank never "
                "joins hangs forever)" + ("".join("\n" + e for e in errors)))
    if errors or record["killed"]:
        gone = [r for r, o in enumerate(outcomes) if o is None and r not in record["killed"]]
        message = f"the launch of {world_size} ranks failed after {seconds:.1f} s"
        if record["killed"]:
            message += f"; killed rank(s) {', '.join(map(str, record['killed']))} still waiting"
        if gone:
            message += f"; rank(s) {', '.join(map(str, gone))} exited with {[record['codes'][r] for r in gone]}"
        return message + "".join("\n" + e for e in errors)
    missing = [r for r, o in enumerate(outcomes) if o is None]
    if missing:
        return (f"rank(s) {', '.join(map(str, missing))} exited with {[record['codes'][r] for r in missing]} "
                "without a result")
    return None


def _check_traces(traces: str, world_size: int, executable: Optional[str], hung: Sequence[int],
                  ending: Optional[str]) -> Any:
    """The verdict on the launch's traces; raises ``CollectiveMismatch`` (with how the launch ended) on a problem."""
    from .collectives import CollectiveMismatch, check_collectives

    from .check import NormcheckError

    try:
        verdict = check_collectives(traces, world_size=world_size, executable=executable, hung=hung)
    except NormcheckError:
        if ending is not None:  # nothing recorded before the launch failed: its own error says more
            return None
        raise
    if not verdict.consistent:
        message = verdict.message + f"\n  traces: {traces}"
        if ending is not None:
            message += "\n" + ending
        raise CollectiveMismatch(message, verdict)
    return verdict
