"""Every rank's collective calls, recorded for ``normcheck collectives``, and its verdict read back.

    with record_collectives(folder) as recorder:     # on every rank, after init_process_group
        for step in range(steps):
            recorder.step = step                     # optional: groups the calls by training step
            ...                                      # the training code, unchanged

Each rank appends one JSON line per collective call to ``folder/rank-<r>.jsonl`` (nothing else is
written there), flushed before the call is issued, so the call a rank hangs in is its trace's last
line:

    {"rank": 1, "step": 3, "seq": 17, "op": "all_reduce", "tensor": "all_reduce", "shape": [1],
     "dtype": "float32", "reduce_op": "sum", "group": "world", "source": "train.py:88"}

``tensor`` is the label given with ``recorder.label(name)``, else the torch function the program
called (``all_reduce``, ``all_gather_object``, ``ddp bucket 2``); ``source`` is the program's own line
that led to the call (the first frame outside torch and normcheck).

What is seen, on torch 1.13 and 2.x alike:
- every call a Python program makes through ``torch.distributed`` (however the function was imported),
  because the recorder wraps the methods of the ProcessGroup class that ``torch.distributed`` calls;
  the object collectives appear as the collectives they issue (``all_gather_object``: two all_gathers);
- DistributedDataParallel's gradient buckets: at a DDP model's first forward inside the block the
  recorder registers a communication hook that does what DDP's built-in all-reduce does (multiply the
  bucket by 1/W, all-reduce; bit for bit the same result) through ``torch.distributed.all_reduce``; a
  model with its own Python hook is seen through that hook's calls;
- DDP's broadcasts of parameters at construction and of buffers before each forward
  (``torch.distributed._broadcast_coalesced``), as one broadcast line per call.

What is not seen: collectives issued from C++ only (DDP's parameter verification at construction,
its bucket-order broadcast after the first iteration, the unused-parameter all-reduce of
``find_unused_parameters``, a built-in C++ communication hook), functional collectives
(``torch.distributed._functional_collectives``, used by FSDP2 and DTensor), calls deferred inside
``_coalescing_manager``, and point-to-point ``send``/``recv``. The checker pairs every rank's calls
position by position, so a collective on a subgroup that leaves out some ranks shows them as missing.
"""

import contextlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .check import NormcheckError, find_executable
from .errors import Error

__all__ = ["record_collectives", "CollectiveRecorder", "check_collectives", "CollectiveVerdict", "TracedCall",
           "CollectiveMismatch", "trace_files"]

PathLike = Union[str, "os.PathLike[str]"]

# ProcessGroup method -> (op in the trace, index of the argument whose tensors are described, how)
# how: "one" (the first tensor), "coalesced" (every tensor: their total length), "dtype" (dtype only:
# all_to_all splits may differ per rank), "none" (a barrier).
_METHODS: Dict[str, Tuple[str, int, str]] = {
    "allreduce": ("all_reduce", 0, "one"),
    "allreduce_coalesced": ("all_reduce", 0, "coalesced"),
    "broadcast": ("broadcast", 0, "one"),
    "allgather": ("all_gather", 1, "one"),
    "_allgather_base": ("all_gather", 1, "one"),
    "all_gather_single": ("all_gather", 1, "one"),
    "allgather_coalesced": ("all_gather", 1, "coalesced"),
    "allgather_into_tensor_coalesced": ("all_gather", 1, "coalesced"),
    "all_gather_single_coalesced": ("all_gather", 1, "coalesced"),
    "reduce_scatter": ("reduce_scatter", 0, "one"),
    "_reduce_scatter_base": ("reduce_scatter", 0, "one"),
    "reduce_scatter_single": ("reduce_scatter", 0, "one"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 0, "coalesced"),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 0, "coalesced"),
    "reduce": ("reduce", 0, "one"),
    "gather": ("gather", 1, "one"),
    "scatter": ("scatter", 0, "one"),
    "alltoall": ("all_to_all", 1, "dtype"),
    "alltoall_base": ("all_to_all", 1, "dtype"),
    "all_to_all_single": ("all_to_all", 1, "dtype"),
    "barrier": ("barrier", -1, "none"),
    "monitored_barrier": ("barrier", -1, "none"),
}

