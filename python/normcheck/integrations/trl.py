"""One optimizer step of a TRL trainer, judged where TRL forms its loss: ``GRPOTrainer`` against the objective
its ``loss_type`` declares, ``DPOTrainer`` against the mean over preference pairs, ``SFTTrainer`` against the
token mean (through the fused LM head's ``log_probs``, which the probe routes itself).

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(loss_type="dr_grpo", ...),
                          train_dataset=prompts, processing_class=tokenizer)
    attach(trainer)      # the transformers callback, the policy loss measured, the objective declared
    trainer.train()

GRPO's policy loss is not a cross-entropy: TRL gathers log-probabilities itself, forms the per-token
loss −min(r·A, clip(r)·A) with the importance ratio r and the advantage A of each completion, then
normalizes by ``loss_type``. At the step's ratio r = 1 (one iteration per generation, so the old
log-probabilities are the current ones, detached), the per-token loss has derivative exactly −1 with
respect to A (the two branches tie and share it), so ``attach`` measures the normalization through the
advantages: during the judged step each completion token's advantage becomes A − p·(−y), the probe's
term, and p.grad carries every weight TRL's normalization, the Trainer and DDP gave that token. Each
completion is one sequence (one group) of the probe. The loss value and every model gradient are
those of the unprobed step.

What each ``loss_type`` declares (``declared_objective``), from TRL's own normalization code:

| loss_type | TRL divides each microbatch's masked token sum by | objective over the update |
|---|---|---|
| ``grpo`` | each sequence's token count, then the microbatch's sequence count, then G | ``sequence_mean`` |
| ``luspo`` | the microbatch's sequence count, then G | ``sequence_sum_mean`` |
| ``dr_grpo`` | B·L_max (rows times ``max_completion_length``), then G | ``constant``, C = W·G·B·L_max |
| ``dapo`` | the generation batch's token count over all ranks ÷ W, times G ÷ steps_per_generation | ``token_mean`` |

Other loss types (``bnpo`` normalizes by the local batch only; ``cispo``, ``sapo`` and ``vespo`` are
not linear in A with slope −1) raise ``ProbeError`` unless an objective is given and, for the latter
three, cannot be measured this way at all.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import torch
import torch.nn.functional as F

from .. import _probe_routes as routes
from ..probe import Probe, ProbeError
from . import transformers as hf

__all__ = ["MEASURABLE", "NormcheckCallback", "ProbedPolicyLoss", "ProbedPreferenceLoss", "attach",
           "declared_objective"]

NormcheckCallback = hf.NormcheckCallback

MEASURABLE = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""Loss types whose per-token loss is −min(r·A, clip(r)·A): measured through the advantages."""

IGNORE = -100


def declared_objective(trainer: Any) -> Dict[str, Any]:
    """The objective (and normalizer) a ``GRPOTrainer``'s ``loss_type`` declares, as ``Probe.judge`` takes them."""
    loss_type = str(trainer.loss_type)
    if loss_type == "grpo":
        return {"objective": "sequence_mean"}
    if loss_type == "luspo":
        return {"objective": "sequence_sum_mean"}
    if loss_type == "dapo":
        return {"objective": "token_mean"}
    if loss_type == "dr_grpo":
        args = trainer.args
        world_size = int(trainer.accelerator.num_processes)
        constant = (world_size * int(args.gradient_accumulation_steps) * int(args.per_device_train_batch_size)
                    * int(trainer.max_completion_length))
        return {"objective": "constant", "normalizer": constant}
    raise ProbeError(f"loss_type {loss_type!r} declares no objective over the whole update (bnpo normalizes each "
                     "rank's batch by its own tokens): pass objective= (and normalizer=) to attach")


