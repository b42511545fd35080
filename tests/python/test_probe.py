"""normcheck.torch.Probe in one process: the captured cross_entropy, p's components, keeping p invisible.

Needs torch. Sequences, objectives, sites and the capture of the gradient are in test_probe_groups.py;
multi-process behaviour (DDP, hooks, verdicts) in test_ddp.py and test_probe_trips.py.
"""

import json
import math
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import tiny_lm  # noqa: E402
from normcheck import _probe_capture as capture  # noqa: E402
from normcheck import torch as probing  # noqa: E402
from normcheck._probe_install import route  # noqa: E402
from normcheck.torch import Probe, ProbeError  # noqa: E402

CLASSES = 5


class Head(nn.Module):
    """A linear head: logits (batch, length, classes) from features."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        torch.manual_seed(3)
        self.linear = nn.Linear(4, CLASSES).to(dtype)

    def forward(self, x):
        return self.linear(x)


def bits(tensor):
    view = torch.int64 if tensor.dtype == torch.float64 else torch.int32
    return tensor.detach().contiguous().view(view)


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def primary(probe):
    """This rank's primary components of the captured p (one per group, in group order)."""
    vector = probe.gradients()[""]
    return vector[: probe.slots].tolist()


def witness(probe):
    """This rank's witness components of the captured p."""
    vector = probe.gradients()[""]
    half = probe.slots * probe.world_size
    return vector[half: half + probe.slots].tolist()


def inputs(dtype=torch.float32):
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 4, generator=generator).to(dtype)
    labels = torch.tensor([[1, 4, -100, 2], [0, -100, -100, 3]])
    return x, labels


LOSSES = {
    # name: (how the step calls cross-entropy on logits (2, 4, C) and labels (2, 4), with a label shift)
    "functional": lambda logits, labels, **kw: F.cross_entropy(
        logits[:, :-1].reshape(-1, CLASSES), labels[:, 1:].reshape(-1), **kw),
    "module": lambda logits, labels, **kw: nn.CrossEntropyLoss(**kw)(
        logits[:, :-1].reshape(-1, CLASSES), labels[:, 1:].reshape(-1)),
    "spatial": lambda logits, labels, **kw: F.cross_entropy(logits.transpose(1, 2), labels, **kw),
}


def options_grid():
    for reduction in ("mean", "sum", "none"):
        for weighted in (False, True):
            for smoothing in (0.0, 0.1):
                for ignore in (-100, 2):
                    yield reduction, weighted, smoothing, ignore


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_wrapped_cross_entropy_changes_no_value_and_no_gradient(loss_name, dtype):
    """Loss and model gradients bit for bit equal to torch's; p.grad the exact probe gradient."""
    loss_of = LOSSES[loss_name]
    x, padded = inputs(dtype)
    checked = 0
    for reduction, weighted, smoothing, ignore in options_grid():
        labels = torch.where(padded == -100, torch.full_like(padded, ignore), padded)
        options = {"reduction": reduction, "ignore_index": ignore, "label_smoothing": smoothing}
        if weighted:
            options["weight"] = torch.tensor([0.5, 2.0, 1.25, 0.75, 3.0], dtype=dtype)
        plain = Head(dtype)
        expected = loss_of(plain(x), labels, **options)
        (expected.sum() if reduction == "none" else expected).backward()
        model = Head(dtype)
        probe = Probe(model, dtype=dtype)
        with probe.step():
            got = loss_of(model(x), labels, **options)
            (got.sum() if reduction == "none" else got).backward()
        where = f"{loss_name} {options}"
        assert same_bits(got, expected), where
        assert same_bits(model.linear.weight.grad, plain.linear.weight.grad), where
        assert same_bits(model.linear.bias.grad, plain.linear.bias.grad), where

        # p's components: −Σ w over each group's valid tokens, divided as torch divides ('mean': by Σ w of
        # the valid targets); the spatial loss keeps the rows (one group each), the flattened ones are one group.
        seen = labels[:, 1:] if loss_name != "spatial" else labels
        rows = ([[int(t) for t in row] for row in seen] if loss_name == "spatial"
                else [[int(t) for row in seen for t in row]])
        weight_of = (lambda t: Fraction(float(options["weight"][t]))) if weighted else (lambda t: Fraction(1))
        mass = sum(weight_of(t) for row in rows for t in row if t != ignore)
        scale = 1 / mass if reduction == "mean" else Fraction(1)
        want = [-sum((weight_of(t) for t in row if t != ignore), Fraction(0)) * scale for row in rows]
        assert primary(probe)[: len(rows)] == pytest.approx([float(w) for w in want], rel=1e-6), where
        if not weighted:  # the witness: the j-th valid token of its group carries j
            want = [-sum((j + 1 for j in range(sum(1 for t in row if t != ignore))), 0) * scale for row in rows]
            assert witness(probe)[: len(rows)] == pytest.approx([float(w) for w in want], rel=1e-6), where
        assert probe.parameter.grad is None, "captured and cleared when the step ended"
        checked += 1
    assert checked == 24


