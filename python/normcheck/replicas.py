"""Do the replicas agree? Every rank's training state compared exactly, by its bytes.

``check_replicas(model, optimizer, scheduler)`` is collective: call it on every rank of the group, at
any point of a step. Each rank digests every tensor of its state (a hash of its dtype, shape and bytes)
and every scalar (written exactly: ``float.hex()`` for floats), the digests are gathered, and when they
all agree the call returns a ``ReplicaSummary``. When some differ, only the first differing tensor is
gathered, and every rank raises the same ``ReplicaDivergence``: the state's path in the model's own
names, which ranks differ from which, its dtype and shape, the first differing index and each side's
value as an exact hex float.

What is compared, in this order (the first difference in this order is the one named):

    rng                    torch's, Python's, NumPy's (if imported) and CUDA's generators, with rng=True
    scheduler.KEY          the scheduler's state_dict(), e.g. scheduler.last_epoch
    optimizer.param_groups[i].KEY   every setting of a parameter group (lr, betas, weight_decay, ...)
                           and which parameters it holds
    buffer NAME            the module's buffers (BatchNorm's running statistics), with buffers=True
    grad NAME              each parameter's .grad (None is a value too), with grads=True
    optimizer.state[NAME].KEY       the optimizer's per-parameter state (exp_avg, momentum_buffer, step)
    NAME                   the parameters

Inputs of an update come before what the update writes, so a fault is named where it enters: a
scheduler stepped on one rank is ``scheduler.last_epoch`` (the learning rate it set follows), a
rank-dependent clipping decision is ``grad NAME`` (the moments and parameters it changed follow). The
message lists the other differing paths after the first.

Needs torch; no NumPy (bytes are read with ctypes).
"""

from __future__ import annotations

import ctypes
import hashlib
import pickle
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["check_replicas", "ReplicaDivergence", "ReplicaSummary", "CategoryCount", "CATEGORIES"]

CATEGORIES: Tuple[str, ...] = ("rng", "scheduler", "param_groups", "buffers", "gradients", "optimizer_state",
                               "parameters")
"""The kinds of state compared, in the order their first difference is looked for."""

_SHOWN_OTHERS = 8


@dataclass(frozen=True)
class CategoryCount:
    """How much of one kind of state was compared."""

    tensors: int = 0
    bytes: int = 0
    """The tensors' bytes, on each rank."""
    values: int = 0
    """Scalars and other non-tensor values (a gradient that is None counts here)."""


@dataclass(frozen=True)
class ReplicaSummary:
    """What ``check_replicas`` compared when every rank agreed."""

    world_size: int
    ranks: Tuple[int, ...]
    """The global ranks of the group compared."""
    categories: Mapping[str, CategoryCount] = field(default_factory=dict)
    """One count per kind of state (the names of ``CATEGORIES``); kinds not compared are absent."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Kinds asked for but not compared, with the reason (DDP's broadcast buffers)."""

    @property
    def tensors(self) -> int:
        """Tensors compared on each rank, over every kind."""
        return sum(c.tensors for c in self.categories.values())

    @property
    def bytes(self) -> int:
        """Bytes of tensors compared on each rank, over every kind."""
        return sum(c.bytes for c in self.categories.values())

    @property
    def values(self) -> int:
        """Non-tensor values compared on each rank, over every kind."""
        return sum(c.values for c in self.categories.values())

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {c.tensors} tensors ({c.bytes} bytes) and {c.values} values"
                          for name, c in self.categories.items())
        text = (f"the replicas of ranks {', '.join(map(str, self.ranks))} agree exactly: {self.tensors} tensors "
                f"({self.bytes} bytes) and {self.values} values compared ({parts})")
        return text + "".join(f"; {name} not compared: {why}" for name, why in self.skipped.items())


