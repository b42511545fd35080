"""Do the replicas agree? Every rank's training state compared exactly, by its bytes.

``check_replicas(model, optimizer, scheduler)`` is collective: call it on every rank of the group, at
any point of a step. Each rank digests every tensor of its state (a hash of its dtype, shape and bytes)
and writes every other value exactly (``float.hex()`` for floats; every kind of number by its exact text
and type; NumPy scalars and arrays by dtype, shape and bytes; containers by their type, length and keys,
with their items below them; any other object by its type and the state it pickles with). The entries
are gathered, and when they all agree the call returns a ``ReplicaSummary``, which lists what could not
be compared (a lambda, a meta tensor). When some differ, only the first differing tensor is gathered,
and every rank raises the same ``ReplicaDivergence``: the state's path in the model's own names, which
ranks differ from which, its dtype and shape, the first differing index and each side's value as an
exact hex float. A rank that cannot read its state sends the reason in the same gather, and every rank
raises the same ``ReplicaReadError`` at once.

What is compared, in this order (the first difference in this order is the one named):

    rng                    torch's, Python's, NumPy's (if imported) and CUDA's generators, with rng=True
    scheduler.KEY          the scheduler's state_dict(), e.g. scheduler.last_epoch
    optimizer.param_groups[i].KEY   every setting of a parameter group (lr, betas, weight_decay, ...)
                           and which parameters it holds
    buffer NAME            the module's buffers (BatchNorm's running statistics), with buffers=True
    grad NAME              each parameter's .grad (None is a value too), with grads=True
    optimizer.state[NAME].KEY       the optimizer's per-parameter state (exp_avg, momentum_buffer, step)
    NAME                   the parameters; one the optimizer trains outside the model is named by its
                           place, optimizer.param_groups[i].params[j]

Inputs of an update come before what the update writes, so a fault is named where it enters: a
scheduler stepped on one rank is ``scheduler.last_epoch`` (the learning rate it set follows), a
rank-dependent clipping decision is ``grad NAME`` (the moments and parameters it changed follow). The
message lists the other differing paths after the first.

Paths: ``.key`` for a mapping's identifier keys and attributes, ``{key}`` for its other keys and
``[i]`` for a sequence's items, so that ``{0: t}`` and ``[t]`` are two paths.

Needs torch; NumPy only to read NumPy values the state holds (tensor bytes are read with ctypes).
"""

from __future__ import annotations

import ctypes
import decimal
import enum
import fractions
import hashlib
import numbers
import pickle
import random
import sys
import types
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple,
                    Union)

import torch
import torch.distributed as dist
from torch import nn

from .errors import Error

__all__ = ["check_replicas", "ReplicaDivergence", "ReplicaReadError", "ReplicaSummary", "CategoryCount", "CATEGORIES"]

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
    uncompared: Mapping[str, str] = field(default_factory=dict)
    """path → what it holds and why its contents could not be compared (a lambda, a meta tensor); every
    rank holds the same there."""

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
        text += "".join(f"; {name} not compared: {why}" for name, why in self.skipped.items())
        if self.uncompared:
            text += f"; {len(self.uncompared)} states held alike but not compared: " + ", ".join(
                f"{path} ({why})" for path, why in self.uncompared.items())
        return text


class ReplicaDivergence(AssertionError, Error):
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


class ReplicaReadError(RuntimeError, Error):
    """Some rank could not read its state; raised on every rank at once, naming each such rank's failure."""

    def __init__(self, failures: Mapping[int, str], ranks: Sequence[int]) -> None:
        self.failures: Dict[int, str] = dict(failures)
        """rank → what failed there (the exception's type and message)."""
        self.ranks: Tuple[int, ...] = tuple(ranks)
        """The group's ranks."""
        read = [r for r in self.ranks if r not in self.failures]
        lines = [f"check_replicas could not read the state of {_ranks_text(sorted(self.failures))}"
                 + (f" ({_ranks_text(read)} read theirs)" if read else "")]
        lines += [f"  rank {r}: {why}" for r, why in sorted(self.failures.items())]
        super().__init__("\n".join(lines))

    def __reduce__(self) -> Any:
        return (ReplicaReadError, (self.failures, self.ranks))


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
    """'tensor' (token: digest), 'array' (a NumPy array; token: its exact text or digest), 'value' (token: the
    exact text) or 'uncompared' (token: what is known of it; description: why its contents are not compared)."""
    token: str
    description: str
    """'float32[4, 3]' for a tensor; the value's type for a value."""
    nbytes: int = 0
    tensor: Optional[torch.Tensor] = field(default=None, compare=False, repr=False)
    """The plain (CPU, contiguous) tensor digested; kept on this rank only, never sent."""


