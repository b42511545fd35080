"""The normcheck/1 document of a probed step, made on rank 0 from every rank's ``RankRecord``.

``document`` is a pure function of the records and p's ``Geometry``: it puts FSDP2's shards of p.grad
together (``assemble``), refuses a gradient that was never combined across ranks (``unreduced``), names
the reducer (given, known from DDP's hook, or inferred from the local and reduced gradients) and
restricts each rank's probe vectors to the groups it used (``restrict``). On a mesh with replica
dimensions the replicas of a group write one region of p (``Geometry.region``): the first replica's
record (every replica coordinate 0) says which of its slots are used, and every replica must have used
as many.

Standard library only: a test builds records by hand and needs no torch and no processes.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import dump
from ._probe_record import Geometry, ProbeError, RankRecord, TermDeclaration, TermRecord
from .options import Number, Objective, Reducer

__all__ = ["document", "assemble", "unreduced", "restrict", "first_replicas", "replica_losses", "infer_reducer",
           "local_parts", "ROUNDOFF"]

ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
"""Unit roundoff by dtype name, to pick the coarsest arithmetic the probe's gradient met."""


def infer_reducer(local: Sequence[float], reduced: Sequence[float], world_size: int) -> Optional[Reducer]:
    """'mean' or 'sum': what the reducer did to each rank's own components (local → reduced), or None.

    Each rank's groups live in components no other rank writes, so the reduced value of a rank's own
    component is its local value divided by W under a mean and unchanged under a sum.
    """
    if world_size == 1:
        return "mean"
    total_local = math.fsum(abs(v) for v in local)
    total_reduced = math.fsum(abs(v) for v in reduced)
    if not (math.isfinite(total_local) and math.isfinite(total_reduced)) or total_local == 0:
        return None
    ratio = total_reduced / total_local
    errors: Dict[Reducer, float] = {"mean": abs(ratio * world_size - 1), "sum": abs(ratio - 1)}
    best = min(errors, key=errors.__getitem__)
    return best if errors[best] < 0.05 else None


def local_parts(values: Sequence[float], region: int, slots: int, used: int, half: Optional[int]) -> List[float]:
    """A rank's own components (primary, then witness) of a probe vector: those of its ``region``."""
    start = region * slots
    own = list(values[start:start + used])
    if half is not None:
        own += list(values[half + start:half + start + used])
    return own


def first_replicas(parts: Sequence[RankRecord], geometry: Geometry) -> List[RankRecord]:
    """The record that owns each region, in region order: the first rank writing it (all ranks without
    replica dimensions); ProbeError when a replica recorded another number of groups than its first."""
    firsts: Dict[int, RankRecord] = {}
    for part in parts:
        region = geometry.region(part.rank)
        first = firsts.setdefault(region, part)
        if part.used != first.used:
            raise ProbeError(f"rank {part.rank} recorded {part.used} groups, but rank {first.rank}, a replica of it "
                             f"(the same coordinates but along {_replica_names(geometry)}), recorded {first.used}: "
                             "replicas hold the same tokens and record the same groups")
    if sorted(firsts) != list(range(geometry.regions)):
        raise ProbeError(f"the records cover regions {sorted(firsts)} of p, not all {geometry.regions}")
    return [firsts[q] for q in range(geometry.regions)]


def replica_losses(parts: Sequence[RankRecord], geometry: Geometry) -> Optional[str]:
    """The first loss value a replica computed otherwise than its first replica, in words; None when every
    replica's losses agree within 64 units of roundoff of the coarsest loss dtype.

    Replicas hold the same tokens, so a correct step gives them the same per-token losses; a loss
    normalized over a rank's own shard (label smoothing over the local vocabulary under tensor
    parallelism) weighs tokens rightly but computes other values on each replica. p's gradient cannot
    see that: it is compared here.
    """
    if geometry.regions == geometry.world_size:
        return None
    firsts: Dict[int, RankRecord] = {}
    for part in parts:
        first = firsts.setdefault(geometry.region(part.rank), part)
        if first is part:
            continue
        where = f"rank {part.rank} ({_coordinates(geometry, part.rank)})"
        theirs = f"its replica rank {first.rank} ({_coordinates(geometry, first.rank)})"
        if len(part.losses) != len(first.losses):
            return (f"{where} recorded {len(part.losses)} loss values, {theirs} {len(first.losses)}: replicas hold "
                    "the same tokens and compute the same losses")
        names = set(part.loss_dtypes) | set(first.loss_dtypes) or {"float32"}
        tolerance = 64 * max(ROUNDOFF[name] for name in names)
        for i, (mine, reference) in enumerate(zip(part.losses, first.losses)):
            if mine == reference:
                continue
            close = abs(mine - reference) <= tolerance * max(abs(mine), abs(reference))
            if math.isfinite(mine) and math.isfinite(reference) and close:
                continue
            return (f"{where} computed {mine!r} for loss value {i} (in the order the step recorded them: valid "
                    f"tokens call by call), where {theirs} computed {reference!r}: replicas hold the same tokens, so "
                    "a correct step gives them the same losses; a loss normalized over a rank's own shard (label "
                    "smoothing over the local vocabulary, a mean over local logits) differs between them")
    return None


