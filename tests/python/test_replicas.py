"""check_replicas on real DDP and bare-group runs: correct runs agree, each planted fault is named.

One launch per W (2 and 3, gloo on loopback) runs every variant in one process group, one after the
other, and brings back what check_replicas said on each rank; the tests below judge those results.
Every fault is planted on the last rank. The same launch records a DDP run with record_collectives
and runs it again unrecorded, so the recorder's effect on the gradients can be judged.
"""

import json
import math
import os
import random
import sys
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from normcheck.collectives import check_collectives, record_collectives, trace_files  # noqa: E402
from normcheck.launch import launch  # noqa: E402
from normcheck.replicas import ReplicaReadError  # noqa: E402
from normcheck.torch import ReplicaDivergence, ReplicaSummary, check_replicas  # noqa: E402

WORLD_SIZES = (2, 3)


class Net(nn.Module):
    """Linear → BatchNorm → ReLU → Dropout → Linear: parameters, buffers and randomness."""

    def __init__(self, dropout=0.0, norm=True):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.norm = nn.BatchNorm1d(8) if norm else nn.Identity()
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.drop(torch.relu(self.norm(self.body(x)))))


def batch(rank, step, scale=1.0):
    """Different data on every rank, drawn from its own generator (the global one stays shared)."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(8, 6, generator=g) * scale
    return x, x.sum(dim=1, keepdim=True)


def outcome(call):
    """('agree', summary), ('differ', the divergence's fields) or ('unread', the read error's), on this rank."""
    try:
        return ("agree", call())
    except ReplicaDivergence as e:
        return ("differ", {"message": str(e), "path": e.path, "category": e.category, "ranks": e.ranks,
                           "reference": e.reference_ranks, "index": e.index, "values": e.values,
                           "dtype": e.dtype, "shape": e.shape, "others": e.others})
    except ReplicaReadError as e:
        return ("unread", {"message": str(e), "failures": e.failures})


def timed(call):
    """The outcome of a check and the seconds it took on this rank."""
    started = time.monotonic()
    result = outcome(call)
    return {"outcome": result, "seconds": time.monotonic() - started}


def ddp_setup(dropout=0.0, broadcast_buffers=True, norm=True, lr=1e-2):
    torch.manual_seed(0)
    model = Net(dropout=dropout, norm=norm)
    ddp = DDP(model, broadcast_buffers=broadcast_buffers)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.1)
    return model, ddp, optimizer


def train_step(ddp, optimizer, rank, step, scale=1.0):
    x, y = batch(rank, step, scale)
    loss = nn.functional.mse_loss(ddp(x), y)
    optimizer.zero_grad()
    loss.backward()
    return loss


# --- the variants, each on every rank --------------------------------------------------------------

def correct_ddp(rank, world_size):
    """DDP with BatchNorm, dropout under a shared seed, different data, AdamW, StepLR and clipping."""
    model, ddp, optimizer = ddp_setup(dropout=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    torch.manual_seed(1234)  # the same dropout masks on every rank, and the same generators to compare
    random.seed(1234)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(1234)
    results = []
    for step in range(3):
        train_step(ddp, optimizer, rank, step)
        results.append(outcome(lambda: check_replicas(ddp, optimizer, scheduler, rng=True)))  # mid-step
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 0.5)  # decided on the reduced gradient: the same
        optimizer.step()
        scheduler.step()
        results.append(outcome(lambda: check_replicas(ddp, optimizer, scheduler, rng=True)))
    return results


def correct_bare(rank, world_size):
    """No DDP: gradients averaged by hand with all_reduce, SGD with momentum, a buffer every rank updates."""
    torch.manual_seed(0)
    model = Net(norm=False)
    model.register_buffer("updates", torch.zeros((), dtype=torch.int64))
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    results = []
    for step in range(2):
        x, y = batch(rank, step)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world_size)
        optimizer.step()
        model.updates += 1
        results.append(outcome(lambda: check_replicas(model, optimizer)))
    return results


def optimizer_exp_avg(rank, world_size):
    """The last rank restores its optimizer through bfloat16 (a lossy checkpoint path): exp_avg differs."""
    model, ddp, optimizer = ddp_setup()
    train_step(ddp, optimizer, rank, 0)
    optimizer.step()
    saved = optimizer.state_dict()
    if rank == world_size - 1:
        for state in saved["state"].values():
            state["exp_avg"] = state["exp_avg"].bfloat16().float()
    optimizer.load_state_dict(saved)
    return outcome(lambda: check_replicas(ddp, optimizer))


def optimizer_lr(rank, world_size):
    """The last rank restores a checkpoint whose learning rate is another's."""
    model, ddp, optimizer = ddp_setup()
    train_step(ddp, optimizer, rank, 0)
    optimizer.step()
    saved = optimizer.state_dict()
    if rank == world_size - 1:
        saved["param_groups"][0]["lr"] = 3e-3
    optimizer.load_state_dict(saved)
    return outcome(lambda: check_replicas(ddp, optimizer))


