"""Taps: the probe's terms go through the modules' outputs, so that what acts on those gradients acts on them.

A tap point is a module whose output the probe watches: each child of the probed module, each site, and
each member of a site that is a container (``nn.ModuleList``, ``nn.ModuleDict``: never called itself).
Inside ``probe.step()``, a forward hook that runs before the module's other forward hooks passes the
output's floating tensors that require grad through ``Tap``, an autograd function that returns them as
they are (aliases of the same storage: every value, every later in-place use and every later hook stays
as it would be) together with the *ghost*: the probe parameters that entered the data path so far in
this forward of the probed module (p at the first tap, a site's parameter at its own tap), summed in
float64. The loss terms use the ghost that left the last tap, where they used the parameters.

In the backward, a tensor hook registered first on each returned tensor keeps the gradient arriving
there, before any other hook; ``Tap.backward`` receives it after every hook registered on the tensor
since (a pipeline stage's ÷G, FSDP's own, the user's) and compares the two (``factor_of``): the same
tensor, or the same bits, is the factor 1; a scalar multiple is that factor, taken exactly (a power of
two bit for bit, else the simplest fraction the dtype's rounding allows); anything else is refused. The
ghost's gradient is multiplied by the factor on its way to the parameters that entered at this tap or
before it, so each probe parameter receives the factors of every tap from where it entered to the loss,
as a parameter of the module in its place does on a path of modules run one after another. The model's
own gradients pass through as the hooks left them, the same tensors.

What is measured here is reported, never raised in the backward: a refusal is kept in the probe's
``Refusals`` and raised as ``ProbeError`` on every rank when the step is judged.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
from torch import nn

from ._probe_install import walk

__all__ = ["Factor", "Refusals", "Chain", "TapRecord", "Tap", "tap_points", "factor_of", "scaled", "describe",
           "hook_names", "is_container", "prepend_forward_hook", "tapped", "module_backward_hooks", "output_tensors",
           "replaced"]

Factor = Union[Fraction, float]
"""A measured factor: exact where the rounding of the gradient's dtype allows it, else its float64 value."""

_UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8,
                  torch.float16: 2.0 ** -11}
_LARGEST_DENOMINATOR = 1 << 20  # a factor is a fraction with a smaller denominator, or taken as its float value
_CHUNK = 1 << 22  # elements compared at once (float64 copies of a large gradient stay bounded)


class Refusals:
    """What the probe saw but cannot measure in this step; raised as one ``ProbeError`` when it is judged."""

    def __init__(self) -> None:
        self.messages: List[str] = []

    def add(self, message: str) -> None:
        """Keeps ``message`` (once)."""
        if message not in self.messages:
            self.messages.append(message)

    def text(self) -> Optional[str]:
        """Every refusal in one text, or None."""
        return "; ".join(self.messages) if self.messages else None


