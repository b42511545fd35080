"""p and every site receive what a model parameter in their place receives: planted hooks are judged failures.

Each scenario is a step of tiny_lm's model under DistributedDataParallel (W = 2, gloo on loopback),
G microbatches per rank on probe_loops' uneven dataset, in two versions: ``planted``, where a hook
makes the model's parameters receive another weight than the token mean, and ``correct``, the same
machinery used so that every parameter receives the token mean. The gate must fail every planted
version (naming what fits, or saying unexplained), or the probe refuse it (``ProbeError`` naming the
hook and its module) where no factor describes what the hook did, and pass every correct one; and
every run, planted or not, is bitwise the unprobed run (``invisible``).

- ``resumming_hook``: a communication hook that all-reduces with SUM, and every microbatch's backward
  synchronizes (no ``no_sync``): the model's buffers hold the earlier microbatches' reduced sums when
  the next one is reduced, so microbatch m weighs W^(G−1−m) (correct: ``no_sync`` but on the last);
- ``stage_output_hook``: a forward hook on a stage registers a tensor hook on its output that divides
  the gradient by G (DeepSpeed's pipeline stages): planted on an inner stage, whose parameters and
  those upstream receive 1/G too many (correct: on the last stage, with the loss × G);
- ``module_gradient_scaling``: hooks on one module's parameters, registered before the probe is
  attached, divide by G (correct: on every parameter, with the loss × G);
- ``post_reduction_division``: a communication hook that sums and then divides the reduced bucket by
  W·G, with the loss × G, every microbatch synchronizing (correct: ``no_sync`` but on the last);
- ``masking_hook``: a tensor hook on a stage's output multiplies its gradient by a mask: planted, the
  mask drops the second half of every sequence (no factor describes that: refused); correct, it drops
  the positions that carry no label, whose gradient is 0 already (the factor 1);
- ``norm_in_the_step``: after the synchronizing backward, inside ``probe.step()``, the step clips
  ``model.parameters()`` (the probe's among them) with a ``clip_grad_norm_`` bound before the step, by a
  norm written by hand, and (torch ≥ 2.6) with ``get_total_norm`` and ``clip_grads_with_norm_`` bound
  before the step: none of them may see p.grad (correct: the token mean, clipped; planted: the same
  clipping, with a loss that is the local mean).

The law must catch wrong probes (``BROKEN``): one that ignores the factor a tap measured, one that puts
the terms at the loss as before the taps, one that does not give its parameters the model's hooks, one
that leaves p.grad in place after the synchronizing backward.
"""

import contextlib

import pytest

torch = pytest.importorskip("torch")
try:  # DistributedDataParallel imports torch._dynamo on first use: once here, not in every forked rank
    import torch._dynamo  # noqa: F401
except ImportError:  # torch 1.13
    pass
import torch.distributed as dist  # noqa: E402
import torch.nn.utils.clip_grad as clip_grad  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import invisible  # noqa: E402
import probe_loops  # noqa: E402
import tiny_lm  # noqa: E402
from normcheck.launch import launch  # noqa: E402
from normcheck.torch import Probe, ProbeError  # noqa: E402

# Bound before any step, as a training script that imports them at its top does: the probe cannot replace them.
BOUND_CLIP = clip_grad.clip_grad_norm_
BOUND_TOTAL_NORM = getattr(torch.nn.utils, "get_total_norm", None)  # torch ≥ 2.6
BOUND_CLIP_WITH_NORM = getattr(torch.nn.utils, "clip_grads_with_norm_", None)

WORLD_SIZE = 2
GS = (2, 4)
SCENARIOS = ("resumming_hook", "stage_output_hook", "module_gradient_scaling", "post_reduction_division",
             "masking_hook", "norm_in_the_step")
VERSIONS = ("planted", "correct")
REFUSED = {("masking_hook", "planted"): ("masked", "layer's output", "otherwise than by a factor")}
"""Planted versions no factor describes: (scenario, version) → what the ProbeError must name."""


def sum_hook(state, bucket):  # type: ignore[no-untyped-def]  (DDP checks the annotations)
    """All-reduce with SUM, then divide the reduced bucket by ``state`` (1: no division)."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda done: done.value()[0].div_(state) if state != 1 else done.value()[0])


def divide_output(divisor):
    """A forward hook whose tensor hook divides the gradient of the module's output by ``divisor``."""
    def hook(module, inputs, output):
        output.register_hook(lambda grad: grad / divisor)

    return hook


