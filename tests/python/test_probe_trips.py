"""What a new user tripped on, each reproduced with real DDP processes (W = 2, gloo) and fixed.

One launch runs every scenario on both ranks and brings back what each rank saw; each test asserts one
scenario. The scenarios:

- the probe attached after DDP wrapped the model (DDP does not hold p);
- a step whose every backward ran under no_sync (nothing ever synchronized p);
- clipping every parameter after ``probe.step()`` ended, then checking: the judged gradient is the one
  captured at the synchronizing backward (and a probe that reads p.grad at check time is caught);
- ``probe.check()`` after ``optimizer.step()``, raising on every rank with the diagnosis and the table;
- PowerSGD, whose hook crashed on a 0-dimensional p (p is 1-D now);
- a step judged after one that was not, under DDP without find_unused_parameters (p got no gradient in
  the unjudged step, and DDP stopped at the next forward).
"""

import contextlib
import json
import time

import pytest

torch = pytest.importorskip("torch")
try:  # DistributedDataParallel imports torch._dynamo on first use: once here, not in every forked rank
    import torch._dynamo  # noqa: F401
except ImportError:
    pass
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import probe_loops  # noqa: E402
import tiny_lm  # noqa: E402
from normcheck.check import NormcheckFailure  # noqa: E402
from normcheck.launch import launch  # noqa: E402
from normcheck.torch import ProbeError  # noqa: E402


def caught(call):
    """What ``call()`` returned, or the exception it raised, as something that pickles."""
    try:
        return {"value": call()}
    except NormcheckFailure as e:
        return {"failure": str(e), "diagnosis": list(e.diagnosis), "weights": e.weights is not None}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}


def step_of(ddp, probe, rank, g=2, sync=True):
    """The global-count step on the uneven dataset (forward and backward under no_sync but the last)."""
    counts = probe_loops.Counts(probe_loops.window("uneven", g, 2))
    step = probe_loops.Step(ddp, probe, counts, rank, torch.float32)
    total = step.all_reduce(step.local_count())
    for m, (tokens, labels) in enumerate(step.batches):
        with (ddp.no_sync() if m + 1 < g or not sync else contextlib.nullcontext()):
            logits = ddp(tokens)
            targets = labels[:, 1:]
            per_token = F.cross_entropy(logits[:, :-1].reshape(-1, tiny_lm.VOCAB), targets.reshape(-1),
                                        reduction="none").reshape(targets.shape)
            (probe.add(per_token, targets).sum() * 2 / total).backward()


def after_wrapping(rank, make_probe):
    model = tiny_lm.make_model(torch.float32)
    ddp = DistributedDataParallel(model)
    probe = make_probe(model)  # too late: DDP built its reducer without p
    return caught(lambda: step_of(ddp, probe, rank))


def never_synchronized(rank, make_probe):
    model = tiny_lm.make_model(torch.float32)
    probe = make_probe(model)
    ddp = DistributedDataParallel(model)
    with probe.step(wrap=False):
        step_of(ddp, probe, rank, sync=False)
    return caught(lambda: probe.dump(ddp))


def clipped_after_the_step(rank, make_probe, broken):
    model = tiny_lm.make_model(torch.float32)
    probe = make_probe(model, sites=None)
    if broken:
        probe._capture = lambda when: None  # what the probe did before: read p.grad when checked
        probe._release = lambda: None  # nor sets p.grad to None
        probe._hide = lambda: None  # nor sets it aside after the synchronizing backward
    ddp = DistributedDataParallel(model)
    with probe.step(wrap=False):
        step_of(ddp, probe, rank)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-6)  # every parameter, p's too, after the step
    if broken:
        del probe._capture
        del probe._release
        del probe._hide
    return caught(lambda: (list(probe.captures), probe.dump(ddp)))


def check_after_the_update(rank, make_probe):
    model = tiny_lm.make_model(torch.float32)
    probe = make_probe(model)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(probe.model_parameters(), lr=0.01)
    local = sum(int((tiny_lm.shifted_labels(labels) != -100).sum()) for _, labels in
                probe_loops.Step(ddp, probe, probe_loops.Counts(probe_loops.window("uneven", 2, 2)), rank,
                                 torch.float32).batches)
    with probe.step(wrap=False):
        counts = probe_loops.Counts(probe_loops.window("uneven", 2, 2))
        step = probe_loops.Step(ddp, probe, counts, rank, torch.float32)
        for m, tokens, labels, backward in step.microbatches():
            per_token, _ = step.per_token(tokens, labels)
            backward(per_token.sum() / local)  # the local mean
    optimizer.step()
    return caught(lambda: probe.check(ddp, optimizer=optimizer))