def test_the_probe_gradient_check_catches_a_mean_over_every_position():
    """The exact expectation above is not vacuous: dividing by all positions (padding too) differs."""
    x, labels = inputs()
    model = Head()
    probe = Probe(model)
    with probe.step():
        F.cross_entropy(model(x)[:, :-1].reshape(-1, CLASSES), labels[:, 1:].reshape(-1)).backward()
    positions = labels[:, 1:].numel()
    valid = int((labels[:, 1:] != -100).sum())
    assert positions != valid
    assert primary(probe)[0] == -valid / valid
    assert primary(probe)[0] != -valid / positions


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize("size_average, reduce", [(False, None), (True, None), (None, False), (False, True),
                                                  (True, False), (None, True)])
def test_legacy_reduction_arguments_are_kept(size_average, reduce):
    x, labels = inputs()
    logits_of = lambda model: model(x)[:, :-1].reshape(-1, CLASSES)  # noqa: E731
    targets = labels[:, 1:].reshape(-1)
    plain = Head()
    expected = F.cross_entropy(logits_of(plain), targets, size_average=size_average, reduce=reduce)
    model = Head()
    probe = Probe(model)
    with probe.step():
        got = F.cross_entropy(logits_of(model), targets, size_average=size_average, reduce=reduce)
        got.sum().backward()
    assert same_bits(got, expected)
    valid = int((targets != -100).sum())
    # torch's mapping: reduce=False is 'none'; otherwise size_average=False is 'sum', else 'mean'.
    summed = reduce is False or size_average is False
    assert primary(probe)[0] == (-1.0 * valid if summed else -1.0)


def test_the_capture_ends_with_the_step():
    original, forward = F.cross_entropy, nn.CrossEntropyLoss.forward
    clip = torch.nn.utils.clip_grad_norm_
    probe = Probe(Head())
    with pytest.raises(RuntimeError):
        with probe.step():
            assert F.cross_entropy is not original and nn.CrossEntropyLoss.forward is not forward
            if capture.has_function_mode():  # torch 2: a TorchFunctionMode as well
                assert torch._C._is_torch_function_mode_enabled()
            raise RuntimeError("the step failed")
    assert F.cross_entropy is original and nn.CrossEntropyLoss.forward is forward
    assert torch.nn.utils.clip_grad_norm_ is clip
    if capture.has_function_mode():
        assert not torch._C._is_torch_function_mode_enabled()
    with probe.step(wrap=False):
        assert F.cross_entropy is original


def test_add_puts_the_term_on_valid_tokens_only_and_keeps_every_bit():
    per_token = torch.tensor([0.5, -0.0, 0.0, 1.25, float("inf")], requires_grad=True)
    labels = torch.tensor([3, 1, -100, -100, 2])
    probe = Probe(Head())
    probed = probe.add(per_token, labels)
    assert same_bits(probed, per_token)  # including −0.0 on a valid token and +0.0 on padding
    probed.sum().backward()
    probe.capture()
    assert primary(probe)[:2] == [-3.0, 0.0] and witness(probe)[:2] == [-6.0, 0.0]
    assert per_token.grad.tolist() == [1.0] * 5
    assert probe._microbatches[0].written() == ({"count": 3, "value": 1, "padding": 2}, None)


def test_add_with_weights_and_the_double_probing_guard():
    probe = Probe(Head())
    per_token = torch.ones(3, requires_grad=True)
    probe.add(per_token, torch.tensor([0, -100, 1]), weights=torch.tensor([0.5, 9.0, 0.25])).sum().backward()
    probe.capture()
    assert primary(probe)[0] == -(0.5 + 0.25) and witness(probe)[0] == 0.0  # no witness in a weighted step
    assert probe._microbatches[0].written() == ([1, None, 1], [0.5, None, 0.25])
    x, labels = inputs()
    model = Head()
    probe = Probe(model)
    with probe.step():
        per_token = F.cross_entropy(model(x).reshape(-1, CLASSES), labels.reshape(-1), reduction="none")
        with pytest.raises(ProbeError, match="wrap=False"):
            probe.add(per_token, labels.reshape(-1))