def mask_output(mask):
    """A forward hook whose tensor hook multiplies the gradient of the module's output by ``mask`` (rows, positions)."""
    def hook(module, inputs, output):
        def masked(grad):
            return grad * mask[:, :, None].to(grad.dtype)

        output.register_hook(masked)

    return hook


def clip_every_way(model, max_norm):
    """Clipping inside the step, after the synchronizing backward, over every parameter of the model (the probe's
    too), by three routes the probe cannot replace: a bound clip_grad_norm_, a norm by hand, get_total_norm."""
    BOUND_CLIP(model.parameters(), max_norm)
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    total = torch.norm(torch.stack([g.detach().norm() for g in grads]))
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(coefficient)
    if BOUND_TOTAL_NORM is not None:
        total = BOUND_TOTAL_NORM([q.grad for q in model.parameters() if q.grad is not None])
        BOUND_CLIP_WITH_NORM(model.parameters(), max_norm / 2, total)


def one_step(scenario, planted, g, probed, make_probe, rank):
    """One update of ``scenario``: ``invisible.record`` of it, with the probe's verdict when probed."""
    counts = probe_loops.Counts(probe_loops.window("uneven", g, WORLD_SIZE))
    model = tiny_lm.make_model(torch.float32)
    every, reducer = False, None
    scale = WORLD_SIZE  # each microbatch's loss sum × W / N: the token mean under DDP's mean
    if scenario == "module_gradient_scaling":
        for parameter in list(model.layer.parameters() if planted else model.parameters()):
            parameter.register_hook(lambda grad: grad / g)
        scale = WORLD_SIZE if planted else WORLD_SIZE * g
    probe = make_probe(model, slots=16) if probed else None
    ddp = DistributedDataParallel(model)
    if scenario == "resumming_hook":
        ddp.register_comm_hook(1, sum_hook)
        every, scale, reducer = planted, 1, "sum"
    elif scenario == "post_reduction_division":
        ddp.register_comm_hook(WORLD_SIZE * g, sum_hook)
        every, scale, reducer = planted, WORLD_SIZE * g, "mean"
    elif scenario == "stage_output_hook":
        (model.layer if planted else model.head).register_forward_hook(divide_output(g))
        scale = WORLD_SIZE if planted else WORLD_SIZE * g
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.1)
    batches = [tiny_lm.make_batch(rows, seed=100 * rank + m) for m, rows in enumerate(counts.lengths[rank])]
    losses = []
    with probe.step() if probe else contextlib.nullcontext():
        for m, (tokens, labels) in enumerate(batches):
            if scenario == "masking_hook":
                mask = labels != tiny_lm.IGNORE  # position t's output predicts token t + 1: shift the mask
                mask = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], 1)
                if planted:
                    mask = mask & (torch.arange(tiny_lm.LENGTH) < tiny_lm.LENGTH // 2)
                handle = (model.layer if planted else model.head).register_forward_hook(mask_output(mask))
            with contextlib.nullcontext() if every or m + 1 == g else ddp.no_sync():
                loss = ddp(tokens, labels, reduction="sum")[0] * scale / counts.N
                if scenario == "norm_in_the_step" and planted:
                    loss = loss * counts.N / counts.rm(rank, m) / g  # the local mean
                loss.backward()
            losses.append(loss)
            if scenario == "masking_hook":
                handle.remove()
        if scenario == "norm_in_the_step":
            clip_every_way(model, 1e-3)
    outcome = invisible.record(losses, model, optimizer, probe)
    if probe is not None:
        try:
            verdict = probe.judge(ddp, reducer=reducer)
            outcome["verdict"] = {"verdict": verdict.verdict, "diagnosis": list(verdict.diagnosis),
                                  "sites": [(s.name, s.diagnosis) for s in verdict.sites], "message": verdict.message}
        except ProbeError as e:
            outcome["verdict"] = {"verdict": "refused", "diagnosis": [], "sites": [], "message": str(e)}
    return outcome


@contextlib.contextmanager
def broken(name):
    """The probe with one of its parts wrong (``BROKEN``), for the duration of the block."""
    if name is None:
        yield
        return
    import normcheck._probe_taps as taps
    import normcheck.probe as probing

    target, attribute, wrong = {
        "ignores_the_factor": (taps, "scaled", lambda grad, factor: grad.clone()),
        "terms_at_the_loss": (taps, "tap_points", lambda module, sites: []),
        "no_parameter_hooks": (probing, "replay_parameter_hooks", lambda module, holders: None),
        "keeps_p_grad_visible": (Probe, "_hide", lambda self: None),
    }[name]
    original = getattr(target, attribute)
    setattr(target, attribute, wrong)
    try:
        yield
    finally:
        setattr(target, attribute, original)


BROKEN = {
    "ignores_the_factor": ("stage_output_hook",),
    "terms_at_the_loss": ("stage_output_hook",),
    "no_parameter_hooks": ("module_gradient_scaling",),
    "keeps_p_grad_visible": ("norm_in_the_step",),
}
"""Wrong probes → the scenarios (run with G = 2) whose law they break."""


def run(scenario, version, g, probe, rank, wrong=None):
    planted = version == "planted"
    try:
        unprobed = one_step(scenario, planted, g, False, probe, rank)
        with broken(wrong):
            probed = one_step(scenario, planted, g, True, probe, rank)
        return {"differences": invisible.differences(unprobed, probed), **probed["verdict"]}
    except Exception as e:  # reported by the item; the other scenarios still run
        return {"error": f"{type(e).__name__}: {e}"}


def between_syncs(kind, probed, make_probe, rank):
    """Every microbatch synchronizes (G = 2), and between the two the loop scales every gradient by hand
    (``rescaled``, in the default capture or with ``capture="step"``) or sets them to None (``zeroed``)."""
    counts = probe_loops.Counts(probe_loops.window("uneven", 2, WORLD_SIZE))
    model = tiny_lm.make_model(torch.float32)
    probe = make_probe(model, slots=16, capture="step" if kind == "rescaled_step_capture" else "reduction") \
        if probed else None
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.1)
    losses = []
    with probe.step() if probe else contextlib.nullcontext():
        for m, rows in enumerate(counts.lengths[rank]):
            if m > 0:
                for parameter in model.parameters():  # the probe's too: what it can see of them
                    if kind == "zeroed":
                        parameter.grad = None
                    elif parameter.grad is not None:
                        parameter.grad.mul_(0.5)
            tokens, labels = tiny_lm.make_batch(rows, seed=100 * rank + m)
            loss = ddp(tokens, labels, reduction="sum")[0] * WORLD_SIZE / counts.N
            loss.backward()
            losses.append(loss)
    outcome = invisible.record(losses, model, optimizer, probe)
    if probe is not None:
        try:
            outcome["verdict"] = probe.judge(ddp).verdict
        except ProbeError as e:
            outcome["verdict"] = f"refused: {e}"
    return outcome


