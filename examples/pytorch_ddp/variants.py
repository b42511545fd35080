"""One update of a one-parameter model under each loss normalization, through DistributedDataParallel.

The model holds θ; each valid token y contributes the loss ½(θ − y)². A rank's batch is a list of
microbatches, each a (targets, valid) pair of tensors: padding positions hold 0 and valid False.

Each variant is what some training code backpropagates on every rank (Sᵣ is the rank's loss sum,
nᵣ its valid tokens, N the valid tokens of the whole update over all ranks, W the world size):

  local_mean              Sᵣ/nᵣ                                   a bug: ranks weigh the same whatever nᵣ
  local_sum               Sᵣ                                      a bug: nothing divides by N
  scaled_sum              W·Sᵣ/N, N all-reduced                   correct under DDP's mean
  global_share            Sᵣ/N under DDP's mean                   a bug: DDP's division by W is not undone
  microbatch_mean         (1/G)·Σₘ Sᵣₘ/nᵣₘ with no_sync           a bug: every microbatch weighs the same
  accumulated_scaled_sum  Σₘ W·Sᵣₘ/N with no_sync, N of the update correct
  sum_hook                W·Sᵣ/N with a hook that sums            a bug: the hook does not divide by W
  empty_rank              W·Sᵣ/N where a rank holds no valid token correct: its loss is a zero that
                                                                  still depends on θ, so it joins
  hang                    like empty_rank, but the empty rank skips its step: the others wait forever
                          (only for testing the driver's time limit)

Weighted variants: each valid token also carries a weight w and the objective is Σwℓ/M, M the weights'
sum over the whole update; Sᵣ is then the weighted loss sum and mᵣ the rank's weight sum.

  weighted_scaled_sum     W·Sᵣ/M, M all-reduced                   correct under DDP's mean
  weighted_count          W·Sᵣ/N, N the all-reduced token count   a bug: the count in place of the mass
  weighted_local_mean     Sᵣ/mᵣ                                   a bug: ranks weigh the same whatever mᵣ
  weighted_accumulated    Σₘ W·Sᵣₘ/M with no_sync, M of the update correct
  weighted_microbatch_mean (1/G)·Σₘ Sᵣₘ/mᵣₘ with no_sync           a bug: every microbatch weighs the same

`run_variant` returns what normcheck needs to know besides the tokens: the reducer the code used
and the denominators it divided by.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CORRECT = ("scaled_sum", "accumulated_scaled_sum", "empty_rank", "weighted_scaled_sum", "weighted_accumulated")
ACCUMULATING = ("microbatch_mean", "accumulated_scaled_sum", "weighted_accumulated", "weighted_microbatch_mean")
WEIGHTED = ("weighted_scaled_sum", "weighted_count", "weighted_local_mean", "weighted_accumulated",
            "weighted_microbatch_mean")
ALL = ("local_mean", "local_sum", "scaled_sum", "global_share", "microbatch_mean", "accumulated_scaled_sum",
       "sum_hook", "empty_rank") + WEIGHTED
TESTING_ONLY = ("hang",)

DESCRIPTIONS = {
    "local_mean": "each rank backpropagates its local mean S_r/n_r",
    "local_sum": "each rank backpropagates its loss sum S_r",
    "scaled_sum": "each rank backpropagates W*S_r/N with N all-reduced",
    "global_share": "each rank backpropagates S_r/N under DDP's mean reducer",
    "microbatch_mean": "gradient accumulation with no_sync, each microbatch backpropagates its own mean divided by G",
    "accumulated_scaled_sum": "gradient accumulation with no_sync, each microbatch backpropagates W*S_rm/N "
                              "with N the update's all-reduced count",
    "sum_hook": "each rank backpropagates W*S_r/N, and a communication hook sums without dividing by W",
    "empty_rank": "each rank backpropagates W*S_r/N; a rank without valid tokens takes part with its zero loss",
    "hang": "a rank without valid tokens skips its step",
    "weighted_scaled_sum": "each rank backpropagates W*S_r/M, its weighted loss sum over the all-reduced weight sum",
    "weighted_count": "each rank backpropagates W*S_r/N, its weighted loss sum over the all-reduced token count",
    "weighted_local_mean": "each rank backpropagates S_r/m_r, its weighted loss sum over its own weight sum",
    "weighted_accumulated": "gradient accumulation with no_sync, each microbatch backpropagates W*S_rm/M with M "
                            "the update's all-reduced weight sum",
    "weighted_microbatch_mean": "gradient accumulation with no_sync, each microbatch backpropagates its own "
                                "weighted mean divided by G",
}

# Token weights of the weighted variants, by position: binary fractions, so every sum of them is exact,
# and each below 1, so M < N and dividing by the count instead of the mass is never invisible (when the
# weights happen to sum to N, weighted_count computes the right gradient and the gate rightly passes it).
WEIGHT_CYCLE = (0.5, 0.25, 0.75, 0.125)


def weights_for(microbatches, start=0):
    """Deterministic weights beside the valid tokens of one rank's microbatches (None beside padding),
    taken from WEIGHT_CYCLE from position `start` on (the driver starts rank r at r, so that ranks
    holding the same count still differ in mass)."""
    position = start
    weights = []
    for tokens in microbatches:
        row = []
        for y in tokens:
            row.append(None if y is None else WEIGHT_CYCLE[position % len(WEIGHT_CYCLE)])
            position += 1
        weights.append(row)
    return weights


class ScalarModel(torch.nn.Module):
    """θ, and the teaching loss summed over a microbatch's valid tokens."""

    def __init__(self, theta, dtype):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor([theta], dtype=dtype))

    def forward(self, targets, valid, weights=None):
        per_token = 0.5 * (self.theta - targets) ** 2
        if weights is not None:
            per_token = weights * per_token
        return torch.where(valid, per_token, torch.zeros_like(per_token)).sum()


