"""The per-group probe in one process: where sequences come from, slots, objectives, sites, the capture.

Needs torch (1.13 or 2.x; where the two differ, each is tested for what it does). Every expectation is
exact: each group's primary component is minus the sum of the weights its tokens got, the witness
component minus the sum of j times the weight of the j-th valid token.
"""

import json

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import tiny_lm  # noqa: E402
from normcheck import _probe_capture as capture  # noqa: E402
from normcheck.torch import Probe, ProbeError  # noqa: E402

MODE = capture.has_function_mode()


def written(probe, tmp_path, **options):
    """The document the probe writes for the step (rank 0, one process)."""
    probe.directory = str(tmp_path)
    return json.loads(open(probe.dump(**options), encoding="utf-8").read())


def components(document, key="per_rank"):
    return [float.fromhex(v) for v in document["observed"][key][0]]


def sums(counts, weight=1.0):
    """Primary and witness components of groups with these counts, every token weighted ``weight``."""
    return [-n * weight for n in counts], [-n * (n + 1) / 2 * weight for n in counts]


def lm_step(probe, model, batches, **forward):
    with probe.step():
        for tokens, labels in batches:
            model(tokens, labels, reduction="sum", **forward)[0].backward()


# ---------------------------------------------------------------------------------------------------
# Where sequences come from

@pytest.mark.parametrize("shift", ["slice", "pad"])
def test_the_rows_of_the_batch_are_the_sequences_through_the_label_shift(tmp_path, shift):
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    lengths = [6, 4, 1]
    lm_step(probe, model, [tiny_lm.make_batch(lengths, seed=1)], shift=shift)
    document = written(probe, tmp_path)
    counts = [n - 1 for n in lengths]
    positions = tiny_lm.LENGTH - (1 if shift == "slice" else 0)  # targets per row after the shift
    assert document["ranks"] == [{"targets": {"sequences": [
        {"count": n, "value": 1, **({"padding": positions - n} if positions - n else {})} if n else
        {"count": 0, "padding": positions} for n in counts]}}]
    primary, witness = sums(counts)
    assert components(document) == primary and components(document, "witness") == witness


def test_inputs_passed_by_name_are_seen(tmp_path):
    """Hugging Face calls model(input_ids=…, labels=…): the rows of the batch are the sequences on both
    torches (a pre-hook with kwargs on torch 2, the forward shadowed on the instance on torch 1.13)."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    tokens, labels = tiny_lm.make_batch([6, 3], seed=2)
    with probe.step():
        model(input_ids=tokens, labels=labels, reduction="sum")[0].backward()
    target = written(probe, tmp_path)["ranks"][0]["targets"]
    assert target == {"sequences": [{"count": 5, "value": 1}, {"count": 2, "value": 1, "padding": 3}]}


def test_the_inputs_hook_leaves_the_model_as_it_was():
    """remove() leaves no instance forward behind, a deep copy runs its own forward, and a forward the
    instance already had is kept and restored."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    copy = __import__("copy").deepcopy(model)
    tokens, _ = tiny_lm.make_batch([6, 3], seed=2)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(1.0)
        assert not torch.equal(copy(tokens), model(tokens)), "the copy ran the original's forward"
    probe.remove()
    assert "forward" not in model.__dict__
    own = tiny_lm.make_model(torch.float32)
    calls = []

    def forward(*args, **kwargs):
        calls.append(1)
        return type(own).forward(own, *args, **kwargs)

    own.forward = forward
    other = Probe(own, sites=None)
    with torch.no_grad():
        own(tokens)
    assert calls == [1]
    other.remove()
    assert own.__dict__.get("forward") is forward


def packed_batch():
    """Three sequences packed into one row of 10, as a flattening collator packs them: position_ids restart
    at 0 and each sequence's first label is -100 (nothing predicts it from the sequence before)."""
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 0, 1, 2, 3]])
    labels = tokens.clone()
    labels[position_ids == 0] = -100
    return tokens, labels, position_ids


