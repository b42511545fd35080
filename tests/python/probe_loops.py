"""Training loops as frameworks write them, each with the weight it gives every token and what normcheck names it.

Every loop is one update of tiny_lm's model under DistributedDataParallel, G microbatches per rank
(``no_sync`` on all but the last), written the way the framework it imitates writes it: a Hugging Face
Trainer step with ``num_items_in_batch``, a torchtitan-style global token count, verl-style sequence
losses on per-token log-probabilities, hooks, post-reduction scaling… The table ``LOOPS`` holds, per
loop, the per-token weight the loop delivers after the reducer (an exact oracle from the batch's
counts, checked against the probe's measurement) and the verdict and explanation names the gate must
give: the one place to adjust names.

Counts: sequence s of microbatch m on rank r holds n[r][m][s] valid labels (its length minus one,
after the shift); n_rm, n_r and N sum them; S counts the update's sequences with a valid label.
"""

from __future__ import annotations

import contextlib
import fnmatch
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tiny_lm
from tiny_lm import IGNORE, LENGTH, VOCAB

# Row lengths per rank, per microbatch (1 to 3 rows, up to 4 microbatches, up to 3 ranks). Counts
# (length − 1 per row): rank 0 [8, 11, 7, 5], rank 1 [7, 5, 5, 8], rank 2 [9, 4, 10, 10]: every window
# of G = 1, 2, 4 microbatches has distinct per-rank counts, of tokens and of rows, and per-microbatch
# counts over the ranks that are not all equal (a per-microbatch count is then no token mean, nor a
# per-microbatch row count a sequence mean), and rows per microbatch vary.
DATASETS: Dict[str, List[List[List[int]]]] = {
    "uneven": [
        [[6, 4], [5, 6, 3], [3, 6], [6]],
        [[3, 2, 5], [3, 3, 2], [6], [2, 5, 4]],
        [[5, 6], [2, 2, 3], [4, 3, 6], [6, 6]],
    ],
    # Rank 1's microbatch 1 holds no label (rows of length 1 and 0); with G = 1, rank 1 is empty.
    "empty": [
        [[6, 4], [5, 6, 3], [3, 6], [6]],
        [[1, 0], [1, 0], [6], [2, 5, 4]],
        [[5, 6], [2], [4, 3, 6], [6, 6]],
    ],
    # Every microbatch holds as many tokens over all ranks as the next (14 over two ranks, 22 over three),
    # the ranks' own counts differ: a count over k of G microbatches is exactly k/G of the update's.
    "steady": [
        [[6, 5], [4, 3, 3], [5, 6, 3], [4, 3]],
        [[4, 3], [5, 4], [2, 3], [6, 5]],
        [[5, 5], [6, 4], [3, 4, 4], [2, 6, 3]],
    ],
    # Every rank the same rows: equal counts, the local mean is the token mean.
    "equal": [
        [[6, 4], [5, 6, 3], [3, 6], [6]],
        [[6, 4], [5, 6, 3], [3, 6], [6]],
        [[6, 4], [5, 6, 3], [3, 6], [6]],
    ],
}


def window(dataset: str, g: int, world_size: int) -> List[List[List[int]]]:
    """Row lengths of the update: W ranks, G microbatches each."""
    return [rank[:g] for rank in DATASETS[dataset][:world_size]]


class Counts:
    """The update's counts, known to every rank (the dataset is fixed): what the oracle weights use."""

    def __init__(self, lengths: List[List[List[int]]]) -> None:
        self.lengths = lengths
        self.n = [[[max(length - 1, 0) for length in rows] for rows in rank] for rank in lengths]
        self.mass: Fraction = Fraction(0)
        """The weighted loops' weight mass M (set from the dump's weights by the checker)."""

    def rm(self, r: int, m: int) -> int:
        """n_rm: valid labels of rank r's microbatch m."""
        return sum(self.n[r][m])

    def r(self, r: int) -> int:
        """n_r: valid labels of rank r."""
        return sum(self.rm(r, m) for m in range(len(self.n[r])))

    @property
    def world_size(self) -> int:
        return len(self.n)

    @property
    def g(self) -> int:
        return len(self.n[0])

    @property
    def N(self) -> int:
        return sum(self.r(r) for r in range(self.world_size))

    def Nm(self, m: int) -> int:
        """N_m: valid labels of microbatch m over all ranks."""
        return sum(self.rm(r, m) for r in range(self.world_size))

    @property
    def S(self) -> int:
        """Sequences of the update that hold a valid label."""
        return sum(1 for rank in self.n for rows in rank for n in rows if n > 0)

    @property
    def rows(self) -> int:
        """Rows (sequences, empty ones too) of the update."""
        return sum(len(rows) for rank in self.n for rows in rank)

    def positions(self) -> int:
        """Label positions after the shift, padding included."""
        return self.rows * (LENGTH - 1)

    def unshifted(self) -> int:
        """Valid labels counted before the shift (a row of length L has L labels there)."""
        return sum(length for rank in self.lengths for rows in rank for length in rows)