_labels = threading.local()
_active: Optional["CollectiveRecorder"] = None
_internal_prefixes: Tuple[str, ...] = tuple(
    os.path.join(os.path.dirname(os.path.abspath(m.__file__ or "")), "")
    for m in (torch, sys.modules[__name__.rsplit(".", 1)[0]]))
_internal_cache: Dict[str, bool] = {}
_short_cache: Dict[str, str] = {}
_DECORATORS = frozenset({"wrapper", "inner", "decorate_context", "wrapped"})  # torch's wrappers, not the API


def trace_files(directory: PathLike) -> List[str]:
    """The trace files ``record_collectives`` wrote into ``directory``, in rank order."""
    folder = os.fspath(directory)
    found = []
    for name in os.listdir(folder):
        if name.startswith("rank-") and name.endswith(".jsonl") and name[5:-6].isdigit():
            found.append((int(name[5:-6]), os.path.join(folder, name)))
    return [path for _, path in sorted(found)]


def _internal(filename: str) -> bool:
    known = _internal_cache.get(filename)
    if known is None:
        known = os.path.abspath(filename).startswith(_internal_prefixes) or filename.startswith("<frozen")
        _internal_cache[filename] = known
    return known


def _short(filename: str) -> str:
    known = _short_cache.get(filename)
    if known is None:
        absolute = os.path.abspath(filename)
        try:
            relative = os.path.relpath(absolute)
        except ValueError:
            relative = absolute
        known = absolute if relative.startswith("..") else relative
        _short_cache[filename] = known
    return known


def _caller() -> Tuple[str, str]:
    """(the program's file:line that led here, the outermost torch or normcheck function it called)."""
    frame = sys._getframe(1)
    api = ""
    while frame is not None and _internal(frame.f_code.co_filename):
        name = frame.f_code.co_name
        if not name.startswith("_") and name not in _DECORATORS:
            api = name
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "", api
    return f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}", api


def _tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _reduce_op_name(op: Any) -> str:
    inner = getattr(op, "op", op)
    name = getattr(inner, "name", None)
    if isinstance(name, str):
        return name.lower()
    for candidate in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        known = getattr(dist.ReduceOp, candidate, None)
        try:
            if known is not None and op == known:
                return candidate.lower()
        except Exception:  # a kind of ReduceOp this torch cannot compare
            pass
    return str(op)


_group_names: Dict[int, Tuple[Any, str]] = {}  # id -> (the group, kept alive so its id is not reused; name)


def _group_name(group: Any) -> str:
    """'world' for the default group, else the group's name and global ranks."""
    known = _group_names.get(id(group))
    if known is not None and known[0] is group:
        return known[1]
    try:
        default = dist.distributed_c10d._get_default_group()
    except Exception:
        default = None
    if group is None or group is default:
        name = "world"
    else:
        try:
            ranks = ",".join(str(r) for r in dist.get_process_group_ranks(group))
        except Exception:
            ranks = "?"
        label = getattr(dist.distributed_c10d, "_pg_names", {}).get(group) or getattr(group, "group_name", "")
        name = f"group {label} (ranks {ranks})" if label else f"ranks {ranks}"
    _group_names[id(group)] = (group, name)
    return name


