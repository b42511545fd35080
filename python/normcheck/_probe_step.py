"""What the probe records of one step: microbatches, their groups (sequences) and each group's components.

A *group* is a sequence where the microbatch declares sequences, otherwise the microbatch itself. Each
group a rank records gets one slot: the primary component ``rank·slots + slot`` of the probe vector
and the witness component ``W·slots`` further on. Slots are handed out in the order groups first
appear, which is the file's group order on this rank (microbatches one after the other, sequences in
order of first appearance inside each).

Where sequences come from, for the targets of one loss call (``Layout``): explicit sequence ids; the
restarts of ``position_ids`` (packing) or ``cu_seqlens``; the rows of a 2-D batch (the labels, or the
batch the model was given). A loss whose targets cannot be matched to any of these is one group.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from .errors import Error

__all__ = ["StepError", "Layout", "Microbatch", "Components", "Keys", "layout", "layout_from_inputs", "sequence_keys"]


class StepError(RuntimeError, Error):
    """A recording problem; the probe raises it as ProbeError."""


class Layout:
    """Which sequence each position of a (B, T) batch belongs to: each row one, or ``keys[b, t]`` (−1: none)."""

    def __init__(self, shape: Tuple[int, int], source: str, keys: Optional[torch.Tensor] = None) -> None:
        self.shape = shape
        self.source = source
        self.keys = keys.reshape(shape).to(torch.int64) if keys is not None else None

    def for_targets(self, count: int) -> Optional["Keys"]:
        """The sequences of ``count`` loss targets, or None when they do not match the batch.

        Targets match when there is one per position (``B·T``, the shift done by padding the labels) or
        one per position but the last of each row (``B·(T − 1)``, the shift done by slicing); target
        (b, t) belongs to the sequence of position (b, t), the position whose output predicts it.
        """
        rows, length = self.shape
        if count == rows * length:
            return (rows, length) if self.keys is None else self.keys.reshape(-1)
        if length > 1 and count == rows * (length - 1):
            return (rows, length - 1) if self.keys is None else self.keys[:, :-1].reshape(-1)
        return None


def _shape(tensor: torch.Tensor, source: str) -> Tuple[int, int]:
    if tensor.dim() == 1:
        return 1, int(tensor.shape[0])
    if tensor.dim() != 2:
        raise StepError(f"sequence information from {source} must be 1-D or 2-D, not of shape {tuple(tensor.shape)}")
    return int(tensor.shape[0]), int(tensor.shape[1])


def _rows(batch: torch.Tensor, source: str) -> Layout:
    return Layout(_shape(batch, source), f"the rows of {source}")


def _restarts(position_ids: torch.Tensor) -> Layout:
    shape = _shape(position_ids, "position_ids")
    ids = position_ids.reshape(shape).to(dtype=torch.int64)
    starts = ids == 0
    starts[:, 0] = True  # every row starts a sequence
    if int(starts.sum()) == shape[0]:
        return Layout(shape, "the rows of position_ids")  # no restart inside a row: each row is a sequence
    keys = torch.cumsum(starts.reshape(-1).to(torch.int64), 0).reshape(shape) - 1
    return Layout(shape, "position_ids that restart at 0", keys)


def _cumulative(cu_seqlens: torch.Tensor, positions: Optional[int]) -> Layout:
    bounds = [int(v) for v in cu_seqlens.reshape(-1).tolist()]
    if len(bounds) < 2 or bounds[0] != 0 or any(b > a for a, b in zip(bounds[1:], bounds)):
        raise StepError(f"cu_seqlens must rise from 0, not {bounds[:8]}{'…' if len(bounds) > 8 else ''}")
    total = positions if positions is not None else bounds[-1]
    if total < bounds[-1]:
        raise StepError(f"cu_seqlens covers {bounds[-1]} positions, the batch has {total}")
    keys = torch.full((total,), -1, dtype=torch.int64)
    lengths = torch.tensor([b - a for a, b in zip(bounds, bounds[1:])], dtype=torch.int64)
    keys[: bounds[-1]] = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int64), lengths)
    return Layout((1, total), "cu_seqlens", keys)


def layout(*, sequence_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
           cu_seqlens: Optional[torch.Tensor] = None, labels: Optional[torch.Tensor] = None) -> Layout:
    """A layout from one explicit source (the first given of sequence_ids, cu_seqlens, position_ids, labels)."""
    if sequence_ids is not None:
        return Layout(_shape(sequence_ids, "sequence_ids"), "sequence_ids", sequence_ids)
    if cu_seqlens is not None:
        positions = None
        for other in (position_ids, labels):
            if other is not None:
                positions = int(other.numel())
        return _cumulative(cu_seqlens, positions)
    if position_ids is not None:
        return _restarts(position_ids)
    if labels is not None:
        if labels.dim() != 2:
            raise StepError(f"labels of shape {tuple(labels.shape)} have no rows: give (B, T) labels or sequence ids")
        return _rows(labels, "the labels")
    raise StepError("probe.sequences() needs one of sequence_ids, position_ids, cu_seqlens or labels")


_CUMULATIVE_NAMES = ("cu_seqlens", "cu_seq_lens_q", "cu_seqlens_q")


def layout_from_inputs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Optional[Layout]:
    """What a model's forward inputs say about sequences, or None.

    ``cu_seqlens`` (or ``cu_seq_lens_q``), else ``position_ids`` (restarts mark packed sequences),
    else the rows of ``labels``, ``input_ids`` or the first 2-D integer tensor among the positional
    arguments.
    """
    def integer_2d(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.dim() == 2 and not value.is_floating_point() \
            and value.dtype != torch.bool

    batch: Optional[torch.Tensor] = None
    for name in ("labels", "input_ids"):
        if integer_2d(kwargs.get(name)):
            batch = kwargs[name]
            break
    if batch is None:
        batch = next((a for a in args if integer_2d(a)), None)
    for name in _CUMULATIVE_NAMES:
        value = kwargs.get(name)
        if isinstance(value, torch.Tensor):
            return _cumulative(value, int(batch.numel()) if batch is not None else None)
    position_ids = kwargs.get("position_ids")
    if isinstance(position_ids, torch.Tensor) and not position_ids.is_floating_point():
        return _restarts(position_ids)
    if batch is not None:
        return _rows(batch, "the batch the model was given")
    return None


def sequence_keys(keys: torch.Tensor) -> Tuple[List[int], torch.Tensor]:
    """(the distinct keys ≥ 0 in order of first appearance, each position's index into that list or −1)."""
    flat = keys.reshape(-1).to(device="cpu", dtype=torch.int64)
    inside = flat >= 0
    if not bool(inside.any()):
        return [], torch.full_like(flat, -1)
    kept = flat[inside]
    if kept.numel() < 2 or bool((kept[1:] >= kept[:-1]).all()):
        # Rows, packed sequences, cu_seqlens: keys already rise in flat order, first appearance is sorted order.
        distinct, counts = torch.unique_consecutive(kept, return_counts=True)
        index = torch.full_like(flat, -1)
        index[inside] = torch.repeat_interleave(torch.arange(int(distinct.numel()), dtype=torch.int64), counts)
        return [int(k) for k in distinct.tolist()], index
    distinct, inverse = torch.unique(kept, sorted=True, return_inverse=True)
    count = int(distinct.numel())
    # First appearance of each key: the smallest position among its occurrences (a stable sort by key).
    order_by_key = torch.sort(inverse, stable=True).indices
    first = torch.full((count,), int(flat.numel()), dtype=torch.int64)
    starts = torch.cumsum(torch.bincount(inverse, minlength=count), 0) - torch.bincount(inverse, minlength=count)
    first = order_by_key[starts]
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(count, dtype=torch.int64)
    index = torch.full_like(flat, -1)
    index[inside] = rank[inverse]
    return [int(k) for k in distinct[order].tolist()], index


class Microbatch:
    """What the loss saw of one microbatch: its groups in order of first appearance, and each call's positions.

    Groups are keyed by sequence (None: the microbatch is one group). Counting is left to ``written``:
    a loss call stores its valid mask and each position's group index, and nothing waits for the data.
    """

    def __init__(self) -> None:
        self.keys: Dict[Optional[int], int] = {}  # sequence key → group index in this microbatch
        self.slots: List[int] = []  # group index → slot
        self.sequences: Optional[bool] = None
        self.weighted: Optional[bool] = None
        self.source: Optional[str] = None
        # (group index per position, or one group index for all; valid mask; weights)
        self.calls: List[Tuple[Union[int, torch.Tensor], torch.Tensor, Optional[torch.Tensor]]] = []
        self.running: Optional[torch.Tensor] = None  # valid tokens per group so far (kept for marked microbatches)
        self._counted: Optional[Tuple[List[int], List[int]]] = None
        # call index → each position's position in its whole sequence (context parallelism: add(positions=))
        self.positions: Dict[int, torch.Tensor] = {}

    def counts(self) -> Tuple[List[int], List[int]]:
        """(valid tokens, positions) per group, in group order."""
        if self._counted is None:
            groups = len(self.slots)
            valid = [0] * groups
            positions = [0] * groups
            for index, flags, _ in self.calls:
                if isinstance(index, int):
                    valid[index] += int(flags.sum())
                    positions[index] += int(flags.numel())
                    continue
                where = index.to("cpu")
                listed_valid = torch.bincount(where, weights=flags.to("cpu", torch.float64), minlength=groups).tolist()
                listed_positions = torch.bincount(where, minlength=groups).tolist()
                for g in range(groups):
                    valid[g] += int(listed_valid[g])
                    positions[g] += int(listed_positions[g])
            self._counted = (valid, positions)
        return self._counted

    @property
    def valid(self) -> int:
        """Valid tokens of the microbatch."""
        return sum(self.counts()[0])

    def written(self) -> Tuple[Any, Any]:
        """(the microbatch as the document writes it, its weights or None): compact groups, or token lists."""
        from . import dump

        valid, positions = self.counts()
        if not self.slots:  # a microbatch in which this loss saw no token (an auxiliary term's, say)
            return [], None
        if self.weighted:
            token_lists: List[List[Optional[int]]] = [[] for _ in self.slots]
            weight_lists: List[List[Optional[float]]] = [[] for _ in self.slots]
            for index, flags, weights in self.calls:
                assert weights is not None
                where = [index] * int(flags.numel()) if isinstance(index, int) else index.tolist()
                for g, flag, w in zip(where, flags.tolist(), weights.tolist()):
                    token_lists[g].append(1 if flag else None)
                    weight_lists[g].append(float(w) if flag else None)
            if self.sequences:
                return {"sequences": token_lists}, {"sequences": weight_lists}
            return token_lists[0], weight_lists[0]
        compact = [dump.group(n, value=1, padding=size - n) for n, size in zip(valid, positions)]
        if self.positions:
            return {"sequences": self._slices(compact)}, None
        if self.sequences:
            return {"sequences": compact}, None
        return compact[0], None

    def _slices(self, groups: List[Any]) -> List[Any]:
        """Each group as a slice of its sequence: its key as the sequence's ID, the positions it holds as ranges."""
        from . import dump

        if len(self.positions) != len(self.calls):
            raise StepError("positions= was given to some loss calls of a microbatch and not to others: a slice's "
                            "positions must cover every token it holds")
        if not self.sequences:
            raise StepError("positions= needs the sequences of the microbatch (2-D labels, or sequence_ids=)")
        if self.weighted:
            raise StepError("weighted tokens in sequence slices are not written yet: "
                            "positions= takes unweighted losses")
        held: List[List[int]] = [[] for _ in self.slots]
        for call, (index, _, _) in enumerate(self.calls):
            where = self.positions[call].tolist()
            groups_of = [index] * len(where) if isinstance(index, int) else index.to("cpu").tolist()
            for g, position in zip(groups_of, where):
                held[g].append(int(position))
        key_of = {index: key for key, index in self.keys.items()}
        written = []
        for g, group in enumerate(groups):
            ordered = sorted(held[g])
            twice = next((a for a, b in zip(ordered, ordered[1:]) if a == b), None)
            if twice is not None:
                raise StepError(f"sequence {key_of[g]} holds position {twice} twice in one microbatch of this rank")
            ranges: List[List[int]] = []
            for position in ordered:
                if ranges and position == ranges[-1][1]:
                    ranges[-1][1] = position + 1
                else:
                    ranges.append([position, position + 1])
            written.append(dump.sliced(group, sequence=str(key_of[g]), positions=ranges))
        return written


Keys = Union[None, Tuple[int, int], torch.Tensor]
"""A loss call's sequences: None (one group), (B, T) for the rows of a batch, or a key per position."""

_row_indices: Dict[Tuple[int, int, str], torch.Tensor] = {}


def _rows_index(rows: int, length: int, device: torch.device) -> torch.Tensor:
    key = (rows, length, str(device))
    found = _row_indices.get(key)
    if found is None:
        found = torch.arange(rows, dtype=torch.int64, device=device).repeat_interleave(length)
        if len(_row_indices) > 64:
            _row_indices.clear()
        _row_indices[key] = found
    return found


class Components:
    """Hands out slots and builds, for one loss call, each position's component index and witness value."""

    def __init__(self, slots: int, region: int, regions: int, option: str = "slots") -> None:
        self.slots = slots
        self.region = region
        """The region of p this rank writes (its rank, or its first replica's index on a replica mesh)."""
        self.regions = regions
        self.option = option
        self.used = 0

    @property
    def half(self) -> int:
        """Offset of the witness components: regions·slots (W·slots without replicas)."""
        return self.slots * self.regions

    def allocate(self) -> int:
        """The next free slot on this rank; StepError when there is none."""
        if self.used >= self.slots:
            raise StepError(f"this step records more than the {self.slots} groups (microbatches and sequences) a rank "
                            f"has components for: construct the probe with a larger {self.option}= "
                            f"(Probe(model, {self.option}=…))")
        self.used += 1
        return self.used - 1

    def _groups(self, batch: Microbatch, keys: Sequence[Optional[int]]) -> Tuple[List[int], bool]:
        """Group indices (in the microbatch) of ``keys``, allocating new groups; whether any existed before."""
        indices = []
        existed = False
        for key in keys:
            index = batch.keys.get(key)
            if index is None:
                index = len(batch.slots)
                batch.keys[key] = index
                batch.slots.append(self.allocate())
            else:
                existed = True
            indices.append(index)
        return indices, existed

    def record(self, batch: Microbatch, valid: torch.Tensor, keys: Keys, weights: Optional[torch.Tensor],
               keep_running: bool, witness: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        """Records one loss call's positions into ``batch``; returns (components, magnitudes).

        The probe term of position i is −Σ p[components]·magnitudes over its entries: its group's primary
        component with magnitude 1 (its weight, in a weighted step) and, with the ``witness``, its witness
        component with magnitude j, its ordinal among the group's valid tokens; both 0 where the target
        is not valid. The first L entries are the primary ones, the next L (if any) the witness ones.
        ``valid`` is the flat mask of valid targets (on the loss's device), ``keys`` where its sequences
        are; ordinals run on across the calls of a marked microbatch (``keep_running``).
        """
        device = valid.device
        count = int(valid.numel())
        sequences = keys is not None
        if batch.sequences is not None and batch.sequences != sequences:
            raise StepError("one microbatch mixed losses with and without sequence information")
        batch.sequences = sequences
        flags = valid.to(torch.float64)
        index: Union[int, torch.Tensor]
        cache_key: Optional[Tuple[Any, ...]] = None
        if keys is None:
            (index,), existed = self._groups(batch, [None])
            ordinal = torch.cumsum(flags, 0) if witness else flags
            cache_key = ("one", batch.slots[index], count)
        elif isinstance(keys, tuple):
            rows, length = keys
            groups, existed = self._groups(batch, list(range(rows)))
            index = _rows_index(rows, length, device)
            if groups != list(range(rows)):
                index = torch.tensor(groups, dtype=torch.int64, device=device)[index]
            ordinal = torch.cumsum(flags.reshape(rows, length), 1).reshape(-1) if witness else flags
            cache_key = ("rows", tuple(batch.slots[g] for g in groups), rows, length)
        else:
            found, position_groups = sequence_keys(keys)
            outside = position_groups < 0
            if bool((outside & valid.to("cpu")).any()):
                raise StepError("a valid token lies outside every sequence (sequence key −1)")
            if bool(outside.any()):
                # Positions outside every sequence count as padding of the sequence before them (or the first).
                if not found:
                    found = [-1]
                    position_groups = torch.zeros(count, dtype=torch.int64)
                else:  # forward fill: the group of the last position inside a sequence, else of the first one
                    positions = torch.arange(count, dtype=torch.int64)
                    last = torch.cummax(torch.where(outside, torch.full_like(positions, -1), positions), 0).values
                    first = int(torch.nonzero(~outside)[0, 0])
                    position_groups = position_groups[torch.where(last < 0, torch.full_like(last, first), last)]
            groups, existed = self._groups(batch, found)
            index = torch.tensor(groups, dtype=torch.int64)[position_groups].to(device)
            order = torch.sort(index, stable=True).indices
            running = torch.cumsum(flags[order], 0)
            per_group = torch.zeros(len(batch.slots), dtype=torch.float64, device=device).index_add_(0, index, flags)
            starts = torch.cumsum(per_group, 0) - per_group
            ordinal = torch.empty_like(running)
            ordinal[order] = running - starts[index[order]]
        if witness and existed:
            assert batch.running is not None
            grown = torch.zeros(len(batch.slots), dtype=torch.float64, device=device)
            grown[: batch.running.numel()] = batch.running
            batch.running = grown
            ordinal = ordinal + batch.running[index]
        if witness and keep_running:
            total = torch.zeros(len(batch.slots), dtype=torch.float64, device=device)
            if batch.running is not None:
                total[: batch.running.numel()] = batch.running
            if isinstance(index, int):
                total[index] += flags.sum()
            else:
                total.index_add_(0, index, flags)
            batch.running = total
        batch.calls.append((index, valid, weights))
        batch._counted = None
        if cache_key is not None:  # the layout of the vector is part of the key: probes differ in it
            cache_key += (self.region, self.slots, self.regions, witness, str(device))
        components = _components.get(cache_key) if cache_key is not None else None
        if components is None:
            base = self.region * self.slots
            if isinstance(index, int):
                primary = torch.full((count,), base + batch.slots[index], dtype=torch.int64, device=device)
            else:
                primary = (torch.tensor(batch.slots, dtype=torch.int64, device=device) + base)[index]
            components = torch.cat([primary, primary + self.half]) if witness else primary
            if cache_key is not None:
                if len(_components) > 256:
                    _components.clear()
                _components[cache_key] = components
        primary_magnitudes = weights if weights is not None else flags
        magnitudes = torch.cat([primary_magnitudes, ordinal * flags]) if witness else primary_magnitudes
        return components, magnitudes


_components: Dict[Tuple[Any, ...], torch.Tensor] = {}
"""Component indices of recurring layouts (the same rows in the same slots, step after step)."""
