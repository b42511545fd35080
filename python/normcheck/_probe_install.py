"""Installing the probe on a module: p and the sites' parameters, kept out of checkpoints, routed through outputs.

``install`` registers a zero parameter under the probe's name on the module and on each site (a
submodule with parameters of its own) and returns their ``Holder``s; ``keep_out_of_checkpoints`` makes
``state_dict`` leave them out and ``load_state_dict`` not miss them. ``route`` multiplies an output by
1(p), whose gradient is exactly 0, so that a reducer that waits for every parameter sees p used.
``replay_parameter_hooks`` gives each probe parameter the gradient hooks of the model parameters it
stands for, registered before the probe, and ``parameter_hook_problem`` says when they no longer match.
``KeywordInputs`` shows the probe a forward's keyword arguments where pre-hooks cannot (torch 1.13).
"""

from __future__ import annotations

import functools
import types
from fractions import Fraction
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ._probe_record import ProbeError

__all__ = ["DEFAULT_NAME", "SitesOption", "Holder", "KeywordInputs", "install", "keep_out_of_checkpoints",
           "register_inputs_hook", "route", "walk", "own_bucket_dtype", "default_dtype", "parameter_hooks", "same_hook",
           "replay_parameter_hooks", "parameter_hook_problem"]

DEFAULT_NAME = "normcheck_probe"
"""The name p is registered under, on the module and on each site."""

SitesOption = Union[str, Sequence[str], None]
"""``"children"``, a list of submodule names, or None."""


class KeywordInputs:
    """Where forward pre-hooks take no keyword arguments (torch 1.13): ``module.forward`` shadowed on the
    instance by a method that hands (module, args, kwargs) to ``seen`` first, so that a model called as
    ``model(input_ids=..., labels=...)`` shows its batch; ``remove()`` restores the forward it had. The
    method is bound to the module, so a deep copy of the module calls its own forward."""

    def __init__(self, module: nn.Module, seen: Callable[[nn.Module, Any, Any], None]) -> None:
        self._module: Optional[nn.Module] = module
        self._previous = module.__dict__.get("forward")
        previous = self._previous

        def observed(this: nn.Module, *args: Any, **kwargs: Any) -> Any:
            seen(this, args, kwargs)
            if previous is not None:
                return previous(*args, **kwargs)
            return type(this).forward(this, *args, **kwargs)

        self.forward = types.MethodType(observed, module)
        object.__setattr__(module, "forward", self.forward)

    def remove(self) -> None:
        """Restores the forward the module had (once; later calls do nothing)."""
        module, self._module = self._module, None
        if module is None or module.__dict__.get("forward") is not self.forward:
            return
        if self._previous is not None:
            object.__setattr__(module, "forward", self._previous)
        else:
            del module.__dict__["forward"]


class Holder:
    """One probe parameter and the module it is registered on ('' for the probed module itself).

    ``fully_shard`` replaces the parameter in the module by a DTensor shard and, during the module's
    forward, by the gathered one; ``current()`` is whichever the module holds now, and ``live`` a copy
    of the gathered one taken at the start of the last forward (its data outlives FSDP freeing the
    gathered storage; its backward reaches the gathered parameter, whose gradient FSDP reduce-scatters).
    """

    def __init__(self, site: str, module: nn.Module, parameter: nn.Parameter, name: str) -> None:
        self.site = site
        self.module = module
        self.parameter = parameter
        self.name = name
        self.live: Optional[torch.Tensor] = None

    def current(self) -> torch.Tensor:
        """The parameter the module holds under the probe's name now (p itself unless FSDP replaced it)."""
        held = self.module._parameters.get(self.name)
        return held if held is not None else self.parameter

    def source(self) -> torch.Tensor:
        """What a loss term multiplies: the forward's copy of a gathered p, else p."""
        return self.live if self.live is not None else self.parameter


def own_bucket_dtype(module: nn.Module) -> torch.dtype:
    """float64 or float32, whichever no parameter of ``module`` has (float32 when it has both)."""
    present = {parameter.dtype for parameter in module.parameters()}
    return torch.float64 if torch.float64 not in present else torch.float32