class CollectiveRecorder:
    """One rank's trace file; ``record_collectives`` makes it and sends every collective call here."""

    def __init__(self, directory: PathLike, rank: int) -> None:
        self.directory = os.fspath(directory)
        self.rank = rank
        self.path = os.path.join(self.directory, f"rank-{rank}.jsonl")
        self.calls = 0
        """Calls recorded by this recorder."""
        self._seq, self._step = self._continued()
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")

    def _continued(self) -> Tuple[int, int]:
        """The next seq and the current step, after the lines an earlier recorder left in the file."""
        try:
            with open(self.path, "rb") as f:
                lines = [line for line in f.read().splitlines() if line.strip()]
        except FileNotFoundError:
            return 0, 0
        if not lines:
            return 0, 0
        last = json.loads(lines[-1])
        return int(last["seq"]) + 1, int(last["step"])

    @property
    def step(self) -> int:
        """The training step written on the following lines (never goes back)."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < self._step:
            raise ValueError(f"the recorder's step goes from {self._step} to {value!r}: a step is an int "
                             "that never goes back")
        self._step = value

    @contextlib.contextmanager
    def label(self, name: str) -> Iterator[None]:
        """Names the tensor of the calls this thread makes inside the block (``"valid_tokens"``)."""
        stack: List[str] = getattr(_labels, "stack", [])
        _labels.stack = stack + [name]
        try:
            yield
        finally:
            _labels.stack = stack

    def record(self, op: str, tensors: Sequence[torch.Tensor], how: str, group: Any,
               reduce_op: Optional[str] = None, root: Optional[int] = None) -> None:
        """Writes one call and flushes it; the wrappers call this just before the call is issued."""
        source, api = _caller()
        stack: List[str] = getattr(_labels, "stack", [])
        line: Dict[str, Any] = {"rank": self.rank, "step": self._step, "seq": 0, "op": op}
        if how != "none":
            line["tensor"] = stack[-1] if stack else api or op
            if how == "one" and tensors:
                line["shape"], line["dtype"] = [int(n) for n in tensors[0].shape], _dtype_name(tensors[0].dtype)
            elif how == "coalesced" and tensors:
                line["shape"] = [sum(int(t.numel()) for t in tensors)]
                line["dtype"] = "+".join(sorted({_dtype_name(t.dtype) for t in tensors}))
            else:
                line["shape"] = []
                line["dtype"] = _dtype_name(tensors[0].dtype) if tensors else ""
        if reduce_op is not None:
            line["reduce_op"] = reduce_op
        line["group"] = _group_name(group)
        if root is not None:
            line["root"] = root
        line["source"] = source
        with self._lock:
            line["seq"] = self._seq
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()
            self._seq += 1
            self.calls += 1

    def close(self) -> None:
        """Flushes and closes the trace file."""
        self._file.close()


def _describe(method: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[List[torch.Tensor], Optional[str],
                                                                                   Optional[int]]:
    op, position, how = _METHODS[method]
    values = list(args) + list(kwargs.values())
    tensors = _tensors(args[position]) if 0 <= position < len(args) else []
    if not tensors and how != "none":
        tensors = [t for v in values for t in _tensors(v)]
    reduce_op: Optional[str] = None
    root: Optional[int] = None
    for v in values:
        if hasattr(v, "reduceOp"):
            reduce_op = _reduce_op_name(v.reduceOp)
        elif isinstance(v, dist.ReduceOp) or type(v).__name__ == "RedOpType":
            reduce_op = _reduce_op_name(v)
        if hasattr(v, "rootRank"):
            root = int(v.rootRank)
    if method == "broadcast" and root is None:
        ints = [v for v in args[1:] if isinstance(v, int) and not isinstance(v, bool)]
        root = ints[0] if ints else None
    if op in ("all_reduce", "reduce", "reduce_scatter") and reduce_op is None:
        reduce_op = "sum"
    return tensors, reduce_op, root


def _wrap_method(cls: Any, method: str) -> Any:
    """Replaces ``cls.method`` by a recording wrapper; returns the class attribute to put back."""
    stored = vars(cls)[method]  # pybind11's instancemethod: getattr would unwrap it to a plain function
    original = getattr(cls, method)
    op, _, how = _METHODS[method]

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _active
        if recorder is not None:
            tensors, reduce_op, root = _describe(method, args, kwargs)
            recorder.record(op, tensors, how, self, reduce_op, root)
        return original(self, *args, **kwargs)

    recorded.__name__ = method
    recorded.__doc__ = original.__doc__
    setattr(cls, method, recorded)
    return stored


def _ddp_allreduce(state, bucket):  # type: ignore[no-untyped-def]
    # No annotations: DDP rejects a hook whose annotations are not its own classes (strings included).
    # What DDP's built-in C++ all-reduce does: multiply by 1/W, sum (bit for bit the same result on torch
    # 1.13 and 2.x, which PyTorch's Python default hook, dividing by W, is not).
    tensor = bucket.buffer()
    tensor.mul_(1.0 / dist.get_world_size(state))
    stack: List[str] = getattr(_labels, "stack", [])
    _labels.stack = stack + [f"ddp bucket {bucket.index()}"]
    try:
        work = dist.all_reduce(tensor, group=state, async_op=True)
    finally:
        _labels.stack = stack
    return work.get_future().then(lambda done: done.value()[0])


def _ensure_hook(ddp: Any) -> None:
    if getattr(ddp, "_normcheck_recording_hook", None) is not None:
        return
    try:
        ddp.register_comm_hook(ddp.process_group, _ddp_allreduce)
        ddp._normcheck_recording_hook = True
    except RuntimeError:  # the model has its own hook; a Python one is seen through its calls
        ddp._normcheck_recording_hook = False


@contextlib.contextmanager
def record_collectives(directory: PathLike, *, rank: Optional[int] = None) -> Iterator[CollectiveRecorder]:
    """Records this rank's collective calls inside the block into ``directory/rank-<r>.jsonl``.

    Every rank enters it (after ``init_process_group``); ``rank`` defaults to the global rank. A second
    block appends to the same file, its calls numbered on. One block at a time per process.
    """
    global _active
    if _active is not None:
        raise RuntimeError(f"record_collectives: this process already records into {_active.path}")
    if rank is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("record_collectives needs an initialized torch.distributed process group "
                               "(or an explicit rank)")
        rank = dist.get_rank()
    os.makedirs(os.fspath(directory), exist_ok=True)
    recorder = CollectiveRecorder(directory, rank)
    process_group = dist.ProcessGroup
    originals: Dict[str, Any] = {}
    ddp_class = torch.nn.parallel.DistributedDataParallel
    original_forward: Callable[..., Any] = ddp_class.forward
    original_broadcast = getattr(dist, "_broadcast_coalesced", None)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        _ensure_hook(self)
        return original_forward(self, *args, **kwargs)

    def broadcast_coalesced(process_group: Any, tensors: Any, *args: Any, **kwargs: Any) -> Any:
        active = _active
        listed = _tensors(tensors)
        if active is not None and listed:
            source = [v for v in args[1:2]] + [kwargs[k] for k in ("src", "authoritative_rank") if k in kwargs]
            stack: List[str] = getattr(_labels, "stack", [])
            _labels.stack = stack + ["ddp broadcast_coalesced"]
            try:
                active.record("broadcast", listed, "coalesced", process_group, None,
                              int(source[0]) if source else 0)
            finally:
                _labels.stack = stack
        assert original_broadcast is not None
        return original_broadcast(process_group, tensors, *args, **kwargs)

    try:
        for method in _METHODS:
            if method in vars(process_group):
                originals[method] = _wrap_method(process_group, method)
        setattr(ddp_class, "forward", forward)
        if original_broadcast is not None:
            setattr(dist, "_broadcast_coalesced", broadcast_coalesced)
        _active = recorder
        yield recorder
    finally:
        _active = None
        for method, original in originals.items():
            setattr(process_group, method, original)
        setattr(ddp_class, "forward", original_forward)
        if original_broadcast is not None:
            setattr(dist, "_broadcast_coalesced", original_broadcast)
        recorder.close()


# ---------------------------------------------------------------------------------------------------
# The verdict of `normcheck collectives --json`


@dataclass(frozen=True)
class TracedCall:
    """One rank's call at the place the ranks first disagree, as the checker reports it."""

    rank: int
    seq: Optional[int]
    """None when the rank issued no call there."""
    op: str = ""
    tensor: str = ""
    shape: Tuple[int, ...] = ()
    dtype: str = ""
    reduce_op: str = ""
    group: str = ""
    source: str = ""
    """The program's line that issued it ("train.py:88"), when the recorder wrote one."""
    file: str = ""
    line: int = 0
    ordinal: int = 0
    """1 for the rank's first call of this op, 2 for its second, ... (0 when unknown)."""
    last: bool = False
    """True when it is the rank's last recorded call: the one it still waits in, if it hung."""

    def text(self) -> str:
        """``all_reduce #2 (float32[1])``, with the group when it is not the default one."""
        shape = "[" + ", ".join(map(str, self.shape)) + "]"
        what = "" if self.op == "barrier" else f"{self.dtype}{shape}"
        if self.group and self.group != "world":
            what = f"{what}, {self.group}" if what else self.group
        number = f" #{self.ordinal}" if self.ordinal else ""
        return f"{self.op}{number}" + (f" ({what})" if what else "")


