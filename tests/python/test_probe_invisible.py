"""The probed step is bitwise the unprobed one: losses, every model gradient, the optimizer's update.

A matrix of steps, each run twice from the same state through ``invisible.assert_invisible``:
activation checkpointing off, reentrant and non-reentrant; autocast to bfloat16 on the CPU or not; a
float64 head on a float32 body or one dtype; sites on and off; a loss the probe captures
(``cross_entropy``) and one it does not see (``log_softmax`` and ``gather``); one process, and W = 2
under DistributedDataParallel with and without ``find_unused_parameters``. Without
``find_unused_parameters`` DDP waits for a gradient of every parameter it holds: a backward that no
probe term reaches must still give p one, or the bucket holding p is never all-reduced and every rank
keeps its own gradients. ``torch.compile`` is not in the matrix (one compilation takes tens of seconds
here): test_probe_compiled.py runs one such step, on torch 2 only.
"""

import contextlib
import itertools

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import invisible  # noqa: E402
from normcheck.launch import launch  # noqa: E402
from normcheck.torch import Probe, ProbeError  # noqa: E402

VOCAB = 13
CHECKPOINTING = (None, "reentrant", "non_reentrant")


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.inner = nn.Linear(width, width)
        self.outer = nn.Linear(width, width)

    def forward(self, x):
        return x + self.outer(torch.tanh(self.inner(x)))


class Model(nn.Module):
    """Embedding, two residual blocks (checkpointed as asked), a head (float64 when ``mixed``)."""

    def __init__(self, checkpointing, mixed, width=8):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, width)
        self.blocks = nn.ModuleList([Block(width), Block(width)])
        self.head = nn.Linear(width, VOCAB)
        if mixed:
            self.head.double()
        self.checkpointing = checkpointing

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            if self.checkpointing is None:
                h = block(h)
            else:
                h = checkpoint(block, h, use_reentrant=self.checkpointing == "reentrant")
        return self.head(h.to(self.head.weight.dtype))


def batches(rank, seed=None):
    """Two microbatches of two rows on ``rank``, a count that differs by rank (``seed``: 100 + rank by default)."""
    generator = torch.Generator().manual_seed(100 + rank if seed is None else seed)
    out = []
    for m in range(2):
        tokens = torch.randint(0, VOCAB, (2, 6), generator=generator)
        labels = tokens.clone()
        labels[1, 3 + m + rank:] = -100
        out.append((tokens, labels))
    return out


def loss_of(logits, labels, captured):
    flat, targets = logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1)
    if captured:
        return F.cross_entropy(flat.float(), targets, reduction="sum")
    valid = targets != -100
    picked = torch.log_softmax(flat.float(), -1).gather(1, targets.clamp(min=0)[:, None])[:, 0]
    return -(picked * valid).sum()


def one_step(settings, probed, make_probe, rank, world_size, probe_class=Probe):
    """One step of two microbatches (the first under no_sync), the token sum over all ranks' tokens."""
    checkpointing, bf16, mixed, sites, captured, unused = settings
    model = Model(checkpointing, mixed)
    probe = make_probe(model, sites=sites) if probed else None
    wrapped = (nn.parallel.DistributedDataParallel(model, find_unused_parameters=unused) if world_size > 1
               else model)
    optimizer = torch.optim.AdamW(probe.model_parameters() if probe else model.parameters(), lr=1e-2)
    data = batches(rank)
    total = sum(int((labels[:, 1:] != -100).sum()) for _, labels in data) * world_size
    losses = []
    with probe.step() if probe else contextlib.nullcontext():
        for m, (tokens, labels) in enumerate(data):
            quiet = world_size > 1 and m + 1 < len(data)
            with wrapped.no_sync() if quiet else contextlib.nullcontext():
                with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                    loss = loss_of(wrapped(tokens), labels, captured) * world_size / total
                loss.backward()
            losses.append(loss)
    outcome = invisible.record(losses, model, optimizer, probe)
    if probe is not None:
        try:
            outcome["verdict"] = probe.judge(wrapped if world_size > 1 else None).verdict
        except ProbeError as e:
            outcome["verdict"] = f"ProbeError: {e}"
    return outcome