def test_microbatches_by_call_or_by_mark():
    probe = Probe(Head())
    for _ in range(2):
        probe.add(torch.ones(2, requires_grad=True), torch.tensor([1, 1]))
    assert [b.written()[0] for b in probe._microbatches] == [{"count": 2, "value": 1}] * 2
    assert [b.slots for b in probe._microbatches] == [[0], [1]]  # a group, and its components, each
    probe = Probe(Head())
    probe.microbatch()
    probe.add(torch.ones(2, requires_grad=True), torch.tensor([1, -100])).sum().backward()
    probe.add(torch.ones(1, requires_grad=True), torch.tensor([1])).sum().backward()
    probe.microbatch()
    probe.add(torch.ones(1, requires_grad=True), torch.tensor([1])).sum().backward()
    assert [b.written()[0] for b in probe._microbatches] == [{"count": 2, "value": 1, "padding": 1},
                                                             {"count": 1, "value": 1}]
    probe.capture()
    assert witness(probe)[:2] == [-(1 + 2), -1.0]  # the second call of a marked microbatch counts on: j = 2
    probe = Probe(Head())
    probe.add(torch.ones(1, requires_grad=True), torch.tensor([1]))
    with pytest.raises(ProbeError, match="from the first"):
        probe.microbatch()


def test_default_values_are_positive_distinct_and_small():
    table = {(r, m): probing.default_value(r, m) for r in range(8) for m in range(8)}
    assert len(set(table.values())) == len(table) and min(table.values()) == 2
    assert all(v > 0 and v < 2 ** 11 for v in table.values())  # exact even in float16
    assert [probing.default_value(r, 0) for r in range(4)] == [2, 3, 7, 17]


def test_losses_without_grad_are_not_recorded():
    probe = Probe(Head())
    with torch.no_grad():
        probe.add(torch.ones(2), torch.tensor([1, 1]))
        F.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 1]))
    assert probe._microbatches == []


# ---------------------------------------------------------------------------------------------------
# Keeping p invisible

def test_p_is_not_in_the_state_dict_and_checkpoints_without_it_load():
    model = Head()
    reference = model.state_dict()
    probe = Probe(model)
    assert probing.DEFAULT_NAME in dict(model.named_parameters())
    assert list(model.state_dict()) == list(reference)
    model.load_state_dict(Head().state_dict())  # strict, no key for p
    wrapper = nn.Sequential(model)  # a prefix, as DDP's "module."
    assert probing.DEFAULT_NAME not in " ".join(wrapper.state_dict())
    wrapper.load_state_dict(nn.Sequential(Head()).state_dict())
    probe.remove()
    assert probing.DEFAULT_NAME not in dict(model.named_parameters())
    with_p = nn.Linear(1, 1)
    with_p.register_parameter(probing.DEFAULT_NAME, nn.Parameter(torch.zeros(())))
    assert probing.DEFAULT_NAME in with_p.state_dict()  # the hook is what removes it


def test_a_checkpoint_with_an_unrelated_missing_key_still_fails():
    model = Head()
    Probe(model)
    state = Head().state_dict()
    del state["linear.bias"]
    with pytest.raises(RuntimeError, match="linear.bias"):
        model.load_state_dict(state)


def test_p_stays_out_of_optimizers_and_is_refused_in_one():
    model = Head()
    probe = Probe(model)
    kept = list(probe.model_parameters())
    assert all(p is not probe.parameter for p in kept) and len(kept) == 2
    assert [n for n, _ in probe.named_model_parameters()] == ["linear.weight", "linear.bias"]
    probe.check_optimizer(torch.optim.SGD(kept, lr=1))
    with pytest.raises(ProbeError, match="model_parameters"):
        probe.check_optimizer(torch.optim.AdamW(model.parameters(), lr=1))


def single_process_step(probe, model, x, labels, reduction="sum"):
    with probe.step():
        F.cross_entropy(model(x)[:, :-1].reshape(-1, CLASSES), labels[:, 1:].reshape(-1),
                        reduction=reduction).backward()


