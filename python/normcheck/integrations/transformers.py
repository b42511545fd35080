"""One optimizer step of a real Hugging Face ``transformers.Trainer``, judged by normcheck.

    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    attach(trainer)        # a probe on trainer.model; the first optimizer step is judged
    trainer.train()        # raises NormcheckFailure, naming the mistake, when that step is wrong

``attach(trainer, every=50, log="normcheck.jsonl")`` judges steps 0, 50, 100, … of the real run
instead, one JSON line each in the log; between judged steps the probe copies nothing and p's
gradient (0) is dropped after every backward.

An unmodified Trainer cannot host a probe by itself: it builds its optimizer from every parameter of
the model (p included) and clips the gradients right after the last backward of the accumulation
window, before any callback runs. What ``attach`` adds:

- the probe p on ``trainer.model``, before ``train()`` wraps it in DistributedDataParallel;
- at ``on_train_begin`` (the optimizer exists by then, and the model is wrapped) p leaves every
  parameter group of the Trainer's optimizer, so it is never updated and holds no optimizer state;
- at ``on_step_begin`` of the judged step the probe's ``step()`` starts, and with it the capture of
  every cross-entropy the model (or a ``compute_loss_func``) computes over the accumulation window;
- the probe takes p.grad at the moment the synchronizing reduction completes and sets it to None before
  clipping, so the Trainer's clipping (``max_grad_norm``) and the optimizer neither see nor change it;
- at ``on_pre_optimizer_step`` the step is judged (``Probe.judge``, collective: every rank is there);
- in every forward the probe routes p through the model's output with gradient 0, so that DDP finds
  p's gradient on every step (it stops otherwise, or never all-reduces: a parameter it holds got none).

The Trainer's ``LabelSmoother`` (``label_smoothing_factor > 0``) computes its loss with
``log_softmax`` and ``gather``, not ``cross_entropy``; during the judged step the callback measures it
through ``ProbedLabelSmoother``: the probe term rides on the smoother's own denominator.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, Mapping, Optional

import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..options import Framework
from ..probe import Probe, ProbeError
from ._shared import JudgedRun, JudgedSteps, drop_from_optimizer

__all__ = ["NormcheckCallback", "ProbedLabelSmoother", "attach", "drop_from_optimizer"]


class ProbedLabelSmoother:
    """The Trainer's ``LabelSmoother`` with the probe term added on its valid tokens, over its own denominator.

    ``LabelSmoother`` sums −log_softmax gathered at the labels (and over every class, for the smoothing
    part), masks ``ignore_index`` and divides by ``num_items_in_batch`` when the Trainer passes it, else
    by the microbatch's valid count. This wrapper returns its value unchanged plus Σ p·(−y) over the
    same valid tokens divided by that same denominator, so p.grad carries the smoother's division and
    everything the Trainer does after it. Before adding, it reads back the denominator the smoother
    really used (the same smoothed loss summed by torch's ``cross_entropy`` with ``label_smoothing``,
    over the smoother's value) and raises ``ProbeError`` when that is not the one above (to 10⁻³): the
    wrapper never judges a guessed denominator.
    """

    def __init__(self, smoother: Any, probe: Probe) -> None:
        """Wraps ``smoother`` (a ``transformers.trainer_pt_utils.LabelSmoother``) for ``probe``."""
        self.smoother = smoother
        self.probe = probe
        self.ignore_index: int = int(getattr(smoother, "ignore_index", -100))
        self.epsilon: float = float(getattr(smoother, "epsilon", 0.0))

    def __call__(self, model_output: Any, labels: torch.Tensor, shift_labels: bool = False,
                 num_items_in_batch: Any = None) -> torch.Tensor:
        """The smoother's loss on ``model_output`` and ``labels``, plus the probe term (0 in value)."""
        value: torch.Tensor = self.smoother(model_output, labels, shift_labels=shift_labels,
                                            num_items_in_batch=num_items_in_batch)
        if not torch.is_grad_enabled():
            return value
        targets = labels[..., 1:] if shift_labels else labels
        valid = targets != self.ignore_index
        if num_items_in_batch is None:
            denominator: Any = valid.sum()
        elif torch.is_tensor(num_items_in_batch):
            denominator = num_items_in_batch.to(value.device)
        else:
            denominator = num_items_in_batch
        with torch.no_grad():
            # The smoothed loss summed over the valid tokens, as torch's cross_entropy computes it (the same
            # (1 − ε)·nll + ε·mean over classes of −log p per token): over the smoother's value, its denominator.
            logits = model_output["logits"] if isinstance(model_output, dict) else model_output[0]
            if shift_labels:
                logits = logits[..., :-1, :]
            undivided = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=self.ignore_index,
                reduction="sum", label_smoothing=self.epsilon)
        used = float(undivided) / float(value.detach()) if float(value.detach()) != 0 else None
        expected = float(denominator)
        if used is not None and abs(used - expected) > 1e-3 * abs(expected):
            raise ProbeError(f"the Trainer's LabelSmoother divided its loss by {used:.6g}, not by {expected:g} "
                             "(num_items_in_batch, else the valid count): its normalization changed and this "
                             "integration cannot measure it; judge the step with label_smoothing_factor=0")
        zeros = torch.zeros(targets.shape, dtype=value.dtype, device=value.device)
        term: torch.Tensor = self.probe.add(zeros, targets, ignore_index=self.ignore_index).sum() / denominator
        return value + term


