"""What the ranks exchange when the probe judges a step: each rank's record, and the layout of p.

A rank's ``RankRecord`` is built by ``_probe_gather`` and sent to rank 0, which makes the normcheck/1
document from all of them (``_probe_document``). Records are frozen and hold plain Python values only
(numbers, strings, tuples), so that they pickle between processes and a test can build them by hand.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple, Union

from .errors import Error
from .options import FloatDtype, Objective, Reducer

__all__ = ["ProbeError", "Geometry", "RankRecord", "TermRecord", "TermDeclaration", "WireNumber", "DividedBy",
           "regions_of", "region_of"]

WireNumber = Union[int, str]
"""An exact number as normcheck/1 writes it (``dump.literal``)."""
DividedBy = Union[WireNumber, Tuple[WireNumber, ...]]
"""What a rank divided its loss sum by: one number, or one per microbatch."""


class ProbeError(RuntimeError, Error):
    """The probe was used in a way that makes p.grad mean something else than the step's weights."""


def regions_of(mesh: Tuple[Tuple[str, int, str], ...], world_size: int) -> int:
    """How many ranks write components of their own: all of them, but one per replica group on a mesh
    with ``replica`` dimensions (replicas hold the same tokens and write the same components)."""
    if not mesh:
        return world_size
    count = 1
    for _, size, role in mesh:
        if role != "replica":
            count *= size
    return count


def region_of(mesh: Tuple[Tuple[str, int, str], ...], rank: int) -> int:
    """The components ``rank`` writes: its index among the mesh's ranks with every replica coordinate
    0 (row-major over the other dimensions); ``rank`` itself without replica dimensions."""
    if not any(role == "replica" for _, _, role in mesh):
        return rank
    coords = []
    rest = rank
    for _, size, _ in reversed(mesh):
        coords.append(rest % size)
        rest //= size
    index = 0
    for (_, size, role), coord in zip(mesh, reversed(coords)):
        if role != "replica":
            index = index * size + coord
    return index


@dataclass(frozen=True)
class Geometry:
    """Where p's components are: ``slots`` per region for ``regions`` regions, as many again for the witness.

    A region is the part of p one rank writes; on a mesh with replica dimensions the replicas of a
    group share one (``region``), else every rank has its own."""

    slots: int
    world_size: int
    witness: bool
    sites: Tuple[str, ...] = ()
    """The submodules with a probe parameter of their own, in order (p itself is the site ``""``)."""
    mesh: Tuple[Tuple[str, int, str], ...] = ()
    """The device mesh's dimensions as (name, size, role), ranks row-major; empty without a mesh."""

    @property
    def regions(self) -> int:
        """The ranks that write components of their own (``regions_of``)."""
        return regions_of(self.mesh, self.world_size)

    def region(self, rank: int) -> int:
        """The region ``rank`` writes (``region_of``)."""
        return region_of(self.mesh, rank)

    @property
    def components(self) -> int:
        """The length of every probe vector."""
        return self.slots * self.regions * (2 if self.witness else 1)


@dataclass(frozen=True)
class TermDeclaration:
    """An auxiliary loss term as the step declares it (``Probe.term``): its weight in the step's loss and the
    objective it is judged by over its own tokens."""

    name: str
    weight: WireNumber = 1
    objective: Objective = "token_mean"
    normalizer: Optional[WireNumber] = None


@dataclass(frozen=True)
class TermRecord:
    """One rank's tokens of an auxiliary term: its microbatches, aligned with the main loss's, and the slots of p
    its groups were given, in group order."""

    name: str
    microbatches: Tuple[Tuple[Any, Any], ...] = ()
    """Each microbatch as the document writes it, and None (a term's tokens carry no weights)."""
    sequences: Tuple[bool, ...] = ()
    valid: Tuple[int, ...] = ()
    slots: Tuple[int, ...] = ()


@dataclass(frozen=True)
class RankRecord:
    """One rank's part of a judged step; with ``error`` set, what went wrong there and nothing else."""

    rank: int
    error: Optional[str] = None
    notes: Tuple[str, ...] = ()
    """Sentences for the verdict (rank 0's are shown)."""
    microbatches: Tuple[Tuple[Any, Any], ...] = ()
    """Each microbatch as the document writes it, and its weights or None (``Microbatch.written()``)."""
    weighted: bool = False
    sequences: Tuple[bool, ...] = ()
    """Whether each microbatch's groups are its sequences."""
    valid: Tuple[int, ...] = ()
    """Valid tokens of each microbatch."""
    used: int = 0
    """The slots (groups) this rank recorded."""
    vectors: Mapping[str, Tuple[float, ...]] = field(default_factory=dict)
    """The captured gradient of each site's probe parameter, whole, divided by the loss scale."""
    spans: Optional[Mapping[str, Tuple[int, int]]] = None
    """Under FSDP2: the components [start, end) of each site's gradient this rank's shard held."""
    local: Optional[Tuple[float, ...]] = None
    """p's gradient before any reduction, where it is kept (to infer an unknown hook's reducer)."""
    dtype: FloatDtype = "float64"
    """p's dtype."""
    loss_dtypes: Tuple[FloatDtype, ...] = ()
    divided_by: Optional[DividedBy] = None
    ddp: bool = False
    """A DistributedDataParallel ran the module."""
    ddp_forward: bool = False
    """A forward of this step ran inside DistributedDataParallel."""
    reduced: bool = False
    """A synchronizing backward was seen."""
    hook: Optional[str] = None
    """The name of DDP's communication hook, where there is one."""
    hook_reducer: Optional[Reducer] = None
    hook_dtype: Optional[FloatDtype] = None
    reducer: Optional[Reducer] = None
    """The reducer ``check()`` was given."""
    reduction_dtype: Optional[FloatDtype] = None
    """The reduction dtype ``check()`` was given."""
    losses: Tuple[float, ...] = ()
    """On a mesh with replica dimensions: every loss value the step recorded, in call order (a call's
    valid tokens' losses, or its reduced loss), compared with the first replica's."""
    slots: Optional[Tuple[int, ...]] = None
    """With auxiliary terms: the slots of the main loss's groups, in group order (None: slots 0 … used − 1)."""
    terms: Tuple[TermRecord, ...] = ()
    """The auxiliary terms this rank recorded, in the order it first saw them."""
