"""A small causal language model and the training steps the DDP tests judge.

The model: an embedding, one ``nn.TransformerEncoderLayer`` under a causal mask and a linear head.
Labels are the tokens themselves, shifted by one inside the loss (position t predicts token t+1), with
``-100`` where a sequence is padded; a sequence of length 1 has no label at all after the shift.

Each variant is a training step as real code writes it; ``run_variant`` runs it through DDP with a
probe and returns the probe's verdict. ``EXPECTED`` says what normcheck must conclude.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

VOCAB = 13
LENGTH = 6
IGNORE = -100

# Sequence lengths per rank, per microbatch (two sequences each). A length-L sequence has L − 1 labels.
DATASETS = {
    # G = 1, uneven counts: 8 and 3 labels (and 9 on a third rank).
    ("uneven", 1): [[[6, 4]], [[3, 2]], [[5, 6]]],
    # G = 1, one rank holds only padding (its sequences are 1 and 0 tokens long: no label after the shift).
    ("empty", 1): [[[6, 4]], [[1, 0]], [[5, 6]]],
    # G = 1, every rank the same count (5 + 3 = 8): the local mean equals the token mean.
    ("equal", 1): [[[6, 4]], [[4, 6]], [[5, 5]]],
    # G = 2, uneven, with rank 1's second microbatch all padding.
    ("uneven", 2): [[[6, 4], [5, 5]], [[3, 2], [1, 0]], [[5, 6], [2, 6]]],
    # G = 2, uneven, no empty microbatch: for per-microbatch means.
    ("full", 2): [[[6, 4], [5, 6]], [[3, 2], [4, 2]], [[5, 6], [2, 6]]],
}

# What normcheck must conclude: (verdict, an explanation that must be named), per variant; a callable
# when it depends on G. mean_of_empty, count_padding and the float16 reduction need the C++ features
# of issue 15 (observed values "nan", count_padding, observed.reduction_dtype).
EXPECTED: Dict[str, Any] = {
    "microbatch_mean": lambda g: ("fail", "microbatch_mean" if g > 1 else "local_mean"),
    "microbatch_mean_empty": ("fail", "mean_of_empty"),
    "local_mean": ("fail", "local_mean"),
    "local_mean_declared": ("fail", "local_mean"),
    "global_count": ("pass", None),
    "global_count_empty_rank": ("pass", None),
    "sum_hook": ("pass", None),
    "world_twice": ("fail", "objective×W"),
    "count_padding": ("fail", "count_padding"),
    "fp16_hook": ("pass", None),
    "equal_counts": ("inconclusive", "local_mean"),
    "planned_global_count": ("pass", None),
    "planned_local_mean": ("fail", "local_mean"),
}
# Every variant runs twice: the step calls probe.add on per-token losses ("explicit"), or the model
# computes its loss itself through the wrapped cross_entropy ("patched").
PATCHED = tuple(EXPECTED)


def expected(variant: str, g: int) -> Tuple[str, Optional[str]]:
    """The verdict and a required explanation for ``variant`` at G microbatches."""
    want = EXPECTED[variant]
    return want(g) if callable(want) else want


def dataset_for(variant: str, g: int) -> str:
    """Which dataset a variant runs on."""
    if variant == "microbatch_mean":
        return "full" if g > 1 else "uneven"
    if variant == "microbatch_mean_empty":
        return "uneven" if g > 1 else "empty"
    if variant == "global_count_empty_rank":
        return "empty"
    if variant == "equal_counts":
        return "equal"
    return "uneven"


class TinyLM(nn.Module):
    """Embedding, one causal TransformerEncoderLayer, linear head; optionally its own shifted loss."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, tokens: torch.Tensor, labels: Optional[torch.Tensor] = None,
                reduction: str = "mean") -> Any:
        length = tokens.shape[1]
        causal = torch.triu(torch.full((length, length), float("-inf"), dtype=self.head.weight.dtype), diagonal=1)
        logits = self.head(self.layer(self.embed(tokens), src_mask=causal))
        if labels is None:
            return logits
        # As Hugging Face causal LMs do: shift inside the model and call cross_entropy there.
        shifted = logits[:, :-1].reshape(-1, VOCAB)
        targets = labels[:, 1:].reshape(-1)
        return F.cross_entropy(shifted, targets, ignore_index=IGNORE, reduction=reduction), logits


def make_model(dtype: torch.dtype, seed: int = 0) -> TinyLM:
    """The same initial model on every rank and in every run."""
    torch.manual_seed(seed)
    return TinyLM().to(dtype)