def per_token_loss(model, tokens, labels):
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, tiny_lm.VOCAB), F.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1),
                           reduction="none"), F.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)


@pytest.mark.parametrize("source", ["position_ids", "cu_seqlens", "sequence_ids"])
def test_packed_sequences(tmp_path, source):
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    tokens, labels, position_ids = packed_batch()
    if source == "position_ids":
        probe.sequences(position_ids=position_ids)
    elif source == "cu_seqlens":
        probe.sequences(cu_seqlens=torch.tensor([0, 4, 6, 10], dtype=torch.int32))
    with probe.step(wrap=False):
        per_token, targets = per_token_loss(model, tokens, labels)
        ids = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, 2]) if source == "sequence_ids" else None
        probe.add(per_token, targets, sequence_ids=ids).sum().backward()
    document = written(probe, tmp_path)
    # Target t predicts token t + 1: each sequence's last position predicts the next one's masked first token.
    assert document["ranks"] == [{"targets": {"sequences": [{"count": 3, "value": 1, "padding": 1},
                                                            {"count": 1, "value": 1, "padding": 1},
                                                            {"count": 3, "value": 1, "padding": 1}]}}]
    primary, witness = sums([3, 1, 3])
    assert components(document) == primary and components(document, "witness") == witness


def test_sequence_ids_in_any_order_positions_outside_count_as_padding(tmp_path):
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None)
    per_token = torch.zeros(8, requires_grad=True)
    labels = torch.tensor([1, 1, -100, 1, 1, -100, 1, 1])
    ids = torch.tensor([7, 7, -1, 3, 7, -1, 3, 3])  # 7 first: group 0; 3: group 1; −1 pads the group before it
    weights_of = torch.tensor([1.0, 2, 0, 4, 8, 0, 16, 32])
    (probe.add(per_token, labels, sequence_ids=ids) * weights_of).sum().backward()
    document = written(probe, tmp_path)
    assert document["ranks"][0]["targets"] == {"sequences": [{"count": 3, "value": 1, "padding": 2},
                                                             {"count": 3, "value": 1}]}
    assert components(document) == [-(1 + 2 + 8), -(4 + 16 + 32)]
    assert components(document, "witness") == [-(1 * 1 + 2 * 2 + 3 * 8), -(1 * 4 + 2 * 16 + 3 * 32)]
    with pytest.raises(ProbeError, match="outside every sequence"):
        probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1]), sequence_ids=torch.tensor([0, -1]))


def test_a_microbatch_without_sequence_information_is_one_group(tmp_path):
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None)
    probe.add(torch.zeros(4, requires_grad=True), torch.tensor([1, -100, 1, 1])).sum().backward()
    assert written(probe, tmp_path)["ranks"][0]["targets"] == {"count": 3, "value": 1, "padding": 1}
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None, sequences=False)  # rows ignored on request
    lm_step(probe, probe.module, [tiny_lm.make_batch([6, 4], seed=1)])
    assert written(probe, tmp_path)["ranks"][0]["targets"] == {"count": 8, "value": 1, "padding": 2}


def test_declared_sequences_must_match_the_loss():
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None)
    probe.sequences(labels=torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ProbeError, match="neither one per position"):
        probe.add(torch.zeros(7, requires_grad=True), torch.ones(7, dtype=torch.long))
    with pytest.raises(ProbeError, match="needs one of"):
        probe.sequences()


def test_a_step_with_more_groups_than_slots_names_the_option():
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None, slots=3)
    tokens, labels = tiny_lm.make_batch([6, 5, 4, 3], seed=0)
    with pytest.raises(ProbeError, match=r"more than the 3 groups.*slots="):
        with probe.step():
            tiny_lm.make_model(torch.float32)  # nothing: the probe's own module below
            probe.module(tokens, labels, reduction="sum")
    assert probe.components == 3 * 1 * 2 and probe.parameter.shape == (6,)


