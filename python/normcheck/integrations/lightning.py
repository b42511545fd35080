"""One optimizer step of a real Lightning ``Trainer``, judged by normcheck.

    trainer = lightning.pytorch.Trainer(strategy="ddp", accelerator="cpu", devices=2,
                                        accumulate_grad_batches=4, callbacks=[NormcheckCallback()])
    trainer.fit(module, datamodule)   # raises NormcheckFailure, naming the mistake, when step 0 is wrong

What the callback does, hook by hook:

- ``setup`` (before the strategy wraps the module in DistributedDataParallel): puts the probe p on the
  LightningModule, or on the submodule named by ``module=``; the probe routes p through that module's
  output in every forward (gradient 0), so that DDP finds p's gradient on every step;
- ``on_fit_start`` (the optimizers exist): takes p out of every optimizer ``configure_optimizers``
  built from ``self.parameters()``, so it is never updated and, since Lightning clips the parameters
  of its optimizers, never clipped;
- ``on_train_batch_start`` of the judged window's first batch: starts the probe's ``step()``, which
  captures every cross-entropy of the window's ``training_step`` calls (the division by
  ``accumulate_grad_batches`` Lightning applies to what ``training_step`` returns is measured with it);
- ``on_before_optimizer_step`` (after the window's synchronizing backward, before Lightning's
  clipping): judges the step, collectively on every rank;
- ``on_exception``: ends the probe's step; ``on_train_end``: raises when the step was never reached.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, List, Mapping, Optional

import lightning.pytorch as pl
from torch import nn
from torch.optim import Optimizer

from ..probe import Probe, ProbeError
from ._shared import JudgedRun, JudgedSteps, drop_from_optimizer

__all__ = ["NormcheckCallback", "drop_from_optimizer"]


class NormcheckCallback(JudgedRun, pl.Callback):
    """A Lightning ``Callback`` that judges optimizer step ``step`` (counted from 0, as ``global_step``), and with
    ``every`` = K every K-th step after it; ``log``: a file rank 0 appends one JSON line per judged step to
    (``normcheck.integrations._shared.JudgedSteps``).

    ``module``: the dotted name of the submodule to probe (default: the LightningModule itself); the
    probe routes p through that module's forward, so name one that every ``training_step`` calls when
    ``training_step`` does not call ``self(...)``. ``probe_factory(module)`` makes the probe (the
    ``normcheck_gate`` fixture's ``probe``), else ``Probe(module, **probe_options)``.
    ``raise_on_failure``: raise ``NormcheckFailure`` on every rank when the gate does not pass (the whole
    diagnosis on rank 0), else warn alike and keep the verdicts in ``verdicts``; a pass prints one line on
    rank 0. ``judge_options`` go to ``Probe.judge``.
    """

    def __init__(self, *, step: int = 0, every: Optional[int] = None, log: Optional[str] = None,
                 module: Optional[str] = None,
                 probe_factory: Optional[Callable[[nn.Module], Probe]] = None,
                 probe_options: Optional[Mapping[str, Any]] = None, raise_on_failure: bool = True,
                 judge_options: Optional[Mapping[str, Any]] = None) -> None:
        """Configures the callback; the probe is attached at ``setup``."""
        self.steps = JudgedSteps(first=step, every=every, log=log)
        """The judged steps' verdicts, and the log (its rank is set when the probe is attached)."""
        if probe_factory is not None and probe_options:
            raise TypeError("pass either probe_factory= or probe_options=, not both")
        self.step = step
        self.every = every
        self.module = module
        self.probe_factory = probe_factory
        self.probe_options: Dict[str, Any] = dict(probe_options or {})
        self.raise_on_failure = raise_on_failure
        self.judge_options: Dict[str, Any] = dict(judge_options or {})
        self.probe: Optional[Probe] = None
        """The probe, once attached (at ``setup``)."""
        self.window: Optional[int] = None
        """How many batches the judged window held (fewer than G in an epoch's short last window)."""
        self.dropped_from_optimizer = 0
        """How many parameter groups of the optimizers held p before the callback removed it."""
        self._active: Optional[contextlib.ExitStack] = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Attaches the probe before the strategy wraps the module."""
        if stage != "fit" or self.probe is not None:
            return
        target: nn.Module = pl_module.get_submodule(self.module) if self.module else pl_module
        if self.probe_factory is not None:
            self.probe = self.probe_factory(target)
        else:
            self.probe = Probe(target, **self.probe_options)
        if self.probe.accumulation_steps is None:  # Lightning's window, which a short last one still divides by
            self.probe.accumulation_steps = int(trainer.accumulate_grad_batches)
        self.steps.rank = self.probe.rank

    def _probe(self) -> Probe:
        if self.probe is None:
            raise ProbeError("the probe was not attached: NormcheckCallback judges Trainer.fit")
        return self.probe

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Takes p out of every optimizer (``configure_optimizers`` saw it among ``self.parameters()``)."""
        probe = self._probe()
        optimizers: List[Optimizer] = list(trainer.optimizers)
        self.dropped_from_optimizer = sum(drop_from_optimizer(o, probe) for o in optimizers)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """At the first batch of a judged window: starts the probe's step; counts the window's batches."""
        if self._active is not None:
            self.window = (self.window or 0) + 1
            return
        if not self.steps.due(trainer.global_step) or batch_idx % trainer.accumulate_grad_batches != 0:
            return
        stack = contextlib.ExitStack()
        stack.enter_context(self._probe().step())
        self._active = stack
        self.window = 1

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: Optimizer) -> None:
        """After the window's synchronizing backward, before clipping: judges the step."""
        if self._active is None:
            return
        self.close()
        options = dict(self.judge_options)
        options.setdefault("optimizer", list(trainer.optimizers))
        options.setdefault("framework", "lightning")
        verdict = self._probe().judge(trainer.strategy.model, **options)
        self.steps.judged(trainer.global_step, verdict)
        self._probe().conclude(verdict, step=trainer.global_step, raise_on_failure=self.raise_on_failure)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Ends the probe's step when training raised inside the window."""
        self.close()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Raises when training ended before a step was judged: a gate that judged nothing never passes."""
        self.close()
        if not self.judged:
            raise self.steps.never_judged(trainer.global_step)

    def close(self) -> None:
        """Ends the probe's step if it is still active."""
        active, self._active = self._active, None
        if active is not None:
            active.close()
