"""Check your own training step: one update on two ranks, judged exactly by normcheck.

    PYTHONPATH=python NORMCHECK=build/normcheck /usr/bin/python3 -m pytest examples/pytorch_probe

`train_step` stands for your training code; the probe adds a parameter p = 0 to the model that
measures the weight the step gives every sequence of every rank, and the normcheck_gate fixture runs
the step on two ranks (gloo on loopback) and fails the test with normcheck's diagnosis and the weight
table when those weights are not the token mean's.
"""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from normcheck import NormcheckFailure


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=11):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, vocab)

    def forward(self, tokens, labels):
        logits = self.head(self.embed(tokens))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="sum")


def batch(rank):
    """Uneven padding: rank 0 has 7 labels after the shift, rank 1 has 2."""
    tokens = torch.randint(1, 11, (2, 5), generator=torch.Generator().manual_seed(rank))
    lengths = [5, 4] if rank == 0 else [3, 1]
    labels = torch.stack([torch.where(torch.arange(5) < n, row, -100) for row, n in zip(tokens, lengths)])
    return tokens, labels


def train_step(ddp, tokens, labels, world_size, per_rank_mean=False):
    """Your step: the loss sum over the update's token count N, times W to undo DDP's mean."""
    local = (labels[:, 1:] != -100).sum().float()
    total = local.clone()
    dist.all_reduce(total)
    loss = ddp(tokens, labels)
    (loss / local if per_rank_mean else loss * world_size / total).backward()


def step(rank, world_size, probe, per_rank_mean=False):
    model = TinyLM()
    p = probe(model)                          # before DDP: DDP reduces p's gradient too
    ddp = DDP(model)
    optimizer = torch.optim.AdamW(p.model_parameters(), lr=1e-3)
    with p.step():                            # captures cross_entropy, then p's gradient once reduced
        train_step(ddp, *batch(rank), world_size, per_rank_mean)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    p.check(ddp)                              # raises NormcheckFailure with the diagnosis and the table


def test_my_training_step(normcheck_gate):
    normcheck_gate(step, world_size=2)


def test_a_per_rank_mean_is_diagnosed(normcheck_gate):
    with pytest.raises(NormcheckFailure) as failure:
        normcheck_gate(step, world_size=2, args=(True,))
    assert "local_mean" in failure.value.diagnosis           # a failure's name, never a could-hide one
    assert "weights per group" in str(failure.value)