def _coordinates(geometry: Geometry, rank: int) -> str:
    coords = []
    rest = rank
    for _, size, _ in reversed(geometry.mesh):
        coords.append(rest % size)
        rest //= size
    return ", ".join(f"{name} {coord}" for (name, _, _), coord in zip(geometry.mesh, reversed(coords)))


def _replica_names(geometry: Geometry) -> str:
    return " × ".join(name for name, _, role in geometry.mesh if role == "replica")


def restrict(parts: Sequence[RankRecord], geometry: Geometry, site: str, witness: bool,
             slots_of: Optional[Callable[[RankRecord], Sequence[int]]] = None
             ) -> Tuple[List[List[float]], Optional[List[List[float]]]]:
    """Every rank's copy of one probe vector, restricted to the groups used, in group order.

    ``slots_of`` gives the slots of one loss's groups in group order from the record that owns a region (the
    main loss's or an auxiliary term's); by default every slot used, in order.
    """
    half = geometry.slots * geometry.regions
    owners = first_replicas(parts, geometry)
    primary: List[List[float]] = []
    witnessed: List[List[float]] = []
    for part in parts:
        vector = part.vectors[site]
        chosen: List[float] = []
        chosen_witness: List[float] = []
        stray = 0.0
        for q, other in enumerate(owners):
            start = q * geometry.slots
            picked = slots_of(other) if slots_of is not None else range(other.used)
            chosen += [vector[start + slot] for slot in picked]
            stray = max([stray] + [abs(v) for v in vector[start + other.used:start + geometry.slots]])
            if geometry.witness:
                chosen_witness += [vector[half + start + slot] for slot in picked]
                stray = max([stray] + [abs(v) for v in vector[half + start + other.used:half + start + geometry.slots]])
        if stray != 0 and math.isfinite(stray):
            where = f"site {site}" if site else "p"
            raise ProbeError(f"rank {part.rank}'s {where} has gradient in components no group was given "
                             f"(up to {stray!r}): something else than the probe's terms used them")
        primary.append(chosen)
        witnessed.append(chosen_witness)
    return primary, (witnessed if witness else None)


def assemble(parts: Sequence[RankRecord], geometry: Geometry) -> List[RankRecord]:
    """Under FSDP2: each rank's vectors made whole, its own shard where it has one, another rank's elsewhere.

    A component is taken from the lowest rank whose shard holds it; replicas of a shard (HSDP) each
    keep their own values on their own rank, so a disagreement between them reaches the gate's
    replica check. A component no rank holds is an error, never a 0. Unsharded records come back as
    they are.
    """
    sharded = [part.spans is not None for part in parts]
    if not any(sharded):
        return list(parts)
    if not all(sharded):
        raise ProbeError("p was sharded by FSDP on some ranks and not on others")
    spans = [part.spans or {} for part in parts]
    vectors = [dict(part.vectors) for part in parts]
    for site in ("",) + geometry.sites:
        owners: List[Optional[int]] = [None] * geometry.components
        for q, part in enumerate(parts):
            start, end = spans[q].get(site, (0, 0))
            for i in range(start, end):
                if owners[i] is None:
                    owners[i] = q
        missing = [i for i, q in enumerate(owners) if q is None]
        if missing:
            where = f"site {site}" if site else "p"
            raise ProbeError(f"{len(missing)} components of {where}'s gradient (from {missing[0]}) are on no "
                             "rank's shard: FSDP reduced no gradient into them, or some rank captured nothing")
        whole = [q for q in owners if q is not None]
        for r, part in enumerate(parts):
            start, end = spans[r].get(site, (0, 0))
            own = part.vectors[site]
            vectors[r][site] = tuple(own[i] if start <= i < end else parts[q].vectors[site][i]
                                     for i, q in enumerate(whole))
    return [replace(part, vectors=whole_vectors) for part, whole_vectors in zip(parts, vectors)]