def judged_after_unjudged(rank, make_probe, broken):
    """A training step the probe does not judge, then one it judges, under DDP without find_unused_parameters."""
    model = tiny_lm.make_model(torch.float32)
    probe = make_probe(model)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(probe.model_parameters(), lr=0.01)
    counts = probe_loops.Counts(probe_loops.window("uneven", 2, 2))

    def steps():
        import normcheck.probe as probing

        route = probing.route
        if broken:  # what the probe did before: nothing routed p outside probe.step()
            probing.route = lambda value, parameters: (value, False)
        for tokens, labels in probe_loops.Step(ddp, probe, counts, rank, torch.float32).batches:  # not judged
            logits = ddp(tokens)
            F.cross_entropy(logits[:, :-1].reshape(-1, tiny_lm.VOCAB), labels[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad()
        probing.route = route
        with probe.step(wrap=False):
            step_of(ddp, probe, rank)
        return probe.check(ddp).verdict

    return caught(steps)


def scenarios(rank, world_size, probe):
    """Every scenario on this rank."""
    return {
        "after_wrapping": after_wrapping(rank, probe),
        "never_synchronized": never_synchronized(rank, probe),
        "clipped": clipped_after_the_step(rank, probe, broken=False),
        "clipped_broken": clipped_after_the_step(rank, probe, broken=True),
        "check_after_update": check_after_the_update(rank, probe),
        "judged_after_unjudged": judged_after_unjudged(rank, probe, broken=False),
        "judged_after_unjudged_broken": judged_after_unjudged(rank, probe, broken=True),
    }


_result = {}


@pytest.fixture(scope="module")
def ranks(executable, tmp_path_factory):
    if "ranks" not in _result:
        started = time.monotonic()
        _result["ranks"] = launch(scenarios, 2, executable=executable, timeout=180,
                                  directory=str(tmp_path_factory.mktemp("trips")))
        print(f"launch: {time.monotonic() - started:.1f} s")
    return _result["ranks"]


def test_a_probe_attached_after_ddp_wrapped_the_model_says_so(ranks):
    for rank in ranks:
        error = rank["after_wrapping"].get("error", "")
        assert error.startswith("ProbeError") and "does not hold p" in error and "before" in error, rank


def test_a_step_that_never_synchronized_says_so(ranks):
    for rank in ranks:
        error = rank["never_synchronized"].get("error", "")
        assert "never synchronized" in error and "no_sync" in error, rank


def components_of(path):
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    return [float.fromhex(v) for v in document["observed"]["per_rank"][0]]


def test_clipping_after_the_step_does_not_change_what_is_judged(ranks):
    captures, path = ranks[0]["clipped"]["value"]
    assert captures == ["the synchronizing backward"]
    counts = probe_loops.Counts(probe_loops.window("uneven", 2, 2))
    want = [-n / counts.N for rank in counts.n for rows in rank for n in rows]
    assert components_of(path) == pytest.approx(want, rel=1e-6)
    _, broken = ranks[0]["clipped_broken"]["value"]
    assert components_of(broken) != pytest.approx(want, rel=1e-3), "the test catches a probe that reads late"


def test_check_after_the_update_raises_on_every_rank_with_the_table(ranks):
    results = [rank["check_after_update"] for rank in ranks]
    assert all("failure" in r for r in results), results
    assert [{k: v for k, v in r.items() if k != "failure"} for r in results[1:]] == \
        [{k: v for k, v in results[0].items() if k != "failure"}], "every rank raises the same verdict"
    assert "local_mean" in results[0]["diagnosis"] and results[0]["weights"]
    assert "weights per group" in results[0]["failure"]
    assert results[1]["failure"] == "normcheck: the step FAILED (local_mean): rank 0 reports the whole diagnosis"


def test_powersgd_on_a_one_dimensional_p():
    """torch's PowerSGD hook views every tensor as (shape[0], −1): a 0-dimensional p crashed it. p is 1-D; on
    gloo PowerSGD needs one bucket (torch 2 hangs with more, probe or not), so p takes the model's dtype there.
    Its weights are checked in test_ddp.py (loop "powersgd"); here: p has the shape the hook needs."""
    from normcheck.torch import Probe

    probe = Probe(tiny_lm.make_model(torch.float32), dtype=torch.float32)
    assert probe.parameter.dim() == 1 and probe.parameter.view(probe.parameter.shape[0], -1).shape[1] == 1
    with pytest.raises(ProbeError):
        Probe(tiny_lm.make_model(torch.float32), slots=0)


def test_a_step_judged_after_one_that_was_not_passes_under_plain_ddp(ranks):
    for rank in ranks:
        assert rank["judged_after_unjudged"] == {"value": "pass"}, rank["judged_after_unjudged"]
        error = rank["judged_after_unjudged_broken"].get("error", "")
        assert error.startswith("RuntimeError"), "the test catches a probe that leaves p out of unjudged steps"