def test_the_mean_of_an_empty_microbatch_is_nan_in_its_groups_only(tmp_path):
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None)
    with probe.step():
        for lengths in ([6, 4], [1, 0]):
            tokens, labels = tiny_lm.make_batch(lengths, seed=3)
            (probe.module(tokens, labels)[0] / 2).backward()
    values = components(written(probe, tmp_path))
    assert values[:2] == [-5 / 16, -3 / 16] and all(v != v for v in values[2:])  # NaN: 0/0


# ---------------------------------------------------------------------------------------------------
# Objectives

def test_objectives_are_declared_on_the_probe_or_per_dump(tmp_path):
    model = tiny_lm.make_model(torch.float32)
    with pytest.raises(ProbeError, match="normalizer"):
        Probe(model, objective="constant")
    with pytest.raises(ProbeError, match="normalizer"):
        Probe(model, normalizer=4)
    with pytest.raises(ProbeError, match="objective is one of"):
        Probe(model, objective="mean")
    for wrong in (0, True, 2.0):
        with pytest.raises(ProbeError, match="accumulation_steps is a positive number"):
            Probe(model, accumulation_steps=wrong)
    probe = Probe(model, objective="constant", normalizer=20, sites=None)
    lm_step(probe, model, [tiny_lm.make_batch([6, 4], seed=1)])
    document = written(probe, tmp_path)
    assert document["objective"] == "constant" and document["normalizer"] == 20
    lm_step(probe, model, [tiny_lm.make_batch([6, 4], seed=1)])
    assert written(probe, tmp_path, objective="sequence_mean")["objective"] == "sequence_mean"


def test_sequence_objectives_need_the_sequences_of_every_microbatch(tmp_path):
    probe = Probe(tiny_lm.make_model(torch.float32), objective="sequence_mean", sites=None)
    probe.add(torch.zeros(3, requires_grad=True), torch.tensor([1, 1, -100])).sum().backward()
    with pytest.raises(ProbeError, match="needs the sequences of every microbatch"):
        written(probe, tmp_path)


def test_weights_go_with_the_weighted_token_mean_only(tmp_path):
    probe = Probe(tiny_lm.make_model(torch.float32), sites=None)
    probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1]),
              weights=torch.tensor([0.5, 2.0])).sum().backward()
    document = written(probe, tmp_path)
    assert document["objective"] == "weighted_token_mean" and "witness" not in document["observed"]
    assert document["ranks"][0] == {"targets": [1, 1], "weights": ["0x1.0000000000000p-1", "0x1.0000000000000p+1"]}
    probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1]),
              weights=torch.tensor([0.5, 2.0])).sum().backward()
    with pytest.raises(ProbeError, match="weighted_token_mean, not sequence_mean"):
        written(probe, tmp_path, objective="sequence_mean")
    probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1])).sum().backward()
    with pytest.raises(ProbeError, match="no loss of the step had weights"):
        written(probe, tmp_path, objective="weighted_token_mean")


# ---------------------------------------------------------------------------------------------------
# Sites

def test_sites_are_parameters_of_their_submodules():
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model)
    assert list(probe.sites) == ["embed", "layer", "head"]
    names = dict(model.named_parameters())
    assert all(names[f"{site}.normcheck_probe"] is parameter for site, parameter in probe.sites.items())
    assert "normcheck_probe" in names and not any("normcheck_probe" in n for n, _ in probe.named_model_parameters())
    assert not any("normcheck_probe" in key for key in model.state_dict())
    model.load_state_dict(tiny_lm.make_model(torch.float32).state_dict())
    assert (list(Probe(tiny_lm.make_model(torch.float32), sites=["layer.linear1", "head"]).sites)
            == ["layer.linear1", "head"])
    assert Probe(tiny_lm.make_model(torch.float32), sites=None).sites == {}
    with pytest.raises(ProbeError, match="no submodule 'tail'"):
        Probe(tiny_lm.make_model(torch.float32), sites=["tail"])
    probe.remove()
    assert not any("normcheck_probe" in n for n, _ in model.named_parameters())


