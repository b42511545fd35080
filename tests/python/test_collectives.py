"""A rank that skips a collective, named from the traces when the launch's time limit ends the hang;
and the normcheck_gate fixture judging replicas and collectives together.

The skipping rank is the last one: its data give it a zero loss, and the step all-reduces the loss
for logging only when it looks large. The others wait in that all-reduce for ever; the launcher kills
them at its time limit, checks the recorded traces with the executable and must name the call, its
dtype and shape and the line of this file that issued it.
"""

import os
import re
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from normcheck.collectives import CollectiveMismatch, trace_files  # noqa: E402
from normcheck.launch import LaunchError, launch  # noqa: E402
from normcheck.torch import ReplicaDivergence  # noqa: E402

HANG_LIMIT = 10.0  # seconds: the forked ranks reached the hang within 1 s beside two busy cores; ten times that


def skips_when_its_loss_is_small(rank, world_size, probe):
    torch.manual_seed(0)
    ddp = DDP(nn.Linear(4, 3, bias=False))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)
    for step in range(3):
        x = torch.randn(6, 4, generator=data) * (0.0 if rank == world_size - 1 else 1.0)
        loss = ddp(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        if logged.item() > 1e-6:  # the bug: a rank whose loss looks small skips the logging all-reduce
            dist.all_reduce(logged)  # the skipped collective
    return "finished"


def line_of(text):
    with open(__file__, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if text in line:
                return number
    raise AssertionError(f"{text!r} not in {__file__}")


@pytest.mark.parametrize("world_size", (2, 3))
def test_a_skipped_collective_is_named_when_the_time_limit_ends_the_hang(tmp_path, executable, world_size):
    started = time.monotonic()
    with pytest.raises(CollectiveMismatch) as raised:
        launch(skips_when_its_loss_is_small, world_size, timeout=HANG_LIMIT, collectives=True,
               executable=executable, directory=str(tmp_path))
    seconds = time.monotonic() - started
    message = str(raised.value)
    print(f"W={world_size}: {seconds:.1f} s\n{message}")
    last = world_size - 1
    waiting = "rank 0 waits" if world_size == 2 else "ranks 0, 1 wait"
    skipped = f"{os.path.basename(__file__)}:{line_of('dist.all_reduce(logged)  # the skipped collective')}"
    assert re.search(rf"^rank {last} did not issue all_reduce #2 \(float32\[\]\) that {waiting} in, \S*{skipped}$",
                     message, re.MULTILINE), message
    assert f"passed its time limit of {HANG_LIMIT:g} s" in message
    verdict = raised.value.verdict
    assert verdict is not None and not verdict.consistent and verdict.hung
    assert set(range(last)) <= set(verdict.hung)
    stuck = [c for c in verdict.side_by_side if c.rank == 0][0]
    assert (stuck.op, stuck.shape, stuck.dtype, stuck.ordinal) == ("all_reduce", (), "float32", 2)
    assert stuck.source.endswith(skipped)
    # Each rank's trace is one file in a folder of its own, and the waiting ranks' last line is the call.
    folder = os.path.dirname(verdict.files[0])
    assert [os.path.basename(f) for f in trace_files(folder)] == [f"rank-{r}.jsonl" for r in range(world_size)]
    with open(os.path.join(folder, "rank-0.jsonl"), encoding="utf-8") as f:
        assert f.read().splitlines()[-1].endswith(f'"source": "{stuck.source}"}}')


def ddp_step(rank, world_size, probe, extra_scheduler_step):
    """A token-normalized DDP step with a probe, then the optimizer and scheduler; the replicas named."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Linear(3, 4)
    p = probe(model)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(p.model_parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    labels = torch.tensor([1, 2, 3, -100]) if rank == 0 else torch.tensor([0, -100, -100, -100])
    total = (labels != -100).sum().float()
    dist.all_reduce(total)
    with p.step():
        loss = F.cross_entropy(ddp(torch.ones(4, 3)), labels, reduction="sum")
        (loss * world_size / total).backward()
    p.check(ddp)
    optimizer.step()
    scheduler.step()
    if extra_scheduler_step and rank == world_size - 1:
        scheduler.step()
    probe.replicas(ddp, optimizer, scheduler)
    return rank


def test_the_gate_passes_a_correct_step_judging_replicas_and_collectives(normcheck_gate):
    assert normcheck_gate(ddp_step, 2, args=(False,), replicas=True, collectives=True) == [0, 1]
    result = normcheck_gate.last
    assert result.collectives.consistent and result.collectives.calls > 4
    summaries = [rank[0] for rank in result.replicas]
    assert len(summaries) == 2 and str(summaries[0]) == str(summaries[1])
    assert summaries[0].categories["parameters"].tensors == 3  # weight, bias and the probe parameter
    assert summaries[0].categories["scheduler"].values > 0


def test_the_gate_names_a_scheduler_stepped_on_one_rank(normcheck_gate):
    with pytest.raises(ReplicaDivergence, match=r"the replicas differ at scheduler\.last_epoch: rank 1 differs "
                                                r"from rank 0") as raised:
        normcheck_gate(ddp_step, 2, args=(True,), replicas=True, collectives=True)
    assert raised.value.values == {0: "1", 1: "2"}


def no_model(rank, world_size, probe):
    dist.barrier()
    return rank


def test_the_gate_asked_for_replicas_needs_a_model_to_compare(normcheck_gate):
    with pytest.raises(LaunchError, match=r"replicas=True, but the step gave no model to compare: call "
                                          r"probe\.replicas\(model, optimizer, scheduler\)"):
        normcheck_gate(no_model, 2, replicas=True)