class Step:
    """One rank's view of the update: the DDP model, the probe, its microbatches and real collectives."""

    def __init__(self, ddp: DistributedDataParallel, probe: Any, counts: Counts, rank: int, dtype: torch.dtype) -> None:
        self.ddp = ddp
        self.probe = probe
        self.counts = counts
        self.rank = rank
        self.world_size = counts.world_size
        self.g = counts.g
        self.dtype = dtype
        self.batches = [tiny_lm.make_batch(rows, seed=100 * rank + m) for m, rows in enumerate(counts.lengths[rank])]

    def all_reduce(self, value: float) -> torch.Tensor:
        """The sum over ranks of a count, as training code computes it."""
        total = torch.tensor(float(value), dtype=self.dtype)
        dist.all_reduce(total)
        return total

    def local_count(self) -> int:
        """This rank's valid labels over its window, as the code counts them."""
        return sum(int((tiny_lm.shifted_labels(labels) != IGNORE).sum()) for _, labels in self.batches)

    def microbatches(self, sync_every: bool = False) -> Any:
        """(m, tokens, labels, backward) for each microbatch, forward and backward under ``no_sync`` on all but
        the last (``sync_every``: every microbatch synchronizes)."""
        for m, (tokens, labels) in enumerate(self.batches):
            last = m + 1 == self.g
            with (self.ddp.no_sync() if not (last or sync_every) else contextlib.nullcontext()):
                yield m, tokens, labels, torch.Tensor.backward

    def per_token(self, tokens: torch.Tensor, labels: torch.Tensor,
                  **options: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        """(per-token loss with the probe's term, valid mask), shaped (B, T − 1): verl-style log-prob losses."""
        logits = self.ddp(tokens)
        targets = labels[:, 1:]
        per_token = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), targets.reshape(-1), ignore_index=IGNORE,
                                    reduction="none").reshape(targets.shape)
        per_token = self.probe.add(per_token, targets, ignore_index=IGNORE, **options)
        return per_token, targets != IGNORE

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor, **options: Any) -> torch.Tensor:
        """The loss the model computes itself (cross_entropy inside forward, captured by probe.step())."""
        return self.ddp(input_ids=tokens, labels=labels, **options)[0]


Weight = Callable[[Counts, int, int, int], Optional[Fraction]]
"""(counts, r, m, s) → the weight each token of that sequence gets after the reducer (None: NaN)."""
Expect = Callable[[int, int], Tuple[str, Tuple[str, ...]]]
"""(W, G) → (verdict, names that must be among the explanations; "a|b" accepts either)."""


def fails(*names: str) -> Expect:
    return lambda w, g: ("fail", names)


def passes() -> Expect:
    return lambda w, g: ("pass", ())


def in_g(name_g: str, name_w: str) -> Expect:
    """A factor in G, which fits as the same factor in W too when W = G: then both must be named."""
    return lambda w, g: ("fail", (name_g, name_w) if w == g else (name_g,))


@dataclass(frozen=True)
class Loop:
    """One training loop of the table."""

    name: str
    imitates: str
    step: Callable[[Step], None]
    weight: Weight
    expect: Expect
    gs: Tuple[int, ...] = (1, 2, 4)
    dataset: str = "uneven"
    patched: bool = False
    objective: str = "token_mean"
    normalizer: Optional[Callable[[Counts], int]] = None
    options: Dict[str, Any] = field(default_factory=dict)
    hook: Optional[str] = None
    site_weight: Optional[Dict[str, Weight]] = None
    """Weights that differ at a site (by submodule name); other sites and p get ``weight``."""
    site_expect: Optional[Tuple[str, str]] = None
    """(site, name) that the gate must name at a site."""
    worlds: Tuple[int, ...] = (2, 3)
    could_hide: Tuple[str, ...] = ()
    """Names the gate must list as could-hide (never as failures)."""
    known: str = ""
    """Why the gate does not give ``expect`` today (a test that must fail until it does), or ""."""
    positions: int = LENGTH - 1
    """Loss targets per row: LENGTH − 1 with the shift by slicing, LENGTH when the labels are padded first."""
    declares_divisor: bool = False
    """The loop tells the probe what each rank divided by: its own count (probe.divided_by)."""
    accumulation_steps: Optional[Callable[[int, int], int]] = None
    """(W, G) → the nominal accumulation steps the loop is configured with, declared to the probe (None: none)."""


# ---------------------------------------------------------------------------------------------------
# The loops

def global_count(s: Step) -> None:
    """torchtitan / accelerate's documented pattern: each microbatch's sum × W / N, N all-reduced."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / total)


def sync_every_microbatch(s: Step) -> None:
    """The global count, with every microbatch's backward synchronizing (no no_sync): the reduced gradients add up."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches(sync_every=True):
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / total)


def hf_trainer(s: Step) -> None:
    """transformers ≥ 4.46 Trainer, average_tokens_across_devices: num_items_in_batch over the window and the
    devices, the model divides its loss sum by it, the Trainer multiplies by W and does not divide by G."""
    num_items = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        loss = s.forward(tokens, labels, num_items_in_batch=num_items, shift="pad")
        backward(loss * s.world_size)


def hf_per_device(s: Step) -> None:
    """transformers #34242: num_items_in_batch counted on the device only, no average across devices."""
    num_items = s.local_count()
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels, num_items_in_batch=num_items, shift="pad"))


def hf_per_device_times_w(s: Step) -> None:
    """transformers #34242 with the loss × W kept (NeMo Automodel #3830: local mean × dp, no ÷G)."""
    num_items = s.local_count()
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels, num_items_in_batch=num_items, shift="pad") * s.world_size)


