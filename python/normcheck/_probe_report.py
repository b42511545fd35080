"""What a person reads of a judged step: one line on rank 0 when it passes, the diagnosis once when not.

``framed`` gives a verdict's message its frame on rank 0, before the verdict goes to every rank: the
remedies in the framework's terms right after the first line (the report's mathematics follows), and
where the dump and its picture are, or that they were not kept. ``conclude`` then runs on every rank
at once, after the same collective: a pass prints one line on rank 0 and nothing elsewhere; a failure
raises ``NormcheckFailure`` (or warns ``NormcheckWarning``) on every rank, with the whole diagnosis on
rank 0 and a one-line pointer to it on the others, so that no rank waits for another and the diagnosis
is printed once. Under torchrun (``TORCHELASTIC_RUN_ID`` set) a rank that raises first ends the job
before rank 0's traceback is printed, so there rank 0 prints the diagnosis itself, every rank waits for
it at ``synchronize``, and rank 0 too raises the one-line pointer.

Standard library only.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import replace
from typing import Any, Callable, Mapping, Optional

from .check import NormcheckFailure, Verdict
from .errors import NormcheckWarning
from .options import Framework
from .remedies import remedy_lines

__all__ = ["framed", "passed_line", "pointer_line", "conclude"]


def framed(verdict: Verdict, framework: Optional[Framework], picture: Optional[str], kept: bool) -> Verdict:
    """``verdict`` with its message framed: remedies after the first line, the files (or their absence) last."""
    if verdict.passed:
        return replace(verdict, picture=picture)
    first, _, rest = verdict.message.partition("\n")
    lines = [first, *remedy_lines(verdict.report, framework)]
    if rest:
        lines.append(rest)
    if not kept:
        lines.append("  the dump and its picture were in a temporary folder, now removed: construct the probe "
                     "with keep=True (or directory=) to keep them")
    elif picture is not None:
        lines.append(f"  picture of the weight table: {picture}")
    return replace(verdict, message="\n".join(lines), picture=picture)


def _what(step: Optional[int]) -> str:
    return f"step {step}" if step is not None else "the step"


def _objective_words(report: Mapping[str, Any]) -> str:
    objective = str(report.get("objective") or "token_mean")
    words = f"the {objective.replace('_', '-')} gradient"
    if objective == "constant" and report.get("normalizer") is not None:
        words = f"the gradient of the loss sum over C = {report.get('normalizer')}"
    return words


def passed_line(verdict: Verdict, step: Optional[int]) -> str:
    """The one line a passing step prints on rank 0, every number from the report."""
    report = verdict.report
    ranks = [r for r in report.get("ranks", []) or [] if isinstance(r, dict)]
    microbatches = sum(int(r.get("microbatches", 0) or 0) for r in ranks)
    world_size = report.get("world_size", len(ranks))
    return (f"normcheck: {_what(step)} judged on {world_size} rank{'' if world_size == 1 else 's'}, "
            f"{microbatches} microbatch{'' if microbatches == 1 else 'es'}, {report.get('valid_tokens')} tokens: "
            f"{_objective_words(report)}")


def pointer_line(verdict: Verdict, step: Optional[int], where: str = "rank 0 reports the whole diagnosis") -> str:
    """What every rank but 0 raises: the outcome in one line, pointing to rank 0's diagnosis."""
    heading = {"fail": "FAILED", "inconclusive": "was INCONCLUSIVE"}.get(str(verdict.verdict), "was not judged")
    names = verdict.explanations or verdict.could_hide
    named = f" ({', '.join(names)})" if names else ""
    return f"normcheck: {_what(step)} {heading}{named}: {where}"


def conclude(verdict: Verdict, rank: int, step: Optional[int] = None, raise_on_failure: bool = True,
             synchronize: Optional[Callable[[], None]] = None) -> Verdict:
    """On every rank at once: prints the pass line on rank 0, or raises (warns) the failure, whole on rank 0.

    ``synchronize`` (a barrier of every rank) is called under torchrun before a failure is raised."""
    if verdict.passed:
        if rank == 0:
            print(passed_line(verdict, step), file=sys.stderr, flush=True)
        return verdict
    text = verdict.message if rank == 0 else pointer_line(verdict, step)
    if raise_on_failure and synchronize is not None and os.environ.get("TORCHELASTIC_RUN_ID"):
        if rank == 0:
            print(text, file=sys.stderr, flush=True)
            text = pointer_line(verdict, step, "the whole diagnosis is printed above")
        synchronize()
    if raise_on_failure:
        raise NormcheckFailure(text, [verdict])
    warnings.warn(text, NormcheckWarning, stacklevel=3)
    return verdict