def make_batch(lengths: Sequence[int], seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(tokens, labels) for sequences of the given lengths, padded to LENGTH (token 0, label -100)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(len(lengths), LENGTH, dtype=torch.long)
    labels = torch.full((len(lengths), LENGTH), IGNORE, dtype=torch.long)
    for i, n in enumerate(lengths):
        row = torch.randint(1, VOCAB, (n,), generator=generator)
        tokens[i, :n] = row
        labels[i, :n] = row
    return tokens, labels


def batches_for(dataset: str, g: int, rank: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """This rank's microbatches of a dataset."""
    return [make_batch(lengths, seed=100 * rank + m) for m, lengths in enumerate(DATASETS[(dataset, g)][rank])]


def shifted_labels(labels: torch.Tensor) -> torch.Tensor:
    """The labels the loss sees: position t predicts token t+1."""
    return labels[:, 1:].reshape(-1)


def all_reduced(value: float, dtype: torch.dtype) -> torch.Tensor:
    """The sum over ranks of a count, as training code computes it."""
    total = torch.tensor(value, dtype=dtype)
    dist.all_reduce(total)
    return total


def sum_without_dividing(state, bucket):  # type: ignore[no-untyped-def]  (DDP checks the annotations)
    """A communication hook that all-reduces with SUM and does not divide by W."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda done: done.value()[0])


def train_step(variant: str, patched: bool, model: nn.Module, probe: Any, batches: Sequence[Tuple[torch.Tensor, torch.Tensor]],
               world_size: int) -> None:
    """Forward and backward of one update as ``variant`` normalizes it; afterwards gradients are synchronized.

    ``patched``: the model computes its loss itself (cross_entropy inside forward) and the probe wraps
    it; otherwise the step computes per-token losses and calls ``probe.add`` (``probe`` may be None
    for an unprobed run).
    """
    g = len(batches)
    counts = [int((shifted_labels(labels) != IGNORE).sum()) for _, labels in batches]
    positions = sum(shifted_labels(labels).numel() for _, labels in batches)
    dtype = next(model.parameters()).dtype
    local = sum(counts)
    by_own_count = ("local_mean", "local_mean_declared", "planned_local_mean")
    needs_total = variant not in ("microbatch_mean", "microbatch_mean_empty") + by_own_count
    total = all_reduced(local, dtype) if needs_total else None
    padded_total = all_reduced(positions, dtype) if variant == "count_padding" else None

    def loss_of(m: int, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        mean = variant in ("microbatch_mean", "microbatch_mean_empty")
        if patched:
            loss = model(tokens, labels, reduction="mean" if mean else "sum")[0]
        else:
            logits = model(tokens)
            targets = shifted_labels(labels)
            per_token = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), targets, ignore_index=IGNORE,
                                        reduction="none")
            if probe is not None:
                per_token = probe.add(per_token, targets, ignore_index=IGNORE)
            loss = per_token.sum() / counts[m] if mean else per_token.sum()
        if mean:
            return loss / g
        if variant in by_own_count:
            return loss / local
        if variant == "sum_hook":
            return loss / total
        if variant == "world_twice":
            return loss * world_size * world_size / total
        if variant == "count_padding":
            return loss * world_size / padded_total
        return loss * world_size / total  # global_count, fp16_hook, equal_counts, planned_global_count

    for m, (tokens, labels) in enumerate(batches):
        if m + 1 < g:
            with model.no_sync():
                loss_of(m, tokens, labels).backward()
        else:
            loss_of(m, tokens, labels).backward()
    if probe is not None and variant == "local_mean_declared":
        probe.divided_by(local)  # what this rank divided its loss sum by: its own count


def wrap(model: nn.Module, variant: str, find_unused: bool) -> DistributedDataParallel:
    """DDP around the model, with the variant's communication hook."""
    ddp = DistributedDataParallel(model, find_unused_parameters=find_unused)
    if variant == "sum_hook":
        ddp.register_comm_hook(None, sum_without_dividing)
    elif variant == "fp16_hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    return ddp


def run_variant(variant: str, patched: bool, dtype: torch.dtype, g: int, rank: int, world_size: int,
                make_probe: Any, find_unused: bool) -> Dict[str, Any]:
    """One probed update; returns the verdict, its explanations, and the report's status or error."""
    model = make_model(dtype)
    # A float32 model gets p in float64, in a bucket of its own (the default); a float64 model shares its
    # bucket with a float64 p, so that a float64 observed gradient is judged too.
    probe = make_probe(model, dtype=torch.float64 if dtype == torch.float64 else None)
    ddp = wrap(model, variant, find_unused)
    batches = batches_for(dataset_for(variant, g), g, rank)
    if variant.startswith("planned_"):
        from normcheck.torch import gather_counts

        counts = gather_counts([int((shifted_labels(labels) != IGNORE).sum()) for _, labels in batches])
        probe.plan(counts)
    optimizer = torch.optim.SGD(probe.model_parameters(), lr=0.1)
    optimizer.zero_grad()
    with probe.step(wrap=patched):
        train_step(variant, patched, ddp, probe, batches, world_size)
    verdict = probe.judge(ddp, optimizer=optimizer)
    optimizer.step()
    error = verdict.report.get("error")
    return {"verdict": verdict.verdict, "status": verdict.status, "diagnosis": list(verdict.diagnosis),
            "could_hide": list(verdict.could_hide), "error": error and f"{error.get('code')}: {error.get('message')}",
            "message": verdict.message, "file": verdict.file}


def one_update(dtype: torch.dtype, g: int, rank: int, world_size: int, make_probe: Any, patched: bool,
               hook: Optional[str]) -> Tuple[List[torch.Tensor], Any]:
    """The model's parameters after one AdamW step with clipping, with a probe (make_probe) or without,
    and the probe's verdict (judged, not raised: the update is taken either way)."""
    model = make_model(dtype, seed=7)
    probe = make_probe(model) if make_probe is not None else None
    ddp = wrap(model, hook or "global_count", find_unused=True)
    parameters = list(probe.model_parameters()) if probe is not None else list(model.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=0.01, weight_decay=0.1)
    batches = batches_for("uneven", g, rank)
    with (probe.step(wrap=patched) if probe is not None else contextlib.nullcontext()):
        train_step("global_count", patched, ddp, probe, batches, world_size)
    verdict = probe.judge(ddp, optimizer=optimizer) if probe is not None else None
    torch.nn.utils.clip_grad_norm_(parameters, max_norm=0.05)
    optimizer.step()
    return [p.detach().clone() for p in parameters], verdict


def bitwise_equal(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Same shapes and the same bits (so -0.0 and NaN payloads count)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        bits = torch.int64 if x.dtype == torch.float64 else torch.int32
        if not torch.equal(x.contiguous().view(bits), y.contiguous().view(bits)):
            return False
    return True