def hf_before_fix(s: Step) -> None:
    """transformers before #34191: each microbatch's mean loss, divided by the accumulation steps."""
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels) / s.g)


def hf_kwargs_ignored(s: Step) -> None:
    """transformers #37208 (TRL #2615, #35856): the model takes **kwargs but ignores num_items_in_batch and
    returns its mean; the Trainer, believing the model normalized, skips the ÷G."""
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels))  # num_items_in_batch went into **kwargs and nowhere


def hf_double_division(s: Step) -> None:
    """transformers #35808: normalized over the window's token count, then divided by G again."""
    num_items = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        loss = s.forward(tokens, labels, num_items_in_batch=num_items, shift="pad") * s.world_size
        backward(loss / s.g)


def local_mean(s: Step) -> None:
    """Megatron #7452 and the classic: each rank divides its loss sum by its own count."""
    local = s.local_count()
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() / local)


def local_mean_declared(s: Step) -> None:
    """local_mean, with the divisor told to the probe (observed.tokens.divided_by)."""
    local = s.local_count()
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() / local)
    s.probe.divided_by(local)


def rank_mean_over_g(s: Step) -> None:
    """torchtitan #1842: each microbatch over the rank's own count, and ÷G as well."""
    local = s.local_count()
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() / local / s.g)


def microbatch_global_count(s: Step) -> None:
    """Each microbatch over its own count on all ranks (all-reduced per microbatch), then ÷G as accelerate's
    accumulate() divides: a token count per microbatch where it should span the window."""
    for m, tokens, labels, backward in s.microbatches():
        per_token, valid = s.per_token(tokens, labels)
        total = s.all_reduce(int(valid.sum()))
        backward(per_token.sum() * s.world_size / total / s.g)


def cumulative_count(s: Step) -> None:
    """Megatron #7213: microbatch m divided by the rank's count accumulated so far (microbatches 0…m)."""
    running = 0
    for m, tokens, labels, backward in s.microbatches():
        per_token, valid = s.per_token(tokens, labels)
        running += int(valid.sum())
        backward(per_token.sum() / running)


def times_g(s: Step) -> None:
    """A loss multiplied by the accumulation steps on top of the global count."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size * s.g / total)


def world_twice(s: Step) -> None:
    """W applied twice: the loss sum × W² / N."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        loss = s.forward(tokens, labels, reduction="sum")
        backward(loss * s.world_size * s.world_size / total)


def hardcoded_extra(world_size: int) -> int:
    """TP·CP of hardcoded_world: a factor that is no power of W (and, on two ranks, not N/S = 3 of G = 1)."""
    return 5 if world_size == 2 else 4


def hardcoded_world(s: Step) -> None:
    """transformers #39648: loss × (DP·TP·CP) with TP·CP counted although they do not average here."""
    extra = hardcoded_extra(s.world_size)
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        loss = s.forward(tokens, labels, reduction="sum")
        backward(loss * s.world_size * extra / total)


def global_share(s: Step) -> None:
    """The global mean under DDP's mean: the loss sum / N, W forgotten."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() / total)


def raw_sum(s: Step) -> None:
    """miles #3231: raw loss sums under DDP's mean reducer."""
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels, reduction="sum"))


def sum_hook_correct(s: Step) -> None:
    """A sum reducer (a communication hook that does not divide): the loss sum / N is right."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() / total)


def count_padding(s: Step) -> None:
    """The denominator counts every label position, padding included."""
    positions = s.all_reduce(sum(tiny_lm.shifted_labels(labels).numel() for _, labels in s.batches))
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels, reduction="sum") * s.world_size / positions)


def count_before_shift(s: Step) -> None:
    """The labels are counted before the shift: one more per row than the loss sees."""
    total = s.all_reduce(sum(int((labels != IGNORE).sum()) for _, labels in s.batches))
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels, reduction="sum") * s.world_size / total)


def other_window_steps(world_size: int, g: int) -> int:
    """The k microbatches other_window counts over: G/k names no factor in W or G
    (3 of 4 on two ranks, 2 of 4 on three)."""
    return 3 if world_size == 2 else 2


def other_window(s: Step) -> None:
    """TRL #5619: the divisor counts the tokens of another window than the one accumulated (k of the G
    microbatches; each microbatch holds as many tokens over all ranks as the next)."""
    k = other_window_steps(s.world_size, s.g)
    counted = sum(int((tiny_lm.shifted_labels(labels) != IGNORE).sum()) for _, labels in s.batches[:k])
    total = s.all_reduce(counted)
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / total)


def nominal_window(world_size: int, g: int) -> int:
    """accumulate_grad_batches of short_window: more than the G run, and G over it names no factor in W or G."""
    return g + 1 if world_size == 2 else g + 3


def short_window(s: Step) -> None:
    """Lightning #19987, ms-swift #10084: the last window is short (G microbatches) but the mean loss is
    divided by the nominal accumulate_grad_batches."""
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels) / nominal_window(s.world_size, s.g))


def rescaled_buffer(s: Step) -> None:
    """torchtitan #1733: the accumulated gradients are rescaled by 1/G before every microbatch after the first."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        if m > 0:
            with torch.no_grad():
                for parameter in s.ddp.parameters():  # every parameter of the model, the probe's too
                    if parameter.grad is not None:
                        parameter.grad.mul_(1.0 / s.g)
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / total)