_MAX_DEPTH = 32
_SHOWN_BYTES = 64
"""Byte strings and arrays up to this size are sent in full, longer ones as a digest."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _shape_text(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


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


def _digest(header: str, data: bytes) -> str:
    digest = hashlib.blake2b(header.encode() + b"\0", digest_size=16)
    digest.update(data)
    return digest.hexdigest()


def _tensor_entry(tensor: torch.Tensor) -> _Entry:
    description = f"{_dtype_name(tensor.dtype)}{_shape_text(tensor.shape)}"
    if tensor.is_meta:
        return _Entry("uncompared", f"{description} on meta", "a meta tensor holds no values")
    try:
        plain = _plain(tensor)
        data = _raw_bytes(plain)
    except Exception as e:  # a tensor whose values this rank cannot read: the other ranks may
        return _Entry("uncompared", f"{description} unreadable", f"its values cannot be read: {type(e).__name__}")
    description = f"{_dtype_name(plain.dtype)}{_shape_text(plain.shape)}"
    return _Entry("tensor", _digest(description, data), description, len(data), plain)


def _bytes_text(data: bytes) -> str:
    return repr(data) if len(data) <= _SHOWN_BYTES else f"<{len(data)} bytes, blake2b {_digest('', data)}>"


def _int_text(value: int) -> str:
    return str(value) if value.bit_length() <= 8192 else hex(value)  # str() refuses over 4,300 digits


def _numpy_scalar_text(value: Any, numpy: Any) -> str:
    if isinstance(value, numpy.bool_):
        return str(bool(value))
    if isinstance(value, numpy.integer):
        return _int_text(int(value))
    if isinstance(value, numpy.floating) and value.dtype.itemsize <= 8 and not numpy.isnan(value):
        return float(value).hex()  # exact: float16, float32 and float64 widen to a double without rounding
    return f"{value.dtype.str} {_bytes_text(value.tobytes())}"


def _exact_text(value: Any) -> Optional[str]:
    """A scalar written exactly (floats in hex, other numbers by their exact text), or None for a non-scalar.

    Builtin types are written bare; any other type (a subclass, a NumPy scalar) is written with its name,
    so that 1, True, 1.0, numpy.int64(1) and Decimal('1') are five different texts.
    """
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        return f"numpy.{value.dtype.name}({_numpy_scalar_text(value, numpy)})"
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, enum.Enum):
        return f"{_type_name(value)}.{value.name}"
    text: Optional[str] = None
    if isinstance(value, int):
        text = _int_text(int(value))
    elif isinstance(value, float):
        text = float(value).hex()
    elif isinstance(value, complex):
        text = f"({value.real.hex()}, {value.imag.hex()}j)"
    elif isinstance(value, str):
        text = repr(str(value))
    elif isinstance(value, (bytes, bytearray)):
        text = _bytes_text(bytes(value))
    elif isinstance(value, (decimal.Decimal, fractions.Fraction)):
        exact_type = type(value) in (decimal.Decimal, fractions.Fraction)
        return repr(value) if exact_type else f"{_type_name(value)}({value!r})"
    elif isinstance(value, numbers.Rational):
        return f"{_type_name(value)}({_int_text(int(value.numerator))}/{_int_text(int(value.denominator))})"
    elif isinstance(value, numbers.Number):
        shown = repr(value)  # another kind of number: its own exact text, unless it is object's default
        return None if " at 0x" in shown else f"{_type_name(value)}({shown})"
    if text is None:
        return None
    return text if type(value).__module__ == "builtins" else f"{_type_name(value)}({text})"


def _key_text(key: Any) -> str:
    """A mapping's key in a path: `.name`, else `{key}` (braces, never a sequence index's brackets)."""
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    text = _exact_text(key)
    return "{" + (text if text is not None else repr(key)) + "}"


def _sequence_text(value: Union[List[Any], Tuple[Any, ...]], texts: List[str]) -> str:
    inner = ", ".join(texts)
    if type(value) is list:
        return f"[{inner}]"
    inner += "," if len(texts) == 1 else ""
    return f"({inner})" if type(value) is tuple else f"{_type_name(value)}({inner})"


_Walker = Callable[[str, Any], Iterator[Tuple[str, _Entry]]]
"""Walks a value one level down, at the path given."""


def _walk(path: str, value: Any, depth: int = 0,
          ancestors: Optional[Dict[int, str]] = None) -> Iterator[Tuple[str, _Entry]]:
    """Leaves of a nested value: tensors, arrays and scalars (a sequence of scalars is one value), each
    container as its type and length with its items below it, any other object as its type with the state
    it pickles with below it; what cannot be read exactly is an 'uncompared' entry."""
    ancestors = {} if ancestors is None else ancestors
    numpy = sys.modules.get("numpy")
    if isinstance(value, torch.Tensor):
        yield path, _tensor_entry(value)
        return
    if numpy is not None and isinstance(value, numpy.ndarray) and not value.dtype.hasobject:
        description = f"numpy.ndarray {value.dtype.str}{_shape_text(value.shape)}"
        data = value.tobytes()
        yield path, _Entry("array", f"{description} {_bytes_text(data)}", description, len(data))
        return
    text = _exact_text(value)
    if text is not None:
        yield path, _Entry("value", text, _type_name(value))
        return
    if isinstance(value, type):
        yield path, _Entry("value", f"<class {value.__module__}.{value.__qualname__}>", "type")
        return
    if isinstance(value, types.FunctionType):
        if "<" in value.__qualname__:  # a lambda or a local function: its name does not say which
            yield path, _Entry("uncompared", f"<function {value.__qualname__}>", "a function without a global name")
        else:
            yield path, _Entry("value", f"<function {value.__module__}.{value.__qualname__}>", "function")
        return
    if id(value) in ancestors:
        yield path, _Entry("value", f"<the value at {ancestors[id(value)]}>", _type_name(value))
        return
    if depth >= _MAX_DEPTH:
        yield path, _Entry("uncompared", f"<{_type_name(value)}>", f"nested more than {_MAX_DEPTH} deep")
        return
    below = {**ancestors, id(value): path}

    def walk(sub: str, item: Any) -> Iterator[Tuple[str, _Entry]]:
        return _walk(sub, item, depth + 1, below)

    if numpy is not None and isinstance(value, numpy.ndarray):
        yield path, _Entry("value", f"numpy.ndarray {value.dtype.str}{_shape_text(value.shape)}", "numpy.ndarray")
        items = value.tolist()
        if value.ndim == 0:
            yield from walk(path + "[()]", items)
        else:
            for i, item in enumerate(items):
                yield from walk(f"{path}[{i}]", item)
    elif isinstance(value, Mapping):
        yield path, _Entry("value", f"{_type_name(value)} of {len(value)}", _type_name(value))
        for key, item in value.items():
            yield from walk(path + _key_text(key), item)
    elif isinstance(value, (list, tuple)):
        texts = [_exact_text(item) for item in value]
        if all(t is not None for t in texts):
            yield path, _Entry("value", _sequence_text(value, [t for t in texts if t is not None]), _type_name(value))
            return
        yield path, _Entry("value", f"{_type_name(value)} of {len(value)}", _type_name(value))
        for i, item in enumerate(value):
            yield from walk(f"{path}[{i}]", item)
    elif isinstance(value, (set, frozenset)):
        yield path, _set_entry(value, walk)
    else:
        yield from _walk_object(path, value, walk)


def _set_entry(value: Union[Set[Any], FrozenSet[Any]], walk: _Walker) -> _Entry:
    """A set as one value: its items' texts in sorted order (an item that is not a scalar by its entries)."""
    texts: List[str] = []
    for item in value:
        entries = list(walk("", item))
        uncompared = [e for _, e in entries if e.kind == "uncompared"]
        if uncompared:
            return _Entry("uncompared", f"{_type_name(value)} of {len(value)}", f"an item is not compared: "
                          f"{uncompared[0].description}")
        texts.append(entries[0][1].token if len(entries) == 1 and entries[0][0] == "" else
                     "; ".join(f"{p}={e.token}" for p, e in entries))
    return _Entry("value", f"{_type_name(value)}{{{', '.join(sorted(texts))}}}", _type_name(value))


