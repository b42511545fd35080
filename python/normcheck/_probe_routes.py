"""Losses the probe measures without ``cross_entropy``: selected log-probabilities and fused kernels.

Every route ends in the probe's one recording path (``Probe._record`` and ``_per_position`` or
``_summed``, as ``add`` and the captured ``cross_entropy`` use them): the term is the same −p·(…) on
each valid token, only the place it is attached differs.

- Selected log-probabilities (``probe.log_probs``): a token's loss is −log p(token), so the term goes
  on with the opposite sign, log p − t, computed as −((−log p) + t) so that every value keeps its bits
  (t is −0, and x + (−0) is x for every x; x − (−0) would turn −0 into +0).
- A model output that carries them (``probed_output``): TRL's fused LM head returns
  ``FusedCausalLMOutput(log_probs=…, label_mask=…)`` from ``model(..., fused_lm_head=True)``, the
  log-probability of each next-token label computed in tiles inside an autograd function the probe
  cannot enter. Its ``log_probs`` are the first place the selected log-probabilities are visible, so
  the term goes on there, on the positions of ``label_mask``.
- A fused kernel that returns only its reduced loss (``probe.fused_loss``): the term is reduced as the
  caller declares the kernel reduces (``'mean'`` over the valid labels, ``'sum'``, ``'none'``), the
  declaration checked against the cross-entropy recomputed from the kernel's inputs.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Optional

import torch

from ._probe_record import ProbeError
from .options import REDUCTIONS, Reduction

if TYPE_CHECKING:
    from .probe import Probe

__all__ = ["log_probs", "probed_output", "fused_loss", "output_note", "without_output_route", "sequence_terms"]

# Relative difference tolerated between a fused kernel's value and the cross-entropy recomputed from its
# inputs (its own arithmetic is bfloat16 or float32, tiled): far below any wrong denominator of a real batch.
_TOLERANCE = 1e-3
_CHUNK = 4096  # positions per block when recomputing a fused kernel's loss


def log_probs(probe: "Probe", values: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
              sequence_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``values`` (selected log-probabilities, shaped like ``labels``) plus the term of −log p on valid tokens."""
    return probe.add(values.neg(), labels, ignore_index=ignore_index, sequence_ids=sequence_ids).neg()


def _fused_fields(output: Any) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    if not isinstance(output, dict):
        return None
    values, mask = output.get("log_probs"), output.get("label_mask")
    if isinstance(values, torch.Tensor) and isinstance(mask, torch.Tensor) and values.shape == mask.shape \
            and values.is_floating_point() and values.requires_grad:
        return values, mask
    return None


def probed_output(probe: "Probe", output: Any) -> Any:
    """A fused LM head's output with the probe term on its ``log_probs``, or None for any other output."""
    fields = _fused_fields(output) if probe not in _quiet else None
    if fields is None:
        return None
    values, mask = fields
    labels = torch.where(mask.bool(), torch.zeros((), dtype=torch.long, device=mask.device),
                         torch.full((), -100, dtype=torch.long, device=mask.device))
    output["log_probs"] = log_probs(probe, values, labels)  # a ModelOutput keeps the attribute in step
    return output


def output_note(output: Any) -> Optional[str]:
    """What a module output that no route took says about where its loss was computed, or None."""
    if isinstance(output, dict) and isinstance(output.get("log_probs"), torch.Tensor) and output.get("logits") is None:
        return (f"the model returned {type(output).__name__} with per-token log_probs and no logits (a fused LM head, "
                "as TRL's model(..., fused_lm_head=True)): route them with probe.log_probs(outputs.log_probs, labels) "
                "before the loss is formed")
    return None


def _recomputed_sum(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], labels: torch.Tensor,
                    valid: torch.Tensor) -> float:
    """Σ over the valid positions of −log softmax(W·h + b)[label], in float64, block by block."""
    with torch.no_grad():
        rows = hidden.reshape(-1, hidden.shape[-1])[valid.reshape(-1)]
        targets = labels.reshape(-1)[valid.reshape(-1)]
        w = weight.detach().to(torch.float64)
        b = bias.detach().to(torch.float64) if bias is not None else None
        total = torch.zeros((), dtype=torch.float64)
        for start in range(0, int(rows.shape[0]), _CHUNK):
            logits = rows[start:start + _CHUNK].detach().to(torch.float64) @ w.T
            if b is not None:
                logits = logits + b
            chosen = logits.gather(-1, targets[start:start + _CHUNK].unsqueeze(-1)).squeeze(-1)
            total += (torch.logsumexp(logits, -1) - chosen).sum().cpu()
        return float(total)


