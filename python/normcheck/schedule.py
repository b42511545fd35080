"""Which optimizer steps of a run are judged: the first, and every K-th after it. Standard library only."""

from __future__ import annotations

from typing import Optional

__all__ = ["due"]


def due(step: int, *, first: int = 0, every: Optional[int] = None) -> bool:
    """Whether optimizer step ``step`` (counted from 0) is judged: ``first``, and with ``every`` = K every K-th
    step after it (``first``, ``first`` + K, ``first`` + 2K, …).

    A hand-written loop runs the steps it names inside ``probe.step()`` and judges them; the integrations'
    callbacks (``every=``) use it for the steps they judge.
    """
    if every is None:
        return step == first
    return step >= first and (step - first) % every == 0