def test_a_hook_on_one_module_s_parameters_is_measured_at_its_site_only(tmp_path):
    """DeepSpeed #8152 in one process: gradient hooks divide one stage's gradients by 2."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model)
    for parameter in model.layer.parameters():  # the site's probe parameter is among them
        parameter.register_hook(lambda grad: grad / 2)
    lm_step(probe, model, [tiny_lm.make_batch([6, 4], seed=1)])
    document = written(probe, tmp_path)
    sites = {entry["name"]: entry for entry in document["observed"]["sites"]}
    assert sites["embed"]["per_rank"] == document["observed"]["per_rank"] == sites["head"]["per_rank"]
    assert [float.fromhex(v) for v in sites["layer"]["per_rank"][0]] == [v / 2 for v in components(document)]


# ---------------------------------------------------------------------------------------------------
# Capturing the loss

def test_nll_loss_and_its_module_are_captured(tmp_path):
    for loss_of in (lambda logits, t: F.nll_loss(F.log_softmax(logits, -1), t, reduction="sum"),
                    lambda logits, t: nn.NLLLoss(reduction="sum")(F.log_softmax(logits, -1), t)):
        model = tiny_lm.make_model(torch.float32)
        probe = Probe(model, sites=None)
        tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
        with probe.step():
            logits = model(tokens)
            loss_of(logits[:, :-1].reshape(-1, tiny_lm.VOCAB), labels[:, 1:].reshape(-1)).backward()
        assert components(written(probe, tmp_path)) == [-5.0, -3.0]


def test_a_cross_entropy_bound_by_name_before_the_step(tmp_path):
    """`from torch.nn.functional import cross_entropy` before the step: the TorchFunctionMode sees it (torch 2);
    torch 1.13's attribute replacement cannot, and the probe says it saw no loss."""
    from torch.nn.functional import cross_entropy

    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
    with probe.step():
        logits = model(tokens)
        cross_entropy(logits[:, :-1].reshape(-1, tiny_lm.VOCAB), labels[:, 1:].reshape(-1), reduction="sum").backward()
    if MODE:
        assert components(written(probe, tmp_path)) == [-5.0, -3.0]
    else:
        with pytest.raises(ProbeError, match="saw no loss"):
            written(probe, tmp_path)


def label_smoothed(logits, labels, epsilon=0.1):
    """transformers' LabelSmoother where transformers is installed; otherwise the same computation."""
    try:
        from transformers.trainer_pt_utils import LabelSmoother
    except ImportError:
        log_probs = -F.log_softmax(logits, dim=-1)
        labels = labels.unsqueeze(-1)
        padding = labels.eq(-100)
        nll = log_probs.gather(dim=-1, index=labels.clamp(min=0)).masked_fill(padding, 0.0)
        smoothed = log_probs.sum(dim=-1, keepdim=True).masked_fill(padding, 0.0)
        active = padding.numel() - padding.long().sum()
        return (1 - epsilon) * nll.sum() / active + epsilon * smoothed.sum() / (active * log_probs.shape[-1])
    return LabelSmoother(epsilon=epsilon)({"logits": logits}, labels, shift_labels=True)


def test_a_label_smoother_that_never_calls_cross_entropy_is_named(tmp_path):
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
    with probe.step():
        logits = model(tokens)
        try:  # transformers' LabelSmoother shifts the labels itself; the stand-in takes them shifted
            import transformers.trainer_pt_utils  # noqa: F401
        except ImportError:
            loss = label_smoothed(logits[:, :-1], labels[:, 1:])
        else:
            loss = label_smoothed(logits, labels)
        loss.backward()
    with pytest.raises(ProbeError, match="saw no loss") as raised:
        written(probe, tmp_path)
    assert "LabelSmoother" in str(raised.value) and "label_smoothing_factor" in str(raised.value)
    assert "log_softmax" in str(raised.value)


