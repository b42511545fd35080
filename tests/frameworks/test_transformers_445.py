"""transformers 4.45, before the gradient-accumulation fix, on torch 2.13: its Trainer's default fails.

Up to 4.45 the Trainer let the model average each microbatch over its own tokens and divided the
result by G (``accelerator.backward``): the microbatch mean, not the token mean of the window — the
regression the field shipped until 4.46 counted ``num_items_in_batch``. The same callback judges it.
This file runs in an environment of its own (transformers 4.45.x beside torch 2.13); the frameworks'
conftest collects it only there.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import pytest
import transformers  # imported before the ranks fork, so that they share it

from normcheck.integrations.transformers import attach
from normcheck.launch import launch

from tiny import LENGTHS, Rows, collate, llama

ACCUMULATION = (2, 4)


def legacy_step(rank: int, world_size: int, probe: Any, folder: str) -> Dict[str, Any]:
    """The Trainer's default step for each G; the verdicts."""
    transformers.logging.set_verbosity_error()
    results: Dict[str, Any] = {"version": transformers.__version__}
    for g in ACCUMULATION:
        try:
            args = transformers.TrainingArguments(
                output_dir=os.path.join(folder, f"G{g}", str(rank)), per_device_train_batch_size=2,
                gradient_accumulation_steps=g, max_steps=1, use_cpu=True, report_to="none", save_strategy="no",
                logging_strategy="no", disable_tqdm=True, seed=0, learning_rate=1e-2)
            trainer = transformers.Trainer(model=llama(), args=args, train_dataset=Rows(LENGTHS[: world_size * g * 2]),
                                           data_collator=collate)
            callback = attach(trainer, probe=probe(trainer.model), raise_on_failure=False)
            trainer.train()
            verdict = callback.verdict
            results[f"G{g}"] = {"verdict": verdict.verdict, "diagnosis": list(verdict.diagnosis),
                                "message": verdict.message}
        except Exception as e:  # reported per variant; both ranks raise alike
            results[f"G{g}"] = {"error": f"{type(e).__name__}: {e}"}
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """Both ranks' results (one launch)."""
    folder = tmp_path_factory.mktemp("trainer445")
    return launch(legacy_step, 2, args=(str(folder),), timeout=600, directory=str(folder / "dumps"))


@pytest.mark.parametrize("g", ACCUMULATION, ids=lambda g: f"G{g}")
def test_transformers_445_default_is_the_microbatch_mean(ranks: List[Dict[str, Any]], g: int) -> None:
    assert ranks[0]["version"].startswith("4.45."), ranks[0]["version"]
    results = [rank[f"G{g}"] for rank in ranks]
    for result in results:
        assert "error" not in result, result["error"]
    first = results[0]
    assert [r["verdict"] for r in results] == [first["verdict"]] * 2
    assert first["verdict"] == "fail", first["message"]
    assert "microbatch_mean" in first["diagnosis"], first["message"]