def every_scenario(rank, world_size, probe):
    """Each (scenario, version, G), then each wrong probe on its scenarios: the differences of the probed run
    from the unprobed one, and its verdict."""
    results = {}
    for scenario in SCENARIOS:
        for version in VERSIONS:
            for g in GS:
                results[(scenario, version, g)] = run(scenario, version, g, probe, rank)
    for wrong, scenarios in BROKEN.items():
        for scenario in scenarios:
            for version in VERSIONS:
                results[(wrong, scenario, version)] = run(scenario, version, 2, probe, rank, wrong)
    for kind in ("rescaled", "rescaled_step_capture", "zeroed"):
        try:
            probed = between_syncs(kind, True, probe, rank)
            differences = invisible.differences(between_syncs(kind, False, probe, rank), probed)
            results[("between_syncs", kind)] = {"differences": differences, "verdict": probed["verdict"]}
        except Exception as e:  # reported by the test
            results[("between_syncs", kind)] = {"error": f"{type(e).__name__}: {e}"}
    return results


_result = {}


@pytest.fixture(scope="module")
def ranks(executable, tmp_path_factory):
    if "ranks" not in _result:
        _result["ranks"] = launch(every_scenario, WORLD_SIZE, executable=executable, timeout=600,
                                  directory=str(tmp_path_factory.mktemp("receives")))
    return _result["ranks"]


