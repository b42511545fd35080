"""TRL's ``GRPOTrainer`` on W = 2 ranks (gloo): a tiny model generates on CPU, and each ``loss_type`` is judged
against the objective it declares, through ``normcheck.integrations.trl``.

"grpo" averages each completion over its tokens, then the completions: the sequence mean. "dr_grpo"
divides the token sum by a constant (B·L_max per microbatch, so W·G·B·L_max over the update). "dapo"
divides by the generation batch's tokens over all ranks: the token mean. "dr_grpo" and "dapo" pass
against their own objectives; "grpo" weighs every completion as the sequence mean does, and the gate
still says inconclusive, since TRL gives every rank the same number of completions and a per-rank
sequence count would weigh the same. Against another objective each fails, naming what it computed.
Completions end at sampled end-of-sequence tokens, so their lengths differ and the objectives differ.
Each loss type also trains once without the probe (``invisible.trained``): the training loss, the
gradients the optimizer receives and the update must be bitwise those of every probed run.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import pytest
import transformers  # imported before the ranks fork, so that they share them
import trl

from normcheck.integrations.trl import attach
from normcheck.launch import launch

from tiny import small_llama, tiny_tokenizer

# variant: (loss_type, the objective judged against or None for the declared one, verdict, a name it must give)
# "grpo" matches its objective group by group, but every rank holds B·G completions by construction, so a
# per-rank sequence count (local_mean) weighs exactly the same on every step TRL can run: the gate says
# inconclusive and names only that, never pass (a name is matched as a part of the diagnosis' names,
# which say of which objective a per-rank mean is taken, e.g. "local_mean(sequence_mean)").
EXPECTED: Dict[str, Tuple[str, Optional[str], str, Optional[str]]] = {
    "grpo": ("grpo", None, "inconclusive", "local_mean"),
    "dr_grpo": ("dr_grpo", None, "pass", None),
    "dapo": ("dapo", None, "pass", None),
    "grpo-as-token_mean": ("grpo", "token_mean", "fail", "sequence_mean"),
    "dapo-as-sequence_mean": ("dapo", "sequence_mean", "fail", "token_mean"),
    # B·L_max per microbatch counts every position a completion could have held: padding, against the token mean.
    "dr_grpo-as-token_mean": ("dr_grpo", "token_mean", "fail", "count_padding"),
}
PROMPTS = ["a b", "c d a", "b b c", "d", "a", "c c", "d b a", "b"]


def reward(completions: List[str], **kwargs: Any) -> List[float]:
    """Longer completions score higher (any reward will do: the probe measures weights, not advantages)."""
    return [float(len(c)) for c in completions]


def grpo_trainer(folder: str, loss_type: str) -> Any:
    """A GRPOTrainer of one optimizer step on a fresh model (the same seed every time)."""
    from datasets import Dataset

    tokenizer = tiny_tokenizer()
    args = trl.GRPOConfig(
        output_dir=folder, per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4,
        max_completion_length=8, max_steps=1, use_cpu=True, report_to="none", logging_strategy="no",
        save_strategy="no", disable_tqdm=True, loss_type=loss_type, seed=0, learning_rate=1e-2)
    return trl.GRPOTrainer(model=small_llama(len(tokenizer)), reward_funcs=reward, args=args,
                           train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tokenizer)


def grpo_step(rank: int, world_size: int, probe: Any, folder: str) -> Dict[str, Any]:
    """Every variant, each its own model and GRPOTrainer, and each loss type once unprobed; the verdicts and
    what the probe changed of the unprobed step."""
    import invisible

    transformers.logging.set_verbosity_error()
    results: Dict[str, Any] = {}
    unprobed: Dict[str, Dict[str, Any]] = {}
    for name, (loss_type, objective, _, _) in EXPECTED.items():
        try:
            if loss_type not in unprobed:
                unprobed[loss_type] = invisible.trained(grpo_trainer(os.path.join(folder, "plain", loss_type,
                                                                                  str(rank)), loss_type))
            trainer = grpo_trainer(os.path.join(folder, name, str(rank)), loss_type)
            callback = attach(trainer, probe=probe(trainer.model), raise_on_failure=False, objective=objective)
            probed = invisible.trained(trainer, callback.probe)
            verdict = callback.verdict
            rows = verdict.report.get("gate", {}).get("weights", {}).get("rows", [])
            results[name] = {"verdict": verdict.verdict, "diagnosis": list(verdict.diagnosis),
                             "could_hide": list(verdict.could_hide), "message": verdict.message,
                             "rows": len(rows), "rows_within": sum(1 for r in rows if r.get("within_bound")),
                             "changed": invisible.differences(unprobed[loss_type], probed)}
        except Exception as e:  # reported per variant; both ranks raise alike
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """Both ranks' results of every variant (one launch)."""
    folder = tmp_path_factory.mktemp("grpo")
    return launch(grpo_step, 2, args=(str(folder),), timeout=600, directory=str(folder / "dumps"))


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_grpo_loss_type_verdict(ranks: List[Dict[str, Any]], variant: str) -> None:
    results = [rank[variant] for rank in ranks]
    for result in results:
        assert "error" not in result, result["error"]
    first = results[0]
    assert [r["verdict"] for r in results] == [first["verdict"]] * 2
    _, _, verdict, name = EXPECTED[variant]
    assert first["verdict"] == verdict, first["message"]
    assert first["rows"] > 0, "the dump has a weight table (one row per completion)"
    if verdict == "pass":
        assert first["rows_within"] == first["rows"], first["message"]
    elif verdict == "inconclusive":
        assert first["rows_within"] == first["rows"], "every completion weighs what the objective gives it"
        assert first["could_hide"] == [name], first["message"]
    else:
        assert name is not None and any(name in n for n in first["diagnosis"]), first["message"]
    for rank, result in enumerate(results):
        assert result["changed"] == [], f"rank {rank}: the probe changed the step:\n  " + "\n  ".join(result["changed"])


