"""What every integration does the same way: keeping p out of an optimizer the framework built, and the
record of a run's judged steps (which steps, their verdicts, the log)."""

from __future__ import annotations

import json
import os
from typing import Any, List, Optional, Tuple

from ..check import Verdict
from ..probe import Probe, ProbeError
from ..schedule import due

__all__ = ["JudgedRun", "JudgedSteps", "drop_from_optimizer"]


class JudgedSteps:
    """Which optimizer steps of a run a callback judges, what each gave, and the log of them.

    ``first`` and ``every``: as ``due``. ``log``: a file that rank 0 appends one JSON object per judged
    step to (``{"step", "status", "verdict", "diagnosis", "could_hide", "failed_checks", "dump"}``, the dump's
    path where it is kept, else null; or
    ``{"step", "status": "error", "error"}`` for a step that could not be judged), created if absent.
    """

    def __init__(self, *, first: int = 0, every: Optional[int] = None, log: Optional[str] = None,
                 rank: int = 0) -> None:
        """Checks the schedule; ``rank`` is the process's rank (only rank 0 writes the log)."""
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ValueError(f"step counts optimizer steps from 0, not {first!r}")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ValueError(f"every is a positive number of optimizer steps, not {every!r}")
        self.first = first
        self.every = every
        self.log = log
        self.rank = rank
        self.verdicts: List[Tuple[int, Verdict]] = []
        """Each judged step's verdict, in step order."""
        self.errors: List[Tuple[int, ProbeError]] = []
        """Each step that could not be judged, with why (kept when the callback does not raise)."""

    def due(self, step: int) -> bool:
        """Whether ``step`` is judged and has not been yet."""
        done = {s for s, _ in self.verdicts} | {s for s, _ in self.errors}
        return step not in done and due(step, first=self.first, every=self.every)

    @property
    def any(self) -> bool:
        """Whether some step was judged (or found not judgeable)."""
        return bool(self.verdicts or self.errors)

    def judged(self, step: int, verdict: Verdict) -> None:
        """Records step ``step``'s verdict (and logs it on rank 0)."""
        self.verdicts.append((step, verdict))
        self._write({"step": step, "status": verdict.status, "verdict": verdict.verdict,
                     "diagnosis": list(verdict.diagnosis), "could_hide": list(verdict.could_hide),
                     "failed_checks": list(verdict.failed_checks),
                     "dump": verdict.file if os.path.exists(verdict.file) else None})

    def failed(self, step: int, error: ProbeError) -> None:
        """Records that step ``step`` could not be judged (and logs it on rank 0)."""
        self.errors.append((step, error))
        self._write({"step": step, "status": "error", "error": str(error)})

    def never_judged(self, reached: int) -> ProbeError:
        """The error for a run that ended at step ``reached`` before its first judged step."""
        return ProbeError(f"training ended at step {reached} before step {self.first} was judged: judge a step "
                          "the run reaches (max_steps, the number of batches)")

    def _write(self, line: Any) -> None:
        if self.log is None or self.rank != 0:
            return
        folder = os.path.dirname(os.path.abspath(self.log))
        os.makedirs(folder, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def drop_from_optimizer(optimizer: Any, probe: Probe) -> int:
    """Removes every probe parameter from every parameter group of ``optimizer``; returns how many groups held one.

    Works on a torch optimizer and on wrappers that expose its ``param_groups`` (accelerate's
    ``AcceleratedOptimizer``). Call it before the optimizer's first step: a probe parameter that already
    has optimizer state is refused, since the optimizer has then updated it.
    """
    groups = getattr(optimizer, "param_groups", None)
    if groups is None:
        raise ProbeError(f"{type(optimizer).__name__} has no param_groups: cannot keep p out of it")
    state = getattr(optimizer, "state", {})
    held = 0
    for group in groups:
        kept = [q for q in group["params"] if not probe.is_probe(q)]
        if len(kept) == len(group["params"]):
            continue
        if any(probe.is_probe(q) and state.get(q) for q in group["params"]):
            raise ProbeError("p already has optimizer state: the optimizer stepped with p before it was removed")
        held += 1
        group["params"] = kept
    return held


class JudgedRun:
    """What a callback that judges a run's steps shows of them, read from its ``steps`` (a ``JudgedSteps``)."""

    steps: JudgedSteps

    @property
    def verdicts(self) -> List[Verdict]:
        """Every judged step's verdict, in step order."""
        return [v for _, v in self.steps.verdicts]

    @property
    def verdict(self) -> Optional[Verdict]:
        """The last judged step's verdict, once one was judged."""
        return self.steps.verdicts[-1][1] if self.steps.verdicts else None

    @property
    def error(self) -> Optional[ProbeError]:
        """Why the last step that could not be judged was not (the probe saw no loss, …), kept when
        ``raise_on_failure`` is false."""
        return self.steps.errors[-1][1] if self.steps.errors else None

    @property
    def judged(self) -> bool:
        """True once a step was judged (or found not judgeable)."""
        return self.steps.any