def matrix(world_size):
    for checkpointing, bf16, mixed, sites, captured, unused in itertools.product(
            CHECKPOINTING, (False, True), (False, True), ("children", None), (True, False),
            (False, True) if world_size > 1 else (False,)):
        if checkpointing == "reentrant" and unused:
            continue  # DDP refuses reentrant checkpointing with find_unused_parameters, probe or not
        yield checkpointing, bf16, mixed, sites, captured, unused


def name(settings):
    checkpointing, bf16, mixed, sites, captured, unused = settings
    return "-".join([checkpointing or "plain", "bf16" if bf16 else "fp32", "mixed" if mixed else "one_dtype",
                     "sites" if sites else "no_sites", "captured" if captured else "unseen",
                     "find_unused" if unused else "all_used"])


@pytest.mark.parametrize("settings", list(matrix(1)), ids=name)
def test_one_process(settings, executable, tmp_path):
    def make_probe(model, **options):
        return Probe(model, executable=executable, directory=str(tmp_path), **options)

    probed = invisible.assert_invisible(lambda p: one_step(settings, p, make_probe, 0, 1))
    if settings[4]:  # the captured loss is judged too; on one rank a per-rank mean could hide: inconclusive
        assert probed["verdict"] == "inconclusive", probed["verdict"]
    else:
        assert "saw no loss" in probed["verdict"]


def matrix_step(rank, world_size, probe):
    return {name(s): invisible.differences(one_step(s, False, probe, rank, world_size),
                                           one_step(s, True, probe, rank, world_size))
            for s in matrix(world_size)}


_result = {}


@pytest.fixture(scope="module")
def ranks(executable, tmp_path_factory):
    if "ranks" not in _result:
        _result["ranks"] = launch(matrix_step, 2, executable=executable, timeout=600,
                                  directory=str(tmp_path_factory.mktemp("invisible")))
    return _result["ranks"]


@pytest.mark.parametrize("settings", list(matrix(2)), ids=name)
def test_two_ranks(settings, ranks):
    for rank, results in enumerate(ranks):
        assert results[name(settings)] == [], f"rank {rank}: " + "\n".join(results[name(settings)])


# -- the law catches what it must --------------------------------------------------------------------


class Perturbing(Probe):
    """A planted probe whose captured loss gains a term that depends on the logits: the gradient moves."""

    def _loss(self, name, original, arguments):
        return super()._loss(name, original, arguments) + 1e-3 * arguments["input"].square().sum()


def test_the_law_catches_a_probe_whose_term_depends_on_an_activation():
    settings = (None, False, False, "children", True, False)
    with pytest.raises(AssertionError, match="gradients head.weight: differs"):
        invisible.assert_invisible(lambda p: one_step(settings, p, lambda m, **o: Perturbing(m, **o), 0, 1))


def unrouted_step(rank, world_size, probe):
    """The probe as it was: nothing routes p inside the judged step (neither the output's 1(p) nor the taps' ghost),
    so a loss it does not see leaves p out."""
    import normcheck._probe_taps as taps
    import normcheck.probe as probing

    settings = (None, False, False, "children", False, False)
    unprobed = one_step(settings, False, probe, rank, world_size)
    route, tap_points = probing.route, taps.tap_points
    probing.route = lambda value, parameters: (value, False)
    taps.tap_points = lambda module, sites: []
    try:
        probed = one_step(settings, True, probe, rank, world_size)
    finally:
        probing.route, taps.tap_points = route, tap_points
    return invisible.differences(unprobed, probed)


def test_the_law_catches_p_left_out_of_a_backward_under_ddp(executable, tmp_path):
    for found in launch(unrouted_step, 2, executable=executable, timeout=300, directory=str(tmp_path)):
        assert any(line.startswith("gradients ") for line in found), found


# -- a real run: judged every K-th step, the steps between untouched -----------------------------------