# -- the probe changes nothing of an SFTTrainer step on TRL's defaults --------------------------------

TEXTS = ["a b c d a", "b c", "d d a b c a b", "a", "c d a b", "b b b", "a c", "d a b c d"]


def sft_unchanged_step(rank: int, world_size: int, probe: Any, folder: str) -> List[str]:
    """An SFTTrainer step (gradient checkpointing and bf16 on, TRL's defaults) with and without the probe.

    The transformers callback alone: its loss is the fused head's log_probs, which the probe routes
    itself. The training loss, the gradients the optimizer receives and the update must be the unprobed ones.
    """
    from datasets import Dataset

    import invisible

    transformers.logging.set_verbosity_error()
    records = []
    for probed in (False, True):
        tokenizer = tiny_tokenizer()
        args = trl.SFTConfig(output_dir=os.path.join(folder, f"sft-{probed}", str(rank)), per_device_train_batch_size=2,
                             gradient_accumulation_steps=2, max_steps=1, use_cpu=True, report_to="none",
                             save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, learning_rate=1e-2)
        trainer = trl.SFTTrainer(model=small_llama(len(tokenizer)), args=args,
                                 train_dataset=Dataset.from_dict({"text": TEXTS}), processing_class=tokenizer)
        records.append(invisible.trained(trainer, attach_sft(trainer, probe) if probed else None))
    return invisible.differences(records[0], records[1])


def attach_sft(trainer: Any, probe: Any) -> Any:
    """The transformers callback on an SFTTrainer; returns its probe."""
    from normcheck.integrations.transformers import attach as attach_trainer

    return attach_trainer(trainer, probe=probe(trainer.model), raise_on_failure=False).probe


def test_an_sft_step_on_trl_defaults_is_unchanged_by_the_probe(tmp_path: Any) -> None:
    for rank, found in enumerate(launch(sft_unchanged_step, 2, args=(str(tmp_path),), timeout=600,
                                        directory=str(tmp_path / "dumps"))):
        assert found == [], f"rank {rank}: " + "\n".join(found)
