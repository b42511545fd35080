"""The probe: measure what weight a real PyTorch training step gives every part of the update.

``Probe(model)`` registers on the model, before DistributedDataParallel wraps it, a parameter p = 0
with a fixed number of components: ``slots`` per rank for W ranks, and as many again for the witness.
Every group the step's loss sees on a rank (a microbatch, or each of its sequences) gets its own pair
of components k (primary) and k_w (witness), and each valid token's loss gains the term
p[k]·(−1) + p[k_w]·(−j), j the token's ordinal in its group. At p = 0 nothing in the step changes;
because the terms are linear in p, p.grad[k] after the synchronizing backward is minus the sum of the
weights the step gave group k's tokens, carried through its divisions, accumulation, DDP's reducer and
any communication hook. ``check`` gathers every rank's groups and p.grad into a per-group normcheck/1
document and lets ``normcheck check`` compare the weight table with the declared objective's. Under
FSDP2 (``fully_shard`` after the probe), the losses use the gathered p of each forward and rank 0 puts
the ranks' shards of p.grad together.

Two ways in: ``probe.add(per_token_loss, labels)`` where the step computes per-token losses itself,
and ``with probe.step():``, which captures ``cross_entropy`` and ``nll_loss`` for the duration of the
step (through a TorchFunctionMode on torch 2, by replacing the functions on torch 1.13), so that a
loss computed inside an unmodified model is probed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import tempfile
import types
import weakref
from fractions import Fraction
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.distributed as dist
from torch import nn

from . import _probe_capture as capture
from . import dump
from ._probe_step import Components, Keys, Layout, Microbatch, StepError, layout, layout_from_inputs
from .check import NormcheckError, NormcheckFailure, Verdict, run_check
from .collectives import record_collectives  # noqa: F401 (re-exported)
from .errors import Error
from .replicas import ReplicaDivergence, ReplicaSummary, check_replicas  # noqa: F401 (re-exported)

__all__ = ["Probe", "ProbeError", "OBJECTIVES", "DEFAULT_SLOTS", "default_value", "gather_counts", "count_valid",
           "own_bucket_dtype", "default_dtype", "DEFAULT_NAME"]
__all__ += ["check_replicas", "ReplicaDivergence", "ReplicaSummary", "record_collectives"]

DEFAULT_NAME = "normcheck_probe"
DEFAULT_SLOTS = 64
"""Groups (microbatches and sequences) one rank may record in a step unless ``slots=`` says otherwise."""
OBJECTIVES = ("token_mean", "weighted_token_mean", "sequence_mean", "sequence_sum_mean", "constant")
"""What the step claims to compute, as normcheck names it (``objective=``)."""

Number = Union[int, float, Fraction, str]
SitesOption = Union[str, Sequence[str], None]

_DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16",
                torch.float16: "float16"}
# Unit roundoff by dtype name, to pick the coarsest arithmetic the probe's gradient met.
_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
_files = itertools.count()
_default_folder: Optional[str] = None  # one temporary folder per process for dumps nobody placed



class _KeywordInputs:
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


class ProbeError(RuntimeError, Error):
    """The probe was used in a way that makes p.grad mean something else than the step's weights."""


# ---------------------------------------------------------------------------------------------------
# Small public helpers

_primes: List[int] = [2]


def _prime(k: int) -> int:
    candidate = _primes[-1]
    while len(_primes) <= k:
        candidate += 1
        if all(candidate % p for p in _primes if p * p <= candidate):
            _primes.append(candidate)
    return _primes[k]


def default_value(rank: int, microbatch: int) -> int:
    """A distinct positive value per (rank, microbatch): the k-th prime, k the Cantor pairing of the two.

    Distinct small exact constants for hand-written scalar dumps; the per-group probe itself measures
    with the value 1 and needs none.
    """
    if rank < 0 or microbatch < 0:
        raise ValueError("rank and microbatch are non-negative")
    k = (rank + microbatch) * (rank + microbatch + 1) // 2 + microbatch
    return _prime(k)


def count_valid(labels: torch.Tensor, ignore_index: int = -100) -> int:
    """The number of valid tokens in ``labels`` (those not equal to ``ignore_index``)."""
    return int((labels != ignore_index).sum().item())


def gather_counts(local_counts: Sequence[int]) -> List[List[int]]:
    """Collective: every rank's per-microbatch valid-token counts, in rank order."""
    mine = [int(n) for n in local_counts]
    if not (dist.is_available() and dist.is_initialized()):
        return [mine]
    everyone: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return [list(counts) for counts in everyone]


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


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        raise ProbeError(f"the probe handles float64, float32, bfloat16 and float16 losses, not {dtype}")
    return name


# ---------------------------------------------------------------------------------------------------
# Routing p through the forward pass

class _One(torch.autograd.Function):
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