# ---------------------------------------------------------------------------------------------------
# Capturing the gradient

def test_the_gradient_is_kept_whatever_happens_to_p_grad_after_the_step(tmp_path):
    """Clipping (or anything) after probe.step() ends cannot change what is judged: p.grad is None by then."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    lm_step(probe, model, [tiny_lm.make_batch([6, 4], seed=1)])
    assert probe.parameter.grad is None and probe.captures == ("the end of probe.step()",)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-6)  # every parameter, p's too
    assert components(written(probe, tmp_path)) == [-5.0, -3.0]


def test_the_old_capture_at_check_time_fails_this_test(tmp_path):
    """A probe that read p.grad only when checked (the trap) judges the clipped gradient."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    probe._capture = lambda when: None  # never captures on its own
    probe._release = lambda: None  # nor sets p.grad to None
    lm_step(probe, model, [tiny_lm.make_batch([6, 4], seed=1)])
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-6)
    del probe._capture
    del probe._release
    assert components(written(probe, tmp_path)) != [-5.0, -3.0]


def test_a_backward_after_the_capture_is_named(tmp_path):
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    lm_step(probe, model, [tiny_lm.make_batch([6, 4], seed=1)])
    probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1])).sum().backward()  # after the step
    with pytest.raises(ProbeError, match="after its gradient was captured"):
        written(probe, tmp_path)


def test_capture_step_judges_a_division_of_the_gradients_after_the_backward(tmp_path):
    """torchtune's scale_grads: with capture='step' the division after the backward is part of what is judged."""
    for mode, want in (("step", [-5 / 8, -3 / 8]), ("reduction", [-5.0, -3.0])):
        model = tiny_lm.make_model(torch.float32)
        probe = Probe(model, sites=None, capture=mode)
        with probe.step():
            tokens, labels = tiny_lm.make_batch([6, 4], seed=1)
            model(tokens, labels, reduction="sum")[0].backward()
            if mode == "reduction":
                probe.capture()  # what the synchronizing backward does under DDP
            for parameter in model.parameters():
                if parameter.grad is not None:
                    parameter.grad.mul_(1 / 8)
        assert components(written(probe, tmp_path)) == want
    with pytest.raises(ProbeError, match="capture is"):
        Probe(tiny_lm.make_model(torch.float32), capture="later")


def test_the_loss_and_every_gradient_are_bitwise_unchanged_with_sequences():
    tokens, labels, position_ids = packed_batch()
    plain = tiny_lm.make_model(torch.float32)
    per_token, targets = per_token_loss(plain, tokens, labels)
    per_token.sum().backward()
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model)
    probe.sequences(position_ids=position_ids)
    with probe.step(wrap=False):
        probed, _ = per_token_loss(model, tokens, labels)
        probed = probe.add(probed, targets)
        probed.sum().backward()
    assert torch.equal(probed.detach().view(torch.int32), per_token.detach().view(torch.int32))
    for (name, a), b in zip(probe.named_model_parameters(), plain.parameters()):
        assert torch.equal(a.grad.view(torch.int32), b.grad.view(torch.int32)), name


def test_a_gradient_written_after_the_capture_is_named(tmp_path):
    """Clipping, a scaler or an optimizer that still holds p writes p.grad after the capture: the check says
    so instead of judging either value (the probe judges what it captured)."""
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, sites=None)
    tokens, labels = tiny_lm.make_batch([6, 3], seed=2)
    with probe.step():
        model(tokens, labels, reduction="sum")[0].backward()
    assert probe.captures == ("the end of probe.step()",) and probe.parameter.grad is None
    probe.parameter.grad = torch.ones_like(probe.parameter)
    with pytest.raises(ProbeError, match="p.grad was written to after it was captured at the end of probe.step()"):
        written(probe, tmp_path)