def default_dtype(module: nn.Module, world_size: int) -> torch.dtype:
    """The probe's dtype unless given: the model's own (float32 or float64) on one or two ranks, else the other.

    On two ranks p joins the model's all-reduce bucket: one collective fewer per step, and a sum of two
    addends is the same in either order, so no bit of the model's reduction changes. On three or more,
    a longer bucket changes the ring all-reduce's chunks and so the order in which some elements are
    summed: p takes the dtype no parameter has, and DDP gives it a bucket of its own.
    """
    present = {parameter.dtype for parameter in module.parameters()}
    if world_size <= 2 and len(present) == 1 and present <= {torch.float32, torch.float64}:
        return next(iter(present))
    return own_bucket_dtype(module)


def site_modules(module: nn.Module, sites: SitesOption) -> List[Tuple[str, nn.Module]]:
    """The submodules ``sites`` names, by name: the children with parameters for ``"children"``."""
    if sites is None:
        return []
    if isinstance(sites, str):
        if sites != "children":
            raise ProbeError(f"sites is 'children', a list of submodule names or None, not {sites!r}")
        return [(n, child) for n, child in module.named_children() if next(child.parameters(), None) is not None]
    chosen: List[Tuple[str, nn.Module]] = []
    for site in sites:
        if not isinstance(site, str) or not site:
            raise ProbeError(f"a site is a submodule's name, not {site!r}")
        try:
            chosen.append((site, module.get_submodule(site)))
        except AttributeError:
            raise ProbeError(f"the module has no submodule {site!r} to place a site in") from None
    names = [n for n, _ in chosen]
    if len(set(names)) != len(names):
        raise ProbeError(f"sites are named twice: {names}")
    return chosen


