"""The normcheck/1 writer: the one place in the package that produces the wire format.

A document is built as a plain dict whose leaves are already wire literals (JSON integers, strings such
as ``"0x1.8p+1"`` or ``"3/4"``, ``None`` for a position without a valid token), rendered one member per
line and written atomically. Every float goes through ``float.hex()``, which is exact: a float32 value
converted to a Python float keeps its value, so normcheck reads exactly the numbers the program held.
No float is ever formatted with ``str()`` or ``repr()``; ``render`` refuses a document that still holds
one.

Standard library only, except ``dump_update``, which gathers the ranks' parts through
``torch.distributed``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import stat
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .options import DTYPES, OBJECTIVES, REDUCERS

__all__ = [
    "FORMAT", "DTYPES", "REDUCERS", "OBJECTIVES", "Literal", "exact", "literal", "tokens", "group", "sequences",
    "site", "observed", "document", "render", "write", "write_atomically", "token_values", "rank_part",
    "build_document", "dump_update", "sliced", "term", "term_measurement",
]

FORMAT = "normcheck/1"
VERDICTS = ("pass", "fail", "inconclusive")

Literal = Union[int, str]
"""A wire literal: a JSON integer, or a string holding a hexadecimal float, a fraction or a decimal."""


def exact(value: Any) -> str:
    """The exact text of a number: ``float.hex()`` of a float ('nan', 'inf', '-inf' when not finite).

    An int, ``Fraction`` or ``Decimal`` is written as its ``float.hex()`` text only when a float holds it
    exactly, otherwise as the integer, ``"p/q"`` or decimal it is: nothing is rounded through a float. A
    string is taken as the exact literal the caller wrote (normcheck reads it, or rejects it). A tensor or
    NumPy scalar is read with ``item()``. A boolean, or any other type, is refused (TypeError).
    """
    if hasattr(value, "item") and not isinstance(value, (int, float, Fraction, Decimal, str)):
        value = value.item()
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, str):
        if not value or value != value.strip():
            raise ValueError(f"{value!r} is not an exact literal (empty, or with spaces around it)")
        return value
    if isinstance(value, Decimal):
        if value.is_nan():
            if value.is_snan():
                raise ValueError("a signalling NaN is not a value a program held")
            return "nan"
        if value.is_infinite():
            return "-inf" if value < 0 else "inf"
        value = Fraction(value)
    if isinstance(value, int):
        value = Fraction(value)
    if isinstance(value, Fraction):
        try:
            as_float = float(value)
        except OverflowError:
            as_float = math.inf
        if math.isfinite(as_float) and Fraction(as_float) == value:
            return as_float.hex()
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    raise TypeError(f"{type(value).__name__} is not an exact number (int, float, Fraction, Decimal or a literal "
                    "string)")


def literal(value: Any, *, finite: bool = True) -> Literal:
    """One exact number as a wire literal: an int stays an int, a float becomes its ``float.hex()`` text.

    A ``Fraction`` becomes ``"p/q"`` (an int when whole); a string is taken as the literal the caller
    wrote; a tensor or NumPy scalar is read with ``item()``. Non-finite floats are refused unless
    ``finite`` is False (only observed values may be non-finite).
    """
    if hasattr(value, "item") and not isinstance(value, (int, float, Fraction, str)):
        value = value.item()
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if finite and not math.isfinite(value):
            raise ValueError(f"{value.hex()} is not a finite number (only observed values may be)")
        return value.hex()
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    if isinstance(value, str):
        if not value:
            raise ValueError("an empty string is not a number")
        return value
    raise TypeError(f"{type(value).__name__} is not an exact number (int, float, Fraction or a literal string)")


def tokens(values: Any, valid: Any = None) -> List[Optional[Literal]]:
    """One microbatch's token values as literals, ``None`` where a position holds no valid token.

    ``values`` is a sequence (tensors are read with ``tolist()``) whose items are numbers or ``None``;
    ``valid``, if given, is a sequence of flags of the same length that marks the valid positions.
    """
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    if valid is None:
        return [None if v is None else literal(v) for v in values]
    valid = valid.tolist() if hasattr(valid, "tolist") else list(valid)
    if len(values) != len(valid):
        raise ValueError(f"{len(values)} values but {len(valid)} validity flags")
    return [literal(v) if ok else None for v, ok in zip(values, valid)]


def group(count: int, *, value: Any = 1, padding: int = 0) -> Dict[str, Any]:
    """A compact group: ``count`` valid tokens that all hold the exact ``value``, and ``padding`` positions.

    Written ``{"count": n, "value": y, "padding": p}``; ``value`` is left out when ``count`` is 0 and
    ``padding`` when it is 0. One group of the per-group measurement (a microbatch, or one sequence).
    """
    result: Dict[str, Any] = {"count": _count(count, "a group's count")}
    if result["count"] > 0:
        result["value"] = literal(value)
    if _count(padding, "a group's padding"):
        result["padding"] = int(padding)
    return result


def sequences(items: Sequence[Any]) -> Dict[str, Any]:
    """A microbatch that declares its sequences: ``{"sequences": [SEQ, …]}``, each SEQ one group.

    Each item is a token list (numbers or ``None``) or a compact group from ``group()``; ``[]`` is an
    empty sequence. At least one sequence.
    """
    listed = list(items)
    if not listed:
        raise ValueError("a microbatch with sequences needs at least one sequence")
    return {"sequences": [_sequence(item, f"sequence {i}") for i, item in enumerate(listed)]}


def sliced(item: Any, *, sequence: str, positions: Optional[Sequence[Sequence[int]]] = None) -> Dict[str, Any]:
    """A slice of the sequence ``sequence`` (its ID) held on a context-parallel rank: ``item`` is its tokens
    (a token list or a compact group from ``group()``), ``positions`` the half-open ranges ``[start, end]``
    of positions it holds in the whole sequence, ascending (format.md, "Sequence slices")."""
    result: Dict[str, Any] = {"sequence": str(sequence)}
    if positions is not None:
        ranges = [[int(start), int(end)] for start, end in positions]
        if any(start >= end for start, end in ranges) or any(a[1] > b[0] for a, b in zip(ranges, ranges[1:])):
            raise ValueError(f"slice {sequence!r}: positions are ascending ranges [start, end) with start < end")
        result["positions"] = ranges
    if isinstance(item, Mapping):
        result.update(_compact(item, f"slice {sequence!r}"))
    else:
        result["targets"] = tokens(item)
    return result


def _sequence(item: Any, what: str) -> Any:
    if isinstance(item, Mapping) and "sequence" in item:
        unknown = set(item) - {"sequence", "positions", "targets", "count", "value", "padding"}
        if unknown:
            raise ValueError(f"{what}: a slice has sequence, positions and its tokens, not {sorted(unknown)}")
        tokens_of = item["targets"] if "targets" in item else {k: item[k] for k in ("count", "value", "padding")
                                                               if k in item}
        return sliced(tokens_of, sequence=item["sequence"], positions=item.get("positions"))
    if isinstance(item, Mapping):
        return _compact(item, what)
    return tokens(item)


def _compact(item: Mapping[str, Any], what: str) -> Dict[str, Any]:
    unknown = set(item) - {"count", "value", "padding"}
    if unknown or "count" not in item:
        raise ValueError(f"{what}: a compact group has count (required), value and padding, not {sorted(item)}")
    count = _count(item["count"], f"{what}: count")
    if count > 0 and "value" not in item:
        raise ValueError(f"{what}: a compact group of {count} tokens needs a value")
    result: Dict[str, Any] = {"count": count}
    if "value" in item:
        result["value"] = literal(item["value"])
    if item.get("padding"):
        result["padding"] = _count(item["padding"], f"{what}: padding")
    return result


def _microbatch(value: Any, what: str) -> Any:
    """One microbatch as written: a token array, a compact group, or ``{"sequences": [...]}``."""
    if isinstance(value, Mapping):
        if set(value) == {"sequences"}:
            listed = list(value["sequences"])
            if not listed:
                raise ValueError(f"{what}: a microbatch with sequences needs at least one sequence")
            return {"sequences": [_sequence(item, f"{what}, sequence {i}") for i, item in enumerate(listed)]}
        return _compact(value, what)
    return tokens(value)


def _weights_like(value: Any, shape: Any, what: str) -> Any:
    """Weights mirroring one microbatch: a list beside a token list, ``{"sequences": [[w…]…]}`` beside sequences."""
    if isinstance(shape, dict) and "sequences" in shape:
        rows = value.get("sequences") if isinstance(value, Mapping) else None
        if rows is None or len(rows) != len(shape["sequences"]):
            raise ValueError(f"{what}: weights must mirror the microbatch's {len(shape['sequences'])} sequences")
        written = [tokens(row) for row in rows]
        for row, seq in zip(written, shape["sequences"]):
            if isinstance(seq, dict) or len(row) != len(seq):
                raise ValueError(f"{what}: weighted tokens are written as lists, with weights shaped like them")
        return {"sequences": written}
    if isinstance(shape, dict):
        raise ValueError(f"{what}: a weighted step writes its tokens as lists, not as compact groups")
    row = tokens(value)
    if len(row) != len(shape):
        raise ValueError(f"{what}: weights are not shaped like its tokens")
    return row


def site(name: str, per_rank: Sequence[Sequence[Any]],
         witness: Optional[Sequence[Sequence[Any]]] = None) -> Dict[str, Any]:
    """One entry of ``observed.sites``: the probe components measured in the submodule ``name``.

    ``per_rank`` (and ``witness``) are shaped like ``observed.per_rank``: one vector per rank.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("a site needs a non-empty name")
    result: Dict[str, Any] = {"name": name,
                              "per_rank": [_vector(v, f"site {name} rank {r}") for r, v in enumerate(per_rank)]}
    if witness is not None:
        result["witness"] = [_vector(v, f"site {name} witness rank {r}") for r, v in enumerate(witness)]
    return result


