"""normcheck.torch.Probe in one process: the wrapped cross_entropy, p's gradient, keeping p invisible.

Needs torch. Multi-process behaviour (DDP, hooks, verdicts) is in test_ddp.py.
"""

import math
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import tiny_lm  # noqa: E402
from normcheck import torch as probing  # noqa: E402
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

        # p.grad: −Σ w·y over valid tokens, divided as torch divides ('mean': by Σ w of valid targets).
        seen = labels[:, 1:].reshape(-1) if loss_name != "spatial" else labels.reshape(-1)
        valid = [int(t) for t in seen if int(t) != ignore]
        weights = [float(options["weight"][t]) if weighted else 1.0 for t in valid]
        y = probing.default_value(0, 0)
        total = -sum(Fraction(w) * y for w in weights)
        want = total / sum(Fraction(w) for w in weights) if reduction == "mean" else total
        assert Fraction(probe.parameter.grad.item()) == want, where
        assert probe._microbatches[0].values == [None if int(t) == ignore else y for t in seen]
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
    assert probe.parameter.grad.item() == -2 * valid / valid
    assert probe.parameter.grad.item() != -2 * valid / positions


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
    assert probe.parameter.grad.item() == (-2.0 * valid if summed else -2.0)


def test_the_wrapping_ends_with_the_step():
    original, forward = F.cross_entropy, nn.CrossEntropyLoss.forward
    clip = torch.nn.utils.clip_grad_norm_
    probe = Probe(Head())
    with pytest.raises(RuntimeError):
        with probe.step():
            assert F.cross_entropy is not original and nn.CrossEntropyLoss.forward is not forward
            raise RuntimeError("the step failed")
    assert F.cross_entropy is original and nn.CrossEntropyLoss.forward is forward
    assert torch.nn.utils.clip_grad_norm_ is clip
    with probe.step(wrap=False):
        assert F.cross_entropy is original


def test_add_puts_the_term_on_valid_tokens_only_and_keeps_every_bit():
    per_token = torch.tensor([0.5, -0.0, 0.0, 1.25, float("inf")], requires_grad=True)
    labels = torch.tensor([3, 1, -100, -100, 2])
    probe = Probe(Head())
    probed = probe.add(per_token, labels)
    assert same_bits(probed, per_token)  # including −0.0 on a valid token and +0.0 on padding
    probed.sum().backward()
    assert probe.parameter.grad.item() == -2.0 * 3
    assert per_token.grad.tolist() == [1.0] * 5
    assert probe._microbatches[0].values == [2, 2, None, None, 2]


def test_add_with_weights_and_the_double_probing_guard():
    probe = Probe(Head())
    per_token = torch.ones(3, requires_grad=True)
    probe.add(per_token, torch.tensor([0, -100, 1]), weights=torch.tensor([0.5, 9.0, 0.25])).sum().backward()
    assert probe.parameter.grad.item() == -2.0 * (0.5 + 0.25)
    assert probe._microbatches[0].weights == [0.5, None, 0.25]
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
    assert [b.values for b in probe._microbatches] == [[2, 2], [5, 5]]  # (rank 0, microbatch 1) gets 5
    probe = Probe(Head())
    probe.microbatch()
    probe.add(torch.ones(2, requires_grad=True), torch.tensor([1, -100]))
    probe.add(torch.ones(1, requires_grad=True), torch.tensor([1]))
    probe.microbatch()
    probe.add(torch.ones(1, requires_grad=True), torch.tensor([1]))
    assert [b.values for b in probe._microbatches] == [[2, None, 2], [5]]
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
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    with pytest.raises(ProbeError, match="not 0"):
        probe.judge()


