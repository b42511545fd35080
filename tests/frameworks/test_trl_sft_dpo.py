"""TRL's ``SFTTrainer`` and ``DPOTrainer`` on W = 2 ranks (gloo), on TRL's defaults, judged by ``attach(trainer)``.

SFTConfig turns on gradient checkpointing and bf16 and computes the loss from the fused LM head's
``log_probs`` (``model(..., fused_lm_head=True)``), never through ``cross_entropy``; nothing of that
is changed here. Each data mode is one variant: plain text, prompt-completion (completion-only loss,
TRL's default for such data), packing (best-fit packing, which TRL makes padding-free) and
padding-free batches without packing.

DPOTrainer is judged against the sequence mean with one sequence per preference pair: TRL averages
−logsigmoid(β·δ) over each microbatch's pairs, whatever their lengths. Judged against the token mean
it fails naming the sequence mean; a loss that sums the pairs instead of averaging them, and one that
divides by the accumulation steps a second time, fail with their names.

Every variant also trains once without the probe (``invisible.trained``): the training loss, the
gradients the optimizer receives and the updated parameters must be bitwise those of the probed run.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
import transformers  # imported before the ranks fork, so that they share them
import trl

import invisible
from normcheck.integrations import transformers as hf
from normcheck.integrations.trl import attach
from normcheck.launch import launch
from normcheck.probe import Probe, ProbeError

from tiny import LENGTHS, Rows, collate, llama, small_llama, tiny_tokenizer

TEXTS = ["a b c d a", "b c", "d d a b c a b", "a", "c d a b", "b b b", "a c", "d a b c d", "c", "b a d d",
         "a a b", "d c b a c"]
PROMPTS = ["a b", "c", "d a b", "b", "a c", "d", "c c", "b d a", "a", "d d", "c a", "b b"]
COMPLETIONS = ["c d a", "a", "b b", "c d d a", "a", "b c", "d", "a b c d", "c c", "b", "d a b", "a"]
REJECTED = ["d", "b c a b", "a", "c", "d d b", "a a", "b a c", "c", "d a", "a b c c", "b", "c d"]

# variant: (SFTConfig options, the dataset's kind); every variant is judged against the token mean.
SFT: Dict[str, Tuple[Dict[str, Any], str]] = {
    "plain": ({}, "text"),
    "completion_only": ({}, "prompt_completion"),
    "packing": ({"packing": True, "max_length": 12}, "text"),
    "padding_free": ({"padding_free": True, "max_length": None}, "text"),  # TRL refuses a max_length it cannot enforce
}
# variant: (the trainer class's change, the objective judged against or None for the declared one,
#           verdict, a name the diagnosis must hold)
DPO: Dict[str, Tuple[str, Optional[str], str, Optional[str]]] = {
    "default": ("none", None, "pass", None),
    "as_token_mean": ("none", "token_mean", "fail", "sequence_mean"),
    "summed_pairs": ("sum", None, "fail", "objective×"),  # ×2 pairs, which is also W here
    "divided_by_g": ("divide_by_g", None, "fail", "objective/G"),
}


def sft_data(kind: str) -> Any:
    """The SFT dataset of a kind: language modelling or prompt-completion."""
    from datasets import Dataset

    if kind == "text":
        return Dataset.from_dict({"text": TEXTS})
    return Dataset.from_dict({"prompt": PROMPTS, "completion": COMPLETIONS})


def sft_trainer(folder: str, options: Dict[str, Any], kind: str) -> Any:
    """An SFTTrainer on TRL's defaults but for the step's size and the variant's data options."""
    tokenizer = tiny_tokenizer()
    args = trl.SFTConfig(output_dir=folder, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=1,
                         use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no",
                         disable_tqdm=True, seed=0, learning_rate=1e-2, **options)
    return trl.SFTTrainer(model=small_llama(len(tokenizer)), args=args, train_dataset=sft_data(kind),
                          processing_class=tokenizer)


