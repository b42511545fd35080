"""A real ``transformers.Trainer`` step on W = 2 ranks (gloo), judged through ``normcheck.integrations.transformers``.

Every variant is the Trainer's own code path, chosen only through its public arguments or the model it
is given: the default (tokens counted over the window and across ranks: passes), the per-device count
(``average_tokens_across_devices=False``: local_mean), a model whose ``forward(**kwargs)`` ignores
``num_items_in_batch`` (transformers #37208), and the Trainer's ``LabelSmoother``, measured, both with
the default and the per-device count. G = 2 and 4, per-device batches of two rows of different lengths.
All variants run in one launch (one process group; each variant its own model, probe and Trainer), and
each test asserts one variant's verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
import transformers  # imported before the ranks fork, so that they share it

from normcheck.integrations.transformers import attach
from normcheck.launch import launch

from tiny import LENGTHS, CountIgnoringLM, Rows, collate, llama

# What normcheck must conclude per variant: (verdict, a failure name it must give, or None).
EXPECTED: Dict[str, Tuple[str, Optional[str]]] = {
    "default": ("pass", None),
    "no_average": ("fail", "local_mean"),
    "ignores_count": ("fail", "microbatch_mean×W·G"),
    "label_smoothing": ("pass", None),
    "label_smoothing_no_average": ("fail", "local_mean"),
}
ACCUMULATION = (2, 4)
WORLD_SIZE = 2


def trainer_arguments(folder: str, variant: str, g: int, **overrides: Any) -> Any:
    """The Trainer's arguments for one variant: one optimizer step of G microbatches of two rows per rank."""
    settings: Dict[str, Any] = dict(
        output_dir=folder, per_device_train_batch_size=2, gradient_accumulation_steps=g, max_steps=1,
        use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        train_sampling_strategy="sequential", seed=0, learning_rate=1e-2,
        average_tokens_across_devices=not variant.endswith("no_average"),
        label_smoothing_factor=0.1 if variant.startswith("label_smoothing") else 0.0)
    settings.update(overrides)
    return transformers.TrainingArguments(**settings)


def make_trainer(folder: str, variant: str, g: int, world_size: int, **overrides: Any) -> Any:
    """A Trainer over the first W·G·2 rows, with a fresh model (the same seed every time)."""
    model = CountIgnoringLM() if variant == "ignores_count" else llama()
    return transformers.Trainer(model=model, args=trainer_arguments(folder, variant, g, **overrides),
                                train_dataset=Rows(LENGTHS[: world_size * g * 2]), data_collator=collate)


def outcome(callback: Any) -> Dict[str, Any]:
    """What a rank reports of one judged step."""
    verdict = callback.verdict
    return {"verdict": verdict.verdict, "passed": verdict.passed, "diagnosis": list(verdict.diagnosis),
            "could_hide": list(verdict.could_hide), "message": verdict.message,
            "dropped": callback.dropped_from_optimizer}