def unreduced(parts: Sequence[RankRecord], geometry: Geometry) -> Optional[str]:
    """Why p's gradient was evidently never combined across ranks, or None."""
    if geometry.world_size == 1:
        return None
    if geometry.regions == 1:  # every rank a replica of one: the reduction has nothing to combine either
        return None
    own_nonzero = False
    owners = first_replicas(parts, geometry)
    for part in parts:
        vector = part.vectors[""]
        for q, other in enumerate(owners):
            start = q * geometry.slots
            values = vector[start:start + other.used]
            if q == geometry.region(part.rank):
                own_nonzero = own_nonzero or any(v != 0 for v in values)
            elif any(v != 0 for v in values):
                return None
    if not own_nonzero:
        return None
    first = parts[0]
    if first.ddp_forward and not first.reduced:
        return ("DistributedDataParallel never synchronized p's gradient: every backward of the step ran under "
                "no_sync(), or the step ended before the synchronizing backward")
    return ("nothing combined the ranks' gradients of p: each rank holds only its own tokens' share. "
            "DistributedDataParallel reduces only the parameters it held when it was built: construct "
            "Probe(model) before DistributedDataParallel(model); a step that all-reduces gradients itself "
            "must include p (and call probe.capture() after it)")


def _main_slots(part: RankRecord) -> Sequence[int]:
    return part.slots if part.slots is not None else range(part.used)


def _term_of(part: RankRecord, name: str) -> TermRecord:
    """Rank ``part``'s record of term ``name``: a term the rank never saw holds no token in any microbatch."""
    for term in part.terms:
        if term.name == name:
            return term
    empty = len(part.microbatches)
    return TermRecord(name=name, microbatches=(([], None),) * empty, sequences=(False,) * empty, valid=(0,) * empty)


def _terms(parts: Sequence[RankRecord], geometry: Geometry, declared: Mapping[str, TermDeclaration],
           with_witness: bool) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The auxiliary terms the ranks recorded (in the order rank 0, then the others, first saw them): each one's
    entry of the document's ``terms`` and of ``observed.terms``."""
    names: List[str] = []
    for part in parts:
        names += [term.name for term in part.terms if term.name not in names]
    entries: List[Dict[str, Any]] = []
    measurements: List[Dict[str, Any]] = []
    for name in names:
        records = [_term_of(part, name) for part in parts]
        for part, record in zip(parts, records):
            if len(record.microbatches) != len(part.microbatches):
                raise ProbeError(f"rank {part.rank} recorded term {name} in {len(record.microbatches)} microbatches "
                                 f"of its {len(part.microbatches)}")
        if not any(valid for record in records for valid in record.valid):
            raise ProbeError(f"term {name} saw no valid token on any rank this step: its objective is undefined")
        declaration = declared.get(name, TermDeclaration(name=name))
        if declaration.objective in ("sequence_mean", "sequence_sum_mean"):
            for part, record in zip(parts, records):
                for m, (sequenced, valid) in enumerate(zip(record.sequences, record.valid)):
                    if valid and not sequenced:
                        raise ProbeError(f"term {name} is judged by {declaration.objective}, but rank {part.rank}'s "
                                         f"microbatch {m} of it has no sequences")
        slots = {part.rank: record.slots for part, record in zip(parts, records)}
        per_rank, witness = restrict(parts, geometry, "", with_witness, lambda owner: slots[owner.rank])
        entries.append(dump.term(name, [[written for written, _ in record.microbatches] for record in records],
                                 weight=None if declaration.weight == 1 else declaration.weight,
                                 objective=None if declaration.objective == "token_mean" else declaration.objective,
                                 normalizer=declaration.normalizer))
        measurements.append(dump.term_measurement(name, per_rank, witness))
    return entries, measurements


