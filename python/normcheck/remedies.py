"""What to change, in the framework's own terms, for each diagnosis the gate names.

The names are the core's: a report of ``check --json`` lists them under ``gate.diagnosis``, and
``remedy_lines`` reads them from there. A name the gate builds from a base and a factor
(``microbatch_mean×W·G``, ``local_mean(sequence_mean)``) takes the base's remedy unless it has its own;
a site's name (``head: objective/G``) is a module's treatment of its gradients, for which no switch of
the framework is the remedy. Where a framework has no entry for a name, the report's mathematics
(``instead``) is the remedy. TRL's trainers are transformers Trainers: a name without an entry of TRL's
takes transformers'.

Standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .options import Framework

__all__ = ["REMEDIES", "FRAMEWORK_NAMES", "remedy", "remedies", "remedy_lines", "base_name"]

FRAMEWORK_NAMES: Dict[Framework, str] = {
    "transformers": "transformers' Trainer", "trl": "TRL", "accelerate": "accelerate", "lightning": "Lightning",
}
"""How a remedy's heading names each framework."""

_FALLBACK: Dict[Framework, Framework] = {"trl": "transformers"}

_TRAINER_COUNT = ("let the Trainer normalize by `num_items_in_batch`: give the model a `forward(..., **kwargs)` that "
                  "passes `num_items_in_batch` to its loss (transformers' own models do), or pass "
                  "`compute_loss_func=`; a `compute_loss` override must divide the loss sum by `num_items_in_batch` "
                  "and multiply by `self.accelerator.num_processes` itself")
_LIGHTNING_COUNT = ("return from `training_step` the loss sum × `self.trainer.world_size` × "
                    "`self.trainer.accumulate_grad_batches` / N, N the valid tokens of the whole accumulation window "
                    "over all ranks (counted before the window's first backward, e.g. with `self.all_gather`): "
                    "Lightning divides what `training_step` returns by `accumulate_grad_batches`, and DDP averages "
                    "the ranks")
_ACCELERATE_COUNT = ("backpropagate the loss sum × `accelerator.num_processes` × `gradient_accumulation_steps` / N, "
                     "N the valid tokens of the whole accumulation window summed over processes "
                     "(`accelerator.gather(count).sum()` before the window's first backward): "
                     "`accelerator.backward` divides by `gradient_accumulation_steps`, and DDP averages the processes")