def term(name: str, ranks: Sequence[Sequence[Any]], *, weight: Any = None, objective: Optional[str] = None,
         normalizer: Any = None) -> Dict[str, Any]:
    """One entry of the document's ``terms``: an auxiliary loss term's own tokens on the main loss's ranks.

    ``ranks[r]`` lists rank r's microbatches, aligned with the main loss's (``[]`` where the term holds no
    token); ``weight`` is the term's exact weight in the step's loss (default 1), ``objective`` the one it is
    judged by over its own tokens (default ``token_mean``; ``constant`` with ``normalizer``).
    """
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name == "main":
        raise ValueError(f"a term's name is an identifier of lower-case letters, digits and _ other than 'main', "
                         f"not {name!r}")
    result: Dict[str, Any] = {"name": name}
    if weight is not None:
        result["weight"] = literal(weight)
    _objective_members(result, objective, normalizer)
    result["ranks"] = [list(rank) for rank in ranks]
    return result


def _objective_members(result: Dict[str, Any], objective: Optional[str], normalizer: Any) -> None:
    """``objective`` (checked) and ``normalizer`` (beside ``constant`` only) into ``result``, where given."""
    if objective is not None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
        result["objective"] = objective
    if (normalizer is not None) != (objective == "constant"):
        raise ValueError("the objective constant needs a normalizer, and only it takes one")
    if normalizer is not None:
        result["normalizer"] = literal(normalizer)