def document(parts: Sequence[RankRecord], geometry: Geometry, *, objective: Objective,
             normalizer: Optional[Number], description: Optional[str], origin: str,
             backend: str, terms: Mapping[str, TermDeclaration] = {},
             accumulation_steps: Optional[int] = None) -> Dict[str, Any]:
    """The per-group normcheck/1 document of the step every record describes (rank order); raises ProbeError.

    ``description`` replaces the default one, which starts with ``origin`` (what probed which model)
    and names the ``backend``, the ranks and the reducer. ``terms`` holds the auxiliary terms' declarations
    (``Probe.term``); a term recorded without one has weight 1 and the token mean. ``accumulation_steps`` is
    the nominal window the training is configured with, written where given.
    """
    errors = [p.error for p in parts if p.error]
    if errors:
        raise ProbeError("; ".join(dict.fromkeys(errors)))
    parts = assemble(parts, geometry)
    first = parts[0]
    why = unreduced(parts, geometry)
    if why is not None:
        raise ProbeError(why)
    weighted = {p.weighted for p in parts}
    if len(weighted) > 1:
        raise ProbeError("some ranks' losses had weights and some did not")
    is_weighted = weighted == {True}
    if is_weighted:
        if objective == "token_mean":
            objective = "weighted_token_mean"
        if objective != "weighted_token_mean":
            raise ProbeError(f"the losses had weights, so the objective is weighted_token_mean, not {objective}")
    elif objective == "weighted_token_mean":
        raise ProbeError("objective='weighted_token_mean' but no loss of the step had weights")
    if objective in ("sequence_mean", "sequence_sum_mean"):
        for part in parts:
            for m, (sequenced, valid) in enumerate(zip(part.sequences, part.valid)):
                if valid and not sequenced:
                    raise ProbeError(f"objective {objective} needs the sequences of every microbatch, but rank "
                                     f"{part.rank}'s microbatch {m} has none: give position_ids, cu_seqlens or "
                                     "2-D labels to the model, or declare them with probe.sequences(...) or "
                                     "add(..., sequence_ids=...)")
    reducer = first.reducer
    how = "given"
    hook_name = first.hook
    if reducer is None and first.ddp:
        if hook_name is None:
            reducer, how = "mean", "DDP without a communication hook"
        elif first.hook_reducer is not None:
            reducer, how = first.hook_reducer, f"the hook {hook_name}"
    if reducer is None:
        half = geometry.slots * geometry.regions if geometry.witness else None
        local: List[float] = []
        reduced: List[float] = []
        for part in parts:
            if part.local is None:
                continue
            region = geometry.region(part.rank)
            local += local_parts(part.local, region, geometry.slots, part.used, half)
            reduced += local_parts(part.vectors[""], region, geometry.slots, part.used, half)
        # The reduction combines the regions: replicas add the same values, which a mean divides out again.
        reducer = infer_reducer(local, reduced, geometry.regions)
        how = "inferred from the local and reduced gradients of p"
        if reducer is None:
            combined = f"the communication hook {hook_name}" if hook_name else "the step"
            raise ProbeError(f"cannot tell how {combined} combined the ranks' gradients of p: pass "
                             "reducer='mean' or 'sum' to check()")
    reduction_dtype = first.reduction_dtype or first.hook_dtype
    names = {first.dtype, *(d for p in parts for d in p.loss_dtypes)}
    dtype = max(names, key=ROUNDOFF.__getitem__)
    divided = [p.divided_by for p in parts]
    if any(d is not None for d in divided) and not all(d is not None for d in divided):
        raise ProbeError("probe.divided_by() was called on some ranks and not on others")
    with_witness = geometry.witness and not is_weighted
    per_rank, witness = restrict(parts, geometry, "", with_witness, _main_slots)
    sites = []
    for name in geometry.sites:
        site_rank, site_witness = restrict(parts, geometry, name, with_witness, _main_slots)
        sites.append(dump.site(name, site_rank, site_witness))
    term_entries, term_measurements = _terms(parts, geometry, terms, with_witness)
    seen = dump.observed(
        dtype=dtype, per_rank=per_rank, witness=witness, sites=sites or None,
        reduction_dtype=reduction_dtype if reduction_dtype not in (None, dtype) else None,
        divided_by=divided if all(d is not None for d in divided) else None,
        terms=term_measurements or None)
    text = description or (
        f"{origin}, W = {len(parts)} ({backend}"
        + (", mesh " + " × ".join(f"{name} {size}" for name, size, _ in geometry.mesh) if geometry.mesh else "")
        + f"), reducer {reducer} ({how})"
        + (f", communication hook {hook_name}" if hook_name else "")
        + (", p sharded by FSDP2" if first.spans is not None else "")
        + (f", sites {', '.join(geometry.sites)}" if geometry.sites else "")
        + (f", terms {', '.join(entry['name'] for entry in term_entries)}" if term_entries else ""))
    ranks = [[written for written, _ in p.microbatches] for p in parts]
    weights = [[w for _, w in p.microbatches] for p in parts] if is_weighted else None
    mesh = [{"name": name, "size": size, "role": role} for name, size, role in geometry.mesh] or None
    return dump.document(ranks, weights=weights, world_size=len(parts), reducer=reducer, theta=0,
                         objective=objective, normalizer=normalizer, description=text, observed=seen, mesh=mesh,
                         terms=term_entries or None, accumulation_steps=accumulation_steps)