REMEDIES: Dict[str, Dict[Framework, str]] = {
    "local_mean": {
        "transformers": ("set `average_tokens_across_devices=True` in `TrainingArguments` (the default), so that "
                         "`num_items_in_batch` counts the tokens of every rank and the Trainer multiplies the loss by "
                         "the number of processes"),
        "trl": ("set `average_tokens_across_devices=True` in the trainer's config (`SFTConfig`, `DPOConfig`, …; the "
                "default), so that `num_items_in_batch` counts the tokens of every rank"),
        "accelerate": _ACCELERATE_COUNT,
        "lightning": _LIGHTNING_COUNT,
    },
    "microbatch_mean": {
        "transformers": _TRAINER_COUNT,
        "accelerate": _ACCELERATE_COUNT,
        "lightning": _LIGHTNING_COUNT,
    },
    "global_share": {
        "transformers": ("a `compute_loss` that divides by `num_items_in_batch` must multiply the loss by "
                         "`self.accelerator.num_processes`, as the Trainer's own does with "
                         "`average_tokens_across_devices=True`"),
        "accelerate": "multiply the loss by `accelerator.num_processes`: DDP divides the ranks' sum by it",
        "lightning": "multiply the loss by `self.trainer.world_size`: DDP divides the ranks' sum by it",
    },
    "local_sum": {
        "transformers": _TRAINER_COUNT,
        "accelerate": _ACCELERATE_COUNT,
        "lightning": _LIGHTNING_COUNT,
    },
    "count_before_shift": {
        "transformers": ("count the labels the loss predicts, after the shift: `(labels[..., 1:] != -100).sum()`, "
                         "or give the batch `shift_labels`, which the Trainer counts as they are"),
        "accelerate": "count the labels the loss predicts, after the shift: `(labels[..., 1:] != -100).sum()`",
        "lightning": "count the labels the loss predicts, after the shift: `(labels[..., 1:] != -100).sum()`",
    },
    "count_padding": {
        "transformers": ("give padding the label -100 (`DataCollatorForLanguageModeling` does; a collator that "
                         "copies `input_ids` into `labels` counts the padding)"),
        "accelerate": "give padding the label -100, and count `labels != -100`",
        "lightning": "give padding the label -100, and count `labels != -100`",
    },
    "objective/G": {
        "transformers": ("a `compute_loss` override that divides by `num_items_in_batch` must set "
                         "`loss_is_scaled_for_ga = True` on the Trainer subclass: the Trainer divides the loss by "
                         "`gradient_accumulation_steps` otherwise"),
        "accelerate": ("do not divide by `gradient_accumulation_steps` yourself: `accelerator.backward` already "
                       "does, so multiply a loss normalized by the whole window's count by it"),
        "lightning": ("do not divide by `accumulate_grad_batches` in `training_step`: Lightning already divides "
                      "what it returns by it"),
    },
    "objective×G": {
        "accelerate": ("`accelerator.backward` divides by `gradient_accumulation_steps`: multiply by it only a loss "
                       "normalized by the whole window's count, not a microbatch's mean"),
        "lightning": ("Lightning divides what `training_step` returns by `accumulate_grad_batches`: multiply by it "
                      "only a loss normalized by the whole window's count"),
    },
    "objective×W": {
        "transformers": ("the number of processes was multiplied in twice: with `average_tokens_across_devices=True` "
                         "the Trainer multiplies the loss by it already, so a `compute_loss_func` must not"),
        "accelerate": ("multiply by `accelerator.num_processes` only where DDP averages: a summing communication "
                       "hook needs no world-size factor"),
        "lightning": ("multiply by `self.trainer.world_size` only where DDP averages: a summing communication hook "
                      "needs no world-size factor"),
    },
    "short_window": {
        "transformers": _TRAINER_COUNT,
        "accelerate": ("the last window of the epoch is short: divide by the tokens that window holds "
                       "(`accelerator.gradient_state.end_of_dataloader` marks it), not by the nominal steps"),
        "lightning": ("the last window of the epoch is short: divide by the tokens that window holds, not by "
                      "`accumulate_grad_batches`"),
    },
    "sequence_mean": {
        "trl": ("GRPO's `loss_type='grpo'` averages each completion's token mean; `loss_type='dapo'` is the token "
                "mean over the generation batch"),
    },
    "token_mean": {
        "trl": ("GRPO's `loss_type='dapo'` is the token mean; `loss_type='grpo'` averages each completion's token "
                "mean"),
    },
}
"""Diagnosis name → framework → what to change there."""
for _name in ("sum_of_microbatch_means", "empty_microbatches_counted", "microbatch_global_count", "prefix_count"):
    REMEDIES[_name] = REMEDIES["microbatch_mean"]  # each a count other than the whole window's, over all ranks
REMEDIES["sequence_positions"] = REMEDIES["count_padding"]

_FACTOR = re.compile(r"[×/(]")


def base_name(name: str) -> str:
    """The computation a name applies a factor or another objective to:
    ``microbatch_mean×W·G`` → ``microbatch_mean``."""
    if name.startswith("objective"):
        return name
    found = _FACTOR.search(name)
    return name[:found.start()] if found else name


def remedy(name: str, framework: Framework) -> Optional[str]:
    """What to change in ``framework`` for the diagnosis ``name``, or None where only the mathematics says it."""
    if ": " in name:
        return None
    chosen: Optional[Framework] = framework
    while chosen is not None:
        for key in (name, base_name(name)):
            text = REMEDIES.get(key, {}).get(chosen)
            if text is not None:
                return text
        chosen = _FALLBACK.get(chosen)
    return None


def remedies(report: Mapping[str, Any], framework: Framework) -> List[Tuple[str, str]]:
    """(name, remedy) for each diagnosis of ``report`` (a ``check --json`` report) that has one in ``framework``."""
    gate = report.get("gate") or {}
    if gate.get("verdict") != "fail":
        return []
    found = []
    for entry in gate.get("diagnosis", []) or []:
        name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
        text = remedy(name, framework)
        if text is not None:
            found.append((name, text))
    return found


def remedy_lines(report: Mapping[str, Any], framework: Optional[Framework], indent: str = "  ") -> List[str]:
    """The remedies of ``report`` as lines of a message: a heading, then one line per diagnosis that has one."""
    found = remedies(report, framework) if framework is not None else []
    if not found or framework is None:
        return []
    lines = [f"{indent}what to change in {FRAMEWORK_NAMES[framework]} (the mathematics follows):"]
    lines += [f"{indent}  if {name}: {text}" for name, text in found]
    return lines