@dataclass(frozen=True)
class CollectiveVerdict:
    """``normcheck collectives`` on one run's traces."""

    consistent: bool
    """Every rank issued the same calls in the same order with matching op, group, reduce op, shape, dtype."""
    world_size: int
    calls: int
    steps: int
    kind: Optional[str] = None
    """'missing_call' (some rank did not issue a call others wait in) or 'mismatch'; None when consistent."""
    step: Optional[int] = None
    position: Optional[int] = None
    waiting: Tuple[int, ...] = ()
    missing: Tuple[int, ...] = ()
    side_by_side: Tuple[TracedCall, ...] = ()
    notes: Tuple[str, ...] = ()
    hung: Tuple[int, ...] = ()
    """Ranks that were still running when the launch's time limit ended them."""
    files: Tuple[str, ...] = ()
    report: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    message: str = ""

    def raise_for_problem(self) -> None:
        """Raises ``CollectiveMismatch`` unless the traces are consistent."""
        if not self.consistent:
            raise CollectiveMismatch(self.message, self)


class CollectiveMismatch(AssertionError, Error):
    """The ranks did not issue the same collectives; the message names the first call they disagree on."""

    def __init__(self, message: str, verdict: Optional[CollectiveVerdict] = None) -> None:
        super().__init__(message)
        self.verdict = verdict

    def __reduce__(self) -> Any:
        return (CollectiveMismatch, (str(self), self.verdict))