def dpo_trainer(folder: str, change: str) -> Any:
    """A DPOTrainer on TRL's defaults, its loss changed as ``change`` says (``none``: TRL's own)."""
    from datasets import Dataset

    class Changed(trl.DPOTrainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if change == "sum":  # the pairs summed instead of averaged
                return loss * (inputs["input_ids"].shape[0] // 2)
            if change == "divide_by_g":  # the accumulation steps divided out once more than the Trainer does
                return loss / self.args.gradient_accumulation_steps
            return loss

    tokenizer = tiny_tokenizer()
    # G = 3 ≠ W = 2, so that a factor 1/G cannot be told for 1/W, nor a sum over a microbatch's 2 pairs for ×G.
    args = trl.DPOConfig(output_dir=folder, per_device_train_batch_size=2, gradient_accumulation_steps=3, max_steps=1,
                         use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no",
                         disable_tqdm=True, seed=0, learning_rate=1e-2)
    data = Dataset.from_dict({"prompt": PROMPTS, "chosen": COMPLETIONS, "rejected": REJECTED})
    return Changed(model=small_llama(len(tokenizer)), ref_model=small_llama(len(tokenizer)), args=args,
                   train_dataset=data, processing_class=tokenizer)


def summary(callback: Any) -> Dict[str, Any]:
    """What a rank reports of one judged step."""
    if callback.error is not None:
        return {"error": f"ProbeError: {callback.error}"}
    verdict = callback.verdict
    rows = verdict.report.get("gate", {}).get("weights", {}).get("rows", [])
    return {"verdict": verdict.verdict, "diagnosis": list(verdict.diagnosis), "could_hide": list(verdict.could_hide),
            "message": verdict.message, "rows": len(rows), "rows_within": sum(1 for r in rows if r.get("within_bound"))}


def judged(make: Any, probe: Any, unprobed: Dict[str, Any], objective: Optional[str] = None) -> Dict[str, Any]:
    """One variant trained with the probe: its summary, its settings and what it changed of ``unprobed``."""
    trainer = make()
    callback = attach(trainer, probe=probe(trainer.model), raise_on_failure=False, objective=objective)
    probed = invisible.trained(trainer, callback.probe)
    result = summary(callback)
    result["changed"] = invisible.differences(unprobed, probed)
    result["gradients"] = sum(1 for g in probed["gradients"].values() if g is not None)
    result["settings"] = (bool(trainer.args.gradient_checkpointing), bool(trainer.args.bf16))
    return result


def trl_step(rank: int, world_size: int, probe: Any, folder: str) -> Dict[str, Any]:
    """Every SFT and DPO variant, unprobed and probed; the verdicts and what the probe changed."""
    transformers.logging.set_verbosity_error()
    results: Dict[str, Any] = {}
    for name, (options, kind) in SFT.items():
        def make_sft(probed: bool, name: str = name, options: Dict[str, Any] = options, kind: str = kind) -> Any:
            return sft_trainer(os.path.join(folder, "sft", name, str(probed), str(rank)), options, kind)

        try:
            results[f"sft-{name}"] = judged(lambda: make_sft(True), probe, invisible.trained(make_sft(False)))
        except Exception as e:  # reported per variant; both ranks raise alike
            results[f"sft-{name}"] = {"error": f"{type(e).__name__}: {e}"}
    unprobed: Dict[str, Dict[str, Any]] = {}
    for name, (change, objective, _, _) in DPO.items():
        def make_dpo(probed: bool, name: str = name, change: str = change) -> Any:
            return dpo_trainer(os.path.join(folder, "dpo", name, str(probed), str(rank)), change)

        try:
            if change not in unprobed:
                unprobed[change] = invisible.trained(make_dpo(False))
            results[f"dpo-{name}"] = judged(lambda: make_dpo(True), probe, unprobed[change], objective)
        except Exception as e:
            results[f"dpo-{name}"] = {"error": f"{type(e).__name__}: {e}"}
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """Both ranks' results of every variant (one launch)."""
    folder = tmp_path_factory.mktemp("trl")
    return launch(trl_step, 2, args=(str(folder),), timeout=900, directory=str(folder / "dumps"))


def _same_on_both(ranks: List[Dict[str, Any]], key: str) -> Dict[str, Any]:
    results = [rank[key] for rank in ranks]
    for result in results:
        assert "error" not in result, result["error"]
    assert [r["verdict"] for r in results] == [results[0]["verdict"]] * 2
    assert results[0]["rows"] > 0, "the dump has a weight table"
    return results[0]


def _unchanged(ranks: List[Dict[str, Any]], key: str) -> None:
    for rank, results in enumerate(ranks):
        result = results[key]
        assert "error" not in result, result["error"]
        assert result["gradients"] > 0, "the gradients the optimizer receives were taken"
        assert result["changed"] == [], f"rank {rank}: the probe changed the step:\n  " + "\n  ".join(result["changed"])


@pytest.mark.parametrize("variant", list(SFT))
def test_sft_on_its_defaults_passes_the_token_mean(ranks: List[Dict[str, Any]], variant: str) -> None:
    first = _same_on_both(ranks, f"sft-{variant}")
    assert first["settings"] == (True, True), "TRL's defaults: gradient checkpointing and bf16"
    if variant == "packing":  # packed rows hold as many tokens each: a per-microbatch count could hide
        assert first["verdict"] in ("pass", "inconclusive"), first["message"]
    else:
        assert first["verdict"] == "pass", first["message"]
    assert first["rows_within"] == first["rows"], first["message"]


@pytest.mark.parametrize("variant", list(SFT))
def test_sft_probed_step_is_the_unprobed_one(ranks: List[Dict[str, Any]], variant: str) -> None:
    _unchanged(ranks, f"sft-{variant}")


@pytest.mark.parametrize("variant", list(DPO))
def test_dpo_verdict(ranks: List[Dict[str, Any]], variant: str) -> None:
    first = _same_on_both(ranks, f"dpo-{variant}")
    _, _, verdict, name = DPO[variant]
    if verdict == "pass":  # every rank holds as many pairs, so a per-rank pair count could hide
        assert first["verdict"] in ("pass", "inconclusive"), first["message"]
        assert first["rows_within"] == first["rows"], first["message"]
    else:
        assert first["verdict"] == "fail", first["message"]
        assert name is not None and any(name in n for n in first["diagnosis"]), first["message"]


@pytest.mark.parametrize("variant", list(DPO))
def test_dpo_probed_step_is_the_unprobed_one(ranks: List[Dict[str, Any]], variant: str) -> None:
    _unchanged(ranks, f"dpo-{variant}")


# -- a loss the probe does not see: the error obeys raise_on_failure -----------------------------------


def gathered_loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """The token mean built from log_softmax and gather, never through cross_entropy."""
    logits, targets = outputs["logits"][:, :-1].float(), labels[:, 1:]
    valid = targets != -100
    picked = torch.log_softmax(logits, -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * valid).sum() / (num_items_in_batch if num_items_in_batch is not None else valid.sum())


@pytest.mark.parametrize("raise_on_failure", [False, True])
def test_a_step_whose_loss_is_unseen_names_its_call_and_obeys_raise_on_failure(
        tmp_path: Any, executable: str, raise_on_failure: bool) -> None:
    def trainer() -> Any:
        args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
                                              gradient_accumulation_steps=2, max_steps=1, use_cpu=True,
                                              report_to="none", save_strategy="no", logging_strategy="no",
                                              disable_tqdm=True, seed=0, learning_rate=1e-2)
        return transformers.Trainer(model=llama(), args=args, train_dataset=Rows(LENGTHS[:4]), data_collator=collate,
                                    compute_loss_func=gathered_loss)

    unprobed = invisible.trained(trainer())
    probed_trainer = trainer()
    probe = Probe(probed_trainer.model, executable=executable, directory=str(tmp_path))
    callback = hf.attach(probed_trainer, probe=probe, raise_on_failure=raise_on_failure)
    if raise_on_failure:
        with pytest.raises(ProbeError, match="saw no loss.*log_softmax"):
            probed_trainer.train()
        return
    probed = invisible.trained(probed_trainer, probe)
    assert callback.error is not None and callback.verdict is None
    assert "saw no loss" in str(callback.error) and "log_softmax" in str(callback.error), str(callback.error)
    found = invisible.differences(unprobed, probed)
    assert not found, "the probe changed the step:\n  " + "\n  ".join(found)