def _walk_object(path: str, value: Any, walk: _Walker) -> Iterator[Tuple[str, _Entry]]:
    """Any other object: its type, then what it pickles with (its attributes, mostly), under its path."""
    try:
        reduce: Callable[[Any, int], Any] = getattr(type(value), "__reduce_ex__")
        reduced = reduce(value, 4)
    except Exception as e:
        yield path, _Entry("uncompared", f"<{_type_name(value)}>", f"its state cannot be read: {e}")
        return
    yield path, _Entry("value", f"<{_type_name(value)}>", _type_name(value))
    if isinstance(reduced, str):  # a global: its name is its identity
        yield path + ".__qualname__", _Entry("value", repr(reduced), "str")
        return
    parts = list(reduced) + [None] * (5 - len(reduced))
    constructor, arguments, state, items, pairs = parts[:5]
    if getattr(constructor, "__name__", "") == "__newobj__" and arguments and arguments[0] is type(value):
        if len(arguments) > 1:
            yield from walk(path + ".__new__", tuple(arguments[1:]))
    else:
        yield from walk(path + ".__reduce__", (constructor, arguments))
    if isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
        state = {**(state[0] or {}), **(state[1] or {})}  # (__dict__, __slots__)
    if isinstance(state, dict):
        for key, item in state.items():
            yield from walk(path + _key_text(key), item)
    elif state is not None:
        yield from walk(path + ".__state__", state)
    if items is not None:
        for i, item in enumerate(items):
            yield from walk(f"{path}[{i}]", item)
    if pairs is not None:
        for key, item in pairs:
            yield from walk(path + _key_text(key), item)


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
    """This rank's state as (category, path, entry) in comparison order; raises what it cannot read."""
    if scheduler is not None and not hasattr(scheduler, "state_dict"):
        raise TypeError(f"the scheduler {type(scheduler).__name__} has no state_dict()")
    if optimizer is not None and not hasattr(optimizer, "param_groups"):
        raise TypeError(f"the optimizer {type(optimizer).__name__} has no param_groups")
    groups: List[Dict[str, Any]] = list(optimizer.param_groups) if optimizer is not None else []
    parameters = list(module.named_parameters())
    names: Dict[int, str] = {id(p): name for name, p in parameters}
    # A parameter the optimizer trains but the model does not hold (a temperature outside the DDP module)
    # is named by its place in the parameter groups, and compared like the model's own.
    for g, group in enumerate(groups):
        for i, p in enumerate(group["params"]):
            if id(p) not in names:
                names[id(p)] = f"optimizer.param_groups[{g}].params[{i}]"
                parameters.append((names[id(p)], p))
    entries: List[Tuple[str, str, _Entry]] = []

    def add(category: str, path: str, value: Any) -> None:
        entries.extend((category, p, e) for p, e in _walk(path, value))

    if rng:
        for path, value in _rng_state():
            add("rng", path, value)
    if scheduler is not None:
        for key, value in scheduler.state_dict().items():
            add("scheduler", "scheduler" + _key_text(key), value)
    for g, group in enumerate(groups):
        for key, value in group.items():
            if key == "params":
                entries.append(("param_groups", f"optimizer.param_groups[{g}].params",
                                _Entry("value", ", ".join(names[id(p)] for p in value), "list of parameters")))
            else:
                add("param_groups", f"optimizer.param_groups[{g}]" + _key_text(key), value)
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
                    add("optimizer_state", f"optimizer.state[{names[id(p)]}]" + _key_text(key), value)
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
    return _exact_text(value) or repr(value)


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