def install(module: nn.Module, sites: SitesOption, name: str, components: int, dtype: torch.dtype) -> List[Holder]:
    """A zero parameter of ``components`` components registered as ``name`` on ``module`` and on every site."""
    first = next(module.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    holders: List[Holder] = []
    for site, owner in [("", module)] + site_modules(module, sites):
        if hasattr(owner, name):
            where = f"the submodule {site!r}" if site else "the module"
            raise ProbeError(f"{where} already has an attribute {name!r}: one probe per module")
        parameter = nn.Parameter(torch.zeros(components, dtype=dtype, device=device))
        holders.append(Holder(site, owner, parameter, name))
    for holder in holders:
        holder.module.register_parameter(name, holder.parameter)
    return holders


def _keep_out_of_state_dict(module: nn.Module, name: str) -> Any:
    def drop(module: nn.Module, state_dict: Dict[str, Any], prefix: str, local_metadata: Any) -> None:
        state_dict.pop(prefix + name, None)

    public = getattr(module, "register_state_dict_post_hook", None)
    if callable(public):
        return public(drop)
    private = getattr(module, "_register_state_dict_hook", None)
    if callable(private):
        return private(drop)
    raise ProbeError("this torch offers no state_dict hook: the probe cannot keep p out of checkpoints")


def keep_out_of_checkpoints(holders: Sequence[Holder], name: str) -> List[Any]:
    """Hooks (their handles) that leave ``name`` out of each holder's ``state_dict`` and forgive it missing on load."""
    def forgive_missing(module: nn.Module, incompatible_keys: Any) -> None:
        missing = incompatible_keys.missing_keys
        for key in [k for k in missing if k == name or k.endswith("." + name)]:
            missing.remove(key)

    handles: List[Any] = []
    for holder in holders:
        handles.append(_keep_out_of_state_dict(holder.module, name))
        handles.append(holder.module.register_load_state_dict_post_hook(  # type: ignore[no-untyped-call]
            forgive_missing))
    return handles


def register_inputs_hook(module: nn.Module, seen: Callable[[nn.Module, Any, Any], None]) -> Any:
    """``seen(module, args, kwargs)`` before every forward of ``module``; the hook's handle."""
    try:
        return module.register_forward_pre_hook(seen, with_kwargs=True)
    except TypeError:  # torch 1.13: a pre-hook sees positional inputs only
        return KeywordInputs(module, seen)


class One(torch.autograd.Function):
    """1, as a function of the probe parameters with gradient 0: multiplying an output by it routes them."""

    @staticmethod
    def forward(ctx: Any, *parameters: torch.Tensor) -> torch.Tensor:
        ctx.shapes = [(p.shape, p.dtype, p.device) for p in parameters]
        first = parameters[0]
        return torch.ones((), dtype=first.dtype, device=first.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        # Exactly 0 whatever flows back: sum(grad·output) can be inf or NaN, and 0·inf would be NaN.
        return tuple(torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.shapes)


def route(value: Any, parameters: Sequence[torch.Tensor]) -> Tuple[Any, bool]:
    """``value`` with every floating tensor that requires grad (else its first floating tensor) multiplied by
    1(p); whether one was found. Every such tensor: a loss may be built from any of them (TRL's fused head
    returns a ``loss`` its trainer never backpropagates, and the ``log_probs`` it does)."""
    one: List[torch.Tensor] = []  # made once per route, at the first tensor routed
    ones: Dict[Tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def times_one(tensor: torch.Tensor) -> torch.Tensor:
        if not one:
            one.append(One.apply(*parameters))  # type: ignore[no-untyped-call]
        key = (tensor.device, tensor.dtype)
        if key not in ones:
            ones[key] = one[0].to(device=tensor.device, dtype=tensor.dtype)
        return tensor * ones[key]

    routed, found = walk(value, times_one, lambda t: t.is_floating_point() and t.requires_grad, every=True)
    if found:
        return routed, True
    return walk(value, times_one, lambda t: t.is_floating_point(), every=False)


def walk(value: Any, change: Callable[[torch.Tensor], torch.Tensor], chosen: Callable[[torch.Tensor], bool],
          every: bool) -> Tuple[Any, bool]:
    """``value`` with ``change`` applied to its chosen tensors (every one, or the first); whether one was chosen.
    A dict (a ModelOutput) is changed in place, so that its attributes stay in step; a tuple keeps its type."""
    if isinstance(value, torch.Tensor):
        return (change(value), True) if chosen(value) else (value, False)
    if isinstance(value, dict):
        any_found = False
        for key in list(value.keys()):
            routed, found = walk(value[key], change, chosen, every)
            if found:
                value[key] = routed
                any_found = True
                if not every:
                    break
        return value, any_found
    if isinstance(value, (tuple, list)):
        items = list(value)
        any_found = False
        for i, item in enumerate(items):
            routed, found = walk(item, change, chosen, every)
            if found:
                items[i] = routed
                any_found = True
                if not every:
                    break
        if not any_found:
            return value, False
        if isinstance(value, list):
            return items, True
        if hasattr(value, "_fields"):  # a named tuple
            return type(value)(*items), True
        try:
            return type(value)(items), True
        except TypeError:
            return tuple(items), True
    return value, False


# ---------------------------------------------------------------------------------------------------
# Gradient hooks on the model's parameters

def parameter_hooks(parameter: torch.Tensor, skip: Sequence[Any] = ()) -> List[Any]:
    """The gradient hooks registered on ``parameter`` (``register_hook``), in the order they run, ``skip`` left out."""
    hooks = getattr(parameter, "_backward_hooks", None)
    return [hook for hook in (hooks.values() if hooks else []) if not any(hook == s for s in skip)]


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    plain = (int, float, str, bool, bytes, Fraction, type(None))
    return type(a) is type(b) and isinstance(a, plain) and bool(a == b)


def _same_values(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))


def same_hook(a: Any, b: Any) -> bool:
    """Whether two hooks do the same: the same callable, a bound method of the same object, a partial of the same
    function and arguments, or a function of the same code whose defaults and closed-over values are the same
    objects (the lambdas a loop registers on each parameter of a module)."""
    if a is b:
        return True
    if isinstance(a, functools.partial) and isinstance(b, functools.partial):
        return (same_hook(a.func, b.func) and _same_values(a.args, b.args)
                and sorted(a.keywords) == sorted(b.keywords)
                and all(_same_value(a.keywords[k], b.keywords[k]) for k in a.keywords))
    if isinstance(a, types.MethodType) and isinstance(b, types.MethodType):
        return a.__func__ is b.__func__ and a.__self__ is b.__self__
    if isinstance(a, types.FunctionType) and isinstance(b, types.FunctionType):
        cells_a = [c.cell_contents for c in a.__closure__ or ()]
        cells_b = [c.cell_contents for c in b.__closure__ or ()]
        return (a.__code__ is b.__code__ and _same_values(a.__defaults__ or (), b.__defaults__ or ())
                and _same_values(sorted((a.__kwdefaults__ or {}).items()), sorted((b.__kwdefaults__ or {}).items()))
                and _same_values(cells_a, cells_b))
    return False


def _same_hooks(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(same_hook(x, y) for x, y in zip(a, b))


def _hook_name(hook: Any) -> str:
    inner = getattr(hook, "func", hook)
    return str(getattr(inner, "__qualname__", None) or type(inner).__name__)


def _hooks_text(hooks: Sequence[Any]) -> str:
    return ", ".join(_hook_name(h) for h in hooks) if hooks else "none"


def _represented(module: nn.Module, holders: Sequence[Holder]) -> List[Tuple[List[Tuple[str, nn.Parameter]], bool]]:
    """For each holder, the model parameters it stands for, by name, and whether they must all have the same hooks.

    A site stands for its module's parameters. p stands for the parameters no site holds (all of them
    without sites); when the sites hold them all, p takes what every parameter of the model has in common.
    """
    probe = {id(h.parameter) for h in holders} | {id(h.current()) for h in holders}
    everything = [(n, q) for n, q in module.named_parameters() if id(q) not in probe]
    by_site = [[(f"{h.site}.{n}", q) for n, q in h.module.named_parameters() if id(q) not in probe]
               for h in holders[1:]]
    in_sites = {id(q) for named in by_site for _, q in named}
    own = [(n, q) for n, q in everything if id(q) not in in_sites]
    return [(own, True) if own else (everything, False)] + [(named, True) for named in by_site]


def _expected_hooks(named: Sequence[Tuple[str, nn.Parameter]], strict: bool, where: str) -> List[Any]:
    """The hooks every parameter of ``named`` has (ProbeError if they differ and ``strict``; else none)."""
    if not named:
        return []
    first_name, first = named[0]
    hooks = parameter_hooks(first)
    for name, parameter in named[1:]:
        theirs = parameter_hooks(parameter)
        if not _same_hooks(hooks, theirs):
            if not strict:
                return []
            raise ProbeError(f"the gradient hooks on {where}'s parameters differ ({first_name}: {_hooks_text(hooks)}; "
                             f"{name}: {_hooks_text(theirs)}): its probe parameter cannot receive what each of them "
                             "receives. Register the same hooks on every parameter of the module, or make it a site "
                             "of its own (sites=[...])")
    return hooks


def _post_accumulate_hooks(named: Sequence[Tuple[str, nn.Parameter]], where: str) -> None:
    for name, parameter in named:
        hooks = getattr(parameter, "_post_accumulate_grad_hooks", None)
        if hooks:
            raise ProbeError(f"{name} has post-accumulate-grad hooks ({_hooks_text(list(hooks.values()))}): they see "
                             f"{where}'s gradient after it is accumulated (to scale it in place, or to step an "
                             "optimizer inside the backward), which the probe cannot replay on its own parameter; "
                             "run the probed step without them")


def replay_parameter_hooks(module: nn.Module, holders: Sequence[Holder]) -> None:
    """Registers on each probe parameter the gradient hooks of the model parameters it stands for, in their order.

    A site's module must have the same hooks on every parameter (ProbeError names two that differ); p
    takes those of the parameters no site holds (which must agree likewise), or, when the sites hold every
    parameter, those all of them share. Post-accumulate-grad hooks are refused.
    """
    for holder, (named, strict) in zip(holders, _represented(module, holders)):
        where = holder.site or "the model"
        _post_accumulate_hooks(named, where)
        for hook in _expected_hooks(named, strict, where):
            holder.parameter.register_hook(hook)  # type: ignore[no-untyped-call]


def parameter_hook_problem(module: nn.Module, holders: Sequence[Holder], own: Sequence[Any]) -> Optional[str]:
    """What no longer matches between the model's parameters' hooks and their probe parameters' (hooks added
    after the probe on some of them only), or None. ``own``: the probe's own hooks, left out."""
    try:
        for holder, (named, strict) in zip(holders, _represented(module, holders)):
            where = holder.site or "the model"
            expected = _expected_hooks(named, strict, where)
            present = parameter_hooks(holder.current(), own)
            if not _same_hooks(expected, present):
                return (f"the gradient hooks on {where}'s parameters ({_hooks_text(expected)}) are not those of its "
                        f"probe parameter ({_hooks_text(present)}): hooks registered after Probe(model) on some "
                        "parameters only do not reach the probe's. Register them before the probe, or on "
                        "module.parameters() after it (the probe's included)")
    except ProbeError as e:
        return str(e)
    return None