def empty_counted(s: Step) -> None:
    """NeMo RL #212: the mean over microbatches counts the fully masked ones (a guarded mean gives them 0)."""
    for m, tokens, labels, backward in s.microbatches():
        per_token, valid = s.per_token(tokens, labels)
        backward(per_token.sum() / valid.sum().clamp(min=1) / s.g)


def mean_of_empty(s: Step) -> None:
    """The microbatch mean of a microbatch without a valid label: 0/0, NaN."""
    for m, tokens, labels, backward in s.microbatches():
        backward(s.forward(tokens, labels) / s.g)


def sequence_share(s: Step) -> None:
    """verl #5625: each microbatch's token mean weighted by its share of the rank's sequences."""
    rows = sum(int(tokens.shape[0]) for tokens, _ in s.batches)
    for m, tokens, labels, backward in s.microbatches():
        per_token, valid = s.per_token(tokens, labels)
        backward(per_token.sum() / valid.sum() * tokens.shape[0] / rows)


def sequence_means(per_token: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each row's token mean (0 for a row without a valid label), verl's seq-mean-token-mean inner part."""
    return per_token.sum(dim=1) / valid.sum(dim=1).clamp(min=1)


def seq_mean_token_mean(s: Step) -> None:
    """verl seq-mean-token-mean, GRPO: the mean over the update's sequences of each sequence's token mean."""
    sequences = s.all_reduce(sum(int(((labels[:, 1:] != IGNORE).sum(1) > 0).sum()) for _, labels in s.batches))
    for m, tokens, labels, backward in s.microbatches():
        per_token, valid = s.per_token(tokens, labels)
        backward(sequence_means(per_token, valid).sum() * s.world_size / sequences)


def sum_of_sequence_means(s: Step) -> None:
    """verl #7200, open-instruct #1137: per-sequence token means summed, never divided by the sequence count."""
    for m, tokens, labels, backward in s.microbatches():
        per_token, valid = s.per_token(tokens, labels)
        backward(sequence_means(per_token, valid).sum())


def sequence_positions(s: Step) -> None:
    """verl #3741: each sequence's token sum over its padded length (valid and padded positions)."""
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward((per_token.sum(dim=1) / per_token.shape[1]).sum())


def seq_mean_token_sum(s: Step) -> None:
    """verl seq-mean-token-sum: each sequence's token sum, averaged over the update's sequences."""
    sequences = s.all_reduce(sum(int(((labels[:, 1:] != IGNORE).sum(1) > 0).sum()) for _, labels in s.batches))
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / sequences)


MAX_RESPONSE = 8
"""Dr. GRPO's L_max: the longest response the generation allows (longer than any row here)."""


def dr_grpo_normalizer(counts: Counts) -> int:
    """Dr. GRPO's constant: the update's sequences times the longest possible response."""
    return counts.rows * MAX_RESPONSE


def dr_grpo(s: Step) -> None:
    """Dr. GRPO (verl seq-mean-token-sum-norm): the token sum over a constant, sequences × maximal length."""
    constant = dr_grpo_normalizer(s.counts)
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / constant)


def weighted_mass(s: Step) -> None:
    """Class-weighted cross-entropy divided by the update's weight mass (all-reduced): weighted_token_mean."""
    weight = class_weights(s.dtype)
    mass = 0.0
    for _, labels in s.batches:
        targets = tiny_lm.shifted_labels(labels)
        mass += float(weight[targets[targets != IGNORE]].sum())
    total = s.all_reduce(mass)
    for m, tokens, labels, backward in s.microbatches():
        loss = s.forward(tokens, labels, reduction="sum", weight=weight)
        backward(loss * s.world_size / total)


def weighted_count(s: Step) -> None:
    """Class-weighted cross-entropy divided by the token count instead of the weight mass."""
    weight = class_weights(s.dtype)
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        loss = s.forward(tokens, labels, reduction="sum", weight=weight)
        backward(loss * s.world_size / total)


def class_weights(dtype: torch.dtype) -> torch.Tensor:
    """Exact small class weights (multiples of 1/4)."""
    return torch.tensor([(1 + (c % 4)) / 4 for c in range(VOCAB)], dtype=dtype)


def unexplained(s: Step) -> None:
    """Each microbatch weighted by a factor that no formula names."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum() * s.world_size / total * (1.0 + 0.375 * m + 0.125 * s.rank))


def stage_hooks(s: Step) -> None:
    """DeepSpeed #8152: a gradient hook on one stage's parameters divides by G (the probe's site there too)."""
    handles = [parameter.register_hook(lambda grad: grad / s.g) for parameter in s.ddp.module.layer.parameters()]
    try:
        global_count(s)
    finally:
        for handle in handles:
            handle.remove()


def post_reduction_scale(s: Step) -> None:
    """torchtune #2172: the loss sums are backpropagated and the reduced gradients divided by N afterwards
    (after DDP's mean, so the ×W is missing)."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum())
    with torch.no_grad():
        for parameter in s.ddp.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(1.0 / float(total))


def post_reduction_scale_correct(s: Step) -> None:
    """torchtune's scale_grads done right: the reduced gradients × W / N after the backward."""
    total = s.all_reduce(s.local_count())
    for m, tokens, labels, backward in s.microbatches():
        per_token, _ = s.per_token(tokens, labels)
        backward(per_token.sum())
    with torch.no_grad():
        for parameter in s.ddp.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(s.world_size / float(total))


