"""What every integration does the same way: keeping p out of an optimizer the framework built."""

from __future__ import annotations

from typing import Any

from ..probe import Probe, ProbeError

__all__ = ["drop_from_optimizer"]


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