def fused_loss(probe: "Probe", loss: torch.Tensor, hidden_states: torch.Tensor, weight: torch.Tensor,
               labels: torch.Tensor, *, bias: Optional[torch.Tensor] = None, ignore_index: int = -100,
               reduction: Reduction = "mean") -> torch.Tensor:
    """A fused linear cross-entropy's ``loss`` plus the probe term reduced as the kernel reduces (checked)."""
    if reduction not in REDUCTIONS:
        raise ProbeError(f"a fused kernel's reduction is 'mean', 'sum' or 'none', not {reduction!r}")
    if tuple(hidden_states.shape[:-1]) != tuple(labels.shape):
        raise ProbeError(f"hidden states of shape {tuple(hidden_states.shape)} for labels of shape "
                         f"{tuple(labels.shape)}: give the states that meet the head, one per label")
    if not torch.is_grad_enabled():
        return loss
    valid = labels != ignore_index
    if reduction != "none":
        total = _recomputed_sum(hidden_states, weight, bias, labels, valid)
        expected = total / max(int(valid.sum()), 1) if reduction == "mean" else total
        value = float(loss.detach().float().sum())
        if abs(value - expected) > _TOLERANCE * max(abs(expected), 1e-30):
            raise ProbeError(f"the fused kernel's loss is {value:.6g}, where the {reduction} of the cross-entropy of "
                             f"its inputs is {expected:.6g}: it reduces otherwise than reduction={reduction!r} says "
                             "(another denominator, label smoothing, a z-loss); declare what it computes, or give "
                             "its per-token losses to probe.add")
    elif tuple(loss.shape) != tuple(labels.shape):
        raise ProbeError(f"reduction='none' but the fused loss has shape {tuple(loss.shape)}, the labels "
                         f"{tuple(labels.shape)}")

    def kernel(**_: Any) -> torch.Tensor:
        return loss

    return probe._loss("cross_entropy", kernel, {"target": labels, "ignore_index": ignore_index,
                                                  "reduction": reduction, "weight": None})


_quiet: "weakref.WeakSet[Any]" = weakref.WeakSet()


@contextlib.contextmanager
def without_output_route(probe: "Probe") -> Iterator[None]:
    """While the block runs, ``probed_output`` leaves this probe's outputs alone (the loss is routed elsewhere)."""
    _quiet.add(probe)
    try:
        yield
    finally:
        _quiet.discard(probe)


def sequence_terms(probe: "Probe", mask: torch.Tensor, sequence_ids: torch.Tensor) -> torch.Tensor:
    """One probe term per sequence (float64, −0): its tokens' terms (``mask``), summed and divided by their count.

    For a loss with one term per sequence (a preference pair, a completion): added to that term, it
    gives each of the sequence's tokens the sequence's weight divided by its length, so that p.grad
    carries the weight of the sequence as a whole. ``sequence_ids`` (shaped like ``mask``) numbers the
    sequences 0 … S − 1; the result has S entries.
    """
    labels = torch.where(mask.bool(), torch.zeros((), dtype=torch.long, device=mask.device),
                         torch.full((), -100, dtype=torch.long, device=mask.device))
    zeros = torch.zeros(mask.shape, dtype=torch.float64, device=mask.device)
    terms = probe.add(zeros, labels, sequence_ids=sequence_ids).reshape(-1)
    keys = sequence_ids.reshape(-1).to(device=terms.device, dtype=torch.int64)
    count = int(keys.max()) + 1 if keys.numel() else 0
    totals = torch.zeros(count, dtype=torch.float64, device=terms.device).index_add(0, keys, terms)
    tokens = torch.bincount(keys, weights=mask.reshape(-1).to(device=terms.device, dtype=torch.float64),
                            minlength=count)
    return totals / tokens.clamp(min=1)