def variants_step(rank: int, world_size: int, probe: Any, folder: str) -> Dict[str, Any]:
    """Every variant, each its own Trainer; an exception is reported per variant (both ranks raise alike)."""
    transformers.logging.set_verbosity_error()
    results: Dict[str, Any] = {}
    for g in ACCUMULATION:
        for variant in EXPECTED:
            key = f"{variant}-G{g}"
            try:
                trainer = make_trainer(os.path.join(folder, key, str(rank)), variant, g, world_size)
                callback = attach(trainer, probe=probe(trainer.model), raise_on_failure=False)
                trainer.train()
                results[key] = outcome(callback)
            except Exception as e:  # reported, the next variant still runs
                results[key] = {"error": f"{type(e).__name__}: {e}"}
    # The user's default: a failing step raises NormcheckFailure out of train(), on every rank.
    try:
        trainer = make_trainer(os.path.join(folder, "raises", str(rank)), "no_average", 2, world_size)
        attach(trainer, probe=probe(trainer.model))
        trainer.train()
        results["raises"] = {"raised": None}
    except AssertionError as e:
        results["raises"] = {"raised": type(e).__name__, "explanations": list(getattr(e, "explanations", ()))}
    except Exception as e:
        results["raises"] = {"error": f"{type(e).__name__}: {e}"}
    # A step judged after one that is not: DDP must find p's gradient on the unjudged step as well.
    try:
        trainer = make_trainer(os.path.join(folder, "second", str(rank)), "no_average", 2, world_size, max_steps=2)
        callback = attach(trainer, step=1, probe=probe(trainer.model), raise_on_failure=False)
        trainer.train()
        results["second_step"] = outcome(callback)
    except Exception as e:
        results["second_step"] = {"error": f"{type(e).__name__}: {e}"}
    # The probe changes nothing: the same steps with and without it update the model bit for bit.
    try:
        updated: List[Dict[str, torch.Tensor]] = []
        for probed in (False, True):
            # Two steps, the second judged: the first runs with p routed through the output, the second probed.
            trainer = make_trainer(os.path.join(folder, f"same-{probed}", str(rank)), "default", 2, world_size,
                                   max_steps=2)
            if probed:
                attach(trainer, step=1, probe=probe(trainer.model))
            trainer.train()
            updated.append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
        differ = [k for k in updated[0] if not torch.equal(updated[0][k], updated[1][k])]
        results["unchanged"] = {"keys": sorted(updated[0]) == sorted(updated[1]), "differ": differ}
    except Exception as e:
        results["unchanged"] = {"error": f"{type(e).__name__}: {e}"}
    # A real run judged every other step (attach(every=2, log=...)): five steps, 0, 2 and 4 judged, one log
    # line each, and the run's parameters bitwise those of the same run without the probe.
    try:
        log = os.path.join(folder, "every.jsonl")
        states: List[Dict[str, torch.Tensor]] = []
        callback = None
        for probed in (False, True):
            trainer = make_trainer(os.path.join(folder, f"every-{probed}", str(rank)), "default", 2, world_size,
                                   max_steps=5)
            if probed:
                callback = attach(trainer, every=2, log=log, probe=probe(trainer.model), raise_on_failure=False)
            trainer.train()
            states.append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
        assert callback is not None
        with open(log, encoding="utf-8") if rank == 0 else contextlib.nullcontext() as f:
            lines = [json.loads(line) for line in f] if f is not None else None
        results["every"] = {"steps": [step for step, _ in callback.steps.verdicts],
                            "verdicts": [v.verdict for v in callback.verdicts],
                            "differ": [k for k in states[0] if not torch.equal(states[0][k], states[1][k])],
                            "logged": lines}
    except Exception as e:
        results["every"] = {"error": f"{type(e).__name__}: {e}"}
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """One launch of every variant on W = 2 ranks; each rank's results."""
    folder = tmp_path_factory.mktemp("trainer")
    return launch(variants_step, WORLD_SIZE, args=(str(folder),), timeout=600, directory=str(folder / "dumps"))


def reported(ranks: List[Dict[str, Any]], key: str) -> Dict[str, Any]:
    """Rank 0's result for ``key``, after checking that every rank reported the same verdict."""
    first = ranks[0][key]
    assert "error" not in first, first["error"]
    for other in ranks[1:]:
        assert {k: v for k, v in other[key].items() if k != "message"} == \
               {k: v for k, v in first.items() if k != "message"}
    return first


@pytest.mark.parametrize("g", ACCUMULATION, ids=lambda g: f"G{g}")
@pytest.mark.parametrize("variant", list(EXPECTED))
def test_trainer_variant_verdict(ranks: List[Dict[str, Any]], variant: str, g: int) -> None:
    result = reported(ranks, f"{variant}-G{g}")
    verdict, name = EXPECTED[variant]
    assert result["verdict"] == verdict, result["message"]
    if name is not None:
        assert name in result["diagnosis"], result["message"]
    assert result["dropped"] >= 1, "the Trainer's optimizer held p (it takes every parameter), and p left it"


def test_a_failing_step_raises_out_of_train(ranks: List[Dict[str, Any]]) -> None:
    result = reported(ranks, "raises")
    assert result["raised"] == "NormcheckFailure"
    assert "local_mean" in result["explanations"]


def test_a_step_after_an_unjudged_one_is_judged(ranks: List[Dict[str, Any]]) -> None:
    result = reported(ranks, "second_step")
    assert result["verdict"] == "fail", result["message"]
    assert "local_mean" in result["diagnosis"], result["message"]