def framework_of(trainer: Trainer) -> Framework:
    """``"trl"`` for a trainer of TRL's (they subclass the Trainer), else ``"transformers"``."""
    return "trl" if any(c.__module__.split(".")[0] == "trl" for c in type(trainer).__mro__) else "transformers"


class NormcheckCallback(JudgedRun, TrainerCallback):
    """A ``TrainerCallback`` that judges optimizer steps of ``trainer`` with ``probe``.

    ``step`` is the first optimizer step to judge, counted from 0 as ``state.global_step`` counts it;
    with ``every`` = K, every K-th step after it too (``normcheck.due``), and
    ``log``, a file rank 0 appends one JSON line per judged step to (``JudgedSteps``).
    ``raise_on_failure``: raise ``NormcheckFailure`` (on every rank, from inside ``train()``; the whole
    diagnosis on rank 0) when the gate does not pass, and ``ProbeError`` when the step cannot be judged;
    otherwise warn alike, keep the verdicts in ``verdicts`` (a step's error in ``steps.errors``, the last one
    in ``error``) and let training go on. A passing step prints one line on rank 0.
    ``judge_options`` go to ``Probe.judge`` (``directory``, ``description``, ``reducer``, …).
    """

    def __init__(self, trainer: Trainer, probe: Probe, *, step: int = 0, every: Optional[int] = None,
                 log: Optional[str] = None, raise_on_failure: bool = True,
                 judge_options: Optional[Mapping[str, Any]] = None) -> None:
        """Binds the callback to ``trainer`` and ``probe``; add it with ``trainer.add_callback``."""
        self.steps = JudgedSteps(first=step, every=every, log=log, rank=probe.rank)
        """The judged steps' verdicts and errors, and the log."""
        self.trainer = trainer
        self.probe = probe
        self.step = step
        self.every = every
        self.raise_on_failure = raise_on_failure
        self.judge_options: Dict[str, Any] = dict(judge_options or {})
        self.dropped_from_optimizer = 0
        """How many of the optimizer's parameter groups held p before the callback removed it."""
        self._active: Optional[contextlib.ExitStack] = None
        self._smoother: Any = None

    @property
    def active(self) -> bool:
        """True from the judged step's first microbatch until it is judged."""
        return self._active is not None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        """Takes p out of the Trainer's optimizer (built from every parameter) before its first step."""
        optimizer = self.trainer.optimizer
        if optimizer is None:
            raise ProbeError("the Trainer has no optimizer at on_train_begin: cannot keep p out of it")
        self.dropped_from_optimizer = drop_from_optimizer(optimizer, self.probe)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        """At a judged step's first microbatch: starts the probe's step (and measures a LabelSmoother)."""
        if self._active is not None or not self.steps.due(state.global_step):
            return
        stack = contextlib.ExitStack()
        stack.enter_context(self.probe.step())
        smoother = getattr(self.trainer, "label_smoother", None)
        if smoother is not None and not isinstance(smoother, ProbedLabelSmoother):
            self._smoother = smoother
            setattr(self.trainer, "label_smoother", ProbedLabelSmoother(smoother, self.probe))
            stack.callback(self._restore_smoother)
        self._active = stack

    def _restore_smoother(self) -> None:
        setattr(self.trainer, "label_smoother", self._smoother)
        self._smoother = None

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              **kwargs: Any) -> None:
        """After the window's synchronizing backward (and the Trainer's clipping): judges the step."""
        if self._active is None:
            return
        self.close()
        options = dict(self.judge_options)
        options.setdefault("optimizer", self.trainer.optimizer)
        options.setdefault("framework", framework_of(self.trainer))
        try:
            verdict = self.probe.judge(self.trainer.model_wrapped, **options)
        except ProbeError as e:  # raised alike on every rank, so every rank goes on alike
            self.steps.failed(state.global_step, e)
            if self.raise_on_failure:
                raise
            return
        self.steps.judged(state.global_step, verdict)
        self.probe.conclude(verdict, step=state.global_step, raise_on_failure=self.raise_on_failure)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Raises when training ended before a step was judged: a gate that judged nothing never passes."""
        self.close()
        if not self.judged:
            raise self.steps.never_judged(state.global_step)

    def close(self) -> None:
        """Ends the probe's step if it is still active (after an exception inside the window, say)."""
        active, self._active = self._active, None
        if active is not None:
            active.close()