def per_row_mean_unseen(s: Step) -> None:
    """Each row's token mean, ×W / S, on a probe that sees no sequences (sequences=False): the weights vary
    inside the probe's groups."""
    seq_mean_token_mean(s)


def f(numerator: Any, *denominators: Any) -> Fraction:
    """numerator / (the product of the denominators), exact."""
    result = Fraction(numerator)
    for value in denominators:
        result /= Fraction(value)
    return result


LOOPS: List[Loop] = [
    # -- correct loops: pass --
    Loop("global_count", "torchtitan, accelerate's token count", global_count,
         lambda c, r, m, s: f(1, c.N), passes()),
    Loop("sync_every_microbatch", "the global count, every microbatch synchronized", sync_every_microbatch,
         lambda c, r, m, s: f(1, c.N), passes(), gs=(2, 4)),
    Loop("hf_trainer", "transformers Trainer ≥ 4.46 with average_tokens_across_devices", hf_trainer,
         lambda c, r, m, s: f(1, c.N), passes(), patched=True, positions=LENGTH),
    Loop("sum_hook_correct", "a sum communication hook with the loss sum / N", sum_hook_correct,
         lambda c, r, m, s: f(1, c.N), passes(), hook="sum"),
    Loop("fp16_hook", "torch's fp16_compress_hook", global_count, lambda c, r, m, s: f(1, c.N), passes(),
         hook="fp16", gs=(1, 2)),
    Loop("powersgd", "torch's PowerSGD hook (p is 1-D: reduced uncompressed)", global_count,
         lambda c, r, m, s: f(1, c.N), passes(), hook="powersgd", gs=(1, 2)),
    Loop("post_reduction_scale_correct", "torchtune scale_grads(W / N), probe capture='step'",
         post_reduction_scale_correct, lambda c, r, m, s: f(1, c.N), passes(), options={"capture": "step"}),
    Loop("weighted_mass", "class-weighted cross-entropy over the weight mass", weighted_mass,
         lambda c, r, m, s: 1 / c.mass, passes(), patched=True, gs=(1, 2)),
    Loop("empty_rank", "the global count with a rank that holds no label (G = 1) or an empty microbatch",
         global_count, lambda c, r, m, s: f(1, c.N), passes(), dataset="empty"),
    # -- one DDP group's named mistakes --
    Loop("local_mean", "each rank's own count (Megatron #7452)", local_mean,
         lambda c, r, m, s: f(1, c.world_size * c.r(r)), fails("local_mean")),
    Loop("hf_per_device", "transformers #34242: per-device num_items_in_batch", hf_per_device,
         lambda c, r, m, s: f(1, c.world_size * c.r(r)), fails("local_mean"), patched=True, positions=LENGTH),
    Loop("hf_per_device_times_w", "transformers per-device count × W (NeMo Automodel #3830)", hf_per_device_times_w,
         lambda c, r, m, s: f(1, c.r(r)), fails("local_mean×W"), patched=True, positions=LENGTH),
    Loop("hf_before_fix", "transformers before #34191: mean loss / G", hf_before_fix,
         lambda c, r, m, s: f(1, c.world_size * c.g * c.rm(r, m)),
         lambda w, g: ("fail", ("microbatch_mean",) if g > 1 else ("local_mean",)), patched=True),
    Loop("hf_kwargs_ignored", "transformers #37208, TRL #2615, #35856: Σₘ sₘ/nₘ without ÷G", hf_kwargs_ignored,
         lambda c, r, m, s: f(1, c.world_size * c.rm(r, m)),
         lambda w, g: ("fail", ("sum_of_microbatch_means",) if g > 1 else ("local_mean",)), patched=True),
    Loop("hf_double_division", "transformers #35808: the window's count, then ÷G again", hf_double_division,
         lambda c, r, m, s: f(1, c.N * c.g), in_g("objective/G", "global_share"), patched=True, gs=(2, 4),
         positions=LENGTH),
    Loop("rank_mean_over_g", "torchtitan #1842: per-rank mean, ÷G", rank_mean_over_g,
         lambda c, r, m, s: f(1, c.world_size * c.g * c.r(r)),
         lambda w, g: in_g("local_mean/G", "local_mean/W")(w, g) if g > 1 else ("fail", ("local_mean",))),
    Loop("microbatch_global_count", "a per-microbatch global count, ÷G", microbatch_global_count,
         lambda c, r, m, s: f(1, c.Nm(m) * c.g), fails("microbatch_global_count"), gs=(2, 4)),
    Loop("cumulative_count", "Megatron #7213: cumulative counts", cumulative_count,
         lambda c, r, m, s: f(1, c.world_size * sum(c.rm(r, k) for k in range(m + 1))), fails("prefix_count"),
         gs=(2, 4)),
    Loop("times_g", "the loss × G on top of the global count", times_g,
         lambda c, r, m, s: f(c.g, c.N), in_g("objective×G", "objective×W"), gs=(2, 4)),
    Loop("world_twice", "W applied twice", world_twice, lambda c, r, m, s: f(c.world_size, c.N),
         fails("objective×W"), patched=True),
    Loop("hardcoded_world", "transformers #39648: loss × (DP·TP·CP)", hardcoded_world,
         lambda c, r, m, s: f(hardcoded_extra(c.world_size), c.N),
         lambda w, g: ("fail", (f"objective×{hardcoded_extra(w)}",)), patched=True, gs=(1, 2)),
    Loop("global_share", "the loss sum / N under DDP's mean", global_share,
         lambda c, r, m, s: f(1, c.world_size * c.N), fails("global_share")),
    Loop("post_reduction_scale", "torchtune #2172: 1/N after DDP's mean (capture='step')", post_reduction_scale,
         lambda c, r, m, s: f(1, c.world_size * c.N), fails("global_share"),
         options={"capture": "step"}),
    Loop("post_reduction_scale_unseen", "torchtune scale_grads(W / N) judged at the reduction (the default)",
         post_reduction_scale_correct, lambda c, r, m, s: f(1, c.world_size), fails("local_sum")),
    Loop("raw_sum", "miles #3231: raw sums under a mean reducer", raw_sum,
         lambda c, r, m, s: f(1, c.world_size), fails("local_sum"), patched=True),
    Loop("sum_hook_scaled", "a sum hook with the mean reducer's W / N", global_count,
         lambda c, r, m, s: f(c.world_size, c.N), fails("scaled_sum"), hook="sum"),
    Loop("count_padding", "the count includes padding positions", count_padding,
         lambda c, r, m, s: f(1, c.positions()), fails("count_padding"), patched=True),
    Loop("count_before_shift", "labels counted before the shift", count_before_shift,
         lambda c, r, m, s: f(1, c.unshifted()), fails("count_before_shift"), patched=True),
    Loop("other_window", "TRL #5619: the divisor over another window", other_window,
         lambda c, r, m, s: f(1, sum(c.Nm(k) for k in range(other_window_steps(c.world_size, c.g)))),
         fails("other_window"), gs=(4,),
         dataset="steady"),
    Loop("short_window", "Lightning #19987, ms-swift #10084: a short window ÷ the nominal G", short_window,
         lambda c, r, m, s: f(1, c.world_size * nominal_window(c.world_size, c.g) * c.rm(r, m)), fails("short_window"),
         patched=True, gs=(2, 4), accumulation_steps=nominal_window),
    Loop("short_window_undeclared", "a short window ÷ a nominal G the step does not declare", short_window,
         lambda c, r, m, s: f(1, c.world_size * nominal_window(c.world_size, c.g) * c.rm(r, m)),
         fails("microbatch_mean×*"), patched=True, gs=(2,), worlds=(2,)),
    # Two microbatches fit a geometric and any other two-point pattern alike: G = 4 only.
    Loop("rescaled_buffer", "torchtitan #1733: the buffer rescaled every microbatch", rescaled_buffer,
         lambda c, r, m, s: f(Fraction(1, c.g) ** (c.g - 1 - m), 1, c.N), fails("geometric"), gs=(4,)),
    Loop("empty_counted", "NeMo RL #212: ÷ microbatches including fully masked ones", empty_counted,
         lambda c, r, m, s: f(1, c.world_size * c.g * max(c.rm(r, m), 1)), fails("empty_microbatches_counted"),
         dataset="empty", gs=(2, 4)),
    Loop("mean_of_empty", "the mean of a microbatch without labels", mean_of_empty,
         lambda c, r, m, s: f(1, c.world_size * c.g * c.rm(r, m)) if c.rm(r, m) else None,
         fails("mean_of_empty"), dataset="empty", patched=True),
    Loop("sequence_share", "verl #5625: Σₘ(sₘ/nₘ)·(bₘ/B)", sequence_share,
         lambda c, r, m, s: f(len(c.n[r][m]), sum(len(rows) for rows in c.n[r]) * c.world_size * c.rm(r, m)),
         fails("sequence_share"), gs=(2, 4)),
    Loop("weighted_count", "class weights over the token count", weighted_count,
         lambda c, r, m, s: f(1, c.N), fails("count_denominator"), patched=True, gs=(1, 2)),
    Loop("unexplained", "a factor no formula names", unexplained,
         lambda c, r, m, s: f(Fraction(8 + 3 * m + r, 8), 1, c.N), fails("unexplained"), gs=(2,)),
    Loop("per_row_mean_unseen", "per-sequence means where the probe sees only microbatches", per_row_mean_unseen,
         lambda c, r, m, s: f(1, c.S * c.n[r][m][s]) if c.n[r][m][s] else Fraction(0), fails("varies_within_group"),
         options={"sequences": False}, gs=(1, 2)),
    Loop("stage_hooks", "DeepSpeed #8152: one stage's hooks ÷G", stage_hooks, lambda c, r, m, s: f(1, c.N),
         lambda w, g: ("fail", ()), site_weight={"layer": lambda c, r, m, s: f(1, c.N * c.g)},
         site_expect=("layer", "objective/G|global_share"), gs=(2, 4)),
    # -- declared objectives --
    Loop("seq_mean_token_mean", "verl seq-mean-token-mean (GRPO)", seq_mean_token_mean,
         lambda c, r, m, s: f(1, c.S * c.n[r][m][s]) if c.n[r][m][s] else Fraction(0), passes(),
         objective="sequence_mean"),
    Loop("token_mean_declared_sequence_mean", "token-mean code, sequence_mean declared", global_count,
         lambda c, r, m, s: f(1, c.N), fails("token_mean"), objective="sequence_mean"),
    Loop("sequence_mean_declared_token_mean", "sequence-mean code, token_mean declared", seq_mean_token_mean,
         lambda c, r, m, s: f(1, c.S * c.n[r][m][s]) if c.n[r][m][s] else Fraction(0), fails("sequence_mean")),
    Loop("sum_of_sequence_means", "verl #7200, open-instruct #1137", sum_of_sequence_means,
         lambda c, r, m, s: f(1, c.world_size * c.n[r][m][s]) if c.n[r][m][s] else Fraction(0),
         fails("sum_of_sequence_means"), objective="sequence_mean"),
    Loop("sequence_positions", "verl #3741: each sequence's sum over its padded length", sequence_positions,
         lambda c, r, m, s: f(1, c.world_size * (LENGTH - 1)), fails("sequence_positions")),
    Loop("seq_mean_token_sum", "verl seq-mean-token-sum", seq_mean_token_sum,
         lambda c, r, m, s: f(1, c.S), passes(), objective="sequence_sum_mean"),
    Loop("sequence_sum_mean_declared_token_mean", "seq-mean-token-sum code, token_mean declared", seq_mean_token_sum,
         lambda c, r, m, s: f(1, c.S), fails("sequence_sum_mean")),
    Loop("dr_grpo", "Dr. GRPO, verl seq-mean-token-sum-norm", dr_grpo,
         lambda c, r, m, s: f(1, dr_grpo_normalizer(c)), passes(), objective="constant",
         normalizer=dr_grpo_normalizer),
    Loop("token_mean_declared_constant", "token-mean code, constant declared", global_count,
         lambda c, r, m, s: f(1, c.N), fails("token_mean"), objective="constant", normalizer=dr_grpo_normalizer),
    # Under the token mean the gate knows no constant: a uniform factor (N/C, on the objective or on a count
    # that is proportional to C) is what it can name.
    Loop("constant_declared_token_mean", "Dr. GRPO code, token_mean declared", dr_grpo,
         lambda c, r, m, s: f(1, dr_grpo_normalizer(c)), fails("*×*|*/*")),
    # -- equal counts: nothing tells the local mean from the token mean --
    Loop("equal_counts", "the global count on equal counts", global_count, lambda c, r, m, s: f(1, c.N),
         lambda w, g: ("inconclusive", ()), dataset="equal", gs=(1, 2), could_hide=("local_mean",)),
    Loop("local_mean_equal", "the local mean on equal counts", local_mean,
         lambda c, r, m, s: f(1, c.world_size * c.r(r)), lambda w, g: ("inconclusive", ()), dataset="equal",
         gs=(1, 2), could_hide=("local_mean",)),
    # The denominator check fails (each rank divided by its own count); the gradient is the objective's.
    Loop("local_mean_declared_equal", "the local mean on equal counts, divisor declared", local_mean_declared,
         lambda c, r, m, s: f(1, c.world_size * c.r(r)), lambda w, g: ("fail", ()), dataset="equal", gs=(1, 2),
         could_hide=("local_mean",), declares_divisor=True),
]

