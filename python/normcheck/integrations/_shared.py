"""What every integration does the same way: keeping p out of an optimizer the framework built, and in
the graph of every training step the probe does not judge."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .._probe_install import route
from ..probe import Probe, ProbeError

__all__ = ["drop_from_optimizer", "route_outside_step"]


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


def route_outside_step(probe: Probe, active: Callable[[], bool]) -> Any:
    """Routes p through the probed module's output in every training forward while ``active()`` is false.

    Inside the judged step the probe's loss terms give p its gradient. In the framework's other steps
    nothing does, and DistributedDataParallel (without ``find_unused_parameters``) then stops at the
    next forward: a parameter it holds got no gradient. Multiplying the output by 1, as a function of
    p with gradient exactly 0, keeps every value bit for bit and gives p a zero gradient that the
    probe's next step discards. Returns the hook's handle (``.remove()``).
    """
    parameters = probe.probe_parameters()

    def hook(module: nn.Module, inputs: Any, output: Any) -> Any:
        if active() or not torch.is_grad_enabled():
            return None
        routed, found = route(output, parameters)
        return routed if found else None

    return probe.module.register_forward_hook(hook)