class ReplicaDivergence(AssertionError):
    """The ranks' states differ; raised on every rank, the message names the first difference."""

    def __init__(self, message: str, *, path: str = "", category: str = "", ranks: Sequence[int] = (),
                 reference_ranks: Sequence[int] = (), index: Optional[Sequence[int]] = None,
                 values: Optional[Mapping[int, str]] = None, dtype: Optional[str] = None,
                 shape: Optional[Sequence[int]] = None, others: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.path = path
        """The first differing state, e.g. ``optimizer.state[body.weight].exp_avg``."""
        self.category = category
        """Its kind, one of ``CATEGORIES``."""
        self.ranks: Tuple[int, ...] = tuple(ranks)
        """The ranks that differ from the reference ranks."""
        self.reference_ranks: Tuple[int, ...] = tuple(reference_ranks)
        """The largest group of ranks that agree (ties: the one holding the lowest rank)."""
        self.index: Optional[Tuple[int, ...]] = None if index is None else tuple(index)
        """The first differing element's index, for tensors of the same dtype and shape."""
        self.values: Dict[int, str] = dict(values or {})
        """rank → the value there, written exactly (hex floats), or what the rank holds instead."""
        self.dtype = dtype
        self.shape: Optional[Tuple[int, ...]] = None if shape is None else tuple(shape)
        self.others: Tuple[str, ...] = tuple(others)
        """The other differing paths, in the comparison order."""

    def __reduce__(self) -> Any:
        return (_rebuild_divergence, (str(self), self.path, self.category, self.ranks, self.reference_ranks,
                                      self.index, self.values, self.dtype, self.shape, self.others))


def _rebuild_divergence(message: str, path: str, category: str, ranks: Tuple[int, ...],
                        reference_ranks: Tuple[int, ...], index: Optional[Tuple[int, ...]],
                        values: Dict[int, str], dtype: Optional[str], shape: Optional[Tuple[int, ...]],
                        others: Tuple[str, ...]) -> ReplicaDivergence:
    return ReplicaDivergence(message, path=path, category=category, ranks=ranks, reference_ranks=reference_ranks,
                             index=index, values=values, dtype=dtype, shape=shape, others=others)


# ---------------------------------------------------------------------------------------------------
# One rank's state, as (category, path, entry) in comparison order


@dataclass(frozen=True)
class _Entry:
    kind: str
    """'tensor' (token: digest), or 'value' (token: the exact text)."""
    token: str
    description: str
    """'float32[4, 3]' for a tensor; the value's type for a value."""
    nbytes: int = 0
    tensor: Optional[torch.Tensor] = field(default=None, compare=False, repr=False)
    """The plain (CPU, contiguous) tensor digested; kept on this rank only, never sent."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _shape_text(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor holding exactly the values of `tensor` (conjugate and negative views resolved)."""
    t = tensor.detach()
    if t.is_sparse:
        t = t.to_dense()
    t = t.cpu()
    for resolve in ("resolve_conj", "resolve_neg"):
        if hasattr(t, resolve):
            t = getattr(t, resolve)()
    return t.contiguous()


def _raw_bytes(plain: torch.Tensor) -> bytes:
    size = plain.numel() * plain.element_size()
    return ctypes.string_at(plain.data_ptr(), size) if size else b""


def _tensor_entry(tensor: torch.Tensor) -> _Entry:
    plain = _plain(tensor)
    data = _raw_bytes(plain)
    description = f"{_dtype_name(plain.dtype)}{_shape_text(plain.shape)}"
    digest = hashlib.blake2b(description.encode() + b"\0", digest_size=16)
    digest.update(data)
    return _Entry("tensor", digest.hexdigest(), description, len(data), plain)


def _exact_text(value: Any) -> str:
    """A scalar written exactly: floats in hex, everything else by its exact text."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return float(value).hex()
    if isinstance(value, complex):
        return f"({value.real.hex()}, {value.imag.hex()}j)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    # Other objects (functions in a LambdaLR, say) are compared by type only: their repr can hold an address.
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (torch.Tensor, Mapping, list, tuple))


def _walk(path: str, value: Any) -> Iterator[Tuple[str, _Entry]]:
    """Leaves of a nested value: tensors, and scalars (a sequence of scalars is one value)."""
    if isinstance(value, torch.Tensor):
        yield path, _tensor_entry(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(f"{path}.{key}" if isinstance(key, str) and key.isidentifier() else f"{path}[{key!r}]",
                             item)
    elif isinstance(value, (list, tuple)):
        if all(_is_scalar(item) for item in value):
            text = ", ".join(_exact_text(item) for item in value)
            yield path, _Entry("value", "(" + text + (",)" if len(value) == 1 else ")"), type(value).__name__)
        else:
            for i, item in enumerate(value):
                yield from _walk(f"{path}[{i}]", item)
    else:
        yield path, _Entry("value", _exact_text(value), type(value).__name__)


def _unwrap(model: nn.Module) -> nn.Module:
    """The user's module under DDP (``.module``) and torch.compile (``._orig_mod``)."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(getattr(model, "_orig_mod"), nn.Module):
            model = getattr(model, "_orig_mod")
        else:
            return model


def _rng_state() -> Iterator[Tuple[str, Any]]:
    yield "rng torch", torch.get_rng_state()
    version, words, gauss = random.getstate()
    yield "rng python", torch.tensor(list(words), dtype=torch.int64)
    yield "rng python.gauss_next", gauss
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            state = numpy.random.get_state()
            yield "rng numpy", torch.tensor([int(w) for w in state[1]], dtype=torch.int64)
            yield "rng numpy.position", tuple(state[2:])
        except Exception:  # a NumPy without the legacy global generator
            pass
    cuda_initialized: Callable[[], bool] = torch.cuda.is_initialized
    if torch.cuda.is_available() and cuda_initialized():
        for device in range(torch.cuda.device_count()):
            yield f"rng cuda:{device}", torch.cuda.get_rng_state(device)


def _state(module: nn.Module, optimizer: Any, scheduler: Any, buffers: bool, grads: bool,
           rng: bool) -> List[Tuple[str, str, _Entry]]:
    names: Dict[int, str] = {id(p): name for name, p in module.named_parameters()}
    parameters = list(module.named_parameters())
    entries: List[Tuple[str, str, _Entry]] = []

    def add(category: str, path: str, value: Any) -> None:
        entries.extend((category, p, e) for p, e in _walk(path, value))

    if rng:
        for path, value in _rng_state():
            add("rng", path, value)
    if scheduler is not None:
        if not hasattr(scheduler, "state_dict"):
            raise TypeError(f"check_replicas: the scheduler {type(scheduler).__name__} has no state_dict()")
        for key, value in scheduler.state_dict().items():
            add("scheduler", f"scheduler.{key}" if isinstance(key, str) else f"scheduler[{key!r}]", value)
    groups: List[Dict[str, Any]] = list(getattr(optimizer, "param_groups", [])) if optimizer is not None else []
    if optimizer is not None and not hasattr(optimizer, "param_groups"):
        raise TypeError(f"check_replicas: the optimizer {type(optimizer).__name__} has no param_groups")
    unnamed: Dict[int, str] = {}

    def name_of(p: Any) -> str:
        if id(p) in names:
            return names[id(p)]
        return unnamed.setdefault(id(p), f"<parameter {len(unnamed)} not in the model>")

    for g, group in enumerate(groups):
        for key, value in group.items():
            if key == "params":
                entries.append(("param_groups", f"optimizer.param_groups[{g}].params",
                                _Entry("value", ", ".join(name_of(p) for p in value), "list of parameters")))
            else:
                add("param_groups", f"optimizer.param_groups[{g}].{key}", value)
    if buffers:
        for name, buffer in module.named_buffers():
            add("buffers", f"buffer {name}", buffer)
    if grads:
        for name, p in parameters:
            add("gradients", f"grad {name}", p.grad)
    if optimizer is not None:
        state = getattr(optimizer, "state", {})
        seen = set()
        for group in groups:
            for p in group["params"]:
                if id(p) in seen or p not in state:
                    continue
                seen.add(id(p))
                for key, value in state[p].items():
                    where = f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]"
                    add("optimizer_state", f"optimizer.state[{name_of(p)}]{where}", value)
    for name, p in parameters:
        add("parameters", name, p)
    return entries