def test_judge_refuses_an_optimizer_holding_p_and_a_moved_p(tmp_path, executable):
    x, labels = inputs()
    model = Head()
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    single_process_step(probe, model, x, labels)
    with pytest.raises(ProbeError, match="reached the optimizer"):
        probe.judge(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    single_process_step(probe, model, x, labels)
    with torch.no_grad():
        probe.sites["linear"].add_(1.0)  # an update that moved a probe parameter
    with pytest.raises(ProbeError, match="not 0"):
        probe.judge()
    with torch.no_grad():
        probe.sites["linear"].zero_()


def test_an_optimizer_holding_p_leaves_it_at_zero_once_captured():
    x, labels = inputs()
    model = Head()
    probe = Probe(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)  # p and the site included
    single_process_step(probe, model, x, labels)
    optimizer.step()
    assert all(float(p.detach().abs().sum()) == 0 for p in probe.probe_parameters())
    assert primary(probe)[0] != 0  # what was judged is kept


def test_clipping_inside_the_step_captures_p_first_and_never_sees_it():
    x, labels = inputs()
    model, plain = Head(), Head()
    probe = Probe(model)
    for m in (model, plain):
        F.cross_entropy(m(x).reshape(-1, CLASSES), labels.reshape(-1)).backward() if m is plain else None
    with probe.step():
        F.cross_entropy(model(x).reshape(-1, CLASSES), labels.reshape(-1)).backward()
        assert probe.parameter.grad is not None and probe.captures == ()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)  # p among them
        assert probe.captures == ("gradient clipping",) and probe.parameter.grad is None
    assert probe.captures == ("gradient clipping",)  # nothing left for the end of the step
    want = torch.nn.utils.clip_grad_norm_(plain.parameters(), 1e-3)
    assert same_bits(norm, want) and same_bits(model.linear.weight.grad, plain.linear.weight.grad)
    assert primary(probe)[0] == -1.0  # the mean's weights, unclipped


def test_a_single_process_step_is_judged_and_never_passes_silently(tmp_path, executable):
    """One rank: the local mean is the objective, so the gate says inconclusive, not pass."""
    x, labels = inputs()
    model = Head()
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    single_process_step(probe, model, x, labels, reduction="mean")
    verdict = probe.judge()
    assert verdict.verdict == "inconclusive" and "local_mean" in verdict.could_hide
    assert verdict.explanations == () and verdict.diagnosis == ()  # could-hide names are not failures
    assert probe.parameter.grad is None  # left for the optimizer and clipping to ignore
    text = open(verdict.file, encoding="utf-8").read()
    assert '"dtype": "float32"' in text and '"reducer": "mean"' in text and '"theta": 0' in text
    single_process_step(probe, model, x, labels, reduction="mean")
    with pytest.raises(AssertionError, match="INCONCLUSIVE"):
        probe.check()
    with pytest.raises(ProbeError, match="saw no loss"):
        probe.judge()


def test_the_dump_of_a_single_process_step(tmp_path):
    """What the dump holds, without an executable: the groups, p's components, theta 0, the dtype."""
    x, labels = inputs()
    model = Head()
    probe = Probe(model, directory=str(tmp_path), sites=None)
    single_process_step(probe, model, x, labels, reduction="mean")
    document = json.loads(open(probe.dump(), encoding="utf-8").read())
    assert document["ranks"] == [{"targets": {"count": 3, "value": 1, "padding": 3}}]
    assert document["observed"] == {"per_rank": [["-0x1.0000000000000p+0"]], "witness": [["-0x1.0000000000000p+1"]],
                                    "dtype": "float32"}
    assert document["theta"] == 0 and document["objective"] == "token_mean" and document["world_size"] == 1
    assert probe.gradients() == {}  # the record is cleared once dumped


class Scaler:
    """What the probe uses of a GradScaler."""

    def is_enabled(self):
        return True

    def get_scale(self):
        return 1024.0


def test_a_grad_scaler_scale_is_taken_off(tmp_path):
    x, labels = inputs()
    model = Head()
    probe = Probe(model, directory=str(tmp_path), sites=None)
    with probe.step():
        loss = F.cross_entropy(model(x)[:, :-1].reshape(-1, CLASSES), labels[:, 1:].reshape(-1), reduction="sum")
        (loss * 1024.0).backward()
    document = json.loads(open(probe.dump(scaler=Scaler()), encoding="utf-8").read())
    count = int((labels[:, 1:] != -100).sum())
    assert document["observed"]["per_rank"] == [[float(-count).hex()]]


# ---------------------------------------------------------------------------------------------------
# Routing p through forward

