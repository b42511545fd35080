"""The probed step is bitwise the unprobed one when the model runs under ``torch.compile`` (torch 2 only).

test_probe_invisible.py's model and step, with the model compiled by TorchInductor on the CPU: the
probe's forward hook routes p through the compiled module's output (Dynamo breaks the graph there),
and the captured ``cross_entropy`` outside it carries the probe's term. One process, one compilation
per run (tens of seconds): the loss, every model gradient and the AdamW update equal the unprobed
compiled step's bit for bit, and the step is judged (``inconclusive`` on one rank, where a per-rank mean
could hide). Registered on the virtual environment's torch only: Debian's 1.13 has no ``torch.compile``.
"""

import contextlib

import pytest

torch = pytest.importorskip("torch")

import invisible  # noqa: E402
from normcheck.torch import Probe  # noqa: E402
from test_probe_invisible import Model, batches, loss_of  # noqa: E402


def compiled_step(probed, make_probe):
    model = Model(None, False)
    probe = make_probe(model, sites="children") if probed else None
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(probe.model_parameters() if probe else model.parameters(), lr=1e-2)
    data = batches(0)
    total = sum(int((labels[:, 1:] != -100).sum()) for _, labels in data)
    losses = []
    with probe.step() if probe else contextlib.nullcontext():
        for tokens, labels in data:
            loss = loss_of(compiled(tokens), labels, True) / total
            loss.backward()
            losses.append(loss)
    outcome = invisible.record(losses, model, optimizer, probe)
    if probe is not None:
        outcome["verdict"] = probe.judge().verdict
    return outcome


def test_a_compiled_model_s_probed_step_is_bitwise_the_unprobed_one(executable, tmp_path):
    def make_probe(model, **options):
        return Probe(model, executable=executable, directory=str(tmp_path), **options)

    torch._dynamo.reset()
    probed = invisible.assert_invisible(lambda p: compiled_step(p, make_probe))
    assert probed["verdict"] == "inconclusive", probed["verdict"]