# ---------------------------------------------------------------------------------------------------
# Gathering (pickled bytes in uint8 tensors: no NumPy needed, unlike all_gather_object on torch 2)


def _gather_objects(value: Any, group: Optional[Any], device: torch.device) -> List[Any]:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    world = dist.get_world_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    if data:
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    mine = mine.to(device)
    received = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(received, mine, group=group)
    return [pickle.loads(_raw_bytes(_plain(r))[:int(s.item())]) for r, s in zip(received, sizes)]


def _device_for(group: Optional[Any]) -> torch.device:
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _group_ranks(group: Optional[Any]) -> List[int]:
    world = dist.get_world_size(group)
    if group is None:
        return list(range(world))
    return [int(dist.distributed_c10d.get_global_rank(group, r)) for r in range(world)]


# ---------------------------------------------------------------------------------------------------
# Comparing


def _ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _element_text(flat: torch.Tensor, k: int) -> str:
    value = flat[k].item()
    return _exact_text(value)


def _first_difference(a: bytes, b: bytes) -> int:
    """The first byte offset where two byte strings of equal length differ (binary search in C speed)."""
    low, high = 0, len(a)
    while high - low > 64:
        middle = (low + high) // 2
        if a[low:middle] != b[low:middle]:
            high = middle
        else:
            low = middle
    for i in range(low, high):
        if a[i] != b[i]:
            return i
    return high