class ProbedPolicyLoss:
    """``GRPOTrainer._compute_loss`` with the probe's term in the advantages while ``callback`` is active."""

    def __init__(self, compute_loss: Callable[[Any, Dict[str, Any]], torch.Tensor], probe: Probe,
                 callback: hf.NormcheckCallback) -> None:
        """Wraps the trainer's bound ``_compute_loss``."""
        self.compute_loss = compute_loss
        self.probe = probe
        self.callback = callback

    def __call__(self, model: Any, inputs: Dict[str, Any]) -> torch.Tensor:
        """TRL's loss on ``inputs``, with A − p·(−y) on every completion token the loss mask keeps."""
        if not self.callback.active or not torch.is_grad_enabled():
            return self.compute_loss(model, inputs)
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        labels = torch.where(mask.bool(), torch.zeros_like(mask, dtype=torch.long),
                             torch.full_like(mask, IGNORE, dtype=torch.long))
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        declare = getattr(self.probe, "sequences", None)
        if callable(declare):
            declare(labels=labels)  # each completion (row) is one sequence
        try:
            term = self.probe.add(torch.zeros(labels.shape, dtype=advantages.dtype, device=advantages.device), labels,
                                  ignore_index=IGNORE)
        finally:
            clear = getattr(self.probe, "clear_sequences", None)
            if callable(clear):
                clear()
        # d(−min(r·A, clip(r)·A))/dA = −1 at r = 1: the token's loss gains exactly p·(−y). The fused head's
        # log-probabilities are left alone: their gradients are the policy loss's slopes, not weights.
        with routes.without_output_route(self.probe):
            return self.compute_loss(model, {**inputs, "advantages": advantages - term})


def _refuse_unmeasurable(trainer: Any) -> None:
    args = trainer.args
    loss_type = str(trainer.loss_type)
    if loss_type not in MEASURABLE:
        raise ProbeError(f"loss_type {loss_type!r}: its per-token loss is not −min(r·A, clip(r)·A), so the "
                         "advantages cannot carry the probe; judge the step with one of " + ", ".join(MEASURABLE))
    if int(getattr(trainer, "num_iterations", 1)) != 1 or int(args.steps_per_generation) > int(
            args.gradient_accumulation_steps):
        raise ProbeError("the judged step must use the log-probabilities it generated with (num_iterations = 1, "
                         "steps_per_generation ≤ gradient_accumulation_steps): only then is the ratio exactly 1")
    delta = getattr(args, "delta", None)
    if delta is not None and float(delta) < 1:
        raise ProbeError(f"delta = {delta} clips the ratio below 1: the advantages do not carry the probe")
    if getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False):
        raise ProbeError("vLLM's importance-sampling correction multiplies each token's loss by a ratio that is "
                         "not 1: judge the step with vllm_importance_sampling_correction=False")