def term_measurement(name: str, per_rank: Sequence[Any],
                     witness: Optional[Sequence[Sequence[Any]]] = None) -> Dict[str, Any]:
    """One entry of ``observed.terms``: what the step measured of term ``name``, shaped like ``observed.per_rank``
    (one number, or one vector with a value per group of the term, per rank) and its witness beside vectors."""
    written = [_gradient(v, f"term {name} rank {r}") for r, v in enumerate(per_rank)]
    if len({isinstance(v, list) for v in written}) > 1:
        raise ValueError(f"term {name}'s per_rank mixes numbers and vectors")
    result: Dict[str, Any] = {"name": str(name), "per_rank": written}
    if witness is not None:
        result["witness"] = [_vector(v, f"term {name} witness rank {r}") for r, v in enumerate(witness)]
    return result


def _vector(values: Any, what: str) -> List[Literal]:
    listed = values.tolist() if hasattr(values, "tolist") else list(values)
    if not listed:
        raise ValueError(f"{what}: a gradient vector needs at least one component")
    return [literal(v, finite=False) for v in listed]


def _gradient(value: Any, what: str) -> Any:
    """An observed gradient: one number, or a vector (one component per group)."""
    if isinstance(value, (list, tuple)) or (hasattr(value, "dim") and value.dim() > 0):
        return _vector(value, what)
    return literal(value, finite=False)