def outcome_of(ranks, key):
    for rank, results in enumerate(ranks):
        result = results[key]
        assert "error" not in result, f"rank {rank}: {result['error']}"
        assert result["differences"] == [], f"rank {rank}: the probe changed the step:\n" + "\n".join(
            result["differences"])
    return ranks[0][key]


def lawful(result, scenario, version):
    """None when ``result`` is what the law asks of (scenario, version), else what is wrong with it."""
    if version == "correct":
        return None if result["verdict"] == "pass" else f"a correct step judged {result['verdict']}"
    refused = REFUSED.get((scenario, version))
    if refused is not None:
        if result["verdict"] != "refused":
            return f"a hook no factor describes was not refused: {result['verdict']}"
        missing = [text for text in refused if text not in result["message"]]
        return f"the refusal does not name {missing}" if missing else None
    if result["verdict"] != "fail":
        return f"a planted step judged {result['verdict']}"
    named = result["diagnosis"] + [d for _, diagnosis in result["sites"] for d in diagnosis]
    return None if named else "a failure with neither a name nor 'unexplained'"


def cases():
    for scenario in SCENARIOS:
        for version in VERSIONS:
            for g in GS:
                yield pytest.param(scenario, version, g, id=f"{scenario}-{version}-g{g}")


@pytest.mark.parametrize("scenario, version, g", list(cases()))
def test_the_gate_judges_what_the_parameters_received(ranks, scenario, version, g):
    """Planted: a failure that names what fits or says unexplained, or a refusal that names the hook. Correct: a
    pass. Both: bitwise the unprobed step."""
    result = outcome_of(ranks, (scenario, version, g))
    problem = lawful(result, scenario, version)
    assert problem is None, f"{problem}\n{result['message']}"


@pytest.mark.parametrize("wrong", list(BROKEN))
def test_the_law_catches_a_wrong_probe(ranks, wrong):
    """Each wrong probe breaks the law on its scenario: a planted step passes, a correct one fails, or the update
    changes."""
    caught = []
    for scenario in BROKEN[wrong]:
        for version in VERSIONS:
            result = ranks[0][(wrong, scenario, version)]
            assert "error" not in result, result["error"]
            if result["differences"] or lawful(result, scenario, version) is not None:
                caught.append(version)
    assert caught, f"the law did not catch the probe that {wrong.replace('_', ' ')}"


def test_a_stage_hook_is_named_on_the_sites_upstream_of_it_and_on_p(ranks):
    """The ÷G planted on the inner stage's output reaches the parameters of that stage and of those upstream, and
    p, which enters at the first tap: they are named; the last stage, downstream, receives the token mean."""
    for g in GS:
        result = outcome_of(ranks, ("stage_output_hook", "planted", g))
        sites = dict(result["sites"])
        assert "objective/G" in sites["embed"] and "objective/G" in sites["layer"], result["message"]
        assert sites["head"] == (), result["message"]
        assert "objective/G" in result["diagnosis"], result["message"]


def test_gradients_changed_between_two_synchronizing_backwards(ranks):
    """Scaled by hand between them: refused by the default capture (p.grad was set aside), judged with
    capture="step" (p.grad stays in place and is scaled with the others). Set to None: the probe's start afresh
    too. Every run bitwise the unprobed one."""
    for kind in ("rescaled", "rescaled_step_capture", "zeroed"):
        result = outcome_of(ranks, ("between_syncs", kind))
        if kind == "rescaled":
            assert result["verdict"].startswith("refused: the model's gradients were changed between two "
                                                "synchronizing backwards"), result["verdict"]
            assert "capture='step'" in result["verdict"]
        else:
            assert not result["verdict"].startswith("refused"), result["verdict"]


# -- parameter hooks, in one process -------------------------------------------------------------------


def test_a_site_whose_parameters_have_different_hooks_is_refused():
    model = tiny_lm.make_model(torch.float32)
    model.layer.linear1.weight.register_hook(lambda grad: grad / 2)
    with pytest.raises(ProbeError, match=r"hooks on layer's parameters differ \(layer\.[a-z_.0-9]+: none; "
                                         r"layer\.linear1\.weight: .*<lambda>\)"):
        Probe(model)
    assert not any("normcheck_probe" in name for name, _ in model.named_parameters()), "the refused probe stayed"