def test_a_run_is_judged_every_k_steps_and_logged_unchanged(ranks: List[Dict[str, Any]]) -> None:
    for rank, results in enumerate(ranks):
        result = results["every"]
        assert "error" not in result, result["error"]
        assert result["steps"] == [0, 2, 4] and result["verdicts"] == ["pass"] * 3, result
        assert result["differ"] == [], f"rank {rank}: the probed five-step run changed {result['differ']}"
    logged = ranks[0]["every"]["logged"]
    assert [(line["step"], line["status"], line["verdict"]) for line in logged] == [(0, "pass", "pass"),
                                                                                   (2, "pass", "pass"),
                                                                                   (4, "pass", "pass")]
    assert ranks[1]["every"]["logged"] is None  # only rank 0 writes the log


def test_the_probe_changes_no_update(ranks: List[Dict[str, Any]]) -> None:
    result = reported(ranks, "unchanged")
    assert result["keys"], "the probed model's state_dict has other keys (p must not be in it)"
    assert result["differ"] == []


# -- the pieces, in one process ------------------------------------------------------------------


def test_the_probed_label_smoother_keeps_the_value_and_refuses_another_denominator() -> None:
    from transformers.trainer_pt_utils import LabelSmoother

    from normcheck.integrations.transformers import ProbedLabelSmoother
    from normcheck.torch import Probe, ProbeError
    from tiny import TinyLM

    torch.manual_seed(0)
    logits = torch.randn(2, 5, 32, requires_grad=True)
    labels = torch.tensor([[4, 5, 6, 7, -100], [8, 9, -100, -100, -100]])
    smoother = LabelSmoother(epsilon=0.1)
    probe = Probe(TinyLM())
    with probe.step(wrap=False):
        for count in (None, torch.tensor(7), 7):
            expected = smoother({"logits": logits}, labels, shift_labels=True, num_items_in_batch=count)
            probed = ProbedLabelSmoother(smoother, probe)({"logits": logits}, labels, shift_labels=True,
                                                          num_items_in_batch=count)
            assert torch.equal(probed, expected), "the smoother's value, bit for bit"
            assert probed.requires_grad and probed.grad_fn is not None

        class Halved(LabelSmoother):  # a smoother that divides by another denominator than its count
            def __call__(self, model_output: Any, labels: torch.Tensor, shift_labels: bool = False,
                         num_items_in_batch: Any = None) -> torch.Tensor:
                return super().__call__(model_output, labels, shift_labels, num_items_in_batch) / 2

        with pytest.raises(ProbeError, match="divided its loss by"):
            ProbedLabelSmoother(Halved(epsilon=0.1), probe)({"logits": logits}, labels, shift_labels=True,
                                                            num_items_in_batch=torch.tensor(5))


def test_drop_from_optimizer_takes_out_every_probe_parameter_and_refuses_one_with_state() -> None:
    from normcheck.integrations.transformers import drop_from_optimizer
    from normcheck.torch import Probe, ProbeError
    from tiny import TinyLM

    model = TinyLM()
    probe = Probe(model)
    optimizer = torch.optim.AdamW([{"params": list(model.parameters())[:2]},
                                   {"params": list(model.parameters())[2:]}], lr=1e-3)
    held = sum(1 for g in optimizer.param_groups if any(probe.is_probe(q) for q in g["params"]))
    assert held >= 1
    assert drop_from_optimizer(optimizer, probe) == held
    assert not any(probe.is_probe(q) for g in optimizer.param_groups for q in g["params"])
    probe.check_optimizer(optimizer)
    assert drop_from_optimizer(optimizer, probe) == 0

    stepped = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    for q in model.parameters():
        q.grad = torch.zeros_like(q)
    stepped.step()
    with pytest.raises(ProbeError, match="optimizer state"):
        drop_from_optimizer(stepped, probe)


def test_attach_refuses_a_trainer_that_already_wrapped_its_model(tmp_path: Any) -> None:
    from normcheck.torch import ProbeError

    trainer = make_trainer(str(tmp_path), "default", 2, 1)
    trainer.model_wrapped = torch.nn.Sequential(trainer.model)
    with pytest.raises(ProbeError, match="before trainer.train"):
        attach(trainer)