def _unravel(k: int, shape: Sequence[int]) -> Tuple[int, ...]:
    index: List[int] = []
    for extent in reversed(list(shape)):
        index.append(k % extent)
        k //= extent
    return tuple(reversed(index))


def _partition(tokens: Sequence[Optional[str]], ranks: Sequence[int]) -> List[List[int]]:
    """Ranks grouped by equal token, the reference group first (largest; ties: the lowest rank's)."""
    groups: Dict[Optional[str], List[int]] = {}
    for token, rank in zip(tokens, ranks):
        groups.setdefault(token, []).append(rank)
    return sorted(groups.values(), key=lambda members: (-len(members), members[0]))


def check_replicas(model: nn.Module, optimizer: Any = None, scheduler: Any = None, *, buffers: bool = True,
                   grads: bool = True, rng: bool = False, group: Optional[Any] = None) -> ReplicaSummary:
    """Compares every rank's parameters, gradients, buffers, optimizer and scheduler state exactly.

    Collective: every rank of the group calls it. ``model`` may be DDP-wrapped (names are the wrapped
    module's); the group is ``group``, else DDP's process group, else the default group. Returns a
    ``ReplicaSummary`` when all agree; raises ``ReplicaDivergence`` on every rank when some state
    differs. Pass ``grads=False`` where gradients legitimately differ (inside ``no_sync``, before the
    synchronizing backward), ``rng=True`` to require equal random-number generators too.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("check_replicas needs an initialized torch.distributed process group")
    skipped: Dict[str, str] = {}
    if isinstance(model, nn.parallel.DistributedDataParallel):
        if group is None:
            group = getattr(model, "process_group", None)
        if buffers and getattr(model, "broadcast_buffers", False) and any(True for _ in model.module.buffers()):
            # Each forward starts by overwriting every rank's buffers with rank 0's: between forwards the
            # others hold their own batch's statistics, which DDP replaces before a forward through it reads them.
            buffers = False
            skipped["buffers"] = ("DDP (broadcast_buffers=True) overwrites them with rank 0's at the start of "
                                  "every forward")
    module = _unwrap(model)
    mine = _state(module, optimizer, scheduler, buffers, grads, rng)
    ranks = _group_ranks(group)
    device = _device_for(group)
    wire = [(category, path, entry.kind, entry.token, entry.description, entry.nbytes)
            for category, path, entry in mine]
    everyone: List[List[Tuple[str, str, str, str, str, int]]] = _gather_objects(wire, group, device)

    # Every rank holds the same gathered lists and reaches the same conclusion below, so any further
    # collective is issued by all of them.
    order: Dict[str, Tuple[int, int, int]] = {}
    tables: List[Dict[str, Tuple[str, str, str, str, int]]] = []
    for r, entries in enumerate(everyone):
        table: Dict[str, Tuple[str, str, str, str, int]] = {}
        for position, (category, path, kind, token, description, nbytes) in enumerate(entries):
            table[path] = (category, kind, token, description, nbytes)
            order.setdefault(path, (CATEGORIES.index(category), r, position))
        tables.append(table)
    paths = sorted(order, key=lambda p: order[p])
    differing = [p for p in paths if len({t[p][2] if p in t else None for t in tables}) > 1]
    if not differing:
        counts: Dict[str, Dict[str, int]] = {}
        for category, path, entry in mine:
            count = counts.setdefault(category, {"tensors": 0, "bytes": 0, "values": 0})
            if entry.kind == "tensor":
                count["tensors"] += 1
                count["bytes"] += entry.nbytes
            else:
                count["values"] += 1
        categories = {name: CategoryCount(**counts[name]) for name in CATEGORIES if name in counts}
        return ReplicaSummary(world_size=len(ranks), ranks=tuple(ranks), categories=categories, skipped=skipped)
    raise _divergence(differing, tables, ranks, paths, mine, group, device)


def _divergence(differing: List[str], tables: List[Dict[str, Tuple[str, str, str, str, int]]], ranks: List[int],
                paths: List[str], mine: List[Tuple[str, str, _Entry]], group: Optional[Any],
                device: torch.device) -> ReplicaDivergence:
    path = differing[0]
    held = [t.get(path) for t in tables]
    category = next(h[0] for h in held if h is not None)
    tokens = [h[2] if h is not None else None for h in held]
    parts = _partition(tokens, ranks)
    reference, odd = parts[0], sorted(r for members in parts[1:] for r in members)
    describe = {r: (h[3] if h is not None else "absent") for r, h in zip(ranks, held)}
    heading = f"the replicas differ at {path}: {_ranks_text(odd)} {'differs' if len(odd) == 1 else 'differ'} " \
              f"from {_ranks_text(reference)}"
    lines = [heading]
    values: Dict[int, str] = {}
    index: Optional[Tuple[int, ...]] = None
    dtype: Optional[str] = None
    shape: Optional[Tuple[int, ...]] = None
    kinds = {h[1] if h is not None else None for h in held}
    if kinds == {"tensor"} and len({describe[r] for r in ranks}) == 1:
        # Same dtype and shape, other bytes: gather this one tensor and find its first differing element.
        tensor = next(e.tensor for c, p, e in mine if p == path and e.tensor is not None)
        gathered: List[bytes] = _gather_objects(_raw_bytes(tensor), group, device)
        flat_by_rank = {r: _from_bytes(data, tensor) for r, data in zip(ranks, gathered)}
        dtype, shape = _dtype_name(tensor.dtype), tuple(int(n) for n in tensor.shape)
        reference_bytes = gathered[ranks.index(reference[0])]
        first = None
        for members in parts[1:]:
            offset = _first_difference(reference_bytes, gathered[ranks.index(members[0])])
            k = offset // tensor.element_size()
            first = k if first is None else min(first, k)
        assert first is not None
        index = _unravel(first, shape) if shape else ()
        for r in ranks:
            values[r] = _element_text(flat_by_rank[r], first)
        shown = "; ".join(f"{_ranks_text(m)}: {values[m[0]]}" for m in parts)
        lines.append(f"  {describe[ranks[0]]}, first differing index {list(index)}: {shown}")
    elif kinds == {"value"}:
        for r, h in zip(ranks, held):
            values[r] = h[2] if h is not None else "absent"
        shown = "; ".join(f"{_ranks_text(m)}: {values[m[0]]} ({describe[m[0]]})" for m in parts)
        lines.append(f"  {shown}")
    else:
        for r, h in zip(ranks, held):
            values[r] = describe[r] if h is None or h[1] == "tensor" else f"{h[2]} ({h[3]})"
        shown = "; ".join(f"{_ranks_text(m)}: {values[m[0]]}" for m in parts)
        lines.append(f"  {shown}")
    others = differing[1:]
    if others:
        listed = ", ".join(others[:_SHOWN_OTHERS]) + (f", … {len(others) - _SHOWN_OTHERS} more"
                                                      if len(others) > _SHOWN_OTHERS else "")
        lines.append(f"  {len(differing)} of {len(paths)} compared states differ; after it: {listed}")
    else:
        lines.append(f"  the only difference among {len(paths)} compared states")
    return ReplicaDivergence("\n".join(lines), path=path, category=category, ranks=odd, reference_ranks=reference,
                             index=index, values=values, dtype=dtype, shape=shape, others=others)


def _from_bytes(data: bytes, like: torch.Tensor) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
    return flat.view(like.dtype) if data else torch.zeros(0, dtype=like.dtype)
