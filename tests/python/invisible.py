"""The law every probe and framework test asserts: the probe changes nothing of the step it judges.

A step runs twice from identical state, once unprobed and once probed; ``record`` takes, after each
run's backward, the loss values and every model parameter's gradient, then runs the optimizer and
takes the parameters it left (``trained`` takes the same of a ``transformers.Trainer``'s run).
``differences`` lists every value that is not bitwise the same (a worker process returns that list),
``assert_invisible`` raises naming them.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes: NaN equals NaN of the same payload, −0 differs from +0."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality of two tensors (shape, dtype and every byte)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def record(losses: Sequence[torch.Tensor], model: nn.Module, optimizer: Any = None,
           probe: Any = None) -> Dict[str, Any]:
    """The step's losses and model gradients now, then (after ``optimizer.step()``, if given) its parameters.

    Probe parameters are left out (``probe.is_probe``), so the same names come from both runs.
    """
    def kept(parameter: nn.Parameter) -> bool:
        return probe is None or not probe.is_probe(parameter)

    named = [(name, q) for name, q in model.named_parameters() if kept(q)]
    outcome: Dict[str, Any] = {
        "losses": [loss.detach().clone() for loss in losses],
        "gradients": {name: (q.grad.detach().clone() if q.grad is not None else None) for name, q in named},
        "parameters": None,
    }
    if optimizer is not None:
        optimizer.step()
        outcome["parameters"] = {name: q.detach().clone() for name, q in named}
    return outcome


def trained(trainer: Any, probe: Any = None) -> Dict[str, Any]:
    """``trainer.train()`` recorded as ``record`` records a step: the run's training loss, the model's gradients
    as the optimizer receives them (at ``on_pre_optimizer_step`` of the first step, after clipping) and the
    parameters the run leaves. ``probe``: the probe attached to ``trainer.model``, if any."""
    import transformers

    taken: Dict[str, Any] = {}

    class Take(transformers.TrainerCallback):  # type: ignore[misc]
        def on_pre_optimizer_step(self, *arguments: Any, **kwargs: Any) -> None:
            if not taken:
                taken.update(record([], trainer.model, None, probe))

    trainer.add_callback(Take())
    output = trainer.train()
    taken["losses"] = [torch.tensor(float(output.training_loss), dtype=torch.float64)]
    taken["parameters"] = {name: q.detach().clone() for name, q in trainer.model.named_parameters()
                           if probe is None or not probe.is_probe(q)}
    return taken


def differences(unprobed: Dict[str, Any], probed: Dict[str, Any]) -> List[str]:
    """What the probed run changed: one line per loss, gradient or parameter that is not bitwise the same."""
    found: List[str] = []
    if len(unprobed["losses"]) != len(probed["losses"]):
        found.append(f"{len(probed['losses'])} losses where the unprobed step had {len(unprobed['losses'])}")
    for k, (a, b) in enumerate(zip(unprobed["losses"], probed["losses"])):
        if not same(a, b):
            found.append(f"loss {k}: {b.tolist()} where the unprobed step had {a.tolist()}")
    for kind in ("gradients", "parameters"):
        a_values: Optional[Dict[str, Optional[torch.Tensor]]] = unprobed[kind]
        b_values: Optional[Dict[str, Optional[torch.Tensor]]] = probed[kind]
        if a_values is None or b_values is None:
            if (a_values is None) != (b_values is None):
                found.append(f"{kind}: taken in one run only")
            continue
        if sorted(a_values) != sorted(b_values):
            found.append(f"{kind}: names {sorted(set(a_values) ^ set(b_values))} in one run only")
        for name in a_values:
            a, b = a_values[name], b_values.get(name)
            if a is None or b is None:
                if (a is None) != (b is None):
                    found.append(f"{kind} {name}: None in one run only")
                continue
            if not same(a, b):
                scale = float(a.double().norm()) or 1.0
                relative = float((a.double() - b.double()).norm()) / scale
                found.append(f"{kind} {name}: differs, relative {relative:.3g}")
    return found


def assert_invisible(run: Callable[[bool], Dict[str, Any]]) -> Dict[str, Any]:
    """Runs ``run(False)`` and ``run(True)`` (each returns ``record(...)``) and asserts they are bitwise equal.

    Returns the probed run's record.
    """
    unprobed = run(False)
    probed = run(True)
    found = differences(unprobed, probed)
    assert not found, "the probe changed the step:\n  " + "\n  ".join(found)
    return probed