def _partition(tokens: Sequence[Optional[Tuple[str, str]]], ranks: Sequence[int]) -> List[List[int]]:
    """Ranks grouped by equal (kind, token), the reference group first (largest; ties: the lowest rank's)."""
    groups: Dict[Optional[Tuple[str, str]], List[int]] = {}
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
    ranks = _group_ranks(group)
    device = _device_for(group)
    # A rank that cannot read its state still takes part in the one gather, with the reason instead of
    # its state, so that every rank raises the same error at once instead of waiting for the others.
    failure: Optional[str] = None
    mine: List[Tuple[str, str, _Entry]] = []
    try:
        mine = _state(module, optimizer, scheduler, buffers, grads, rng)
    except Exception as e:
        failure = f"{type(e).__name__}: {e}"
    wire = [(category, path, entry.kind, entry.token, entry.description, entry.nbytes)
            for category, path, entry in mine]
    everyone: List[Tuple[Optional[str], List[_Wire]]] = _gather_objects((failure, wire), group, device)
    failures = {r: f for r, (f, _) in zip(ranks, everyone) if f is not None}
    if failures:
        raise ReplicaReadError(failures, ranks)
    comparison = _compare([entries for _, entries in everyone])
    # Every rank holds the same gathered lists and reaches the same conclusion below, so any further
    # collective is issued by all of them.
    if not comparison.differing:
        return _summary(mine, ranks, skipped)
    raise _divergence(comparison.differing, comparison.tables, ranks, comparison.paths, mine, group, device)