BY_NAME = {loop.name: loop for loop in LOOPS}
assert len(BY_NAME) == len(LOOPS), "loop names are unique"


def wrap(model: torch.nn.Module, hook: Optional[str], find_unused: bool) -> Tuple[DistributedDataParallel, Any]:
    """DDP around the model with a loop's communication hook; (ddp, hook state to keep alive)."""
    ddp = DistributedDataParallel(model, find_unused_parameters=find_unused)
    state: Any = None
    if hook == "sum":
        ddp.register_comm_hook(None, tiny_lm.sum_without_dividing)
    elif hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                            min_compression_rate=0.5, use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp, state


def run(loop: Loop, g: int, rank: int, world_size: int, dtype: torch.dtype, make_probe: Any) -> Optional[str]:
    """One probed update of ``loop``: returns the dump's path on rank 0 (None elsewhere)."""
    counts = Counts(window(loop.dataset, g, world_size))
    model = tiny_lm.make_model(dtype)
    options = dict(loop.options)
    if loop.hook == "powersgd":
        # PowerSGD on gloo hangs with more than one bucket (torch 2, with or without the probe): p joins the
        # model's bucket by taking its dtype.
        options["dtype"] = dtype
    if loop.objective != "token_mean":
        options["objective"] = loop.objective
    if loop.normalizer is not None:
        options["normalizer"] = loop.normalizer(counts)
    if loop.accumulation_steps is not None:
        options["accumulation_steps"] = loop.accumulation_steps(world_size, g)
    probe = make_probe(model, slots=16, **options)
    # PowerSGD's chained collectives race with find_unused_parameters' own all-reduce on gloo (also without
    # the probe, depending on timing): it runs without.
    ddp, state = wrap(model, loop.hook, find_unused=g % 2 == 0 and loop.hook != "powersgd")
    optimizer = torch.optim.SGD(probe.model_parameters(), lr=0.1)
    step = Step(ddp, probe, counts, rank, dtype)
    if loop.hook == "powersgd":
        # PowerSGD compresses from its start iteration on: two steps first (a new step() forgets them).
        for _ in range(2):
            with probe.step(wrap=loop.patched):
                loop.step(step)
            optimizer.zero_grad()
    with probe.step(wrap=loop.patched):
        loop.step(step)
    torch.nn.utils.clip_grad_norm_(probe.model_parameters(), 1.0)
    optimizer.step()
    path = probe.dump(ddp, description=f"{loop.name}: {loop.imitates} (W = {world_size}, G = {g})")
    del state
    return path


