"""The package's test model: a small causal language model, its batches, and one AdamW update.

The model: an embedding, one ``nn.TransformerEncoderLayer`` under a causal mask and a linear head.
Labels are the tokens themselves, shifted by one inside the loss (position t predicts token t+1), with
``-100`` where a sequence is padded; a sequence of length 1 has no label at all after the shift. Its
forward computes the loss itself when given labels, as Hugging Face causal LMs do: with the label
shift done by slicing (``shift="slice"``, older transformers) or by padding the labels and shifting
them (``shift="pad"``, transformers ≥ 4.46), and divided by ``num_items_in_batch`` when given.
"""

from __future__ import annotations

import contextlib
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

VOCAB = 13
LENGTH = 6
IGNORE = -100


class TinyLM(nn.Module):
    """Embedding, one causal TransformerEncoderLayer, linear head; its own shifted loss when given labels."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, input_ids: torch.Tensor, labels: Optional[torch.Tensor] = None, reduction: str = "mean",
                num_items_in_batch: Optional[Any] = None, shift: str = "slice",
                weight: Optional[torch.Tensor] = None) -> Any:
        length = input_ids.shape[1]
        causal = torch.triu(torch.full((length, length), float("-inf"), dtype=self.head.weight.dtype), diagonal=1)
        logits = self.head(self.layer(self.embed(input_ids), src_mask=causal))
        if labels is None:
            return logits
        if shift == "slice":
            shifted, targets = logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1)
        else:
            shifted = logits.reshape(-1, VOCAB)
            targets = F.pad(labels, (0, 1), value=IGNORE)[:, 1:].reshape(-1)
        if num_items_in_batch is not None:
            loss = F.cross_entropy(shifted, targets, ignore_index=IGNORE, reduction="sum", weight=weight)
            return loss / num_items_in_batch, logits
        return F.cross_entropy(shifted, targets, ignore_index=IGNORE, reduction=reduction, weight=weight), logits


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


def shifted_labels(labels: torch.Tensor) -> torch.Tensor:
    """The labels the loss sees: position t predicts token t+1."""
    return labels[:, 1:].reshape(-1)


# Sequence lengths per rank, per microbatch, for the update tests: uneven counts, no empty microbatch.
UPDATE_LENGTHS = [[[6, 4], [5, 5]], [[3, 2], [4, 2]], [[5, 6], [2, 6]]]


def sum_without_dividing(state, bucket):  # type: ignore[no-untyped-def]  (DDP checks the annotations)
    """A communication hook that all-reduces with SUM and does not divide by W."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda done: done.value()[0])


def one_update(dtype: torch.dtype, g: int, rank: int, world_size: int, make_probe: Any, patched: bool,
               hook: Optional[str], sites: Any = None) -> Tuple[List[torch.Tensor], Any]:
    """The model's parameters after one AdamW step with clipping, with a probe (make_probe) or without,
    and the probe's dump, written after the update (None without a probe, and on ranks other than 0).

    The step divides each microbatch's loss sum by the update's token count times W; clipping is
    over every parameter of the model, the probe's included, after the probe captured its gradient.
    """
    model = make_model(dtype, seed=7)
    probe = make_probe(model, sites=sites) if make_probe is not None else None
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    if hook == "fp16_hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    parameters = list(probe.model_parameters()) if probe is not None else list(model.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=0.01, weight_decay=0.1)
    batches = [make_batch(lengths, seed=100 * rank + m) for m, lengths in enumerate(UPDATE_LENGTHS[rank][:g])]
    local = sum(int((shifted_labels(labels) != IGNORE).sum()) for _, labels in batches)
    total = torch.tensor(float(local), dtype=dtype)
    dist.all_reduce(total)
    with (probe.step(wrap=patched) if probe is not None else contextlib.nullcontext()):
        for m, (tokens, labels) in enumerate(batches):
            context = ddp.no_sync() if m + 1 < g else contextlib.nullcontext()
            with context:
                if patched:
                    loss = ddp(tokens, labels, reduction="sum")[0]
                else:
                    logits = ddp(tokens)
                    targets = shifted_labels(labels)
                    per_token = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), targets, ignore_index=IGNORE,
                                                reduction="none")
                    if probe is not None:
                        per_token = probe.add(per_token, targets, ignore_index=IGNORE)
                    loss = per_token.sum()
                (loss * world_size / total).backward()
    # Every parameter of the model, p included: the probe has captured and cleared its gradient.
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=0.05)
    optimizer.step()
    path = probe.dump(ddp, optimizer=optimizer) if probe is not None else None  # after the update
    return [p.detach().clone() for p in parameters], path


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