def clipping(rank, world_size):
    """Each rank decides from its own local loss whether to clip: only the last rank (large data) clips."""
    model, ddp, optimizer = ddp_setup()
    loss = train_step(ddp, optimizer, rank, 0, scale=10.0 if rank == world_size - 1 else 1.0)
    if loss.item() > 50.0:  # the local loss: a rank-dependent decision
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1e-3)
    optimizer.step()
    return {"loss": loss.item(), "outcome": outcome(lambda: check_replicas(ddp, optimizer))}


def scheduler_one_rank(rank, world_size):
    """The last rank steps its scheduler once more (say, in a block meant for one rank only)."""
    model, ddp, optimizer = ddp_setup()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_step(ddp, optimizer, rank, 0)
    optimizer.step()
    scheduler.step()
    if rank == world_size - 1:
        scheduler.step()
    return outcome(lambda: check_replicas(ddp, optimizer, scheduler))


def buffers_not_broadcast(rank, world_size, broadcast_buffers):
    """BatchNorm under DDP with different data per rank, its buffers broadcast or not."""
    model, ddp, optimizer = ddp_setup(broadcast_buffers=broadcast_buffers)
    for step in range(2):
        train_step(ddp, optimizer, rank, step)
        optimizer.step()
    return outcome(lambda: check_replicas(ddp, optimizer))


def one_ulp(rank, world_size):
    """The last rank's weight one float32 ulp away at [1, 2], then +0.0 against -0.0 at [0, 0]."""
    model, ddp, optimizer = ddp_setup()
    results = []
    with torch.no_grad():
        if rank == world_size - 1:
            w = model.body.weight
            w[1, 2] = torch.nextafter(w[1, 2], torch.tensor(math.inf))
    results.append(outcome(lambda: check_replicas(ddp, optimizer)))
    with torch.no_grad():
        dist.broadcast(model.body.weight, src=0)
        model.body.weight[0, 0] = -0.0 if rank == world_size - 1 else 0.0
    results.append(outcome(lambda: check_replicas(ddp, optimizer)))
    equal_values = bool(torch.equal(torch.tensor(-0.0), torch.tensor(0.0)))
    return {"outcomes": results, "values_compare_equal": equal_values}


def grad_none(rank, world_size):
    """The last rank clears its gradients to None, the others to zeros."""
    model, ddp, optimizer = ddp_setup()
    train_step(ddp, optimizer, rank, 0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=(rank == world_size - 1))
    return outcome(lambda: check_replicas(ddp, optimizer))