def cases(world_size: int) -> List[Tuple[Loop, int]]:
    """(loop, G) pairs a launch of W ranks runs."""
    return [(loop, g) for loop in LOOPS if world_size in loop.worlds for g in loop.gs]


# ---------------------------------------------------------------------------------------------------
# The same updates as exact documents: the weight tables the loops give, without floats or processes

def exact_document(loop: Loop, world_size: int, g: int) -> Optional[Dict[str, Any]]:
    """The per-group document the probe would write for ``loop``, with the oracle's exact weights (None for a
    weighted loop, whose tokens the oracle does not describe)."""
    from normcheck import dump

    if loop.name.startswith("weighted"):
        return None
    counts = Counts(window(loop.dataset, g, world_size))
    with_sequences = loop.options.get("sequences", True)
    ranks: List[List[Any]] = []
    tables: Dict[Optional[str], Tuple[List[Any], List[Any]]] = {}
    sites = [None, "embed", "layer", "head"]
    for site in sites:
        weight_of = (loop.site_weight or {}).get(site or "", loop.weight) if site else loop.weight
        primary: List[Any] = []
        witness: List[Any] = []
        for r in range(world_size):
            for m in range(g):
                rows = counts.n[r][m]
                weights = [weight_of(counts, r, m, k) for k in range(len(rows))]
                groups = [[k] for k in range(len(rows))] if with_sequences else [list(range(len(rows)))]
                for members in groups:
                    if any(weights[k] is None for k in members):
                        primary.append("nan")
                        witness.append("nan")
                        continue
                    total, moment, ordinal = Fraction(0), Fraction(0), 0
                    for k in members:
                        w = weights[k]
                        assert w is not None
                        for _ in range(rows[k]):
                            ordinal += 1
                            total -= w
                            moment -= ordinal * w
                    primary.append(total)
                    witness.append(moment)
        tables[site] = (primary, witness)
    for r in range(world_size):
        batches = []
        for m in range(g):
            rows = counts.n[r][m]
            if with_sequences:
                batches.append(dump.sequences([dump.group(n, padding=loop.positions - n) for n in rows]))
            else:
                batches.append(dump.group(sum(rows), padding=loop.positions * len(rows) - sum(rows)))
        ranks.append(batches)
    primary, witness = tables[None]
    seen = dump.observed(dtype="float32", per_rank=[primary] * world_size, witness=[witness] * world_size,
                         sites=[dump.site(name, [tables[name][0]] * world_size, [tables[name][1]] * world_size)
                                for name in sites[1:]],
                         divided_by=[counts.r(r) for r in range(world_size)] if loop.declares_divisor else None)
    normalizer = loop.normalizer(counts) if loop.normalizer is not None else None
    return dump.document(ranks, world_size=world_size, reducer="sum" if loop.hook == "sum" else "mean", theta=0,
                         objective=loop.objective, normalizer=normalizer,
                         description=f"{loop.name}: the loop's exact weights (W = {world_size}, G = {g})",
                         observed=seen, accumulation_steps=(loop.accumulation_steps(world_size, g)
                                                            if loop.accumulation_steps is not None else None))