class Chain:
    """The ghost of one forward of the probed module: its current end and which probe parameters entered it."""

    def __init__(self) -> None:
        self.ghost: Optional[torch.Tensor] = None
        self.entered: Set[int] = set()  # indices of the probe's holders (0: p)
        self.open = True  # the probed module's forward is running: taps extend the chain

    def enter(self, parameters: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
        """The parameters' sum in float64 (None for none): what enters the chain at a tap."""
        total: Optional[torch.Tensor] = None
        for parameter in parameters:
            value = parameter if parameter.dtype == torch.float64 else parameter.to(torch.float64)
            total = value if total is None else total + value
        return total


def hook_names(hooks: Any) -> List[str]:
    """The qualified names of the callables in a hook dictionary (``tensor._backward_hooks``), the taps' own left
    out (an output a module passes on unchanged, tapped before, carries one)."""
    names = []
    for hook in (list(hooks.values()) if hooks else []):
        if getattr(hook, "normcheck_tap", False):
            continue
        inner = getattr(hook, "func", hook)  # functools.partial
        names.append(getattr(inner, "__qualname__", None) or type(inner).__name__)
    return names


class TapRecord:
    """What one tap of one forward keeps for its backward: the module's name, the gradients as they arrived."""

    def __init__(self, name: str, count: int, refusals: Refusals) -> None:
        self.name = name
        self.refusals = refusals
        self.raw: List[Optional[torch.Tensor]] = [None] * count
        self.versions: List[int] = [0] * count
        self.cloned: List[bool] = [False] * count
        self.others: List[List[str]] = [[] for _ in range(count)]  # the other hooks on each output

    def watch(self, index: int, output: torch.Tensor) -> None:
        """Registers the first hook on ``output``: it keeps the gradient that arrives (a copy when another hook, run
        after it, may change it in place). It reads the hooks from the tensor's dictionary of hooks, which
        outlives the Python tensor and is the one every later ``register_hook`` adds to."""
        hooks: Any = {}

        def arrived(grad: Optional[torch.Tensor]) -> None:
            if grad is None:  # torch 2 calls the hooks of a node's output that received no gradient with None
                return
            others = hook_names(hooks)
            self.others[index] = others
            self.cloned[index] = bool(others)
            self.raw[index] = grad.clone() if others else grad
            self.versions[index] = grad._version

        setattr(arrived, "normcheck_tap", True)
        output.register_hook(arrived)  # type: ignore[no-untyped-call]
        hooks = output._backward_hooks

    def factor(self, grads: Sequence[Optional[torch.Tensor]], ghost: Optional[torch.Tensor]) -> Factor:
        """The factor the hooks applied to every output's gradient (1 where none arrived); a refusal is kept."""
        found: List[Tuple[Factor, int]] = []
        undetermined: List[int] = []
        arrived: Dict[int, torch.Tensor] = {}
        for index, hooked in enumerate(grads):
            raw = self.raw[index]
            self.raw[index] = None
            if raw is not None:
                arrived[index] = raw
            if hooked is None:
                continue  # no gradient reached this output, so no hook on it ran
            if raw is None:
                self.refusals.add(f"a gradient reached {self.name}'s output without passing the probe's first hook")
                return 1
            if hooked is raw and not self.cloned[index]:
                if hooked._version != self.versions[index]:
                    self.refusals.add(f"the gradient of {self.name}'s output was changed in place by a hook the probe "
                                      "cannot see (a node hook on its autograd function)")
                    return 1
                found.append((Fraction(1), index))
                continue
            measured = factor_of(raw, hooked)
            if isinstance(measured, str):
                names = ", ".join(self.others[index]) or "a hook"
                self.refusals.add(f"{names} on {self.name}'s output changed its gradient otherwise than by a factor "
                                  f"({measured}): the probe cannot measure what a parameter of {self.name} "
                                  "receives; remove the hook for the probed step")
                return 1
            if measured is None:  # every element 0: any factor fits, and no parameter receives anything from it
                undetermined.append(index)
                continue
            found.append((measured, index))
        if not found:
            if undetermined and ghost is not None and bool(ghost.ne(0).any()):
                names = ", ".join(n for i in undetermined for n in self.others[i]) or "a hook"
                self.refusals.add(f"the gradient reaching {self.name}'s output was 0, so the probe cannot tell "
                                  f"what {names} does to it")
            return 1
        if len({value for value, _ in found}) > 1:  # an output whose gradient is 0 passes nothing on: no factor
            found = [(value, index) for value, index in found if bool(arrived[index].ne(0).any())] or found[:1]
        first = found[0][0]
        for value, index in found[1:]:
            if value != first:
                self.refusals.add(f"the hooks on {self.name}'s outputs scaled their gradients differently "
                                  f"({describe(first)} and {describe(value)}): no parameter of the probe receives both")
                return first
        return first


class Tap(torch.autograd.Function):
    """The outputs as they are (aliases) and the ghost extended; its backward applies the measured factor."""

    @staticmethod
    def forward(ctx: Any, record: TapRecord, ghost: Optional[torch.Tensor], entering: Optional[torch.Tensor],
                *outputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        ctx.record = record
        ctx.present = (ghost is not None, entering is not None)
        if ghost is not None and entering is not None:
            extended = ghost + entering
        else:
            extended = (ghost if ghost is not None else entering).clone()  # type: ignore[union-attr]
        # An alias of each output: detached, so that a later in-place use acts on it as on the output itself; a view
        # stays a view (an in-place use of it then raises, where a detached alias would hide the change from the
        # backward of its base's other uses).
        return (extended,) + tuple(o.view_as(o) if o._is_view() else o.detach() for o in outputs)

    @staticmethod
    def backward(ctx: Any, ghost_grad: Optional[torch.Tensor],
                 *grads: Optional[torch.Tensor]) -> Tuple[Optional[torch.Tensor], ...]:
        record: TapRecord = ctx.record
        factor = record.factor(grads, ghost_grad)
        has_ghost, has_entering = ctx.present
        to_ghost = to_entering = None
        if ghost_grad is not None:
            value = scaled(ghost_grad, factor)
            to_ghost = value if has_ghost else None
            to_entering = (value.clone() if has_ghost else value) if has_entering else None
        return (None, to_ghost, to_entering) + tuple(grads)


def tapped(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` came out of a tap (a module passed on its input unchanged): its hooks are measured there."""
    return isinstance(tensor.grad_fn, Tap._backward_cls)


def scaled(grad: torch.Tensor, factor: Factor) -> torch.Tensor:
    """``grad`` times ``factor`` (a new tensor): one rounding for 1/d and n, two for n/d, exact for powers of two."""
    if isinstance(factor, float):
        return grad * factor
    if factor == 1:
        return grad.clone()
    if factor.numerator == 1:
        return grad / factor.denominator
    if factor.denominator == 1:
        return grad * factor.numerator
    return grad * factor.numerator / factor.denominator


def describe(factor: Factor) -> str:
    """A factor as a person reads it: 1/4, 3, 0.37."""
    return repr(factor) if isinstance(factor, float) else str(factor)


def _simplest_between(low: Fraction, high: Fraction) -> Fraction:
    """The fraction with the smallest denominator in [low, high], 0 ≤ low ≤ high (the Stern–Brocot descent)."""
    whole = math.floor(low)
    if whole == low:
        return Fraction(whole)
    if whole + 1 <= high:
        return Fraction(whole + 1)
    return whole + 1 / _simplest_between(1 / (high - whole), 1 / (low - whole))


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.contiguous().reshape(-1)
    integer = {8: torch.int64, 4: torch.int32, 2: torch.int16}[flat.element_size()]
    return flat.view(integer)


def factor_of(raw: torch.Tensor, hooked: torch.Tensor) -> Union[Factor, str, None]:
    """f with ``hooked`` = f·``raw`` as the dtype rounds it, None when every element is 0 (any f fits), or a text
    saying why there is none. A power of two must match bit for bit; another factor is the simplest fraction
    within a few roundings of every element's ratio (its float64 value when that fraction's denominator
    exceeds 2²⁰); elements that are not finite must stay so, zeros must stay zero."""
    if hooked.shape != raw.shape or hooked.dtype != raw.dtype:
        return f"its shape or dtype changed from {tuple(raw.shape)} {raw.dtype} to {tuple(hooked.shape)} {hooked.dtype}"
    tolerance = 4 * _UNIT_ROUNDOFF.get(raw.dtype, 2.0 ** -24)
    flat_raw, flat_hooked = raw.detach().reshape(-1), hooked.detach().reshape(-1)
    count = flat_raw.numel()
    # The candidate: the ratio at the largest finite element (the one rounding perturbs least).
    finite = torch.isfinite(flat_raw)
    magnitudes = torch.where(finite, flat_raw.abs(), torch.zeros((), dtype=flat_raw.dtype, device=flat_raw.device))
    largest = int(magnitudes.argmax()) if count else 0
    if count and float(magnitudes[largest]) != 0 and torch.equal(_bits(raw), _bits(hooked)):
        return Fraction(1)
    if not count:
        return None
    if float(magnitudes[largest]) == 0:  # every finite element arrived as 0
        if bool(flat_hooked[finite].ne(0).any()):
            return "an element that arrived as 0 left as another value"
        if bool(torch.isfinite(flat_hooked[~finite]).any()):
            return "an element that was not finite became finite"
        return None
    ratio = float(flat_hooked[largest].double()) / float(flat_raw[largest].double())
    candidate: Factor
    if ratio == 0 or not math.isfinite(ratio):
        candidate = Fraction(0) if ratio == 0 else ratio
    else:
        mantissa, _ = math.frexp(abs(ratio))
        if mantissa == 0.5 and torch.equal(_bits(flat_raw * ratio), _bits(flat_hooked)):
            return Fraction(ratio)
        low, high = sorted((Fraction(abs(ratio) * (1 - tolerance)), Fraction(abs(ratio) * (1 + tolerance))))
        simplest = _simplest_between(low, high)
        candidate = (simplest if ratio > 0 else -simplest) if simplest.denominator <= _LARGEST_DENOMINATOR else ratio
    value = float(candidate)
    differing = 0
    for start in range(0, count, _CHUNK):
        a = flat_raw[start:start + _CHUNK].to(torch.float64)
        b = flat_hooked[start:start + _CHUNK].to(torch.float64)
        expected = a * value
        fine = torch.isfinite(a)
        close = (b - expected).abs() <= tolerance * expected.abs() + torch.finfo(raw.dtype).tiny
        wrong = (fine & ~close) | (~fine & torch.isfinite(b))
        differing += int(wrong.sum())
    if differing:
        return (f"{differing} of {count} elements are not {describe(candidate)} times the gradient that arrived, "
                f"as the largest one is")
    return candidate


def is_container(module: nn.Module) -> bool:
    """A module that is never called itself (``ModuleList``, ``ModuleDict``): its members are tapped instead."""
    forward = getattr(type(module), "forward", None)
    return forward is None or getattr(forward, "__name__", "") == "_forward_unimplemented"


def tap_points(module: nn.Module, sites: Sequence[Tuple[str, nn.Module]]) -> List[Tuple[str, nn.Module, Optional[int]]]:
    """(name, module, holder index or None) of every tap point: each site (holder 1, 2, …; a container's members in
    its place), then each child of ``module`` that is not a site yet (no holder enters there)."""
    points: List[Tuple[str, nn.Module, Optional[int]]] = []
    seen: Set[int] = set()

    def add(name: str, member: nn.Module, holder: Optional[int]) -> None:
        if is_container(member):
            for child_name, child in member.named_children():
                add(f"{name}.{child_name}", child, holder)
            return
        if id(member) not in seen:
            seen.add(id(member))
            points.append((name, member, holder))

    for index, (name, site) in enumerate(sites, start=1):
        add(name, site, index)
    for name, child in module.named_children():
        add(name, child, None)
    return points


def prepend_forward_hook(module: nn.Module, hook: Callable[..., Any]) -> Any:
    """``hook`` registered as the module's first forward hook (``prepend=True``, or moved there on torch 1.13)."""
    try:
        return module.register_forward_hook(hook, prepend=True)
    except TypeError:  # torch 1.13 has no prepend: the handle's id is the hook's key in the ordered dictionary
        handle = module.register_forward_hook(hook)
        hooks: Any = module._forward_hooks
        hooks.move_to_end(handle.id, last=False)
        return handle


def module_backward_hooks(module: nn.Module) -> List[str]:
    """The names of the module backward hooks (``register_full_backward_hook``, its pre-hooks) of ``module``."""
    names = hook_names(getattr(module, "_backward_hooks", None))
    names += hook_names(getattr(module, "_backward_pre_hooks", None))
    return names


def output_tensors(value: Any) -> List[torch.Tensor]:
    """The floating tensors in a module's output that carry a gradient path (each once), in order."""
    found: Dict[int, torch.Tensor] = {}

    def carries(tensor: torch.Tensor) -> bool:
        return tensor.is_floating_point() and tensor.requires_grad and tensor.grad_fn is not None

    walk(value, lambda tensor: found.setdefault(id(tensor), tensor), carries, every=True)
    return list(found.values())


def replaced(value: Any, aliases: Dict[int, torch.Tensor]) -> Any:
    """``value`` with every tensor in ``aliases`` (by id) replaced; a dict (a ModelOutput) changed in place."""
    return walk(value, lambda tensor: aliases[id(tensor)], lambda tensor: id(tensor) in aliases, every=True)[0]