def _route(value: Any, parameters: Sequence[torch.Tensor]) -> Tuple[Any, bool]:
    """``value`` with its first floating tensor multiplied by 1(p); whether one was found."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            one: torch.Tensor = _One.apply(*parameters)  # type: ignore[no-untyped-call]
            return value * one.to(device=value.device, dtype=value.dtype), True
        return value, False
    if isinstance(value, dict):
        for key in list(value.keys()):
            routed, found = _route(value[key], parameters)
            if found:
                value[key] = routed  # in place: a ModelOutput keeps its attributes in step
                return value, True
        return value, False
    if isinstance(value, (tuple, list)):
        items = list(value)
        for i, item in enumerate(items):
            routed, found = _route(item, parameters)
            if found:
                items[i] = routed
                if isinstance(value, list):
                    return items, True
                if hasattr(value, "_fields"):  # a named tuple
                    return type(value)(*items), True
                try:
                    return type(value)(items), True
                except TypeError:
                    return tuple(items), True
        return value, False
    return value, False


# ---------------------------------------------------------------------------------------------------
# The probe

class _Holder:
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


class Probe:
    """The probe parameter p on one module (and, for sites, on its submodules): attach before DDP."""

    def __init__(self, module: nn.Module, *, slots: int = DEFAULT_SLOTS, sites: SitesOption = "children",
                 objective: str = "token_mean", normalizer: Optional[Number] = None, witness: bool = True,
                 sequences: bool = True, capture: str = "reduction", world_size: Optional[int] = None,
                 rank: Optional[int] = None,
                 dtype: Optional[torch.dtype] = None, name: str = DEFAULT_NAME, executable: Optional[str] = None,
                 directory: Optional[str] = None, description: Optional[str] = None) -> None:
        """Registers p on ``module`` as ``name`` (and on every site) and hooks it up.

        ``slots``: the groups (microbatches and sequences) one rank may record per step; p has
        slots × W components, twice that with the ``witness``. ``sites``: the submodules that get a
        probe parameter of their own (``"children"``, the default: each direct child that owns
        parameters; a list of submodule names; ``None`` for none). ``objective``: what the step claims
        to compute (``OBJECTIVES``; ``"constant"`` with ``normalizer``), also settable per check.
        ``sequences=False`` treats every microbatch as one group whatever its shape. ``capture``: when
        the probe's gradient is final: ``"reduction"`` (default), right after the synchronizing
        backward, so that nothing done to gradients afterwards (clipping, unscaling, the optimizer)
        changes what is judged; ``"step"``, when ``probe.step()`` ends (or before clipping in it), for a
        step that divides the reduced gradients by hand as part of its normalization. ``world_size`` and
        ``rank``: by default the process group's. ``dtype``: float32 or float64; by default
        ``default_dtype(module, world_size)``: the model's own on two ranks (p shares its bucket, bit for
        bit harmless there), else the one no parameter has (a bucket of its own).
        ``executable``: the normcheck executable (else ``$NORMCHECK``, else PATH); ``directory``: where
        rank 0 writes the dumps (else ``$NORMCHECK_PROBE_DIR``, else a new temporary folder);
        ``description``: a line written into every dump.
        """
        if world_size is None:
            world_size = dist.get_world_size() if _distributed() else 1
        if dtype is None:
            dtype = default_dtype(module, world_size)
        if dtype not in (torch.float32, torch.float64):
            raise ProbeError(f"p is float32 or float64, not {dtype}: its gradient is the observed value")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ProbeError(f"slots is a positive number of groups per rank, not {slots!r}")
        self._check_objective(objective, normalizer)
        if capture not in ("reduction", "step"):
            raise ProbeError(f"capture is 'reduction' or 'step', not {capture!r}")
        if rank is None:
            rank = dist.get_rank() if _distributed() else 0
        if not 0 <= rank < world_size:
            raise ProbeError(f"rank {rank} is not in a world of {world_size}")
        self.module = module
        self.name = name
        self.slots = slots
        self.world_size = world_size
        self.rank = rank
        self.witness = witness
        self.sequences_enabled = sequences
        self.capture_mode = capture
        self.objective = objective
        self.normalizer = normalizer
        self.executable = executable
        self.directory = directory
        self.description = description
        first = next(module.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        self.components = slots * world_size * (2 if witness else 1)
        self._holders: List[_Holder] = []
        for site, owner in [("", module)] + self._site_modules(module, sites):
            if hasattr(owner, name):
                where = f"the submodule {site!r}" if site else "the module"
                raise ProbeError(f"{where} already has an attribute {name!r}: one probe per module")
            parameter = nn.Parameter(torch.zeros(self.components, dtype=dtype, device=device))
            self._holders.append(_Holder(site, owner, parameter, name))
        self.parameter = self._holders[0].parameter
        """p on the probed module itself (its components are laid out as the class docstring says)."""
        for holder in self._holders:
            holder.module.register_parameter(name, holder.parameter)
        self._handles: List[Any] = []
        for holder in self._holders:
            self._handles.append(self._keep_out_of_state_dict(holder.module))
            self._handles.append(holder.module.register_load_state_dict_post_hook(  # type: ignore[no-untyped-call]
                self._forgive_missing))
        self._handles.append(self._register_inputs_hook(module))
        for holder in self._holders:
            self._handles.append(holder.module.register_forward_pre_hook(self._follower(holder)))
        self._handles.append(module.register_forward_hook(self._after_forward))
        self._handles.append(self.parameter.register_hook(self._on_gradient))  # type: ignore[no-untyped-call]
        self._active = False
        self._ddp: Optional[Any] = None  # weakref to the DistributedDataParallel seen running the module
        self._sharded = False  # FSDP2 has replaced p by a DTensor shard (seen at a forward)
        self._keep_local = True
        self._reset()

    # -- construction helpers ---------------------------------------------------------------------

    @staticmethod
    def _check_objective(objective: str, normalizer: Optional[Number]) -> None:
        if objective not in OBJECTIVES:
            raise ProbeError(f"objective is one of {', '.join(OBJECTIVES)}, not {objective!r}")
        if objective == "constant" and normalizer is None:
            raise ProbeError("objective='constant' needs normalizer=C, the constant the token sum is divided by")
        if objective != "constant" and normalizer is not None:
            raise ProbeError(f"normalizer= belongs to objective='constant', not {objective!r}")
        if isinstance(normalizer, (int, float, Fraction)) and not isinstance(normalizer, bool) and not normalizer > 0:
            raise ProbeError(f"the normalizer must be a positive number, not {normalizer!r}")

    def _site_modules(self, module: nn.Module, sites: SitesOption) -> List[Tuple[str, nn.Module]]:
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

    def _keep_out_of_state_dict(self, module: nn.Module) -> Any:
        def drop(module: nn.Module, state_dict: Dict[str, Any], prefix: str, local_metadata: Any) -> None:
            state_dict.pop(prefix + self.name, None)

        public = getattr(module, "register_state_dict_post_hook", None)
        if callable(public):
            return public(drop)
        private = getattr(module, "_register_state_dict_hook", None)
        if callable(private):
            return private(drop)
        raise ProbeError("this torch offers no state_dict hook: the probe cannot keep p out of checkpoints")

    def _forgive_missing(self, module: nn.Module, incompatible_keys: Any) -> None:
        missing = incompatible_keys.missing_keys
        for key in [k for k in missing if k == self.name or k.endswith("." + self.name)]:
            missing.remove(key)

    def _register_inputs_hook(self, module: nn.Module) -> Any:
        try:
            return module.register_forward_pre_hook(self._before_forward_kwargs, with_kwargs=True)
        except TypeError:  # torch 1.13: a pre-hook sees positional inputs only
            return _KeywordInputs(module, self._before_forward_kwargs)

    # -- the probe's parameters -------------------------------------------------------------------

    @property
    def sites(self) -> Dict[str, nn.Parameter]:
        """The site parameters by submodule name (empty without sites)."""
        return {h.site: h.parameter for h in self._holders if h.site}

    def probe_parameters(self) -> List[nn.Parameter]:
        """p and every site's parameter."""
        return [h.parameter for h in self._holders]

    def is_probe(self, parameter: Any) -> bool:
        """True when ``parameter`` is p or a site's probe parameter (or what ``fully_shard`` put in their place)."""
        return any(parameter is h.parameter or parameter is h.current() for h in self._holders)

    def named_model_parameters(self, module: Optional[nn.Module] = None) -> Iterator[Tuple[str, nn.Parameter]]:
        """``module.named_parameters()`` without the probe's (default: the module the probe is attached to)."""
        for name, parameter in (module if module is not None else self.module).named_parameters():
            if not self.is_probe(parameter):
                yield name, parameter

    def model_parameters(self, module: Optional[nn.Module] = None) -> Iterator[nn.Parameter]:
        """``module.parameters()`` without the probe's: give these to the optimizer and to gradient clipping."""
        for _, parameter in self.named_model_parameters(module):
            yield parameter

    def check_optimizer(self, optimizer: Any) -> None:
        """Raises ``ProbeError`` when a probe parameter is in one of the optimizer's parameter groups."""
        for group in getattr(optimizer, "param_groups", []):
            if any(self.is_probe(parameter) for parameter in group.get("params", [])):
                raise ProbeError(f"p reached the optimizer {type(optimizer).__name__}: build it from "
                                 "probe.model_parameters(model), so that p is never updated")

    def remove(self) -> None:
        """Detaches the probe: removes p, the site parameters and every hook from the module."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for holder in self._holders:
            if getattr(holder.module, self.name, None) is holder.parameter:
                delattr(holder.module, self.name)

    # -- one step ---------------------------------------------------------------------------------

    def _reset(self, keep_declared: bool = False) -> None:
        """Forgets the step's record (a ``sequences()`` declaration survives the start of a step)."""
        if not keep_declared:
            self._declared: Optional[Layout] = None
        self._probed: Dict[int, Any] = {}
        self._microbatches: List[Microbatch] = []
        self._marked = False
        self._allocator = Components(self.slots, self.rank, self.world_size)
        self._local: Optional[torch.Tensor] = None  # this rank's own gradient of p, summed over its backwards
        self._captured: Dict[str, torch.Tensor] = {}
        self._spans: Dict[str, Tuple[int, int]] = {}  # under FSDP2: the components of each site this rank holds
        self._captures: List[str] = []
        self._reduced = False
        self._sync_forward = False
        self._ddp_forward = False
        self._unheld: Optional[str] = None
        self._queued = False
        self._pending = False  # a backward reached p since the last capture
        self._loss_dtypes: Set[torch.dtype] = set()
        self._divided_by: Optional[Any] = None
        self._inputs: Optional[Tuple[Sequence[Any], Dict[str, Any]]] = None
        self._inputs_layout: Union[Layout, None, bool] = False  # False: not read yet
        self._seen = capture.seen()
        for holder in self._holders:
            holder.current().grad = None

    def _before_forward_kwargs(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if torch.is_grad_enabled():
            self._inputs = (tuple(args), dict(kwargs))
            self._inputs_layout = False

    def _follower(self, holder: _Holder) -> Callable[[nn.Module, Any], None]:
        """A pre-forward hook: under FSDP2, copies the gathered p for the losses of this forward.

        FSDP's own pre-forward hook runs first (it is prepended) and puts the gathered parameter in
        the module; without FSDP the module holds p itself and nothing is copied.
        """
        def follow(module: nn.Module, inputs: Any) -> None:
            current = module._parameters.get(self.name)
            if current is None or current is holder.parameter or not torch.is_grad_enabled():
                return
            if capture.is_distributed_tensor(current) or tuple(current.shape) != (self.components,):
                return  # not gathered: a loss term on the stale p reaches nothing, which the check reports
            holder.live = current.clone()
            if holder is self._holders[0]:
                holder.live.register_hook(self._on_gradient)  # type: ignore[no-untyped-call]
            self._sharded = True

        return follow

    def _after_forward(self, module: nn.Module, inputs: Any, output: Any) -> Any:
        if not torch.is_grad_enabled():
            return None
        ddp = capture.enclosing_ddp(module)
        if ddp is None:
            return None
        self._ddp_forward = True
        if self._ddp is None or self._ddp() is not ddp:  # a DDP seen for the first time: what it holds and does
            if not capture.ddp_holds(ddp, self.probe_parameters()):
                raise ProbeError("DistributedDataParallel does not hold p: the probe was attached after DDP wrapped "
                                 "the model, so DDP never reduces p's gradient. Construct Probe(model) before "
                                 "DistributedDataParallel(model)")
            has_hook, hook_name, hook = capture.registered_hook(ddp)
            # The local gradient is kept only to infer an unknown hook's reducer.
            self._keep_local = has_hook and capture.known_hook(hook_name, hook)[0] is None
            self._ddp = weakref.ref(ddp)
        if ddp.require_backward_grad_sync:
            self._sync_forward = True
        if not self._active:
            # A step not judged: no loss term reaches p, and DDP (without find_unused_parameters) would stop
            # at the next forward because a parameter it holds got no gradient. p is routed through the
            # output with a gradient of exactly 0, which the next probe.step() discards.
            routed, found = _route(output, self.probe_parameters())
            return routed if found else None
        if not getattr(ddp, "find_unused_parameters", False):
            return None  # every probe parameter gets its gradient through the loss's terms
        # DDP looks for the parameters the output depends on: p must be among them, or it is marked unused.
        routed, found = _route(output, self.probe_parameters())
        if not found:
            raise ProbeError(f"{type(module).__name__}'s output holds no floating tensor to route p through: "
                             "DDP with find_unused_parameters would not see p used by the forward pass")
        return routed

    def _on_gradient(self, grad: torch.Tensor) -> None:
        if self._keep_local:
            local = grad.detach().to(device="cpu", dtype=torch.float64)
            self._local = local.clone() if self._local is None else self._local.add_(local)
        self._pending = True
        if not self._queued:
            self._queued = True
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(self._end_of_backward)

    def _end_of_backward(self) -> None:
        """First callback: p.grad as the backward's accumulation left it, before any reducer's finalize."""
        self._queued = False
        grad = self.parameter.grad
        mark = (id(grad), grad._version) if grad is not None else None
        engine = torch.autograd.Variable._execution_engine
        engine.queue_callback(lambda: self._after_reduction(mark))

    def _after_reduction(self, mark: Optional[Tuple[int, int]]) -> None:
        """Second callback, after DDP's finalize: capture when this backward synchronized the gradients."""
        grad = self.parameter.grad
        if grad is None or type(grad) is not torch.Tensor:
            return
        written = mark is not None and (id(grad), grad._version) != mark
        if not (self._sync_forward or written):
            return
        self._sync_forward = False
        self._reduced = True
        if self.capture_mode == "reduction":
            self._capture("the synchronizing backward")

    def _capture(self, when: str) -> None:
        stored = False
        for holder in self._holders:
            parameter = holder.current()
            grad = parameter.grad
            if grad is None:
                continue
            if capture.is_distributed_tensor(grad):  # this rank's shard: rank 0 puts the shards together
                try:
                    offset, shard = capture.shard_span(grad)
                except ValueError as e:
                    raise ProbeError(str(e)) from None
                value = torch.zeros(self.components, dtype=torch.float64)
                value[offset:offset + shard.numel()] = shard
                self._spans[holder.site] = (offset, offset + shard.numel())
            else:
                value = grad.detach().to(device="cpu", dtype=torch.float64, copy=True)
            previous = self._captured.get(holder.site)
            self._captured[holder.site] = value if previous is None else previous + value
            # None, not zeros: clipping skips it (a zero float64 gradient among float32 ones would still
            # change the dtype, and so the bits, of the total norm), and an optimizer leaves p alone.
            parameter.grad = None
            stored = True
        self._pending = False
        if stored:
            self._captures.append(when)

    def capture(self) -> None:
        """Stores the probe's gradients now as the step's, and zeroes them.

        The probe does this itself after a synchronizing DDP backward, when ``probe.step()`` ends and
        before clipping inside the step; call it where the reduction ends somewhere the probe cannot
        see (gradients all-reduced by hand, for instance) and before anything else touches gradients.
        """
        self._capture("probe.capture()")

    def gradients(self) -> Dict[str, torch.Tensor]:
        """The probe's gradients captured so far this step (float64, on the CPU), by site; ``""`` is p itself.

        Each is the whole vector: component ``rank·slots + k`` is this rank's k-th group, the witness
        components follow at ``W·slots``. Empty before the first capture.
        """
        return {site: value.clone() for site, value in self._captured.items()}

    @property
    def captures(self) -> Tuple[str, ...]:
        """When the gradients were captured this step ('the synchronizing backward', 'the end of probe.step()', …)."""
        return tuple(self._captures)

    def microbatch(self) -> None:
        """Marks the start of a microbatch: every loss until the next mark belongs to it.

        Without marks, each wrapped call (or ``add``) is one microbatch. Once marked, every loss of the
        step must come after a mark.
        """
        if self._microbatches and not self._marked:
            raise ProbeError("probe.microbatch() came after losses of the step: mark every microbatch, "
                             "from the first, or none")
        self._marked = True
        self._microbatches.append(Microbatch())

    def sequences(self, *, sequence_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                  cu_seqlens: Optional[torch.Tensor] = None, labels: Optional[torch.Tensor] = None) -> None:
        """Declares the sequences of the losses that follow (until the next call, or ``clear_sequences``).

        One source: ``sequence_ids`` (a sequence key per position, −1 for none), ``cu_seqlens``
        (cumulative sequence lengths over the flattened batch), ``position_ids`` (packed sequences
        restart at 0) or ``labels`` (each row of a (B, T) batch is a sequence). It describes the batch
        the model is given; a loss's targets are matched to it position by position, with or without
        the label shift. Without a declaration the probe reads the same from the model's inputs.
        """
        try:
            self._declared = layout(sequence_ids=sequence_ids, position_ids=position_ids, cu_seqlens=cu_seqlens,
                                    labels=labels)
        except StepError as e:
            raise ProbeError(str(e)) from None

    def clear_sequences(self) -> None:
        """Forgets a ``sequences()`` declaration: sequences come from the model's inputs again."""
        self._declared = None

    def divided_by(self, value: Union[int, float, Fraction, Sequence[Union[int, float, Fraction]]]) -> None:
        """Tells the probe what this rank divided its loss sum by (N, or one number per microbatch).

        Written to ``observed.tokens.divided_by`` only when every rank tells it; never guessed.
        """
        if isinstance(value, (list, tuple)):
            self._divided_by = [dump.literal(v) for v in value]
        else:
            self._divided_by = dump.literal(value)

    # -- recording a loss -------------------------------------------------------------------------

    def _keys(self, target: torch.Tensor, explicit: Optional[torch.Tensor]) -> Tuple[Keys, str]:
        """Where the targets' sequences are (None: the microbatch is one group) and where that came from."""
        count = int(target.numel())
        if explicit is not None:
            if tuple(explicit.shape) != tuple(target.shape):
                raise ProbeError(f"sequence_ids of shape {tuple(explicit.shape)} for labels of shape "
                                 f"{tuple(target.shape)}")
            return explicit.reshape(-1), "sequence_ids"
        if not self.sequences_enabled:
            return None, "none"
        if self._declared is not None:
            keys = self._declared.for_targets(count)
            if keys is None:
                raise ProbeError(f"the sequences declared from {self._declared.source} describe a batch of shape "
                                 f"{self._declared.shape}; the loss has {count} targets, neither one per position "
                                 "nor one per position but the last of each row")
            return keys, self._declared.source
        if self._inputs is not None:
            if self._inputs_layout is False:  # read once per forward
                try:
                    self._inputs_layout = layout_from_inputs(*self._inputs)
                except StepError as e:
                    raise ProbeError(str(e)) from None
            found = self._inputs_layout
            if isinstance(found, Layout):
                keys = found.for_targets(count)
                if keys is not None:
                    return keys, found.source
        if target.dim() == 2:
            return (int(target.shape[0]), int(target.shape[1])), "the rows of the labels"
        return None, "none"

    def _record(self, valid: torch.Tensor, weights: Optional[torch.Tensor], target: torch.Tensor,
                explicit: Optional[torch.Tensor], dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor, bool]:
        """Records one loss call: (components, magnitudes, witnessed) of its probe term (see Components.record)."""
        if not self._marked:
            self._microbatches.append(Microbatch())
        elif not self._microbatches:
            raise ProbeError("a loss came before the first probe.microbatch() mark")
        batch = self._microbatches[-1]
        weighted = weights is not None
        if batch.weighted is not None and batch.weighted != weighted:
            raise ProbeError("one microbatch mixed losses with and without weights")
        batch.weighted = weighted
        keys, source = self._keys(target, explicit)
        device = self.parameter.device
        flat_valid = valid.reshape(-1)
        if flat_valid.device != device:
            flat_valid = flat_valid.to(device)
        flat_weights = weights.reshape(-1).to(device=device, dtype=torch.float64) if weights is not None else None
        witnessed = self.witness and not weighted
        try:
            components, magnitudes = self._allocator.record(batch, flat_valid, keys, flat_weights, self._marked,
                                                            witnessed)
        except StepError as e:
            raise ProbeError(str(e)) from None
        batch.source = source
        self._loss_dtypes.add(dtype)
        return components, magnitudes, witnessed

    def _vector(self) -> torch.Tensor:
        """p plus every site's parameter, in float64: every token's term uses them all."""
        first = self._holders[0].source()
        vector = first if first.dtype == torch.float64 else first.to(torch.float64)
        # Additions, not stack(...).sum(0): the latter's backward hands every parameter a view of one buffer,
        # which AccumulateGrad may keep as each one's .grad, so that later accumulations add up twice.
        for holder in self._holders[1:]:
            vector = vector + holder.source()
        return vector

    def _per_position(self, components: torch.Tensor, magnitudes: torch.Tensor, witnessed: bool) -> torch.Tensor:
        """The probe term of each target position (float64, −0 everywhere)."""
        term = self._vector().index_select(0, components) * magnitudes
        if witnessed:
            term = term.view(2, -1).sum(0)
        return term.neg()

    def _summed(self, components: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
        """The probe term summed over the call's positions (float64, −0): −p·A, A the magnitudes per component."""
        totals = torch.bincount(components, weights=magnitudes, minlength=self.components)
        return torch.dot(self._vector(), totals).neg()

    def add(self, per_token_loss: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
            weights: Optional[torch.Tensor] = None, sequence_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The per-token loss with the probe term added on every valid token (label ≠ ignore_index).

        ``per_token_loss`` is shaped like ``labels`` (as ``cross_entropy(..., reduction='none')`` gives
        it); padding gets no term. ``weights`` (shaped like ``labels``) are the per-token weights the
        step's objective uses, if any (the dump is then a weighted one). ``sequence_ids`` (shaped like
        ``labels``) names each token's sequence; otherwise sequences come from ``sequences()``, the
        model's inputs or the rows of 2-D labels. Normalize the result exactly as the step normalizes
        its loss.
        """
        earlier = self._probed.get(id(per_token_loss))
        if earlier is not None and earlier() is per_token_loss:
            raise ProbeError("this loss already carries the probe term: it came from the cross_entropy that "
                             "probe.step() captures; with probe.add, use probe.step(wrap=False)")
        if per_token_loss.shape != labels.shape:
            raise ProbeError(f"per-token loss of shape {tuple(per_token_loss.shape)} for labels of shape "
                             f"{tuple(labels.shape)}: add() takes the loss before any reduction")
        if not torch.is_grad_enabled():
            return per_token_loss
        valid = labels != ignore_index
        token_weights = None
        if weights is not None:
            token_weights = torch.where(valid, weights.to(torch.float64), torch.zeros((), dtype=torch.float64,
                                                                                       device=weights.device))
        components, magnitudes, witnessed = self._record(valid, token_weights, labels, sequence_ids,
                                                         per_token_loss.dtype)
        term = self._per_position(components, magnitudes, witnessed)
        return per_token_loss + term.to(device=per_token_loss.device, dtype=per_token_loss.dtype).view(per_token_loss.shape)

    def _loss(self, name: str, original: Callable[..., torch.Tensor], arguments: Dict[str, Any]) -> torch.Tensor:
        """A captured cross_entropy or nll_loss: torch's value, plus the probe term reduced as torch reduces."""
        loss = original(**arguments)
        if not torch.is_grad_enabled():
            return loss
        reduction = arguments["reduction"]
        size_average, reduce = arguments.get("size_average"), arguments.get("reduce")
        if size_average is not None or reduce is not None:  # the legacy arguments, as torch maps them
            if reduce is False:
                reduction = "none"
            else:
                reduction = "sum" if size_average is False else "mean"
        target = arguments["target"]
        if target.is_floating_point():
            raise ProbeError(f"{name} with class-probability targets: the probe needs class indices "
                             "(use probe.add on a per-token loss instead)")
        ignore_index = arguments["ignore_index"]
        weight = arguments.get("weight")
        valid = target != ignore_index
        token_weights = None
        if weight is not None:
            safe = torch.where(valid, target, torch.zeros_like(target))
            token_weights = torch.where(valid, weight.to(torch.float64)[safe],
                                        torch.zeros((), dtype=torch.float64, device=weight.device))
        if reduction not in ("none", "sum", "mean"):
            raise ProbeError(f"unknown reduction {reduction!r}")
        components, magnitudes, witnessed = self._record(valid, token_weights, target, None, loss.dtype)
        if reduction == "none":
            term = self._per_position(components, magnitudes, witnessed)
            probed = loss + term.to(device=loss.device, dtype=loss.dtype).view(loss.shape)
            self._probed[id(probed)] = weakref.ref(probed)
            return probed
        if reduction == "mean":
            # torch's mean: the sum over the number of non-ignored targets, or over their class weights. Divided
            # position by position, so that a mean over no target (0/0) is NaN in this call's components only.
            denominator = token_weights.sum() if token_weights is not None else valid.sum()
            magnitudes = magnitudes / denominator.to(device=magnitudes.device, dtype=torch.float64)
        total = self._summed(components, magnitudes)
        return loss + total.to(device=loss.device, dtype=loss.dtype)

    # -- the step ---------------------------------------------------------------------------------

    def _guard_clipping(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            listed = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            if self._pending and any(self.is_probe(t) for t in listed):
                self._capture("gradient clipping")  # the gradients are final once they are clipped
            return original(listed, *args, **kwargs)

        return guarded

    @contextlib.contextmanager
    def step(self, wrap: bool = True) -> Iterator["Probe"]:
        """Context manager for one step: captures cross_entropy and nll_loss, then the probe's gradient.

        ``wrap=False`` leaves the losses alone, for a step that calls ``probe.add`` itself.

        Inside it, ``torch.nn.functional.cross_entropy`` and ``nll_loss`` (and ``nn.CrossEntropyLoss``,
        ``nn.NLLLoss``) keep the caller's reduction, ignore_index, weight and label_smoothing and gain
        the probe term on valid tokens, reduced as torch reduces. Each call is one microbatch unless
        ``microbatch()`` marks them. The probe's gradient is stored and zeroed after the synchronizing
        backward, before clipping inside the step, or when the step ends, whichever comes first.
        """
        if self._active:
            raise ProbeError("probe.step() is already active")
        self._reset(keep_declared=True)
        clip_module = torch.nn.utils.clip_grad
        originals = {name: getattr(clip_module, name) for name in ("clip_grad_norm_", "clip_grad_value_")}
        for name, original in originals.items():
            guarded = self._guard_clipping(original)
            setattr(clip_module, name, guarded)
            if getattr(torch.nn.utils, name, None) is original:
                setattr(torch.nn.utils, name, guarded)
        self._active = True
        try:
            with (capture.loss_capture(self._loss, self._seen, self.module) if wrap else contextlib.nullcontext()):
                yield self
            if self._pending:
                self._capture("the end of probe.step()")
        finally:
            for name, original in originals.items():
                if getattr(torch.nn.utils, name, None) is not original:
                    setattr(torch.nn.utils, name, original)
                setattr(clip_module, name, original)
            self._active = False

    # -- judging ----------------------------------------------------------------------------------

    def _local_part(self, model: Optional[nn.Module], optimizer: Any, scaler: Any, reducer: Optional[str],
                    reduction_dtype: Optional[str]) -> Dict[str, Any]:
        """What this rank contributes; a problem is reported in the part, not raised, so no rank hangs."""
        part: Dict[str, Any] = {"rank": self.rank, "error": None, "notes": []}
        try:
            if _distributed() and (dist.get_world_size() != self.world_size or dist.get_rank() != self.rank):
                raise ProbeError(f"the probe was built for rank {self.rank} of {self.world_size}, the process group "
                                 f"has rank {dist.get_rank()} of {dist.get_world_size()}: construct it after "
                                 "init_process_group, or pass world_size= and rank=")
            for item in (optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]):
                if item is not None:
                    self.check_optimizer(item)
            for holder in self._holders:
                held: Any = holder.current().detach()
                if bool((held.to_local() if capture.is_distributed_tensor(held) else held).ne(0).any()):
                    raise ProbeError("p is not 0: an optimizer or an update moved it; build optimizers from "
                                     "probe.model_parameters(model)")
            if not self._microbatches:
                raise ProbeError(self._no_loss_message())
            written = [h.site or "p" for h in self._holders if h.current().grad is not None]
            if (self._pending or written) and self._captures:
                what = (f"a backward reached p after its gradient was captured at {self._captures[-1]}, so that "
                        "gradient was never reduced with the others" if self._pending else
                        f"{', '.join(written)}.grad was written to after it was captured at {self._captures[-1]}")
                raise ProbeError(f"{what}: the probe judges what it captured; run every backward of the step "
                                 "before the synchronizing one (or inside probe.step())")
            if self._pending or written:
                self._capture("probe.check()")
            if self.capture_mode == "reduction" and self._reduced:
                part["notes"] = ["the probe's gradient was captured at the synchronizing backward: gradients "
                                 "scaled after it (a division of the reduced gradients by hand) are not judged; "
                                 "if the step normalizes there, construct the probe with capture='step'"]
            if not self._captures and self._sharded and self._local is not None:
                raise ProbeError("FSDP never reduced p's gradient: the step's last backward ran with "
                                 "set_requires_gradient_sync(False); call set_requires_gradient_sync(True) "
                                 "before the last microbatch's backward")
            if not self._captures:
                raise ProbeError("p has no gradient: call probe.check() after the step's backward")
            scale = 1.0
            if scaler is not None and getattr(scaler, "is_enabled", lambda: True)():
                scale = float(scaler.get_scale())
            weighted = {b.weighted for b in self._microbatches if b.weighted is not None}
            if len(weighted) > 1:
                raise ProbeError("some losses of the step had weights and some did not")
            ddp_model = model if isinstance(model, nn.parallel.DistributedDataParallel) else None
            if ddp_model is None and self._ddp is not None:
                ddp_model = self._ddp()
            ddp = ddp_model is not None
            has_hook, hook_name, hook = capture.registered_hook(ddp_model) if ddp else (False, None, None)
            hook_reducer, hook_dtype = capture.known_hook(hook_name, hook) if has_hook else (None, None)
            vectors = {site: [v / scale for v in value.tolist()] for site, value in self._captured.items()}
            for holder in self._holders:
                vectors.setdefault(holder.site, [0.0] * self.components)
            part.update({
                "microbatches": [b.written() for b in self._microbatches],
                "weighted": weighted == {True},
                "sequences": [bool(b.sequences) for b in self._microbatches],
                "valid": [b.valid for b in self._microbatches],
                "used": self._allocator.used,
                "vectors": vectors,
                "spans": dict(self._spans) if self._sharded else None,
                "local": [v / scale for v in self._local.tolist()] if self._local is not None else None,
                "dtype": _dtype_name(self.parameter.dtype),
                "loss_dtypes": sorted(_dtype_name(d) for d in self._loss_dtypes),
                "divided_by": self._divided_by,
                "ddp": ddp,
                "ddp_forward": self._ddp_forward,
                "reduced": self._reduced,
                "hook": hook_name if has_hook else None,
                "hook_reducer": hook_reducer,
                "hook_dtype": hook_dtype,
                "reducer": reducer,
                "reduction_dtype": reduction_dtype,
            })
        except ProbeError as e:
            part["error"] = str(e)
        except Exception as e:  # reported, not raised: the other ranks are about to wait for this one
            part["error"] = f"rank {part['rank']}: {type(e).__name__}: {e}"
        return part

    def _no_loss_message(self) -> str:
        text = ("the probe saw no loss this step: compute it inside `with probe.step():` with "
                "torch.nn.functional.cross_entropy or nll_loss (or nn.CrossEntropyLoss), or pass per-token "
                "losses through probe.add(...)")
        if self._seen.log_softmax:
            text += (f". The step called log_softmax {self._seen.log_softmax} time(s) without cross_entropy or "
                     "nll_loss, as a hand-written loss or transformers' LabelSmoother (label_smoothing_factor > 0) "
                     "does: for the probed step use cross_entropy(..., label_smoothing=ε), which is the same "
                     "loss, or add the per-token losses with probe.add")
        return text

    def _restrict(self, parts: List[Dict[str, Any]], site: str, witness: bool) -> Tuple[List[List[float]], Optional[List[List[float]]]]:
        """Every rank's copy of one probe vector, restricted to the groups used, in group order."""
        half = self.slots * self.world_size
        primary: List[List[float]] = []
        witnessed: List[List[float]] = []
        for part in parts:
            vector = part["vectors"][site]
            chosen: List[float] = []
            chosen_witness: List[float] = []
            stray = 0.0
            for q, other in enumerate(parts):
                start = q * self.slots
                chosen += vector[start:start + other["used"]]
                stray = max([stray] + [abs(v) for v in vector[start + other["used"]:start + self.slots]])
                if self.witness:
                    chosen_witness += vector[half + start:half + start + other["used"]]
                    stray = max([stray] + [abs(v) for v in vector[half + start + other["used"]:half + start + self.slots]])
            if stray != 0 and math.isfinite(stray):
                where = f"site {site}" if site else "p"
                raise ProbeError(f"rank {part['rank']}'s {where} has gradient in components no group was given "
                                 f"(up to {stray!r}): something else than the probe's terms used them")
            primary.append(chosen)
            witnessed.append(chosen_witness)
        return primary, (witnessed if witness else None)

    def _assemble(self, parts: List[Dict[str, Any]]) -> None:
        """Under FSDP2: each rank's vectors made whole, its own shard where it has one, another rank's elsewhere.

        A component is taken from the lowest rank whose shard holds it; replicas of a shard (HSDP) each
        keep their own values on their own rank, so a disagreement between them reaches the gate's
        replica check. A component no rank holds is an error, never a 0.
        """
        sharded = [part["spans"] is not None for part in parts]
        if not any(sharded):
            return
        if not all(sharded):
            raise ProbeError("p was sharded by FSDP on some ranks and not on others")
        for holder in self._holders:
            site = holder.site
            owners: List[Optional[int]] = [None] * self.components
            for q, part in enumerate(parts):
                start, end = part["spans"].get(site, (0, 0))
                for i in range(start, end):
                    if owners[i] is None:
                        owners[i] = q
            missing = [i for i, q in enumerate(owners) if q is None]
            if missing:
                where = f"site {site}" if site else "p"
                raise ProbeError(f"{len(missing)} components of {where}'s gradient (from {missing[0]}) are on no "
                                 "rank's shard: FSDP reduced no gradient into them, or some rank captured nothing")
            for part in parts:
                start, end = part["spans"].get(site, (0, 0))
                own = part["vectors"][site]
                part["vectors"][site] = [own[i] if start <= i < end else parts[q]["vectors"][site][i]  # type: ignore[index]
                                         for i, q in enumerate(owners)]

    def _unreduced(self, parts: List[Dict[str, Any]]) -> Optional[str]:
        """Why p's gradient was evidently never combined across ranks, or None."""
        if self.world_size == 1:
            return None
        own_nonzero = False
        for part in parts:
            vector = part["vectors"][""]
            for q, other in enumerate(parts):
                start = q * self.slots
                values = vector[start:start + other["used"]]
                if q == part["rank"]:
                    own_nonzero = own_nonzero or any(v != 0 for v in values)
                elif any(v != 0 for v in values):
                    return None
        if not own_nonzero:
            return None
        first = parts[0]
        if first["ddp_forward"] and not first["reduced"]:
            return ("DistributedDataParallel never synchronized p's gradient: every backward of the step ran under "
                    "no_sync(), or the step ended before the synchronizing backward")
        return ("nothing combined the ranks' gradients of p: each rank holds only its own tokens' share. "
                "DistributedDataParallel reduces only the parameters it held when it was built: construct "
                "Probe(model) before DistributedDataParallel(model); a step that all-reduces gradients itself "
                "must include p (and call probe.capture() after it)")

    def _document(self, parts: List[Dict[str, Any]], description: Optional[str], objective: str,
                  normalizer: Optional[Number]) -> Dict[str, Any]:
        errors = [p["error"] for p in parts if p["error"]]
        if errors:
            raise ProbeError("; ".join(dict.fromkeys(errors)))
        first = parts[0]
        self._assemble(parts)
        why = self._unreduced(parts)
        if why is not None:
            raise ProbeError(why)
        weighted = {p["weighted"] for p in parts}
        if len(weighted) > 1:
            raise ProbeError("some ranks' losses had weights and some did not")
        is_weighted = weighted == {True}
        if is_weighted:
            if objective == "token_mean":
                objective = "weighted_token_mean"
            if objective != "weighted_token_mean":
                raise ProbeError(f"the losses had weights, so the objective is weighted_token_mean, not {objective}")
        elif objective == "weighted_token_mean":
            raise ProbeError("objective='weighted_token_mean' but no loss of the step had weights")
        if objective in ("sequence_mean", "sequence_sum_mean"):
            for part in parts:
                for m, (sequenced, valid) in enumerate(zip(part["sequences"], part["valid"])):
                    if valid and not sequenced:
                        raise ProbeError(f"objective {objective} needs the sequences of every microbatch, but rank "
                                         f"{part['rank']}'s microbatch {m} has none: give position_ids, cu_seqlens or "
                                         "2-D labels to the model, or declare them with probe.sequences(...) or "
                                         "add(..., sequence_ids=...)")
        reducer = first["reducer"]
        how = "given"
        hook_name = first["hook"]
        if reducer is None and first["ddp"]:
            if hook_name is None:
                reducer, how = "mean", "DDP without a communication hook"
            elif first["hook_reducer"] is not None:
                reducer, how = first["hook_reducer"], f"the hook {hook_name}"
        if reducer is None:
            local: List[float] = []
            reduced: List[float] = []
            for part in parts:
                if part["local"] is None:
                    continue
                local += capture.local_parts(part["local"], part["rank"], self.slots, part["used"],
                                             self.slots * self.world_size if self.witness else None)
                reduced += capture.local_parts(part["vectors"][""], part["rank"], self.slots, part["used"],
                                               self.slots * self.world_size if self.witness else None)
            reducer = capture.infer_reducer(local, reduced, len(parts))
            how = "inferred from the local and reduced gradients of p"
            if reducer is None:
                combined = f"the communication hook {hook_name}" if hook_name else "the step"
                raise ProbeError(f"cannot tell how {combined} combined the ranks' gradients of p: pass "
                                 "reducer='mean' or 'sum' to check()")
        reduction_dtype = first["reduction_dtype"] or first["hook_dtype"]
        names = {first["dtype"], *(d for p in parts for d in p["loss_dtypes"])}
        dtype = max(names, key=_ROUNDOFF.__getitem__)
        divided = [p["divided_by"] for p in parts]
        if any(d is not None for d in divided) and not all(d is not None for d in divided):
            raise ProbeError("probe.divided_by() was called on some ranks and not on others")
        with_witness = self.witness and not is_weighted
        per_rank, witness = self._restrict(parts, "", with_witness)
        sites = []
        for holder in self._holders[1:]:
            site_rank, site_witness = self._restrict(parts, holder.site, with_witness)
            sites.append(dump.site(holder.site, site_rank, site_witness))
        seen = dump.observed(
            dtype=dtype, per_rank=per_rank, witness=witness, sites=sites or None,
            reduction_dtype=reduction_dtype if reduction_dtype not in (None, dtype) else None,
            divided_by=divided if all(d is not None for d in divided) else None)
        backend = dist.get_backend() if _distributed() else "one process"
        text = description or self.description or (
            f"normcheck.torch.Probe on {type(self.module).__name__}, PyTorch {torch.__version__}, "
            f"W = {len(parts)} ({backend}), reducer {reducer} ({how})"
            + (f", communication hook {hook_name}" if hook_name else "")
            + (", p sharded by FSDP2" if first["spans"] is not None else "")
            + (f", sites {', '.join(h.site for h in self._holders[1:])}" if len(self._holders) > 1 else ""))
        ranks = [[written for written, _ in p["microbatches"]] for p in parts]
        weights = [[w for _, w in p["microbatches"]] for p in parts] if is_weighted else None
        return dump.document(ranks, weights=weights, world_size=len(parts), reducer=reducer, theta=0,
                             objective=objective, normalizer=normalizer, description=text, observed=seen)

    def _output_path(self, path: Optional[str]) -> str:
        if path is not None:
            return os.fspath(path)
        global _default_folder
        folder = self.directory or os.environ.get("NORMCHECK_PROBE_DIR")
        if not folder:
            if _default_folder is None:
                _default_folder = tempfile.mkdtemp(prefix="normcheck-probe-")
            folder = _default_folder
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f"probe-{os.getpid()}-{next(_files):03d}.json")

    def dump(self, model: Optional[nn.Module] = None, *, optimizer: Any = None, scaler: Any = None,
             reducer: Optional[str] = None, reduction_dtype: Optional[str] = None, objective: Optional[str] = None,
             normalizer: Optional[Number] = None, description: Optional[str] = None,
             path: Optional[str] = None) -> Optional[str]:
        """Collective: gathers every rank's part and writes the per-group dump on rank 0, without judging it.

        Returns the dump's path on rank 0 and None elsewhere; the options are ``judge``'s. The step's
        record is cleared afterwards, as by ``judge``.
        """
        outcome = self._gathered(model, optimizer, scaler, reducer, reduction_dtype, objective, normalizer,
                                 description, path, judge=False)
        assert outcome is None or isinstance(outcome, str)
        return outcome

    def judge(self, model: Optional[nn.Module] = None, *, optimizer: Any = None, scaler: Any = None,
              reducer: Optional[str] = None, reduction_dtype: Optional[str] = None, objective: Optional[str] = None,
              normalizer: Optional[Number] = None, description: Optional[str] = None,
              path: Optional[str] = None) -> Verdict:
        """Collective: gathers every rank's part, writes the dump on rank 0, runs normcheck, returns its verdict.

        Call it on every rank once the step's gradient is final: after the synchronizing backward,
        and, since the probe keeps its own copy of p.grad, just as well after clipping or after
        ``optimizer.step()``. ``model``: the DDP-wrapped model (by default the one the probe saw run
        the module), whose communication hook names the reducer and the reduction's dtype (torch's
        allreduce_hook, fp16_compress_hook and bf16_compress_hook are known); for another hook, or
        without DDP, the reducer is inferred by comparing each rank's local gradient of p with the
        reduced one. ``reducer`` and ``reduction_dtype`` override both. ``objective`` and
        ``normalizer`` override the probe's for this step. ``optimizer`` (one or a list) is checked to
        hold no probe parameter; ``scaler``, a GradScaler whose scale p.grad still carries (before its
        ``update()``). Misuse raises ``ProbeError`` on every rank; an executable that cannot run
        raises ``NormcheckError``.
        """
        outcome = self._gathered(model, optimizer, scaler, reducer, reduction_dtype, objective, normalizer,
                                 description, path, judge=True)
        assert isinstance(outcome, Verdict)
        return outcome

    def _gathered(self, model: Optional[nn.Module], optimizer: Any, scaler: Any, reducer: Optional[str],
                  reduction_dtype: Optional[str], objective: Optional[str], normalizer: Optional[Number],
                  description: Optional[str], path: Optional[str], judge: bool) -> Union[Verdict, str, None]:
        if reducer not in (None, "mean", "sum"):
            raise ValueError(f"reducer is 'mean' or 'sum', not {reducer!r}")
        if objective is None:
            objective, normalizer = self.objective, normalizer if normalizer is not None else self.normalizer
        self._check_objective(objective, normalizer)
        part = self._local_part(model, optimizer, scaler, reducer, reduction_dtype)
        distributed = _distributed()
        rank = dist.get_rank() if distributed else 0
        parts: Optional[List[Any]] = [part]
        if distributed:
            parts = [None] * dist.get_world_size() if rank == 0 else None
            dist.gather_object(part, parts, dst=0)
        outcome: Any = None
        if rank == 0:
            assert parts is not None
            try:
                if len(parts) != self.world_size:
                    raise ProbeError(f"the probe was built for W = {self.world_size}, the step ran on {len(parts)} "
                                     "ranks: construct it after init_process_group, or pass world_size=")
                document = self._document(parts, description, objective, normalizer)
                target = self._output_path(path)
                dump.write(target, document)
                if judge:
                    verdict = run_check(target, executable=self.executable, require_gate=True)[0]
                    outcome = verdict.with_notes(parts[0]["notes"])
                else:
                    outcome = target
            except (ProbeError, NormcheckError) as e:
                outcome = e
            except Exception as e:  # anything else: every rank must still hear of it
                outcome = ProbeError(f"{type(e).__name__}: {e}")
        if distributed:
            box = [outcome]
            dist.broadcast_object_list(box, src=0)
            outcome = box[0] if judge or isinstance(box[0], Exception) else (outcome if rank == 0 else None)
        self._reset()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    def check(self, model: Optional[nn.Module] = None, **options: Any) -> Verdict:
        """``judge``, raising ``NormcheckFailure`` (an AssertionError holding the diagnosis) unless it passes."""
        verdict = self.judge(model, **options)
        if not verdict.passed:
            raise NormcheckFailure(verdict.message, [verdict])
        return verdict