def run_batches(rank, step):
    """Step ``step``'s two microbatches on ``rank``: new tokens each step, a count that differs by rank."""
    return batches(rank, seed=1000 + 10 * step + rank)


def a_run(probed, make_probe, rank, world_size, *, every=2, steps=5, probe_class=Probe):
    """``steps`` optimizer steps of two microbatches each, clipped over ``model.parameters()`` (p among them),
    steps 0, ``every``, 2·``every``, … inside ``probe.step()`` and judged. p is float64 beside a float32
    model, so a p.grad left between judged steps would change the dtype, and so the bits, of the clipped norm.
    Returns the record of the last step and, for the probed run, what p.grad held after each unjudged step."""
    from normcheck import due

    model = Model(None, False)
    probe = make_probe(model, dtype=torch.float64, probe_class=probe_class) if probed else None
    wrapped = nn.parallel.DistributedDataParallel(model) if world_size > 1 else model
    optimizer = torch.optim.AdamW(probe.model_parameters() if probe else model.parameters(), lr=1e-2)
    left, verdicts = [], []
    for step in range(steps):
        judged = probe is not None and due(step, every=every)
        losses = []
        with probe.step() if judged else contextlib.nullcontext():
            data = run_batches(rank, step)
            total = sum(int((labels[:, 1:] != -100).sum()) for r in range(world_size)  # N: every rank's tokens
                        for _, labels in run_batches(r, step))
            for m, (tokens, labels) in enumerate(data):
                quiet = world_size > 1 and m + 1 < len(data)
                with wrapped.no_sync() if quiet else contextlib.nullcontext():
                    loss = loss_of(wrapped(tokens), labels, True) * world_size / total
                    loss.backward()
                losses.append(loss)
        if probe is not None and not judged:
            left.append(probe.parameter.grad is not None)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        outcome = invisible.record(losses, model, optimizer if step + 1 == steps else None, probe)
        if step + 1 < steps:
            optimizer.step()
        optimizer.zero_grad()
        if judged:
            verdicts.append(probe.judge(wrapped if world_size > 1 else None).verdict)
    outcome["left"] = left
    outcome["verdicts"] = verdicts
    return outcome


class Leaking(Probe):
    """A planted probe that treats every backward as part of a step: p.grad stays set between judged steps."""

    def _idle(self):
        return False


def run_differences(rank, world_size, make_probe, probe_class=Probe):
    unprobed = a_run(False, make_probe, rank, world_size)
    probed = a_run(True, make_probe, rank, world_size, probe_class=probe_class)
    return {"differences": invisible.differences(unprobed, probed), "left": probed["left"],
            "verdicts": probed["verdicts"]}


def probe_maker(executable, directory):
    def make(model, probe_class=Probe, **options):
        return probe_class(model, executable=executable, directory=directory, **options)
    return make


def test_a_run_judged_every_other_step_is_bitwise_the_unprobed_run(executable, tmp_path):
    found = run_differences(0, 1, probe_maker(executable, str(tmp_path)))
    assert found["differences"] == []
    assert found["left"] == [False, False]  # steps 1 and 3: p.grad dropped after their backwards
    assert found["verdicts"] == ["inconclusive"] * 3  # steps 0, 2, 4 (one rank: a per-rank mean could hide)


def run_step(rank, world_size, probe):
    return run_differences(rank, world_size, probe_maker(probe.executable, probe.directory))


def test_a_run_on_two_ranks_judged_every_other_step_is_bitwise_the_unprobed_run(executable, tmp_path):
    for rank, found in enumerate(launch(run_step, 2, executable=executable, timeout=300, directory=str(tmp_path))):
        assert found["differences"] == [], f"rank {rank}: " + "\n".join(found["differences"])
        assert found["left"] == [False, False]
        assert found["verdicts"] == ["pass"] * 3


def test_the_run_law_catches_a_probe_that_leaves_p_grad_between_judged_steps(executable, tmp_path):
    found = run_differences(0, 1, probe_maker(executable, str(tmp_path)), probe_class=Leaking)
    assert found["left"] == [True, True]