def _ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _position(path: str, line_number: int, rank: int, op: str) -> Tuple[int, bool]:
    """(how many calls of `op` the rank issued up to its trace's line `line_number`, whether it was its last)."""
    count = 0
    last = True
    try:
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                call = json.loads(text)
                if call.get("rank") != rank:
                    continue
                if number > line_number:
                    last = False
                    break
                if call.get("op") == op:
                    count += 1
    except (OSError, ValueError):
        return 0, False
    return count, last


def _call_text(call: TracedCall) -> str:
    return call.text() + (f" at {call.source}" if call.source else "")


def _describe_problem(problem: Dict[str, Any], calls: Sequence[TracedCall], hung: Sequence[int],
                      files: Sequence[str]) -> str:
    by_rank = {c.rank: c for c in calls}
    waiting = list(problem["waiting"])
    missing = list(problem["missing"])
    # Ranks the time limit ended while their last recorded call was this one: they wait in it.
    stuck = [r for r in hung if r in by_rank and by_rank[r].seq is not None and by_rank[r].last]
    lines: List[str] = []
    if problem["kind"] == "missing_call" and waiting:
        call = by_rank[waiting[0]]
        waits = "waits" if len(waiting) == 1 else "wait"
        where = f", {call.source}" if call.source else ""
        lines.append(f"{_ranks_text(missing)} did not issue {call.text()} that "
                     f"{_ranks_text(waiting)} {waits} in{where}")
    elif stuck:
        call = by_rank[stuck[0]]
        same = [r for r, c in by_rank.items() if c.seq is not None and (c.op, c.shape, c.dtype, c.group, c.reduce_op,
                                                                          c.source) == (call.op, call.shape, call.dtype,
                                                                                        call.group, call.reduce_op,
                                                                                        call.source)]
        others = [r for r in sorted(by_rank) if r not in same]
        waits = "waits" if len(same) == 1 else "wait"
        where = f", {call.source}" if call.source else ""
        lines.append(f"{_ranks_text(others)} did not issue {call.text()} that {_ranks_text(same)} {waits} in{where}")
        for r in others:
            c = by_rank[r]
            lines.append(f"  rank {r} issued {_call_text(c)} there instead" if c.seq is not None else
                         f"  rank {r} issued no call there")
    else:
        shown = "; ".join(f"rank {c.rank} " + (_call_text(c) if c.seq is not None else "no call") for c in calls)
        lines.append(f"the ranks issue different collectives: {shown}")
    lines.append(f"  at step {problem['step']}, call {problem['position']} (0-based) of that step")
    for note in problem["notes"]:
        lines.append(f"  {note}")
    if hung:
        ended = "it" if len(hung) == 1 else "them"
        detail = "; ".join(f"rank {r} in {_call_text(by_rank[r])}" for r in stuck)
        lines.append(f"  {_ranks_text(list(hung))} {'was' if len(hung) == 1 else 'were'} still running when the "
                     f"launch's time limit ended {ended}" + (f", waiting: {detail}" if detail else ""))
        for r in hung:
            if r in stuck:
                continue
            last = _last_call(files, r)
            lines.append(f"  rank {r} was past its last recorded call"
                         + (f" ({_call_text(last)})" if last is not None else "")
                         + ": it waited in a collective the recorder does not see (one torch issues from C++), "
                         "or in none")
    return "\n".join(lines)