def attach(trainer: Trainer, *, step: int = 0, every: Optional[int] = None, log: Optional[str] = None,
           probe: Optional[Probe] = None, raise_on_failure: bool = True,
           judge_options: Optional[Mapping[str, Any]] = None, **probe_options: Any) -> NormcheckCallback:
    """Puts a probe on ``trainer.model`` and a ``NormcheckCallback`` on ``trainer``; call before ``train()``.

    ``probe``: a ``Probe`` already attached to ``trainer.model`` (the ``normcheck_gate`` fixture's
    ``probe(model)`` makes one); otherwise one is made with ``probe_options`` (``executable``,
    ``directory``, …). ``step``, ``every``, ``log``, ``raise_on_failure`` and ``judge_options``: see
    ``NormcheckCallback``.
    ``trainer.train`` is wrapped so that the probe's step ends even when training raises.
    """
    if trainer.model_wrapped is not trainer.model:
        raise ProbeError("the Trainer's model is already wrapped: attach the probe before trainer.train(), "
                         "so that DistributedDataParallel reduces p with the other parameters")
    model = trainer.model
    if probe is None:
        probe = Probe(model, **probe_options)
    elif probe_options:
        raise TypeError("pass either probe= or options to make one, not both")
    elif not any(p is probe.parameter for p in model.parameters()):
        raise ProbeError("the probe is not attached to trainer.model (or one of its submodules)")
    callback = NormcheckCallback(trainer, probe, step=step, every=every, log=log,
                                 raise_on_failure=raise_on_failure, judge_options=judge_options)
    trainer.add_callback(callback)
    train: Callable[..., Any] = trainer.train

    @functools.wraps(train)
    def train_then_close(*args: Any, **kwargs: Any) -> Any:
        try:
            return train(*args, **kwargs)
        finally:
            callback.close()

    trainer.train = train_then_close  # type: ignore[method-assign]
    return callback