def recorded_and_unrecorded(rank, world_size, traces):
    """One DDP update with its collectives recorded, then the same update unrecorded: the gradients."""
    gradients = []
    methods = dict(vars(dist.ProcessGroup))
    for recorded in (True, False):
        torch.manual_seed(0)
        model = Net(norm=True)
        x, y = batch(rank, 0)
        with record_collectives(traces) if recorded else _nothing() as recorder:
            if recorder is not None:
                recorder.step = 1
            ddp = DDP(model)
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            logged = loss.detach().clone()
            with recorder.label("logged_loss") if recorder is not None else _nothing():
                dist.all_reduce(logged)  # the logged loss
            counts = [None] * world_size
            dist.all_gather_object(counts, {"rank": rank})
            dist.barrier()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters()})
    # The control: PyTorch's Python default hook divides by W instead of multiplying by 1/W.
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    torch.manual_seed(0)
    model = Net(norm=True)
    ddp = DDP(model)
    ddp.register_comm_hook(None, allreduce_hook)
    x, y = batch(rank, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    gradients.append({n: p.grad.clone() for n, p in model.named_parameters()})
    same = all(torch.equal(gradients[0][n], gradients[1][n]) for n in gradients[0])
    dividing_same = all(torch.equal(gradients[2][n], gradients[1][n]) for n in gradients[0])
    restored = all(vars(dist.ProcessGroup).get(name) is value for name, value in methods.items())
    return {"bitwise_equal": same, "dividing_hook_bitwise_equal": dividing_same, "methods_restored": restored}


def outside_parameter(rank, world_size):
    """A learnable temperature outside the DDP module, trained by the same optimizer (add_param_group) and
    all-reduced by hand: the last rank starts from another value, then every rank from rank 0's."""
    torch.manual_seed(0)
    model = Net(norm=False)
    ddp = DDP(model)
    temperature = nn.Parameter(torch.tensor(2.0 if rank == world_size - 1 else 1.0))
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    optimizer.add_param_group({"params": [temperature], "lr": 1e-3})
    results = []
    for step in range(2):
        if step == 1:
            with torch.no_grad():
                dist.broadcast(temperature, src=0)
        x, y = batch(rank, step)
        optimizer.zero_grad()
        nn.functional.mse_loss(ddp(x) * temperature, y).backward()
        dist.all_reduce(temperature.grad)
        temperature.grad.div_(world_size)
        optimizer.step()
        results.append(outcome(lambda: check_replicas(ddp, optimizer)))
    return results


def meta_buffer_one_rank(rank, world_size):
    """The last rank's model holds a buffer on the meta device (no values), the others' on the CPU."""
    torch.manual_seed(0)
    model = Net(norm=False)
    model.register_buffer("scale", torch.ones(3, device="meta" if rank == world_size - 1 else "cpu"))
    return timed(lambda: check_replicas(model))


class Constant:
    """A learning-rate schedule without state_dict()."""


def scheduler_without_state_dict(rank, world_size):
    """The last rank passes a scheduler without state_dict(), the others a StepLR; then every rank one."""
    model, ddp, optimizer = ddp_setup(norm=False)
    scheduler = Constant() if rank == world_size - 1 else torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    return [timed(lambda: check_replicas(ddp, optimizer, scheduler)),
            timed(lambda: check_replicas(ddp, optimizer, Constant()))]


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def every_variant(rank, world_size, probe, traces):
    results = {}
    started = time.monotonic()
    results["correct_ddp"] = correct_ddp(rank, world_size)
    results["correct_bare"] = correct_bare(rank, world_size)
    results["optimizer_exp_avg"] = optimizer_exp_avg(rank, world_size)
    results["optimizer_lr"] = optimizer_lr(rank, world_size)
    results["clipping"] = clipping(rank, world_size)
    results["scheduler_one_rank"] = scheduler_one_rank(rank, world_size)
    results["buffers_not_broadcast"] = buffers_not_broadcast(rank, world_size, broadcast_buffers=False)
    results["buffers_broadcast"] = buffers_not_broadcast(rank, world_size, broadcast_buffers=True)
    results["one_ulp"] = one_ulp(rank, world_size)
    results["grad_none"] = grad_none(rank, world_size)
    results["outside_parameter"] = outside_parameter(rank, world_size)
    results["meta_buffer_one_rank"] = meta_buffer_one_rank(rank, world_size)
    results["scheduler_without_state_dict"] = scheduler_without_state_dict(rank, world_size)
    results["recorded"] = recorded_and_unrecorded(rank, world_size, traces)
    results["seconds"] = time.monotonic() - started
    return results


_launches = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """world size → (every rank's results, the trace folder), one launch per W for the whole module."""
    def get(world_size):
        if world_size not in _launches:
            traces = str(tmp_path_factory.mktemp(f"traces-w{world_size}"))
            started = time.monotonic()
            results = launch(every_variant, world_size, args=(traces,), timeout=240)
            print(f"launch W={world_size}: {time.monotonic() - started:.1f} s "
                  f"(variants {results[0]['seconds']:.1f} s)")
            _launches[world_size] = (results, traces)
        return _launches[world_size]
    return get


def on_every_rank(results, variant):
    """The variant's outcome, checked to be the same on every rank (the messages too)."""
    first = results[0][variant]
    for r, result in enumerate(results[1:], start=1):
        assert _comparable(result[variant]) == _comparable(first), f"rank {r} concluded otherwise on {variant}"
    return first


def _comparable(value):
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "agree":
        return ("agree", str(value[1]))
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k not in ("loss", "seconds")}
    return value


def differ(result):
    kind, fields = result
    assert kind == "differ", f"expected a divergence, got {fields}"
    return fields