def _last_call(files: Sequence[str], rank: int) -> Optional[TracedCall]:
    """The rank's last recorded call, read back from the trace files."""
    found: Optional[Dict[str, Any]] = None
    count: Dict[str, int] = {}
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                for text in f:
                    if text.strip():
                        call = json.loads(text)
                        if call.get("rank") == rank:
                            count[str(call.get("op"))] = count.get(str(call.get("op")), 0) + 1
                            found = call
        except (OSError, ValueError):
            return None
    if found is None:
        return None
    return TracedCall(rank=rank, seq=int(found["seq"]), op=str(found["op"]), tensor=str(found.get("tensor", "")),
                      shape=tuple(int(n) for n in found.get("shape", [])), dtype=str(found.get("dtype", "")),
                      group=str(found.get("group", "")), source=str(found.get("source", "")),
                      ordinal=count[str(found["op"])], last=True)


def check_collectives(traces: Union[PathLike, Sequence[PathLike]], *, world_size: Optional[int] = None,
                      executable: Optional[PathLike] = None, hung: Sequence[int] = (),
                      timeout: float = 120.0) -> CollectiveVerdict:
    """Runs ``normcheck collectives --json`` on a folder of traces (or trace files); returns its verdict.

    ``world_size`` makes a rank that recorded nothing miss every call; ``hung`` names ranks a time limit
    ended, which the message then says. Raises ``NormcheckError`` when there is no trace line to check
    (nothing would be judged) or the executable cannot be run or rejects a trace.
    """
    if isinstance(traces, (str, os.PathLike)):
        folder = os.fspath(traces)
        files = trace_files(folder) if os.path.isdir(folder) else [folder]
    else:
        files = [os.fspath(t) for t in traces]
    nonempty = [f for f in files if os.path.getsize(f) > 0]
    if not nonempty:
        raise NormcheckError(f"no collective call was recorded in {', '.join(files) or traces}: nothing to check")
    program = find_executable(executable)
    command = [program, "collectives", "--json"] + (["--world-size", str(world_size)] if world_size else []) + nonempty
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NormcheckError(f"{' '.join(command)} did not finish within {timeout:g} s") from None
    except OSError as e:
        raise NormcheckError(f"cannot run {program}: {e}") from None
    if done.returncode not in (0, 1):
        raise NormcheckError(f"{' '.join(command)} exited with {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[:2000]}")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise NormcheckError(f"{' '.join(command)} printed no JSON verdict: {done.stdout.strip()[:2000]}") from None
    problem = report.get("problem")
    common = dict(world_size=int(report["world_size"]), calls=int(report["calls"]), steps=int(report["steps"]),
                  hung=tuple(hung), files=tuple(files), report=report)
    if problem is None:
        return CollectiveVerdict(consistent=True, message=f"every rank issued the same {report['calls']} collective "
                                 "calls", **common)
    calls = []
    for entry in problem["calls"]:
        if entry.get("seq") is None:
            calls.append(TracedCall(rank=int(entry["rank"]), seq=None))
            continue
        rank, op = int(entry["rank"]), str(entry["op"])
        path, line = str(entry.get("file", "")), int(entry.get("line", 0))
        ordinal, last = _position(path, line, rank, op)
        calls.append(TracedCall(rank=rank, seq=int(entry["seq"]), op=op, tensor=str(entry.get("tensor", "")),
                                shape=tuple(int(n) for n in entry.get("shape", [])), dtype=str(entry.get("dtype", "")),
                                reduce_op=str(entry.get("reduce_op", "")), group=str(entry.get("group", "")),
                                source=str(entry.get("source", "")), file=path, line=line, ordinal=ordinal,
                                last=last))
    message = _describe_problem(problem, calls, hung, nonempty)
    return CollectiveVerdict(consistent=False, kind=str(problem["kind"]), step=int(problem["step"]),
                             position=int(problem["position"]), waiting=tuple(problem["waiting"]),
                             missing=tuple(problem["missing"]), side_by_side=tuple(calls),
                             notes=tuple(problem["notes"]), message=message, **common)