def _count(value: Any, what: str) -> int:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, not {value!r}")
    return int(value)


def _dtype(name: str, what: str) -> str:
    if name not in DTYPES:
        raise ValueError(f"{what} must be one of {', '.join(DTYPES)}, not {name!r}")
    return name


def observed(*, dtype: str, gradient: Any = None, per_rank: Optional[Sequence[Any]] = None,
             reduction_dtype: Optional[str] = None, tokens_global: Optional[int] = None,
             tokens_per_rank: Optional[Sequence[int]] = None, divided_by: Optional[Sequence[Any]] = None,
             mass_global: Any = None, mass_per_rank: Optional[Sequence[Any]] = None,
             tolerance_absolute: Any = None, tolerance_relative: Any = None,
             witness: Optional[Sequence[Any]] = None,
             sites: Optional[Sequence[Mapping[str, Any]]] = None,
             terms: Optional[Sequence[Mapping[str, Any]]] = None) -> Dict[str, Any]:
    """The ``observed`` object: the gradient (or each rank's copy, ``per_rank``) and what the code counted.

    Gradient values may be non-finite; they are written as ``float.hex()`` prints them ('nan', 'inf',
    '-inf'). Per-group measurement: ``gradient`` or each ``per_rank`` entry is a vector with one
    component per group of the document; ``witness`` is shaped like it (the within-group witness
    components) and ``sites`` is a list of ``site()`` entries. ``divided_by`` has one entry per rank:
    the number the rank divided its loss sum by, or a list with one such number per microbatch.
    ``terms`` lists ``term_measurement()`` entries, one per auxiliary term of the document.
    """
    if (gradient is None) == (per_rank is None):
        raise ValueError("observed needs exactly one of gradient and per_rank")
    result: Dict[str, Any] = {}
    if gradient is not None:
        result["gradient"] = _gradient(gradient, "observed.gradient")
        shapes = {isinstance(result["gradient"], list)}
    else:
        result["per_rank"] = [_gradient(v, f"observed.per_rank[{r}]")
                              for r, v in enumerate(per_rank)]  # type: ignore[arg-type]
        shapes = {isinstance(v, list) for v in result["per_rank"]}
        if len(shapes) > 1:
            raise ValueError("observed.per_rank mixes numbers and vectors")
    vectors = shapes == {True}
    if (witness is not None or sites is not None) and not vectors:
        raise ValueError("witness and sites come beside a per-group (vector) gradient")
    if witness is not None:
        key = "gradient" if gradient is not None else "per_rank"
        written = _gradient(witness, "observed.witness") if gradient is not None else \
            [_vector(v, f"observed.witness[{r}]") for r, v in enumerate(witness)]
        if gradient is None and len(written) != len(result["per_rank"]):
            raise ValueError(f"observed.witness has {len(written)} ranks, {key} {len(result['per_rank'])}")
        result["witness"] = written
    if sites is not None:
        names = [str(entry.get("name", "")) for entry in sites]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"site names must be non-empty and unique: {names}")
        result["sites"] = [dict(entry) for entry in sites]
    if terms is not None:
        names = [str(entry.get("name", "")) for entry in terms]
        if len(set(names)) != len(names):
            raise ValueError(f"each term is measured once: {names}")
        result["terms"] = [dict(entry) for entry in terms]
    result["dtype"] = _dtype(dtype, "dtype")
    if reduction_dtype is not None:
        result["reduction_dtype"] = _dtype(reduction_dtype, "reduction_dtype")
    counted: Dict[str, Any] = {}
    if tokens_global is not None:
        counted["global"] = _count(tokens_global, "tokens_global")
    if tokens_per_rank is not None:
        counted["per_rank"] = [_count(n, "each per-rank count") for n in tokens_per_rank]
    if divided_by is not None:
        counted["divided_by"] = [
            [literal(d) for d in entry] if isinstance(entry, (list, tuple)) else literal(entry)
            for entry in divided_by]
    if counted:
        result["tokens"] = counted
    mass: Dict[str, Any] = {}
    if mass_global is not None:
        mass["global"] = literal(mass_global)
    if mass_per_rank is not None:
        mass["per_rank"] = [literal(m) for m in mass_per_rank]
    if mass:
        result["mass"] = mass
    tolerance: Dict[str, Any] = {}
    if tolerance_absolute is not None:
        tolerance["absolute"] = literal(tolerance_absolute)
    if tolerance_relative is not None:
        tolerance["relative"] = literal(tolerance_relative)
    if tolerance:
        result["tolerance"] = tolerance
    return result


