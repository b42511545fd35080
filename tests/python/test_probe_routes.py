"""The probe's routes for losses built without cross_entropy, in one process: nll_loss after log_softmax,
selected log-probabilities (gather, take_along_dim), a model output that carries them (a fused LM head),
a fused kernel that returns only its loss, and cross-entropy taken chunk by chunk over the hidden states.

Each route runs twice from the same state through ``invisible.assert_invisible`` (the loss, every model
gradient and the optimizer's update bitwise those of the unprobed step), and p must get the exact
weights: −(a group's valid tokens)/N for a token mean over N valid tokens.
"""

import contextlib
import re

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import invisible  # noqa: E402
from normcheck import _probe_capture as capture  # noqa: E402
from normcheck import _probe_routes as routes  # noqa: E402
from normcheck.torch import Probe, ProbeError  # noqa: E402

VOCAB = 7
LABELS = [[3, 1, -100, 4, 2], [0, -100, -100, 6, 5]]  # 4 and 3 valid targets


class Head(nn.Module):
    """Hidden states (B, T, 4) → logits (B, T, VOCAB); ``bias=False`` as fused kernels take the head."""

    def __init__(self, bias=True):
        super().__init__()
        torch.manual_seed(11)
        self.linear = nn.Linear(4, VOCAB, bias=bias)

    def forward(self, x):
        return self.linear(x)