def agree(result):
    kind, summary = result
    assert kind == "agree", f"expected agreement, got:\n{summary['message']}"
    assert isinstance(summary, ReplicaSummary)
    return summary


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_correct_ddp_run_agrees_at_every_check(runs, world_size):
    results, _ = runs(world_size)
    summaries = [agree(r) for r in on_every_rank(results, "correct_ddp")]
    assert len(summaries) == 6
    last = summaries[-1]
    assert set(last.categories) == {"rng", "scheduler", "param_groups", "gradients", "optimizer_state", "parameters"}
    assert last.categories["parameters"].tensors == 6
    assert last.categories["parameters"].bytes == 4 * (6 * 8 + 8 + 8 + 8 + 8 + 1)
    assert last.categories["gradients"].tensors == 6
    assert last.categories["optimizer_state"].tensors == 3 * 6  # step, exp_avg, exp_avg_sq per parameter
    assert "buffers" in last.skipped and "broadcast_buffers=True" in last.skipped["buffers"]
    assert last.ranks == tuple(range(world_size)) and last.tensors > 30


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_bare_process_group_run_agrees_with_its_buffers_compared(runs, world_size):
    results, _ = runs(world_size)
    summaries = [agree(r) for r in on_every_rank(results, "correct_bare")]
    assert summaries[-1].categories["buffers"].tensors == 1 and not summaries[-1].skipped


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_an_optimizer_restored_lossily_on_one_rank_is_named_at_exp_avg(runs, world_size):
    results, _ = runs(world_size)
    fields = differ(on_every_rank(results, "optimizer_exp_avg"))
    last = world_size - 1
    assert fields["path"] == "optimizer.state[body.weight].exp_avg"
    assert fields["ranks"] == (last,) and fields["reference"] == tuple(range(last))
    assert fields["dtype"] == "float32" and fields["shape"] == (8, 6) and fields["index"] is not None
    values = fields["values"]
    assert values[0] != values[last] and float.fromhex(values[last]) == float(
        torch.tensor(float.fromhex(values[0])).bfloat16().float())
    assert f"{fields['path']}: rank {last} differs from rank" in fields["message"]
    assert f"first differing index {list(fields['index'])}" in fields["message"]
    assert values[0] in fields["message"] and values[last] in fields["message"]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_learning_rate_restored_differently_is_named_with_both_exact_values(runs, world_size):
    results, _ = runs(world_size)
    fields = differ(on_every_rank(results, "optimizer_lr"))
    last = world_size - 1
    assert fields["path"] == "optimizer.param_groups[0].lr" and fields["category"] == "param_groups"
    assert fields["values"][last] == (3e-3).hex() and fields["values"][0] == (1e-2).hex()
    assert (3e-3).hex() in fields["message"] and (1e-2).hex() in fields["message"]
    assert fields["others"] == ()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_rank_dependent_clipping_decision_is_named_at_the_gradient(runs, world_size):
    results, _ = runs(world_size)
    losses = [r["clipping"]["loss"] for r in results]
    assert [loss > 50.0 for loss in losses] == [False] * (world_size - 1) + [True]  # only the last rank clips
    fields = differ(on_every_rank(results, "clipping")["outcome"])
    assert fields["path"] == "grad body.weight" and fields["ranks"] == (world_size - 1,)
    assert "body.weight" in fields["others"] and "optimizer.state[body.weight].exp_avg" in fields["others"]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_scheduler_stepped_on_one_rank_is_named_at_last_epoch(runs, world_size):
    results, _ = runs(world_size)
    fields = differ(on_every_rank(results, "scheduler_one_rank"))
    last = world_size - 1
    assert fields["path"] == "scheduler.last_epoch"
    assert fields["values"][last] == "2" and fields["values"][0] == "1"
    assert "optimizer.param_groups[0].lr" in fields["others"]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_batchnorm_buffers_not_broadcast_are_named_and_broadcast_ones_are_not(runs, world_size):
    results, _ = runs(world_size)
    fields = differ(on_every_rank(results, "buffers_not_broadcast"))
    assert fields["path"] == "buffer norm.running_mean" and fields["category"] == "buffers"
    assert fields["ranks"] == tuple(range(1, world_size))  # every rank's own statistics: each differs
    summary = agree(on_every_rank(results, "buffers_broadcast"))
    assert "buffers" in summary.skipped


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_one_ulp_and_a_signed_zero_are_differences(runs, world_size):
    results, _ = runs(world_size)
    variant = on_every_rank(results, "one_ulp")
    last = world_size - 1
    ulp = differ(variant["outcomes"][0])
    assert ulp["path"] == "body.weight" and ulp["index"] == (1, 2)
    assert float.fromhex(ulp["values"][last]) > float.fromhex(ulp["values"][0])
    zero = differ(variant["outcomes"][1])
    assert zero["path"] == "body.weight" and zero["index"] == (0, 0)
    assert zero["values"] == {**{r: "0x0.0p+0" for r in range(last)}, last: "-0x0.0p+0"}
    assert variant["values_compare_equal"]  # a comparison of values would have missed it


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_gradient_that_is_none_on_one_rank_is_named(runs, world_size):
    results, _ = runs(world_size)
    fields = differ(on_every_rank(results, "grad_none"))
    last = world_size - 1
    assert fields["path"] == "grad body.weight"
    assert fields["values"][last] == "None (NoneType)" and fields["values"][0] == "float32[8, 6]"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_parameter_outside_the_model_is_compared_by_its_place_in_the_groups(runs, world_size):
    results, _ = runs(world_size)
    first, second = on_every_rank(results, "outside_parameter")
    fields = differ(first)
    assert fields["path"] == "optimizer.param_groups[1].params[0]" and fields["category"] == "parameters"
    assert fields["ranks"] == (world_size - 1,) and fields["others"] == ()
    summary = agree(second)
    assert summary.categories["parameters"].tensors == 5 and summary.categories["gradients"].tensors == 5


