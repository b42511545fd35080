"""One step of a mesh test's loop, probed or not, and what the probe-invisibility check compares.

``step(loss_of, model, probe, ddp, optimizer)`` runs the loss and its backward (inside ``probe.step``
when probed, then judges it) and the optimizer's step, and returns the loss, the model's gradients and
its parameters after the update (the probe's own left out) and the verdict (None unprobed).
"""

from typing import Any, Callable, List, Optional, Tuple

import torch


def step(loss_of: Callable[[], torch.Tensor], model: torch.nn.Module, probe: Optional[Any], ddp: torch.nn.Module,
         optimizer: torch.optim.Optimizer) -> Tuple[torch.Tensor, List[torch.Tensor], List[torch.Tensor], Any]:
    if probe:
        with probe.step(wrap=False):
            loss = loss_of()
            loss.backward()
        verdict = probe.judge(ddp)
    else:
        loss = loss_of()
        loss.backward()
        verdict = None
    own = [p for p in model.parameters() if not (probe and probe.is_probe(p))]
    gradients = [p.grad.clone() for p in own]
    optimizer.step()
    parameters = [p.detach().clone() for p in own]
    return loss.detach().clone(), gradients, parameters, verdict


def unchanged(plain: Tuple[Any, ...], probed: Tuple[Any, ...]) -> bool:
    """The probed step's loss, gradients and updated parameters are bitwise the unprobed step's."""
    same = all(torch.equal(a, b) for a, b in zip(plain[1] + plain[2], probed[1] + probed[2]))
    return bool(torch.equal(plain[0], probed[0]) and same and len(plain[1]) == len(probed[1]))


def zigzag(cp_rank: int, length: int, cp: int) -> torch.Tensor:
    """The positions CP rank ``cp_rank`` holds of a sequence of ``length``: chunks cp_rank and 2·cp − 1 − cp_rank
    of 2·cp chunks (the load-balanced split)."""
    chunk = length // (2 * cp)
    held: List[int] = []
    for c in (cp_rank, 2 * cp - 1 - cp_rank):
        held += list(range(c * chunk, (c + 1) * chunk))
    return torch.tensor(held)