def document(ranks: Sequence[Sequence[Sequence[Any]]], *, weights: Optional[Sequence[Sequence[Sequence[Any]]]] = None,
             world_size: Optional[int] = None, reducer: Optional[str] = None, theta: Any = None,
             objective: Optional[str] = None, description: Optional[str] = None,
             expect: Optional[Mapping[str, Any]] = None, expect_error: Optional[str] = None,
             observed: Optional[Mapping[str, Any]] = None, expect_gate: Optional[Mapping[str, Any]] = None,
             recipe: Optional[Mapping[str, str]] = None, normalizer: Any = None,
             mesh: Optional[Sequence[Mapping[str, Any]]] = None,
             terms: Optional[Sequence[Mapping[str, Any]]] = None,
             accumulation_steps: Optional[int] = None) -> Dict[str, Any]:
    """A normcheck/1 document (a dict of wire literals) from rank → microbatch → token values.

    ``ranks[r]`` is the list of rank r's microbatches in the order it accumulated them; a microbatch is
    a token list (a token is a number or ``None``, no valid token there), a compact group from
    ``group()`` or a ``sequences()`` value. A rank with one microbatch is written as ``targets``.
    ``objective`` is one of ``OBJECTIVES``; ``constant`` needs ``normalizer`` (an exact positive number).
    ``weights`` has the same shape (``None`` beside padding) and makes the objective
    ``weighted_token_mean`` unless ``objective`` says otherwise. ``observed`` comes from ``observed()``.
    ``expect`` maps gradient names to numbers or ``None``; ``expect_gate`` is ``{"verdict": ...,
    "explanations": [...]}``; ``recipe`` is ``{"scale": "W / N", "reducer": "mean"}``. ``mesh`` lists the
    device mesh's dimensions, ``{"name": "dp", "size": 2, "role": "data"}`` each (roles: data, sequence,
    replica); the ranks are then in its row-major order and each gets its ``coords``. ``terms`` lists
    ``term()`` entries, the auxiliary loss terms, their ranks written as the main loss's are.
    ``accumulation_steps`` is the nominal number of microbatches a window accumulates, as the training is
    configured (no rank may hold more; a short last window holds fewer).
    """
    if not ranks:
        raise ValueError("a document needs at least one rank")
    if weights is not None and len(weights) != len(ranks):
        raise ValueError(f"weights for {len(weights)} ranks, tokens for {len(ranks)}")
    result: Dict[str, Any] = {"format": FORMAT}
    if description:
        result["description"] = str(description)
    if objective is None and weights is not None:
        objective = "weighted_token_mean"
    _objective_members(result, objective, normalizer)
    sizes = [_count(d["size"], "a mesh dimension's size") for d in mesh] if mesh is not None else None
    written = _written_ranks(ranks, weights, sizes, "")
    if mesh is not None:
        assert sizes is not None
        dims = [{"name": str(d["name"]), "size": size, "role": str(d["role"])} for d, size in zip(mesh, sizes)]
        if math.prod(sizes) != len(written):
            raise ValueError(f"the mesh's sizes {sizes} multiply to {math.prod(sizes)}, not the {len(written)} ranks")
        result["mesh"] = {"dims": dims}
    result["ranks"] = written
    if terms is not None:
        declared = []
        for entry in terms:
            listed = dict(entry)
            if len(listed["ranks"]) != len(written):
                raise ValueError(f"term {listed['name']} has {len(listed['ranks'])} ranks, the main loss "
                                 f"{len(written)}")
            listed["ranks"] = _written_ranks(listed["ranks"], None, sizes, f"term {listed['name']}, ")
            declared.append(listed)
        result["terms"] = declared
    if world_size is not None:
        result["world_size"] = _count(world_size, "world_size")
    if accumulation_steps is not None:
        steps = _count(accumulation_steps, "accumulation_steps")
        if steps == 0:
            raise ValueError("accumulation_steps must be a positive number of microbatches, not 0")
        result["accumulation_steps"] = steps
    if reducer is not None:
        if reducer not in REDUCERS:
            raise ValueError(f"reducer must be 'mean' or 'sum', not {reducer!r}")
        result["reducer"] = reducer
    if theta is not None:
        result["theta"] = literal(theta)
    if expect is not None:
        result["expect"] = {str(name): None if value is None else literal(value) for name, value in expect.items()}
    if expect_error is not None:
        result["expect_error"] = str(expect_error)
    if observed is not None:
        result["observed"] = dict(observed)
    if expect_gate is not None:
        gate = dict(expect_gate)
        if gate.get("verdict") not in VERDICTS:
            raise ValueError(f"expect_gate verdict must be one of {', '.join(VERDICTS)}")
        result["expect_gate"] = {"verdict": gate["verdict"],
                                 "explanations": [str(e) for e in gate.get("explanations", [])]}
    if recipe is not None:
        result["recipe"] = {str(k): str(v) for k, v in recipe.items()}
    return result