def test_clipping_that_includes_p_before_the_check_is_refused():
    x, labels = inputs()
    model = Head()
    probe = Probe(model)
    with probe.step():
        F.cross_entropy(model(x).reshape(-1, CLASSES), labels.reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(probe.model_parameters(), 1.0)
        with pytest.raises(ProbeError, match="clipping"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with pytest.raises(ProbeError, match="clipping"):
            torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
        probe.parameter.grad = None  # what check() leaves: then clipping everything is harmless
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def test_a_single_process_step_is_judged_and_never_passes_silently(tmp_path, executable):
    """One rank: the local mean is the objective, so the gate says inconclusive, not pass."""
    x, labels = inputs()
    model = Head()
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    single_process_step(probe, model, x, labels, reduction="mean")
    verdict = probe.judge()
    assert verdict.verdict == "inconclusive" and "local_mean" in verdict.could_hide
    assert probe.parameter.grad is None  # left for the optimizer and clipping to ignore
    text = open(verdict.file, encoding="utf-8").read()
    assert '"dtype": "float32"' in text and '"reducer": "mean"' in text and '"theta": 0' in text
    single_process_step(probe, model, x, labels, reduction="mean")
    with pytest.raises(AssertionError, match="INCONCLUSIVE"):
        probe.check()
    with pytest.raises(ProbeError, match="saw no loss"):
        probe.judge()


class Scaler:
    """What the probe uses of a GradScaler."""

    def is_enabled(self):
        return True

    def get_scale(self):
        return 1024.0


def test_a_grad_scaler_scale_is_taken_off(tmp_path, executable):
    x, labels = inputs()
    model = Head()
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    with probe.step():
        loss = F.cross_entropy(model(x)[:, :-1].reshape(-1, CLASSES), labels[:, 1:].reshape(-1), reduction="sum")
        (loss * 1024.0).backward()
    verdict = probe.judge(scaler=Scaler())
    count = int((labels[:, 1:] != -100).sum())
    assert verdict.report["gate"]["observed"] == str(-2 * count)


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
    x = torch.tensor([-0.0, 0.0, float("nan"), float("inf"), -float("inf"), 3.0e38, 1e-45])
    plain = Odd()(x)["values"]
    model = Odd()
    probe = Probe(model)
    routed = model(x)
    assert routed["ids"].dtype == torch.int64 and same_bits(routed["values"], plain)
    assert routed["values"].grad_fn is not None
    routed["values"].sum().backward()
    assert probe.parameter.grad.item() == 0.0  # not NaN, although the output holds infinities


def test_the_route_check_catches_the_naive_factor():
    """(1 + p·0) is the obvious route; its gradient is 0·Σ(grad·out), NaN when an output is infinite."""
    p = nn.Parameter(torch.zeros(()))
    out = torch.tensor([1.0, float("inf")]) * (1 + p * 0)
    out.sum().backward()
    assert math.isnan(p.grad.item())


def test_a_module_without_a_floating_output_is_refused():
    class Ids(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(()))

        def forward(self, x):
            return (x > 0).long()

    model = Ids()
    Probe(model)
    with pytest.raises(ProbeError, match="no floating tensor"):
        model(torch.ones(2))


def test_named_tuples_and_lists_keep_their_type():
    import collections

    Pair = collections.namedtuple("Pair", "ids logits")
    routed, found = probing._route(Pair(torch.arange(2), torch.ones(2)), nn.Parameter(torch.zeros(())))
    assert found and isinstance(routed, Pair) and routed.logits.grad_fn is not None
    routed, found = probing._route([torch.arange(2), [torch.ones(2)]], nn.Parameter(torch.zeros(())))
    assert found and isinstance(routed, list) and routed[1][0].grad_fn is not None


def test_the_default_dtype_gives_p_a_bucket_of_its_own():
    assert Probe(Head(torch.float32)).parameter.dtype == torch.float64
    assert Probe(Head(torch.float64)).parameter.dtype == torch.float32
    assert Probe(Head(torch.float32), dtype=torch.float32).parameter.dtype == torch.float32
    with pytest.raises(ProbeError):
        Probe(Head(), dtype=torch.float16)


def test_the_observed_dtype_is_the_coarsest_arithmetic_the_gradient_met(tmp_path, executable):
    x, labels = inputs()
    model = Head()  # float32 model, float64 p: the probe's sums were float32
    probe = Probe(model, executable=executable, directory=str(tmp_path))
    single_process_step(probe, model, x, labels)
    assert '"dtype": "float32"' in open(probe.judge().file, encoding="utf-8").read()
    model = Head(torch.float64)
    probe = Probe(model, dtype=torch.float64, executable=executable, directory=str(tmp_path))
    single_process_step(probe, model, x.double(), labels)
    assert '"dtype": "float64"' in open(probe.judge().file, encoding="utf-8").read()


# ---------------------------------------------------------------------------------------------------
# The reducer and the reduction dtype

def test_the_reducer_is_inferred_from_local_and_reduced_gradients():
    assert probing._infer_reducer([-1.0, -2.0], -1.5) == "mean"
    assert probing._infer_reducer([-1.0, -2.0], -3.0) == "sum"
    assert probing._infer_reducer([-1.0, -2.0], -1.5009765625) == "mean"  # float16 rounding
    assert probing._infer_reducer([-1.0, -2.0], -7.0) is None
    assert probing._infer_reducer([0.0, 0.0], 0.0) is None
    assert probing._infer_reducer([float("nan"), 1.0], float("nan")) is None
    assert probing._infer_reducer([-4.0], -4.0) == "mean"


def test_torch_default_hooks_are_known_by_identity_and_by_name():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    assert probing._known_hook(None, default_hooks.allreduce_hook) == ("mean", None)
    assert probing._known_hook(None, default_hooks.fp16_compress_hook) == ("mean", "float16")
    assert probing._known_hook(None, default_hooks.bf16_compress_hook) == ("mean", "bfloat16")
    assert probing._known_hook("fp16_compress_hook", None) == ("mean", "float16")

    def fp16_compress_hook(state, bucket):  # a user's own function with torch's name
        return None

    assert probing._known_hook(None, fp16_compress_hook) == (None, None)
    assert probing._known_hook("my_hook", None) == (None, None)
    wrapped = default_hooks.fp16_compress_wrapper(default_hooks.allreduce_hook)
    assert probing._known_hook(None, wrapped) == (None, "float16")


def test_the_update_comparison_catches_one_ulp_and_the_sign_of_a_zero():
    weights = [torch.tensor([1.0, 0.0, float("nan")]), torch.ones(2, dtype=torch.float64)]
    assert tiny_lm.bitwise_equal(weights, [w.clone() for w in weights])
    one_ulp = [weights[0].clone(), torch.nextafter(weights[1], torch.full_like(weights[1], 2.0))]
    assert not tiny_lm.bitwise_equal(weights, one_ulp)
    negative_zero = [torch.tensor([1.0, -0.0, float("nan")]), weights[1]]
    assert not tiny_lm.bitwise_equal(weights, negative_zero)


def fake_suggest(tmp_path, partition, status=0):
    """A normcheck that answers `suggest --counts` with `partition` and records its arguments."""
    import json

    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"partition": partition, "separation": "7", "closest_pair": "a and b",
                                  "inseparable": [], "required": 100}))
    program = tmp_path / "normcheck"
    program.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/arguments"\ncat "{answer}"\nexit {status}\n')
    program.chmod(0o755)
    return str(program)