_Wire = Tuple[str, str, str, str, str, int]
"""One entry as sent: category, path, kind, token, description, bytes."""
_Held = Tuple[str, str, str, str, int]
"""One entry as held in a rank's table: category, kind, token, description, bytes."""


@dataclass(frozen=True)
class _Comparison:
    paths: List[str]
    """Every path some rank holds, in comparison order."""
    tables: List[Dict[str, _Held]]
    """Per rank (in group order), path → what it holds there."""
    differing: List[str]
    """The paths where some rank's kind or token differs (or it holds nothing), in comparison order."""


def _compare(everyone: Sequence[Sequence[_Wire]]) -> _Comparison:
    """The gathered states compared: no collective, every rank computes the same from the same lists."""
    order: Dict[str, Tuple[int, int, int]] = {}
    tables: List[Dict[str, _Held]] = []
    for r, entries in enumerate(everyone):
        table: Dict[str, _Held] = {}
        for position, (category, path, kind, token, description, nbytes) in enumerate(entries):
            table[path] = (category, kind, token, description, nbytes)
            order.setdefault(path, (CATEGORIES.index(category), r, position))
        tables.append(table)
    paths = sorted(order, key=lambda p: order[p])
    differing = [p for p in paths if len({t[p][1:3] if p in t else None for t in tables}) > 1]
    return _Comparison(paths, tables, differing)


def _summary(mine: Sequence[Tuple[str, str, _Entry]], ranks: Sequence[int],
             skipped: Mapping[str, str]) -> ReplicaSummary:
    counts: Dict[str, Dict[str, int]] = {}
    uncompared: Dict[str, str] = {}
    for category, path, entry in mine:
        count = counts.setdefault(category, {"tensors": 0, "bytes": 0, "values": 0})
        if entry.kind in ("tensor", "array"):
            count["tensors"] += 1
            count["bytes"] += entry.nbytes
        elif entry.kind == "value":
            count["values"] += 1
        else:
            uncompared[path] = f"{entry.token}: {entry.description}"
    categories = {name: CategoryCount(**counts[name]) for name in CATEGORIES if name in counts}
    return ReplicaSummary(world_size=len(ranks), ranks=tuple(ranks), categories=categories, skipped=dict(skipped),
                          uncompared=uncompared)


def _divergence(differing: List[str], tables: List[Dict[str, _Held]], ranks: List[int],
                paths: List[str], mine: List[Tuple[str, str, _Entry]], group: Optional[Any],
                device: torch.device) -> ReplicaDivergence:
    path = differing[0]
    held = [t.get(path) for t in tables]
    category = next(h[0] for h in held if h is not None)
    tokens = [h[1:3] if h is not None else None for h in held]
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
    elif kinds <= {"value", "array"}:
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