class FusedHead(Head):
    """Returns what a fused LM head returns: per-token log-probabilities of the labels and the label mask."""

    def forward(self, x, labels):
        mask = labels != -100
        picked = F.log_softmax(self.linear(x), -1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return {"log_probs": picked.masked_fill(~mask, 0.0), "label_mask": mask}


class OpaqueCrossEntropy(torch.autograd.Function):
    """A fused linear cross-entropy the probe cannot look into: (hidden, weight, labels) → the token mean."""

    @staticmethod
    def forward(ctx, hidden, weight, labels):
        with torch.enable_grad():
            h = hidden.detach().requires_grad_()
            w = weight.detach().requires_grad_()
            logits, mask = h @ w.T, labels != -100
            chosen = logits.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            loss = ((torch.logsumexp(logits, -1) - chosen) * mask).sum() / mask.sum()
            gh, gw = torch.autograd.grad(loss, (h, w))
        ctx.save_for_backward(gh, gw)
        return loss.detach()

    @staticmethod
    def backward(ctx, grad):
        gh, gw = ctx.saved_tensors
        return gh * grad, gw * grad, None


def batch():
    generator = torch.Generator().manual_seed(4)
    return torch.randn(2, 5, 4, generator=generator), torch.tensor(LABELS)


def valid_mean(per_token, labels):
    mask = labels != -100
    return (per_token * mask).sum() / mask.sum()


def selected(model, x, labels, probe, select):
    logp = select(F.log_softmax(model(x), -1), labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    if probe is not None:
        logp = probe.log_probs(logp, labels)
    return -valid_mean(logp, labels)


def nll_after_log_softmax(model, x, labels, probe):
    return F.nll_loss(F.log_softmax(model(x), -1).transpose(1, 2), labels)


def fused_head(model, x, labels, probe):
    out = model(x, labels)
    return -out["log_probs"].sum() / out["label_mask"].sum()


def fused_kernel(model, x, labels, probe):
    loss = OpaqueCrossEntropy.apply(x, model.linear.weight, labels)
    if probe is not None:
        loss = probe.fused_loss(loss, x, model.linear.weight, labels, reduction="mean")
    return loss


def chunked(model, x, labels, probe):
    if probe is not None:
        probe.microbatch()  # both chunks are one microbatch; row b of every chunk is sequence b
    total = 0
    for h, y in zip(x.chunk(2, dim=1), labels.chunk(2, dim=1)):
        total = total + F.cross_entropy(model(h).transpose(1, 2), y, reduction="sum")
    return total / (labels != -100).sum()


# route: (the model, the loss, whether probe.step() captures the losses)
ROUTES = {
    "nll_loss_after_log_softmax": (Head, nll_after_log_softmax, True),
    "gather": (Head, lambda m, x, y, p: selected(m, x, y, p, lambda v, i: v.gather(-1, i)), False),
    "take_along_dim": (Head, lambda m, x, y, p: selected(m, x, y, p, lambda v, i: torch.take_along_dim(v, i, -1)),
                       False),
    "fused_head_output": (FusedHead, fused_head, True),
    "fused_kernel": (lambda: Head(bias=False), fused_kernel, True),
    "chunked_cross_entropy": (Head, chunked, True),
}


def one_step(route, probed):
    """One step of the route's loss, probed or not: ``invisible.record`` of it, and p's first two rows."""
    make, loss_of, wrap = ROUTES[route]
    model = make()
    probe = Probe(model, sites=None) if probed else None
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.1)
    x, labels = batch()
    with probe.step(wrap=wrap) if probe else contextlib.nullcontext():
        loss = loss_of(model, x, labels, probe)
        loss.backward()
    outcome = invisible.record([loss], model, optimizer, probe)
    if probe is not None:
        outcome["rows"] = probe.gradients()[""][:2].tolist()
    return outcome


def expected_rows():
    valid = (torch.tensor(LABELS) != -100).sum(1)
    return [-float(n) / float(valid.sum()) for n in valid]


@pytest.mark.parametrize("route", list(ROUTES))
def test_each_route_is_invisible_and_gives_p_the_token_mean_s_weights(route):
    probed = invisible.assert_invisible(lambda p: one_step(route, p))
    assert probed["rows"] == pytest.approx(expected_rows(), rel=1e-6), "each row of the labels is one group"


def test_a_term_added_with_the_log_probability_s_own_sign_is_caught(monkeypatch):
    # log p + t instead of −((−log p) + t): the loss −log p then carries −t, and p's weights change sign.
    monkeypatch.setattr(routes, "log_probs", lambda probe, values, labels, ignore_index=-100, sequence_ids=None:
                        probe.add(values, labels, ignore_index=ignore_index, sequence_ids=sequence_ids))
    probed = invisible.assert_invisible(lambda p: one_step("gather", p))
    assert probed["rows"] == pytest.approx([-w for w in expected_rows()], rel=1e-6)
    assert probed["rows"] != pytest.approx(expected_rows(), rel=1e-6)


def test_without_the_output_route_a_fused_head_s_loss_is_not_seen(monkeypatch, tmp_path):
    monkeypatch.setattr(routes, "probed_output", lambda probe, output: None)
    model = FusedHead()
    probe = Probe(model, sites=None, directory=str(tmp_path))
    x, labels = batch()
    with probe.step():
        fused_head(model, x, labels, probe).backward()
    with pytest.raises(ProbeError, match="saw no loss"):
        probe.judge()


def test_an_output_of_log_probs_without_a_mask_is_named_when_no_loss_is_seen(tmp_path):
    x, labels = batch()
    model = FusedHead()
    probe = Probe(model, sites=None, directory=str(tmp_path))
    original = model.forward
    model.forward = lambda x, labels: {"log_probs": original(x, labels)["log_probs"]}
    with probe.step():
        loss = -model(x, labels)["log_probs"].sum()
        loss.backward()
    with pytest.raises(ProbeError, match=r"saw no loss.*log_probs and no logits.*probe\.log_probs"):
        probe.judge()


def logsumexp_selected(model, x, labels, probe):
    """Selected log-probabilities without log_softmax, as TRL's selective_log_softmax computes them in float32."""
    logits = model(x)
    logp = logits.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    return -valid_mean(logp, labels)


def test_a_loss_of_selected_log_probabilities_names_gather_and_probe_log_probs(tmp_path):
    model = Head()
    probe = Probe(model, sites=None, directory=str(tmp_path))
    x, labels = batch()
    with probe.step():
        logsumexp_selected(model, x, labels, probe).backward()
    with pytest.raises(ProbeError, match="saw no loss") as raised:
        probe.judge()
    if capture.has_function_mode():  # torch 1.13 has no TorchFunctionMode to see a gather with
        assert re.search(r"gather or take_along_dim 1 time.*probe\.log_probs", str(raised.value)), str(raised.value)


def test_wrap_false_leaves_a_fused_head_s_output_to_the_caller():
    model = FusedHead()
    probe = Probe(model, sites=None)
    x, labels = batch()
    with probe.step(wrap=False):
        out = model(x, labels)
        loss = -probe.log_probs(out["log_probs"], labels).sum() / out["label_mask"].sum()
        loss.backward()
    assert probe.gradients()[""][:2].tolist() == pytest.approx(expected_rows(), rel=1e-6), "probed once, not twice"


@pytest.mark.parametrize("declared", ["sum", "none"])
def test_a_fused_kernel_declared_with_the_wrong_reduction_is_refused(declared):
    x, labels = batch()
    model = Head(bias=False)
    probe = Probe(model, sites=None)
    loss = OpaqueCrossEntropy.apply(x, model.linear.weight, labels)
    with probe.step(), pytest.raises(ProbeError, match="reduces otherwise|reduction='none' but"):
        probe.fused_loss(loss, x, model.linear.weight, labels, reduction=declared)