def test_p_stands_for_the_parameters_no_site_holds():
    """Without sites p stands for every parameter, which must then share their hooks; with sites, each site for
    its module's."""
    model = tiny_lm.make_model(torch.float32)
    model.head.bias.register_hook(lambda grad: grad / 2)
    with pytest.raises(ProbeError, match="hooks on the model's parameters differ"):
        Probe(model, sites=None)
    with pytest.raises(ProbeError, match="hooks on head's parameters differ"):
        Probe(model)


def test_hooks_are_replayed_on_the_probe_parameters():
    model = tiny_lm.make_model(torch.float32)
    halve = lambda grad: grad / 2  # noqa: E731
    for parameter in model.layer.parameters():
        parameter.register_hook(halve)
    probe = Probe(model)
    hooks = {site: [h for h in (q._backward_hooks or {}).values()] for site, q in probe.sites.items()}
    assert hooks == {"embed": [], "layer": [halve], "head": []}
    assert halve not in list((probe.parameter._backward_hooks or {}).values())  # p: what every parameter shares


def test_hooks_registered_after_the_probe_on_some_parameters_are_refused_when_judged(tmp_path, executable):
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    for parameter in model.layer.parameters():  # not the site's: registered on the module's own after the probe
        if not probe.is_probe(parameter):
            parameter.register_hook(lambda grad: grad / 2)
    tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
    with probe.step():
        model(tokens, labels, reduction="sum")[0].backward()
    with pytest.raises(ProbeError, match="hooks on layer's parameters .* are not those of its probe parameter"):
        probe.judge()


def test_hooks_registered_after_the_probe_on_every_parameter_reach_the_probe(tmp_path, executable):
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    for parameter in model.parameters():  # the probe's included
        parameter.register_hook(lambda grad: grad / 4)
    tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
    with probe.step():
        model(tokens, labels, reduction="sum")[0].backward()
    assert probe.gradients()[""][0] == -5 / 4  # p's first group: 5 tokens of weight 1, each gradient ÷4
    probe.judge()  # judged, not refused


# -- measuring a factor ----------------------------------------------------------------------------------


def test_factors_are_measured_exactly_or_refused():
    from fractions import Fraction

    from normcheck._probe_taps import factor_of

    generator = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        raw = torch.randn(64, 5, generator=generator).to(dtype)
        assert factor_of(raw, raw.clone()) == 1
        assert factor_of(raw, raw / 4) == Fraction(1, 4)
        assert factor_of(raw, raw * 8) == 8
        assert factor_of(raw, raw / 3) == Fraction(1, 3)
        assert factor_of(raw, raw * (1 / 3)) == Fraction(1, 3)
        assert factor_of(raw, raw * 3 / 7) == Fraction(3, 7)
        assert factor_of(raw, -raw) == -1
        assert factor_of(raw, raw * 0) == 0
        half = raw.clone()
        half[32:] = 0
        assert "elements are not" in factor_of(raw, half)
        shifted = raw + 1e-3
        assert isinstance(factor_of(raw, shifted), str)
        assert factor_of(torch.zeros(4, dtype=dtype), torch.zeros(4, dtype=dtype)) is None
        assert isinstance(factor_of(torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype)), str)
    assert factor_of(torch.ones(3), torch.ones(3, dtype=torch.float64)).startswith("its shape or dtype")