# The launch's collective time limit is its own plus 60 s: a rank left waiting would take longer than that.
PROMPT_SECONDS = 30.0


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_meta_buffer_on_one_rank_is_a_difference_on_every_rank_at_once(runs, world_size):
    results, _ = runs(world_size)
    variant = on_every_rank(results, "meta_buffer_one_rank")
    fields = differ(variant["outcome"])
    assert fields["path"] == "buffer scale" and fields["ranks"] == (world_size - 1,)
    assert "float32[3] on meta" in fields["values"][world_size - 1]
    assert all(r["meta_buffer_one_rank"]["seconds"] < PROMPT_SECONDS for r in results)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_a_scheduler_one_rank_cannot_read_fails_every_rank_at_once(runs, world_size):
    results, _ = runs(world_size)
    one, every = on_every_rank(results, "scheduler_without_state_dict")
    last = world_size - 1
    kind, fields = one["outcome"]
    assert kind == "unread" and fields["failures"] == {last: "TypeError: the scheduler Constant has no state_dict()"}
    assert fields["message"].startswith(f"check_replicas could not read the state of rank {last} (")
    kind, fields = every["outcome"]
    assert kind == "unread" and sorted(fields["failures"]) == list(range(world_size))
    assert all(t["seconds"] < PROMPT_SECONDS for r in results for t in r["scheduler_without_state_dict"])


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_recording_changes_no_gradient_and_its_trace_is_consistent(runs, world_size, executable):
    results, traces = runs(world_size)
    assert all(r["recorded"]["bitwise_equal"] and r["recorded"]["methods_restored"] for r in results)
    # The comparison can fail: a hook that divides by W (PyTorch's Python default) differs for W = 3.
    assert all(r["recorded"]["dividing_hook_bitwise_equal"] == (world_size == 2) for r in results)
    files = trace_files(traces)
    assert [os.path.basename(f) for f in files] == [f"rank-{r}.jsonl" for r in range(world_size)]
    assert sorted(os.listdir(traces)) == sorted(os.path.basename(f) for f in files)  # nothing else
    verdict = check_collectives(traces, world_size=world_size, executable=executable)
    assert verdict.consistent, verdict.message
    with open(files[0], encoding="utf-8") as f:
        calls = [json.loads(line) for line in f]
    assert [c["seq"] for c in calls] == list(range(len(calls))) and {c["step"] for c in calls} == {1}
    names = [(c["op"], c.get("tensor")) for c in calls]
    assert names[0] == ("broadcast", "ddp broadcast_coalesced")        # DDP's construction
    assert ("broadcast", "ddp broadcast_coalesced") in names[1:]       # its buffers before the forward
    assert ("all_reduce", "ddp bucket 0") in names
    assert ("all_reduce", "logged_loss") in names
    assert names.count(("all_gather", "all_gather_object")) == 2
    assert names[-1] == ("barrier", None)
    logged = next(c for c in calls if c.get("tensor") == "logged_loss")
    assert logged["shape"] == [] and logged["dtype"] == "float32" and logged["reduce_op"] == "sum"
    here = os.path.basename(__file__)
    assert logged["source"].endswith(f"{here}:{_line_of('dist.all_reduce(logged)  # the logged loss')}")


def _line_of(text):
    with open(__file__, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if text in line:
                return number
    raise AssertionError(f"{text!r} not in {__file__}")