def make_batch(microbatches, dtype):
    """(targets, valid) tensors per microbatch from lists of floats with None for padding."""
    batch = []
    for tokens in microbatches:
        targets = torch.tensor([0.0 if y is None else y for y in tokens], dtype=dtype)
        valid = torch.tensor([y is not None for y in tokens], dtype=torch.bool)
        batch.append((targets, valid))
    return batch


def make_weights(weights, dtype):
    """One weight tensor per microbatch, 0 beside padding (which `valid` masks anyway)."""
    return [torch.tensor([0.0 if w is None else w for w in row], dtype=dtype) for row in weights]


def _global_count(local_count):
    count = torch.tensor(local_count, dtype=torch.int64)
    dist.all_reduce(count)
    return count


def _sum_without_dividing(state, bucket):
    """A communication hook that all-reduces with SUM and does not divide by W."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda done: done.value()[0])


def run_variant(name, ddp, batch, world_size, side_group=None, weights=None):
    """Runs one update's forward and backward passes under variant `name`.

    Returns {"reducer", "counted_tokens", "global_tokens", "counted_mass", "global_mass"}: the reducer
    the code used, the rank's own count and weight sum as its code computed them (None if it computed
    none) and the N or M it divided by (None if it used no global one). `weights` (a tensor per
    microbatch) is needed by the weighted variants. After it returns, the gradient is synchronized.
    """
    if name not in ACCUMULATING and len(batch) != 1:
        raise ValueError(f"variant {name} takes one microbatch per rank, not {len(batch)}")
    if (name in WEIGHTED) != (weights is not None):
        raise ValueError(f"variant {name} {'needs' if name in WEIGHTED else 'takes no'} weights")
    local_count = sum(int(valid.sum()) for _, valid in batch)
    result = {"reducer": "mean", "counted_tokens": None, "global_tokens": None, "counted_mass": None,
              "global_mass": None}

    def masses():
        return [torch.where(valid, w, torch.zeros_like(w)).sum() for (_, valid), w in zip(batch, weights)]

    def backward_each(loss_of):
        # Accumulation: every microbatch but the last under no_sync, so only the last all-reduces.
        for m, (targets, valid) in enumerate(batch):
            args = (targets, valid) if weights is None else (targets, valid, weights[m])
            if m + 1 < len(batch):
                with ddp.no_sync():
                    loss_of(m, ddp(*args)).backward()
            else:
                loss_of(m, ddp(*args)).backward()

    if name == "local_mean":
        targets, valid = batch[0]
        n = valid.sum()
        (ddp(targets, valid) / n).backward()
        result["counted_tokens"] = int(n)
    elif name == "local_sum":
        targets, valid = batch[0]
        ddp(targets, valid).backward()
    elif name in ("scaled_sum", "empty_rank", "sum_hook", "global_share", "hang"):
        targets, valid = batch[0]
        n = valid.sum()
        total = _global_count(int(n))
        if name == "sum_hook":
            ddp.register_comm_hook(None, _sum_without_dividing)
            result["reducer"] = "sum"
        if name == "hang" and int(n) == 0:
            # The bug: "nothing to learn here", so this rank skips backward and its all-reduce, and
            # waits for the others at the end of the step; they wait in the all-reduce for it.
            print(f"rank {dist.get_rank()} holds no valid token and skips its step", flush=True)
            dist.barrier(group=side_group)
            raise RuntimeError("unreachable: the other ranks never reach this barrier")
        loss = ddp(targets, valid)
        (loss / total if name == "global_share" else loss * world_size / total).backward()
        result["counted_tokens"] = int(n)
        result["global_tokens"] = int(total)
    elif name == "microbatch_mean":
        g = len(batch)
        backward_each(lambda m, loss: loss / batch[m][1].sum() / g)
        result["counted_tokens"] = local_count
    elif name == "weighted_accumulated":
        local_mass = sum(masses())
        total_mass = local_mass.detach().clone()
        dist.all_reduce(total_mass)
        backward_each(lambda m, loss: loss * world_size / total_mass)
        result["counted_mass"] = local_mass.item()
        result["global_mass"] = total_mass.item()
    elif name == "weighted_microbatch_mean":
        g = len(batch)
        each = masses()
        backward_each(lambda m, loss: loss / each[m] / g)
        result["counted_mass"] = sum(each).item()
    elif name in WEIGHTED:
        targets, valid = batch[0]
        loss = ddp(targets, valid, weights[0])
        local_mass = torch.where(valid, weights[0], torch.zeros_like(weights[0])).sum()
        if name == "weighted_local_mean":
            (loss / local_mass).backward()
            result["counted_mass"] = local_mass.item()
        elif name == "weighted_count":
            n = valid.sum()
            total = _global_count(int(n))
            (loss * world_size / total).backward()
            result["counted_tokens"] = int(n)
            result["global_tokens"] = int(total)
        else:
            total_mass = local_mass.detach().clone()
            dist.all_reduce(total_mass)
            (loss * world_size / total_mass).backward()
            result["counted_mass"] = local_mass.item()
            result["global_mass"] = total_mass.item()
    elif name == "accumulated_scaled_sum":
        total = _global_count(local_count)
        backward_each(lambda m, loss: loss * world_size / total)
        result["counted_tokens"] = local_count
        result["global_tokens"] = int(total)
    else:
        raise ValueError(f"unknown variant {name!r}")
    return result


def one_update(name, microbatches, theta, dtype, world_size, side_group=None, learning_rate=0.125, weights=None):
    """Builds the model and its DDP wrapper, runs the variant, reads the synchronized gradient, and
    takes the optimizer step. Returns (batch, gradient, θ before the step, what run_variant said).
    `weights` (lists shaped like `microbatches`, None beside padding) are for the weighted variants."""
    model = ScalarModel(theta, dtype)
    ddp = DistributedDataParallel(model)
    batch = make_batch(microbatches, dtype)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=learning_rate)
    optimizer.zero_grad()
    held_theta = model.theta.detach()[0].item()
    weight_tensors = None if weights is None else make_weights(weights, dtype)
    outcome = run_variant(name, ddp, batch, world_size, side_group, weight_tensors)
    gradient = model.theta.grad.detach()[0].item()
    optimizer.step()
    return batch, gradient, held_theta, outcome