def test_a_hook_that_is_no_factor_is_refused_in_one_process(tmp_path, executable):
    """The same refusal as the masking scenario's, in one process: named, never judged."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
    mask = torch.arange(tiny_lm.LENGTH)[None, :].expand(2, -1) < 3
    model.layer.register_forward_hook(mask_output(mask))
    with probe.step():
        model(tokens, labels, reduction="sum")[0].backward()
    with pytest.raises(ProbeError, match=r"mask_output.<locals>.hook.<locals>.masked on layer's output changed its "
                                         "gradient otherwise than by a factor"):
        probe.judge()


# -- norms inside the step, in one process ----------------------------------------------------------------


def clipped_by(name, model):
    """One step of ``model`` clipped inside it through ``torch.nn.utils.<name>`` over every parameter (the probe's
    too, where there is a probe); the gradients after it."""
    tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
    model(tokens, labels, reduction="sum")[0].backward()
    utils = torch.nn.utils
    if name == "get_total_norm":
        total = utils.get_total_norm([q.grad for q in model.parameters() if q.grad is not None])
        utils.clip_grads_with_norm_(model.parameters(), 1e-3, total)
    elif name == "clip_grad_value_":
        utils.clip_grad_value_(model.parameters(), 1e-3)
    else:
        utils.clip_grad_norm_(model.parameters(), 1e-3)
    return [q.grad.clone() for q in model.parameters() if q.grad is not None]


GUARDED_HERE = [name for name in ("clip_grad_norm_", "clip_grad_value_", "get_total_norm")
                if hasattr(torch.nn.utils, name)]


@pytest.mark.parametrize("name", GUARDED_HERE)
def test_torch_norms_called_in_the_step_never_see_p(name):
    """Without DDP p.grad stays in place until the step ends (a reduction by hand must reach it); torch's norm and
    clipping functions called through torch.nn.utils inside the step capture it first and leave it out."""
    plain = clipped_by(name, tiny_lm.make_model(torch.float32))
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, dtype=torch.float64)  # a float64 p among float32 gradients: any trace of it shows
    with probe.step():
        probed = clipped_by(name, model)
        assert probe.captures == ("gradient clipping",)
    assert len(probed) == len(plain) and all(invisible.same(a, b) for a, b in zip(plain, probed))
    assert probe.gradients()[""][0] == -5.0  # judged unclipped: the first group's 5 tokens


# -- where hooks sit, in one process ------------------------------------------------------------------------


class Stages(torch.nn.Module):
    """Three linear stages; the middle one returns (output, a side output) and may be checkpointed; ``side`` times the
    side output joins the output."""

    def __init__(self, checkpointed=False, side=0):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(4, 4)
        self.middle = Pair()
        self.last = torch.nn.Linear(4, 3)
        self.checkpointed = checkpointed
        self.side = side  # how much of the side output reaches the loss (0: none, it receives no gradient)

    def forward(self, x):
        if self.checkpointed:
            from torch.utils.checkpoint import checkpoint

            h, side = checkpoint(self.middle, self.first(x), use_reentrant=False)
        else:
            h, side = self.middle(self.first(x))
        return self.last(h + side * self.side if self.side else h)


class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.linear(x)
        return h, h * 2


def stage_step(model, probe):
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 2, 1, 0])
    with probe.step():
        torch.nn.functional.cross_entropy(model(x), labels, reduction="sum").backward()
    return {site: float(vector[0]) for site, vector in probe.gradients().items()}, probe._refused()


def halve_first_output(module, inputs, output):
    first = output[0] if isinstance(output, tuple) else output
    first.register_hook(lambda grad: grad / 2)


@pytest.mark.parametrize("order", ["before", "after", "checkpointed"])
def test_a_stage_hook_is_measured_whenever_it_was_registered(order):
    """A ÷2 on the middle stage's first output, its forward hook registered before or after the probe, or under
    non-reentrant checkpointing: p (entering at the first tap) and the stages up to it receive 5/2, the last 5."""
    model = Stages(checkpointed=order == "checkpointed")
    if order == "before":
        model.middle.register_forward_hook(halve_first_output)
    probe = Probe(model)
    if order != "before":
        model.middle.register_forward_hook(halve_first_output)
    received, refused = stage_step(model, probe)
    assert refused is None
    assert received == {"": -2.5, "first": -2.5, "middle": -2.5, "last": -5.0}


def test_hooks_the_taps_cannot_measure_are_refused_by_name():
    """Outputs of one module scaled differently; a hook registered on the output inside the module's forward; a
    module backward hook."""
    model = Stages(side=1)

    def both(module, inputs, output):
        output[0].register_hook(lambda grad: grad / 2)
        output[1].register_hook(lambda grad: grad / 4)

    model.middle.register_forward_hook(both)
    _, refused = stage_step(model, Probe(model))
    assert "the hooks on middle's outputs scaled their gradients differently (1/2 and 1/4)" in refused

    model = Stages()
    forward = model.middle.forward

    def inside(x):
        h, side = forward(x)
        h.register_hook(lambda grad: grad / 2)
        return h, side

    model.middle.forward = inside
    _, refused = stage_step(model, Probe(model))
    assert "on middle's output were registered before the probe's tap" in refused

    model = Stages()
    model.last.register_full_backward_hook(lambda module, grad_input, grad_output: None)
    _, refused = stage_step(model, Probe(model))
    assert "last has module backward hooks" in refused