def _written_ranks(ranks: Sequence[Sequence[Any]], weights: Optional[Sequence[Sequence[Any]]],
                   sizes: Optional[Sequence[int]], what: str) -> List[Dict[str, Any]]:
    """Each rank's microbatches as written (``targets`` for one), its weights beside them, its mesh ``coords``."""
    written = []
    for r, listed in enumerate(ranks):
        batches = [_microbatch(b, f"{what}rank {r}, microbatch {m}") for m, b in enumerate(listed)]
        if not batches:
            raise ValueError(f"{what}rank {r} has no microbatch (an empty microbatch is [], not no microbatch)")
        rank: Dict[str, Any] = {"targets": batches[0]} if len(batches) == 1 else {"microbatches": batches}
        if weights is not None:
            if len(weights[r]) != len(batches):
                raise ValueError(f"{what}rank {r}: weights are not shaped like its tokens")
            rows = [_weights_like(w, b, f"{what}rank {r}, microbatch {m}")
                    for m, (w, b) in enumerate(zip(weights[r], batches))]
            rank["weights"] = rows[0] if len(batches) == 1 else rows
        if sizes is not None:
            coords, rest = [], r
            for size in reversed(sizes):
                coords.append(rest % size)
                rest //= size
            rank["coords"] = coords[::-1]
        written.append(rank)
    return written