class Odd(nn.Module):
    """Returns values a multiplication must keep: −0.0, NaN, ±inf, huge."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return {"ids": torch.arange(3), "values": x * self.scale}


def test_the_route_is_an_exact_identity_with_a_zero_gradient():
    """Under DDP with find_unused_parameters the probe multiplies the output by a 1 that depends on p."""
    x = torch.tensor([-0.0, 0.0, float("nan"), float("inf"), -float("inf"), 3.0e38, 1e-45])
    plain = Odd()(x)["values"]
    model = Odd()
    probe = Probe(model)
    routed, found = route(model(x), probe.probe_parameters())
    assert found and routed["ids"].dtype == torch.int64 and same_bits(routed["values"], plain)
    assert routed["values"].grad_fn is not None
    (gradient,) = torch.autograd.grad(routed["values"].sum(), probe.parameter, retain_graph=True)
    assert gradient.abs().sum().item() == 0.0  # not NaN, although the output holds infinities
    routed["values"].sum().backward()
    assert probe.parameter.grad is None  # outside a step p keeps no gradient once the backward is done


def test_the_route_check_catches_the_naive_factor():
    """(1 + p·0) is the obvious route; its gradient is 0·Σ(grad·out), NaN when an output is infinite."""
    p = nn.Parameter(torch.zeros(()))
    out = torch.tensor([1.0, float("inf")]) * (1 + p * 0)
    out.sum().backward()
    assert math.isnan(p.grad.item())


def test_an_output_without_a_floating_tensor_has_no_route():
    routed, found = route({"ids": torch.arange(3)}, [nn.Parameter(torch.zeros(3))])
    assert not found and routed["ids"].grad_fn is None


def test_named_tuples_and_lists_keep_their_type():
    import collections

    Pair = collections.namedtuple("Pair", "ids logits")
    routed, found = route(Pair(torch.arange(2), torch.ones(2)), [nn.Parameter(torch.zeros(3))])
    assert found and isinstance(routed, Pair) and routed.logits.grad_fn is not None
    routed, found = route([torch.arange(2), [torch.ones(2)]], [nn.Parameter(torch.zeros(3))])
    assert found and isinstance(routed, list) and routed[1][0].grad_fn is not None


def test_the_default_dtype_shares_the_bucket_on_two_ranks_only():
    assert Probe(Head(torch.float32)).parameter.dtype == torch.float32  # one process: the model's own
    assert Probe(Head(torch.float32), world_size=2).parameter.dtype == torch.float32
    assert Probe(Head(torch.float32), world_size=3).parameter.dtype == torch.float64  # a bucket of its own
    assert Probe(Head(torch.float64), world_size=3).parameter.dtype == torch.float32
    assert Probe(Head(torch.float32).to(torch.bfloat16), world_size=2).parameter.dtype == torch.float64
    assert Probe(Head(torch.float32), world_size=3, dtype=torch.float32).parameter.dtype == torch.float32
    with pytest.raises(ProbeError):
        Probe(Head(), dtype=torch.float16)


def test_the_observed_dtype_is_the_coarsest_arithmetic_the_gradient_met(tmp_path):
    x, labels = inputs()
    model = Head()  # float32 model, float64 p: the code's weights are float32
    probe = Probe(model, directory=str(tmp_path), dtype=torch.float64)
    single_process_step(probe, model, x, labels)
    assert '"dtype": "float32"' in open(probe.dump(), encoding="utf-8").read()
    model = Head(torch.float64)
    probe = Probe(model, dtype=torch.float64, directory=str(tmp_path))
    single_process_step(probe, model, x.double(), labels)
    assert '"dtype": "float64"' in open(probe.dump(), encoding="utf-8").read()


# ---------------------------------------------------------------------------------------------------
# The reduction dtype (the reducer's inference is in test_probe_document.py)

def test_torch_default_hooks_are_known_by_identity_and_by_name():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    assert capture.known_hook(None, default_hooks.allreduce_hook) == ("mean", None)
    assert capture.known_hook(None, default_hooks.fp16_compress_hook) == ("mean", "float16")
    assert capture.known_hook(None, default_hooks.bf16_compress_hook) == ("mean", "bfloat16")
    assert capture.known_hook("fp16_compress_hook", None) == ("mean", "float16")

    def fp16_compress_hook(state, bucket):  # a user's own function with torch's name
        return None

    assert capture.known_hook(None, fp16_compress_hook) == (None, None)
    assert capture.known_hook("my_hook", None) == (None, None)
    wrapped = default_hooks.fp16_compress_wrapper(default_hooks.allreduce_hook)
    assert capture.known_hook(None, wrapped) == (None, "float16")


def test_the_update_comparison_catches_one_ulp_and_the_sign_of_a_zero():
    weights = [torch.tensor([1.0, 0.0, float("nan")]), torch.ones(2, dtype=torch.float64)]
    assert tiny_lm.bitwise_equal(weights, [w.clone() for w in weights])
    one_ulp = [weights[0].clone(), torch.nextafter(weights[1], torch.full_like(weights[1], 2.0))]
    assert not tiny_lm.bitwise_equal(weights, one_ulp)
    negative_zero = [torch.tensor([1.0, -0.0, float("nan")]), weights[1]]
    assert not tiny_lm.bitwise_equal(weights, negative_zero)