def test_plan_maps_the_suggested_targets_to_the_valid_tokens(tmp_path):
    partition = {"format": "normcheck/1", "ranks": [{"microbatches": [[4, -3, 9], [1]]}], "theta": 0}
    model = Head()  # float32: p is float64, the losses float32
    probe = Probe(model, executable=fake_suggest(tmp_path, partition))
    suggestion = probe.plan([[3, 1]])
    assert suggestion.separated and probe.suggestion is suggestion
    assert (tmp_path / "arguments").read_text().split()[-3:] == ["--dtype", "float32", "--json"]
    probe.add(torch.zeros(4, requires_grad=True), torch.tensor([5, -100, 6, 7])).sum().backward()
    probe.add(torch.zeros(2, requires_grad=True), torch.tensor([-100, 1])).sum().backward()
    assert [b.values for b in probe._microbatches] == [[4, None, -3, 9], [None, 1]]
    assert probe.parameter.grad.item() == -(4 - 3 + 9 + 1)
    with pytest.raises(ProbeError, match="no microbatch 2"):
        probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1]))
    probe = Probe(Head(), executable=fake_suggest(tmp_path, partition))
    probe.plan([[3, 1]])
    with pytest.raises(ProbeError, match="more valid tokens than the 3"):
        probe.add(torch.zeros(4, requires_grad=True), torch.tensor([1, 1, 1, 1]))


def test_a_step_whose_counts_differ_from_the_plan_is_refused(tmp_path):
    partition = {"format": "normcheck/1", "ranks": [{"targets": [4, 5, 6]}], "theta": 0}
    probe = Probe(Head(), executable=fake_suggest(tmp_path, partition))
    probe.plan([[3]])
    probe.add(torch.zeros(2, requires_grad=True), torch.tensor([1, 1])).sum().backward()
    with pytest.raises(ProbeError, match=r"plan was made for counts \[3\], the step had \[2\]"):
        probe.judge()
    shifted = {"format": "normcheck/1", "ranks": [{"targets": [4, 5, 6]}], "theta": 1}
    with pytest.raises(probing.NormcheckError, match="θ = 0"):
        Probe(Head(), executable=fake_suggest(tmp_path, shifted)).plan([[3]])