def _refuse_floats(value: Any, where: str) -> None:
    if isinstance(value, float):
        raise TypeError(f"{where} holds the float {value.hex()}: convert it with literal() (float.hex), "
                        "never str() or repr()")
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_floats(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _refuse_floats(item, f"{where}[{i}]")


def render(document: Mapping[str, Any]) -> str:
    """The document as text: one member per line, one rank per line. Refuses any float left in it."""
    _refuse_floats(dict(document), "document")
    lines = []
    for key, value in document.items():
        if key == "ranks":
            ranks = ",\n".join("    " + json.dumps(rank, allow_nan=False) for rank in value)
            lines.append(f'  "ranks": [\n{ranks}\n  ]')
        elif key == "terms":
            terms = ",\n".join("    " + json.dumps(entry, ensure_ascii=False, allow_nan=False) for entry in value)
            lines.append(f'  "terms": [\n{terms}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False, allow_nan=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _write_through(path: str, data: bytes, wait_for_reader: float) -> None:
    """Writes ``data`` through a device or FIFO, waiting at most ``wait_for_reader`` seconds for a FIFO's reader."""
    deadline = time.monotonic() + wait_for_reader
    while True:
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise TimeoutError(errno.ETIMEDOUT, f"{path} is a FIFO (or socket) that no process opened for "
                                   f"reading within {wait_for_reader:g} s: nothing was written") from None
            time.sleep(0.01)
    try:
        os.set_blocking(descriptor, True)  # a reader is there: write it all
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
    finally:
        os.close(descriptor)


def write_atomically(path: Union[str, "os.PathLike[str]"], text: Union[str, bytes], pause_mid_write: float = 0.0,
                     wait_for_reader: float = 10.0) -> None:
    """Writes ``text`` to ``path`` so that ``path`` never holds part of it.

    For a regular file or a path that does not exist yet, the text goes to a temporary in the same
    folder (named ``.NAME.PID.RANDOM.tmp``, which a scan for ``*.json`` skips), is flushed and fsynced,
    and is renamed over ``path`` with ``os.replace``; the folder is then fsynced so that the rename is
    durable. A symbolic link is followed and its target replaced the same way. A character device, a
    FIFO or a socket is written through (never replaced by a regular file); a FIFO that no process opens
    for reading within ``wait_for_reader`` seconds is a ``TimeoutError`` (nothing written), never a hang.
    A directory is an error. ``pause_mid_write`` (seconds) sleeps with half of the text on disk: a way to
    interrupt a run inside the write and see that nothing appears under the final name.
    """
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    path = os.path.realpath(os.fspath(path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path} is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        _write_through(path, data, wait_for_reader)  # a device or a pipe: renaming over it would replace it
        return
    folder = os.path.dirname(path)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(descriptor, "wb") as f:
            if pause_mid_write > 0:
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                time.sleep(pause_mid_write)
                f.write(data[len(data) // 2:])
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write(path: Union[str, "os.PathLike[str]"], document: Mapping[str, Any], pause_mid_write: float = 0.0,
          wait_for_reader: float = 10.0) -> None:
    """Renders ``document`` and writes it to ``path`` atomically (a FIFO: within ``wait_for_reader`` seconds)."""
    write_atomically(path, render(document), pause_mid_write=pause_mid_write, wait_for_reader=wait_for_reader)


# ---------------------------------------------------------------------------------------------------
# One data-parallel update of a one-parameter model, gathered from every rank (examples/pytorch_ddp).

def token_values(targets: Any, valid: Any) -> List[Optional[str]]:
    """One microbatch as the program held it: each target's exact text (``exact``), None where not valid."""
    targets = targets.tolist() if hasattr(targets, "tolist") else list(targets)
    valid = valid.tolist() if hasattr(valid, "tolist") else list(valid)
    if len(targets) != len(valid):
        raise ValueError(f"{len(targets)} targets but {len(valid)} validity flags")
    return [exact(t) if v else None for t, v in zip(targets, valid)]


def rank_part(microbatches: Sequence[Any], gradient: Any, counted_tokens: Optional[int] = None,
              weights: Optional[Sequence[Any]] = None, counted_mass: Any = None) -> Dict[str, Any]:
    """What one rank contributes to ``dump_update``: its tokens, its synchronized gradient, its counts.

    microbatches: (targets, valid) pairs in the order the rank accumulated them; gradient: the rank's
    gradient after the all-reduce; counted_tokens / counted_mass: the count or weight sum its code
    computed for itself, if any; weights: one sequence of token weights per microbatch.
    """
    part: Dict[str, Any] = {
        "microbatches": [token_values(t, v) for t, v in microbatches],
        "gradient": exact(gradient),
        "counted_tokens": None if counted_tokens is None else _count(counted_tokens, "counted_tokens"),
    }
    if weights is not None:
        part["weights"] = [token_values(w, v) for w, (_, v) in zip(weights, microbatches)]
        part["counted_mass"] = None if counted_mass is None else exact(counted_mass)
    return part


def build_document(parts: Sequence[Mapping[str, Any]], *, reducer: str, theta: Any, dtype: str,
                   global_tokens: Optional[int] = None, global_mass: Any = None,
                   description: str = "") -> Dict[str, Any]:
    """The document of one update from every rank's ``rank_part``, in rank order.

    Parts with weights make a weighted_token_mean document; the per-rank counts (masses) are written
    only when every rank computed one.
    """
    weighted = any("weights" in part for part in parts)
    if weighted and not all("weights" in part for part in parts):
        raise ValueError("some ranks gave weights and some did not")
    counts = [part["counted_tokens"] for part in parts]
    masses = [part.get("counted_mass") for part in parts]
    seen = observed(
        dtype=dtype, per_rank=[part["gradient"] for part in parts], tokens_global=global_tokens,
        tokens_per_rank=counts if all(c is not None for c in counts) else None,
        mass_global=None if global_mass is None else exact(global_mass),
        mass_per_rank=masses if weighted and all(m is not None for m in masses) else None)
    return document([part["microbatches"] for part in parts],
                    weights=[part["weights"] for part in parts] if weighted else None,
                    world_size=len(parts), reducer=reducer, theta=exact(theta), description=description,
                    observed=seen)


def dump_update(path: Union[str, "os.PathLike[str]"], *, microbatches: Sequence[Any], gradient: Any, theta: Any,
                dtype: str, reducer: str = "mean", counted_tokens: Optional[int] = None,
                global_tokens: Optional[int] = None, weights: Optional[Sequence[Any]] = None,
                counted_mass: Any = None, global_mass: Any = None, description: str = "", dst: int = 0,
                group: Any = None, pause_mid_write: float = 0.0) -> Optional[Dict[str, Any]]:
    """Collective: every rank calls it after backward; rank ``dst`` gathers every part and writes ``path``.

    See ``rank_part`` and ``build_document`` for the arguments. Returns the document on ``dst``, None
    elsewhere.
    """
    import torch.distributed as dist

    part = rank_part(microbatches, gradient, counted_tokens, weights, counted_mass)
    rank = dist.get_rank(group)
    parts: Optional[List[Any]] = [None] * dist.get_world_size(group) if rank == dst else None
    dist.gather_object(part, parts, dst=dst, group=group)
    if rank != dst:
        return None
    assert parts is not None
    result = build_document(parts, reducer=reducer, theta=theta, dtype=dtype, global_tokens=global_tokens,
                            global_mass=global_mass, description=description)
    write(path, result, pause_mid_write=pause_mid_write)
    return result
