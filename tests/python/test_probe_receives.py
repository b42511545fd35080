"""p and every site receive what a model parameter in their place receives: planted hooks are judged failures.

Each scenario is a step of tiny_lm's model under DistributedDataParallel (W = 2, gloo on loopback),
G microbatches per rank on probe_loops' uneven dataset, in two versions: ``planted``, where a hook
makes the model's parameters receive another weight than the token mean, and ``correct``, the same
machinery used so that every parameter receives the token mean. The gate must fail every planted
version (naming what fits, or saying unexplained) and pass every correct one; and every run, planted
or not, is bitwise the unprobed run (``invisible``).

- ``resumming_hook``: a communication hook that all-reduces with SUM, and every microbatch's backward
  synchronizes (no ``no_sync``): the model's buffers hold the earlier microbatches' reduced sums when
  the next one is reduced, so microbatch m weighs W^(G−1−m) (correct: ``no_sync`` but on the last);
- ``stage_output_hook``: a forward hook on a stage registers a tensor hook on its output that divides
  the gradient by G (DeepSpeed's pipeline stages): planted on an inner stage, whose parameters and
  those upstream receive 1/G too many (correct: on the last stage, with the loss × G);
- ``module_gradient_scaling``: hooks on one module's parameters, registered before the probe is
  attached, divide by G (correct: on every parameter, with the loss × G);
- ``post_reduction_division``: a communication hook that sums and then divides the reduced bucket by
  W·G, with the loss × G, every microbatch synchronizing (correct: ``no_sync`` but on the last).
"""

import contextlib

import pytest

torch = pytest.importorskip("torch")
try:  # DistributedDataParallel imports torch._dynamo on first use: once here, not in every forked rank
    import torch._dynamo  # noqa: F401
except ImportError:  # torch 1.13
    pass
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import invisible  # noqa: E402
import probe_loops  # noqa: E402
import tiny_lm  # noqa: E402
from normcheck.launch import launch  # noqa: E402
from normcheck.torch import ProbeError  # noqa: E402

WORLD_SIZE = 2
GS = (2, 4)
SCENARIOS = ("resumming_hook", "stage_output_hook", "module_gradient_scaling", "post_reduction_division")
VERSIONS = ("planted", "correct")
KNOWN = {
    ("stage_output_hook", "planted"): ("a site's term sits at the loss: "
                                       "a hook on an inner stage's output never acts on it"),
    ("stage_output_hook", "correct"): "p's term sits at the loss: the last stage's ÷G never acts on it, the ×G shows",
    ("module_gradient_scaling", "planted"): ("the site's parameter did not exist "
                                             "when the module's parameters were hooked"),
    ("module_gradient_scaling", "correct"): "p did not exist when the model's parameters were hooked: the ×G shows",
}
"""What the probe does not measure yet: (scenario, version) → why (the test must fail until it does)."""


def sum_hook(state, bucket):  # type: ignore[no-untyped-def]  (DDP checks the annotations)
    """All-reduce with SUM, then divide the reduced bucket by ``state`` (1: no division)."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda done: done.value()[0].div_(state) if state != 1 else done.value()[0])


def divide_output(divisor):
    """A forward hook whose tensor hook divides the gradient of the module's output by ``divisor``."""
    def hook(module, inputs, output):
        output.register_hook(lambda grad: grad / divisor)

    return hook


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
            with contextlib.nullcontext() if every or m + 1 == g else ddp.no_sync():
                loss = ddp(tokens, labels, reduction="sum")[0] * scale / counts.N
                loss.backward()
            losses.append(loss)
    outcome = invisible.record(losses, model, optimizer, probe)
    if probe is not None:
        try:
            verdict = probe.judge(ddp, reducer=reducer)
            outcome["verdict"] = {"verdict": verdict.verdict, "diagnosis": list(verdict.diagnosis),
                                  "sites": [(s.name, s.diagnosis) for s in verdict.sites], "message": verdict.message}
        except ProbeError as e:
            outcome["verdict"] = {"verdict": f"ProbeError: {e}", "diagnosis": [], "sites": [], "message": str(e)}
    return outcome


def every_scenario(rank, world_size, probe):
    """Each (scenario, version, G): the differences of the probed run from the unprobed one, and its verdict."""
    results = {}
    for scenario in SCENARIOS:
        for version in VERSIONS:
            for g in GS:
                planted = version == "planted"
                try:
                    unprobed = one_step(scenario, planted, g, False, probe, rank)
                    probed = one_step(scenario, planted, g, True, probe, rank)
                    results[(scenario, version, g)] = {"differences": invisible.differences(unprobed, probed),
                                                       **probed["verdict"]}
                except Exception as e:  # reported by the item; the other scenarios still run
                    results[(scenario, version, g)] = {"error": f"{type(e).__name__}: {e}"}
    return results


_result = {}


@pytest.fixture(scope="module")
def ranks(executable, tmp_path_factory):
    if "ranks" not in _result:
        _result["ranks"] = launch(every_scenario, WORLD_SIZE, executable=executable, timeout=600,
                                  directory=str(tmp_path_factory.mktemp("receives")))
    return _result["ranks"]


def cases():
    for scenario in SCENARIOS:
        for version in VERSIONS:
            for g in GS:
                known = KNOWN.get((scenario, version))
                marks = [pytest.mark.xfail(strict=True, reason=known)] if known else []
                yield pytest.param(scenario, version, g, id=f"{scenario}-{version}-g{g}", marks=marks)


def outcome_of(ranks, scenario, version, g):
    for rank, results in enumerate(ranks):
        result = results[(scenario, version, g)]
        assert "error" not in result, f"rank {rank}: {result['error']}"
        assert result["differences"] == [], f"rank {rank}: the probe changed the step:\n" + "\n".join(
            result["differences"])
    return ranks[0][(scenario, version, g)]


@pytest.mark.parametrize("scenario, version, g", list(cases()))
def test_the_gate_judges_what_the_parameters_received(ranks, scenario, version, g):
    """Planted: a failure that names what fits or says unexplained. Correct: a pass."""
    result = outcome_of(ranks, scenario, version, g)
    if version == "correct":
        assert result["verdict"] == "pass", result["message"]
        return
    assert result["verdict"] == "fail", result["message"]
    named = result["diagnosis"] + [d for _, diagnosis in result["sites"] for d in diagnosis]
    assert named, f"a failure with neither a name nor 'unexplained':\n{result['message']}"