class ProbedPreferenceLoss:
    """``DPOTrainer._compute_loss`` with one probe term per preference pair while ``callback`` is active.

    TRL's sigmoid loss is −logsigmoid(β·δ) per pair, averaged over the microbatch's pairs; the term is
    added to that per-pair loss (inside the ``F.logsigmoid`` call of ``_compute_loss``, the one whose
    result has one entry per pair), spread over the pair's completion tokens, chosen and rejected, so
    that each pair is one sequence of the probe and p.grad carries the weight TRL, the Trainer and DDP
    gave it. The token log-probabilities the fused LM head returns are left alone: their weights are
    the sigmoid's slopes, not the normalization.
    """

    def __init__(self, compute_loss: Callable[..., Any], probe: Probe, callback: hf.NormcheckCallback) -> None:
        """Wraps the trainer's bound ``_compute_loss``."""
        self.compute_loss = compute_loss
        self.probe = probe
        self.callback = callback

    def __call__(self, model: Any, inputs: Dict[str, Any], return_outputs: bool) -> Any:
        """TRL's loss on ``inputs``, each pair's loss plus its probe term (−0 in value)."""
        if not self.callback.active or not torch.is_grad_enabled():
            return self.compute_loss(model, inputs, return_outputs)
        mask = inputs["completion_mask"][..., 1:]
        pairs = int(mask.shape[0]) // 2
        pair_ids = (torch.arange(2 * pairs, device=mask.device) % pairs).unsqueeze(1).expand(mask.shape)
        original = F.logsigmoid
        calls = []

        def per_pair(value: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            out: torch.Tensor = original(value, *args, **kwargs)
            if tuple(out.shape) != (pairs,) or not out.requires_grad:
                return out
            calls.append(1)
            term = routes.sequence_terms(self.probe, mask, pair_ids)
            return ((-out) + term.to(device=out.device, dtype=out.dtype)).neg()  # −(ℓ + t): ℓ keeps its bits

        with routes.without_output_route(self.probe):
            setattr(F, "logsigmoid", per_pair)
            try:
                result = self.compute_loss(model, inputs, return_outputs)
            finally:
                setattr(F, "logsigmoid", original)
        if len(calls) != 1:
            raise ProbeError(f"DPOTrainer's loss called logsigmoid on its {pairs} pairs {len(calls)} times, not once: "
                             "its loss is not the sigmoid loss this integration measures")
        return result


def _refuse_unmeasurable_preference(trainer: Any) -> None:
    loss_types = [str(t) for t in getattr(trainer, "loss_types", ["sigmoid"])]
    if loss_types != ["sigmoid"]:
        raise ProbeError(f"DPOTrainer with loss_type {loss_types}: the integration measures the sigmoid loss, one "
                         "−logsigmoid term per pair; judge the step with loss_type='sigmoid'")
    if str(getattr(trainer, "f_divergence_type", "reverse_kl")) != "reverse_kl" or getattr(trainer, "use_weighting",
                                                                                               False):
        raise ProbeError("DPOTrainer with an f-divergence or WPO weighting: judge the step with the defaults "
                         "(f_divergence_type='reverse_kl', use_weighting=False)")


def _kind(trainer: Any) -> str:
    names = {cls.__name__ for cls in type(trainer).__mro__}
    for kind in ("GRPOTrainer", "DPOTrainer"):
        if kind in names:
            return kind
    return "SFTTrainer"


def attach(trainer: Any, *, step: int = 0, every: Optional[int] = None, log: Optional[str] = None,
           probe: Optional[Probe] = None, raise_on_failure: bool = True,
           objective: Optional[str] = None, normalizer: Any = None,
           judge_options: Optional[Mapping[str, Any]] = None, **probe_options: Any) -> hf.NormcheckCallback:
    """The transformers integration's ``attach`` for a TRL trainer, with its loss measured where TRL forms it.

    ``GRPOTrainer``: through the advantages, against ``declared_objective(trainer)``. ``DPOTrainer``:
    one term per preference pair, against ``sequence_mean`` (each pair one sequence). Any other trainer
    (``SFTTrainer``): the token log-probabilities of its fused LM head, against ``token_mean``.
    ``objective`` / ``normalizer``: what to judge against instead. Call it before ``trainer.train()``;
    the other options are ``normcheck.integrations.transformers.attach``'s.
    """
    kind = _kind(trainer)
    if kind == "GRPOTrainer":
        _refuse_unmeasurable(trainer)
    elif kind == "DPOTrainer":
        _refuse_unmeasurable_preference(trainer)
    options: Dict[str, Any] = dict(judge_options or {})
    if objective is not None:
        options["objective"] = objective
        if normalizer is not None:
            options["normalizer"] = normalizer
    elif normalizer is not None:
        raise TypeError("normalizer= goes with objective='constant'")
    elif kind == "GRPOTrainer":
        options.update(declared_objective(trainer))
    elif kind == "DPOTrainer":
        options["objective"] = "sequence_mean"
    callback = hf.attach(trainer, step=step, every=every, log=log, probe=probe, raise_on_failure=raise_on_failure,
                         judge_options=options, **probe_options)
    if kind == "GRPOTrainer":
        trainer._compute_loss = ProbedPolicyLoss(trainer._compute_loss, callback.probe, callback)
    elif kind == "DPOTrainer":
        trainer._compute_loss = ProbedPreferenceLoss(trainer._compute_loss, callback.probe, callback)
    return callback