def named_as_expected(loop: Loop, world_size: int, g: int, verdict: Any) -> Optional[str]:
    """Why ``verdict`` is not what the table says for ``loop`` at (W, G), or None when it is."""
    if verdict is None:
        return "normcheck reported nothing on the dump"
    if verdict.status == "error":
        return verdict.message
    want, names = loop.expect(world_size, g)
    if verdict.verdict != want:
        return f"verdict {verdict.verdict}, the table says {want}"
    def given(name: str) -> bool:  # a pattern ("objective×*": any factor on the objective) or a name
        if "*" in name:
            return any(fnmatch.fnmatchcase(e, name) for e in verdict.explanations)
        return name in verdict.explanations

    for alternatives in names:
        if not any(given(n) for n in alternatives.split("|")):
            return f"{alternatives} is not among the explanations {verdict.explanations}"
    if want != "fail" and verdict.explanations:
        return f"could-hide names reported as failures: {verdict.explanations}"
    for hidden in loop.could_hide:
        if hidden not in verdict.could_hide or hidden not in verdict.message:
            return f"{hidden} should could-hide, could_hide is {verdict.could_hide}"
    if loop.site_expect is not None:
        site, named = loop.site_expect
        found = {entry.name: entry for entry in verdict.sites}
        if site not in found or not any(n in found[site].diagnosis for n in named.split("|")):
            return f"site {site} should be named {named}: {[(e.name, e.diagnosis) for e in verdict.sites]}"
    if want != "pass" and (verdict.weights is None or "weights per group" not in verdict.message):
        return "a failing per-group verdict shows its weight table"
    return None
