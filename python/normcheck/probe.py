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
loss computed inside an unmodified model is probed. Losses built otherwise take the routes of
``_probe_routes``: ``probe.log_probs`` for selected log-probabilities, a fused LM head's ``log_probs``
output (routed by the forward hook), ``probe.fused_loss`` for a kernel that returns only its loss.
"""

from __future__ import annotations

import contextlib
import math
import re
import weakref
from fractions import Fraction
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.distributed as dist
from torch import nn

from . import _probe_capture as capture
from . import _probe_gather as gather
from . import _probe_routes as routes
from . import _probe_taps as taps
from . import dump
from ._probe_install import (DEFAULT_NAME, Holder, SitesOption, default_dtype, install, keep_out_of_checkpoints,
                             own_bucket_dtype, parameter_hook_problem, register_inputs_hook, replay_parameter_hooks,
                             route)
from ._probe_record import DividedBy, ProbeError, TermDeclaration, region_of, regions_of
from ._probe_step import Components, Keys, Layout, Microbatch, StepError, layout, layout_from_inputs
from .check import Verdict
from .collectives import record_collectives
from ._probe_report import conclude
from .options import (CAPTURE_MODES, FRAMEWORKS, OBJECTIVES, CaptureMode, FloatDtype, Framework, Number, Objective,
                      Reducer, Reduction)
from .replicas import ReplicaDivergence, ReplicaSummary, check_replicas

__all__ = ["Probe", "ProbeError", "OBJECTIVES", "DEFAULT_SLOTS", "default_value", "gather_counts", "count_valid",
           "own_bucket_dtype", "default_dtype", "DEFAULT_NAME", "Objective", "Reducer", "CaptureMode", "FloatDtype",
           "Number", "SitesOption"]
__all__ += ["check_replicas", "ReplicaDivergence", "ReplicaSummary", "record_collectives"]

DEFAULT_SLOTS = 64
"""Groups (microbatches and sequences) one rank may record in a step unless ``slots=`` says otherwise."""

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


# ---------------------------------------------------------------------------------------------------
# The probe

# torch.nn.utils' functions that take a norm over gradients or change them: inside probe.step() the probe's
# gradient is captured and set to None before they run (get_total_norm and clip_grads_with_norm_: torch ≥ 2.6).
_GUARDED = ("clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_")


class Probe:
    """The probe parameter p on one module (and, for sites, on its submodules): attach before DDP."""

    def __init__(self, module: nn.Module, *, slots: int = DEFAULT_SLOTS, sites: SitesOption = "children",
                 objective: Objective = "token_mean", normalizer: Optional[Number] = None, witness: bool = True,
                 sequences: bool = True, capture: CaptureMode = "reduction", world_size: Optional[int] = None,
                 rank: Optional[int] = None,
                 dtype: Optional[torch.dtype] = None, name: str = DEFAULT_NAME, executable: Optional[str] = None,
                 directory: Optional[str] = None, description: Optional[str] = None, keep: bool = False,
                 framework: Optional[Framework] = None, mesh: Any = None, sequence_dims: Sequence[str] = (),
                 replica_dims: Sequence[str] = (), accumulation_steps: Optional[int] = None) -> None:
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
        rank 0 writes the dumps (else ``$NORMCHECK_PROBE_DIR``, else a new temporary folder per judged
        step, removed once it is judged unless ``keep=True``); ``description``: a line written into every
        dump. ``framework``: the framework the step runs in (``"transformers"``, ``"trl"``,
        ``"accelerate"``, ``"lightning"``), whose terms a failure's remedy is given in; the integrations
        pass their own. ``mesh``: the ``DeviceMesh`` the step runs on (``init_device_mesh``, every dimension
        named, ranks numbered row-major over the whole world); ``sequence_dims`` names its context-parallel
        dimensions, whose ranks hold slices of the same sequences (give each token's position in its whole
        sequence to ``add(..., positions=)``), ``replica_dims`` those whose ranks hold the same tokens (tensor
        parallelism: the replicas share one region of p, and their loss values are compared when the step
        is judged, check ``replica_losses``); every other dimension is a data dimension. The dump then
        carries the mesh, and normcheck names a count reduced over the wrong dimensions in its terms.
        ``accumulation_steps``: the number of microbatches a window accumulates as the training is configured
        (``gradient_accumulation_steps``, ``accumulate_grad_batches``), written into every dump; normcheck names a
        short last window divided by it (``short_window``) only where it is given.
        """
        mesh_dims = self._mesh_dims(mesh, tuple(sequence_dims), tuple(replica_dims))
        if mesh_dims and world_size is None:
            world_size = math.prod(size for _, size, _ in mesh_dims)
        if world_size is None:
            world_size = dist.get_world_size() if gather.distributed() else 1
        if mesh_dims and world_size != math.prod(size for _, size, _ in mesh_dims):
            raise ProbeError(f"the mesh holds {math.prod(size for _, size, _ in mesh_dims)} ranks, not the world's "
                             f"{world_size}: the probe judges the whole mesh")
        if dtype is None:
            dtype = default_dtype(module, world_size)
        if dtype not in (torch.float32, torch.float64):
            raise ProbeError(f"p is float32 or float64, not {dtype}: its gradient is the observed value")
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ProbeError(f"slots is a positive number of groups per rank, not {slots!r}")
        self._check_objective(objective, normalizer)
        if framework is not None and framework not in FRAMEWORKS:
            raise ProbeError(f"framework is one of {', '.join(FRAMEWORKS)}, not {framework!r}")
        if capture not in CAPTURE_MODES:
            raise ProbeError(f"capture is 'reduction' or 'step', not {capture!r}")
        if accumulation_steps is not None and (isinstance(accumulation_steps, bool)
                                               or not isinstance(accumulation_steps, int) or accumulation_steps < 1):
            raise ProbeError(f"accumulation_steps is a positive number of microbatches, not {accumulation_steps!r}")
        if rank is None:
            rank = dist.get_rank() if gather.distributed() else 0
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
        self.accumulation_steps = accumulation_steps
        """The nominal accumulation steps written into every dump, or None (an integration sets its framework's)."""
        self.executable = executable
        self.directory = directory
        self.description = description
        self.keep = keep
        self.framework = framework
        self.mesh_dims: Tuple[Tuple[str, int, str], ...] = mesh_dims
        """The mesh's dimensions as (name, size, role), role data, sequence or replica; empty without a mesh."""
        self.regions = regions_of(mesh_dims, world_size)
        """The ranks that write components of p of their own: one per replica group (all ranks without replicas)."""
        self.region = region_of(mesh_dims, rank)
        """The region of p this rank writes: its first replica's index among the regions."""
        self.components = slots * self.regions * (2 if witness else 1)
        self._holders: List[Holder] = install(module, sites, name, self.components, dtype)
        self.parameter = self._holders[0].parameter
        """p on the probed module itself (its components are laid out as the class docstring says)."""
        try:
            replay_parameter_hooks(module, self._holders)
        except ProbeError:
            for holder in self._holders:
                delattr(holder.module, name)
            raise
        self._handles: List[Any] = keep_out_of_checkpoints(self._holders, name)
        self._handles.append(register_inputs_hook(module, self._before_forward_kwargs))
        for holder in self._holders:
            self._handles.append(holder.module.register_forward_pre_hook(self._follower(holder)))
        self._handles.append(module.register_forward_hook(self._after_forward))
        self._handles.append(self.parameter.register_hook(self._on_gradient))  # type: ignore[no-untyped-call]
        # Taps last: prepended, each runs before every forward hook of its module, the probe's own included.
        self._taps = taps.tap_points(module, [(h.site, h.module) for h in self._holders[1:]])
        for tap_name, point, index in self._taps:
            self._handles.append(taps.prepend_forward_hook(point, self._tapper(tap_name, index)))
        self._active = False
        self._ddp: Optional[Any] = None  # weakref to the DistributedDataParallel seen running the module
        self._sharded = False  # FSDP2 has replaced p by a DTensor shard (seen at a forward)
        self._keep_local = True
        self._term_declarations: Dict[str, TermDeclaration] = {}
        self._reset()

    # -- construction helpers ---------------------------------------------------------------------

    @staticmethod
    def _mesh_dims(mesh: Any, sequence_dims: Tuple[str, ...],
                   replica_dims: Tuple[str, ...]) -> Tuple[Tuple[str, int, str], ...]:
        """The mesh's dimensions with their roles, checked; () without a mesh."""
        if mesh is None:
            if sequence_dims or replica_dims:
                raise ProbeError("sequence_dims= and replica_dims= name dimensions of a mesh: pass mesh=")
            return ()
        names = getattr(mesh, "mesh_dim_names", None)
        layout_of = getattr(mesh, "mesh", None)
        if names is None or layout_of is None:
            raise ProbeError("mesh= is a DeviceMesh with named dimensions: "
                             "init_device_mesh(..., mesh_dim_names=(\"dp\", \"cp\"))")
        names = tuple(str(n) for n in names)
        unknown = [d for d in sequence_dims + replica_dims if d not in names]
        if unknown:
            raise ProbeError(f"the mesh has no dimension {unknown[0]!r}: its dimensions are {', '.join(names)}")
        both = set(sequence_dims) & set(replica_dims)
        if both:
            raise ProbeError(f"dimension {sorted(both)[0]!r} cannot hold both slices and replicas")
        ranks = [int(r) for r in layout_of.flatten().tolist()]
        if ranks != list(range(len(ranks))):
            raise ProbeError("the probe judges a mesh over the whole world, its ranks numbered row-major as "
                             "init_device_mesh numbers them; this mesh holds ranks "
                             f"{ranks[:8]}{'…' if len(ranks) > 8 else ''}")
        dims = []
        for name, size in zip(names, layout_of.shape):
            role = "sequence" if name in sequence_dims else "replica" if name in replica_dims else "data"
            dims.append((name, int(size), role))
        return tuple(dims)

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
        self._terms: Dict[str, List[Microbatch]] = {}  # each auxiliary term's microbatches, aligned with the main's
        self._marked = False
        self._allocator = Components(self.slots, self.region, self.regions)
        self._local: Optional[torch.Tensor] = None  # this rank's own gradient of p, summed over its backwards
        self._captured: Dict[str, torch.Tensor] = {}
        self._spans: Dict[str, Tuple[int, int]] = {}  # under FSDP2: the components of each site this rank holds
        self._captures: List[str] = []
        self._reduced = False
        self._released = False  # the probe set every probe gradient to None after the last capture
        self._sync_forward = False
        self._ddp_forward = False
        self._unheld: Optional[str] = None
        self._queued = False
        self._pending = False  # a backward reached p since the last capture
        self._loss_dtypes: Set[torch.dtype] = set()
        # On a mesh with replica dimensions: the values of every loss call (its valid tokens' losses, or the
        # reduced loss), in call order, compared between replicas when the step is judged.
        self._replica_losses: List[torch.Tensor] = []
        self._divided_by: Optional[DividedBy] = None
        self._inputs: Optional[Tuple[Sequence[Any], Dict[str, Any]]] = None
        self._inputs_layout: Union[Layout, None, bool] = False  # False: not read yet
        self._seen = capture.seen()
        self._chain: Optional[taps.Chain] = None  # the ghost of the probed module's last forward in the step
        self._refusals = taps.Refusals()
        # Set aside after a synchronizing backward until the next forward: (parameter, its gradient) and, for
        # every model parameter, (it, a weak reference to its gradient, the gradient's version) then.
        self._hidden: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self._marks: List[Tuple[torch.Tensor, Any, int]] = []
        for holder in self._holders:
            holder.current().grad = None

    def _before_forward_kwargs(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if torch.is_grad_enabled():
            self._inputs = (tuple(args), dict(kwargs))
            self._inputs_layout = False
            if self._hidden:
                self._unhide()
            if self._active:
                self._chain = taps.Chain()

    def _tapper(self, name: str, holder: Optional[int]) -> Callable[[nn.Module, Any, Any], Any]:
        """The forward hook of one tap point (``_probe_taps``): the output through ``Tap``, the ghost extended."""
        def tap(module: nn.Module, inputs: Any, output: Any) -> Any:
            chain = self._chain
            if chain is None or not chain.open or not self._active:
                return None  # outside the probed module's forward in a step (a re-run under checkpointing among them)
            entering = [i for i in (0, holder) if i is not None and i not in chain.entered]
            sources = [self._holders[i].source() for i in entering]
            if not torch.is_grad_enabled():  # a reentrant checkpoint's first run: no gradient to measure here
                with torch.enable_grad():
                    self._extend(chain, entering, chain.enter(sources))
                return None
            tensors = taps.output_tensors(output)
            hooked = [n for t in tensors if not taps.tapped(t) for n in taps.hook_names(t._backward_hooks)]
            if hooked:
                self._refusals.add(f"{', '.join(hooked)} on {name}'s output were registered before the probe's tap "
                                   "(inside its forward, or by a global forward hook): the probe cannot measure "
                                   "them; register them with module.register_forward_hook")
            backward_hooks = taps.module_backward_hooks(module)
            if backward_hooks:
                self._refusals.add(f"{name} has module backward hooks ({', '.join(backward_hooks)}), which may change "
                                   "the gradients of its output and inputs where the probe cannot measure them")
            entered = chain.enter(sources)
            if not tensors:
                self._extend(chain, entering, entered)
                return None
            record = taps.TapRecord(name, len(tensors), self._refusals)
            results = taps.Tap.apply(record, chain.ghost, entered, *tensors)  # type: ignore[no-untyped-call]
            chain.ghost = results[0]
            chain.entered.update(entering)
            aliases = {}
            for index, (tensor, alias) in enumerate(zip(tensors, results[1:])):
                record.watch(index, alias)
                aliases[id(tensor)] = alias
            return taps.replaced(output, aliases)

        return tap

    @staticmethod
    def _extend(chain: taps.Chain, entering: List[int], entered: Optional[torch.Tensor]) -> None:
        if entered is not None:
            chain.ghost = entered if chain.ghost is None else chain.ghost + entered
        chain.entered.update(entering)

    def _follower(self, holder: Holder) -> Callable[[nn.Module, Any], None]:
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
        if self._chain is not None:
            self._chain.open = False  # its losses still use it; nothing extends it
        ddp = capture.enclosing_ddp(module)
        if ddp is not None:
            self._ddp_forward = True
            if self._ddp is None or self._ddp() is not ddp:  # a DDP seen for the first time: what it holds and does
                if not capture.ddp_holds(ddp, self.probe_parameters()):
                    raise ProbeError("DistributedDataParallel does not hold p: the probe was attached after DDP "
                                     "wrapped the model, so DDP never reduces p's gradient. Construct Probe(model) "
                                     "before DistributedDataParallel(model)")
                has_hook, hook_name, hook = capture.registered_hook(ddp)
                # The local gradient is kept only to infer an unknown hook's reducer.
                self._keep_local = has_hook and capture.known_hook(hook_name, hook)[0] is None
                self._ddp = weakref.ref(ddp)
            if ddp.require_backward_grad_sync:
                self._sync_forward = True
        if self._active:  # a fused LM head's log-probabilities carry the loss: the term goes on them
            probed = routes.probed_output(self, output)
            if probed is None:
                self._seen.note(routes.output_note(output))
            else:
                output = probed
        # Every forward, judged or not, routes p through the output with a gradient of exactly 0: a reducer that
        # waits for every parameter it holds (DDP without find_unused_parameters, the Trainer's choice under
        # gradient checkpointing) would otherwise never all-reduce the bucket holding p, and so leave the model's
        # gradients unreduced, after any backward that no loss term of the probe reaches.
        routed, found = route(output, [holder.source() for holder in self._holders])
        if not found and ddp is not None and getattr(ddp, "find_unused_parameters", False):
            raise ProbeError(f"{type(module).__name__}'s output holds no floating tensor to route p through: "
                             "DDP with find_unused_parameters would not see p used by the forward pass")
        return routed if found else None

    def _refused(self) -> Optional[str]:
        """What the step did that the probe cannot measure: its taps' refusals, parameter hooks that differ."""
        texts = [self._refusals.text(), parameter_hook_problem(self.module, self._holders, [self._on_gradient])]
        return "; ".join(t for t in texts if t) or None

    def _idle(self) -> bool:
        """No step is open and nothing is recorded: p only rides along in this backward, with gradient 0."""
        return not self._active and not self._microbatches

    def _on_gradient(self, grad: torch.Tensor) -> None:
        self._chain = None  # its graph is being consumed: a later loss term cannot go through it
        if self._idle():
            # Between judged steps nothing is copied or kept: p's gradient (0) is dropped once the backward and
            # any reduction are done, so that clipping and the optimizer never see it.
            if not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
            return
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
        if self._idle():
            self._sync_forward = False
            self._release()
            return
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
            self._hide()

    def _hide(self) -> None:
        """Sets the probe's gradients aside (None) after a synchronizing backward, until the next forward.

        Nothing between a synchronizing backward and the step's end is meant to see p.grad: a norm over
        ``model.parameters()`` (clipping by a name bound before the step, ``get_total_norm``) would count it
        and so change the update. The next forward of the step gives each its gradient back (``_unhide``), so
        that a later backward accumulates onto it and a later reduction acts on the sum as on the model's.
        """
        for holder in self._holders:
            parameter = holder.current()
            if parameter.grad is not None:
                self._hidden.append((parameter, parameter.grad))
                parameter.grad = None
        if self._hidden:
            self._marks = [(q, weakref.ref(q.grad) if q.grad is not None else None,
                            q.grad._version if q.grad is not None else 0) for q in self.model_parameters()]

    def _unhide(self) -> None:
        """At the next forward: the gradients set aside go back, unless the model's were reset (dropped) or changed."""
        hidden, marks = self._hidden, self._marks
        self._hidden, self._marks = [], []
        kept, reset, changed = 0, 0, []
        for parameter, reference, version in marks:
            grad = parameter.grad
            if reference is None:
                if grad is not None:
                    changed.append(parameter)
            elif grad is None:
                reset += 1
            elif reference() is grad and grad._version == version:
                kept += 1
            else:
                changed.append(parameter)
        if not changed and not reset:
            for parameter, grad in hidden:
                parameter.grad = grad
        elif changed or kept:
            names = [n for n, q in self.named_model_parameters() if any(q is c for c in changed)]
            self._refusals.add("the model's gradients were changed between two synchronizing backwards of the "
                               f"step{f' ({names[0]}.grad among them)' if names else ''}: the probe sets p.grad "
                               "aside between them, so that no norm or update sees it, and cannot follow the "
                               "change; construct the probe with capture='step', which leaves it in place")
        # Every gradient the model had was set to None (zero_grad): the probe's start afresh too.

    def _capture(self, when: str) -> None:
        """Stores every probe gradient as it is now, replacing what an earlier capture stored.

        The gradients stay where they are: a later backward accumulates onto them, and a later
        reduction acts on the sum, exactly as on the model's parameters (a hook that re-sums the
        earlier microbatches' reduced gradients re-sums p's too); ``_release`` hides them when the
        step is over.
        """
        stored = False
        for holder in self._holders:
            grad = holder.current().grad
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
            self._captured[holder.site] = value
            stored = True
        self._pending = False
        self._released = False
        if stored:
            self._captures.append(when)

    def _release(self) -> None:
        """Sets every probe gradient to None: what was captured is the step's, nothing after it sees p.grad.

        None, not zeros: clipping skips it (a zero float64 gradient among float32 ones would still
        change the dtype, and so the bits, of the total norm), and an optimizer leaves p alone.
        """
        for holder in self._holders:
            holder.current().grad = None
        self._hidden, self._marks = [], []
        self._released = True

    def capture(self) -> None:
        """Stores the probe's gradients now as the step's, and sets them to None.

        The probe does this itself after a synchronizing DDP backward, when ``probe.step()`` ends and
        before clipping inside the step; call it where the reduction ends somewhere the probe cannot
        see (gradients all-reduced by hand, for instance) and before anything else touches gradients.
        """
        self._capture("probe.capture()")
        self._release()

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

    def term(self, name: str, *, weight: Number = 1, objective: Objective = "token_mean",
             normalizer: Optional[Number] = None) -> None:
        """Declares an auxiliary loss term: its ``weight`` in the step's loss and the ``objective`` it is judged by.

        The step's loss is the main loss plus Σ weight·(term's loss); each term's per-token losses come through
        ``add(..., term=name)``, and normcheck judges the term on its own tokens: a token of it should weigh
        weight/N_term under the token mean. A term used without a declaration has weight 1 and the token mean.
        The declaration lasts for every later step.
        """
        self._check_term_name(name)
        self._check_objective(objective, normalizer)
        if objective == "weighted_token_mean":
            raise ProbeError("a term's tokens carry no weights in the probe: declare it with another objective")
        if isinstance(weight, bool) or not isinstance(weight, (int, float, Fraction, str)):
            raise ProbeError(f"a term's weight is an exact number (int, float, Fraction or a literal), not {weight!r}")
        if isinstance(weight, (int, float, Fraction)) and (weight == 0 or not math.isfinite(weight)):
            raise ProbeError(f"a term's weight is a finite number other than 0, not {weight!r}: a term of weight 0 "
                             "adds nothing to the gradient, so there is nothing to judge")
        self._term_declarations[name] = TermDeclaration(
            name=name, weight=dump.literal(weight), objective=objective,
            normalizer=None if normalizer is None else dump.literal(normalizer))

    @staticmethod
    def _check_term_name(name: Any) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name == "main":
            raise ProbeError(f"a term's name is an identifier of lower-case letters, digits and _ other than "
                             f"'main' (the main loss's), not {name!r}")

    def divided_by(self, value: Union[int, float, Fraction, Sequence[Union[int, float, Fraction]]]) -> None:
        """Tells the probe what this rank divided its loss sum by (N, or one number per microbatch).

        Written to ``observed.tokens.divided_by`` only when every rank tells it; never guessed.
        """
        if isinstance(value, (list, tuple)):
            self._divided_by = tuple(dump.literal(v) for v in value)
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

    def _term_batch(self, term: str) -> Microbatch:
        """The microbatch of ``term`` that its loss call belongs to: the one of the main loss's latest microbatch."""
        if not self._microbatches:
            raise ProbeError(f"term {term!r}'s loss came before any main loss of the step: a term's tokens belong "
                             "to the microbatch of the main loss before them; if the term comes first, mark each "
                             "microbatch with probe.microbatch()")
        listed = self._terms.setdefault(term, [])
        while len(listed) < len(self._microbatches):
            listed.append(Microbatch())
        return listed[-1]

    def _record(self, valid: torch.Tensor, weights: Optional[torch.Tensor], target: torch.Tensor,
                explicit: Optional[torch.Tensor], dtype: torch.dtype,
                values: Optional[torch.Tensor] = None, term: Optional[str] = None) -> Tuple[torch.Tensor, torch.Tensor,
                                                                                         bool]:
        """Records one loss call: (components, magnitudes, witnessed) of its probe term (see Components.record).

        ``values``: the call's loss, per token (shaped like ``valid``: its valid tokens are kept) or reduced,
        compared between replicas; kept only on a replica mesh, so no other step pays for it. ``term``: the
        auxiliary term the call's tokens belong to (None: the main loss)."""
        if values is not None and self.regions < self.world_size:
            kept = values.detach()
            if kept.shape == valid.shape:
                kept = kept[valid.to(kept.device)]
            self._replica_losses.append(kept.reshape(-1).to("cpu", torch.float64))
        if term is not None:
            if weights is not None:
                raise ProbeError(f"term {term!r}: a term's tokens carry no weights in the probe")
            batch = self._term_batch(term)
        else:
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
        """p plus every site's parameter, in float64: every token's term uses them all. Those that entered the
        data path at a tap of this forward come through its ghost (``_probe_taps``), the others directly."""
        chain = self._chain
        vector = chain.ghost if chain is not None else None
        entered = chain.entered if chain is not None else set()
        # Additions, not stack(...).sum(0): the latter's backward hands every parameter a view of one buffer,
        # which AccumulateGrad may keep as each one's .grad, so that later accumulations add up twice.
        for index, holder in enumerate(self._holders):
            if index in entered:
                continue
            source = holder.source()
            value = source if source.dtype == torch.float64 else source.to(torch.float64)
            vector = value if vector is None else vector + value
        assert vector is not None
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

    def add(self, per_token_loss: torch.Tensor, labels: Optional[torch.Tensor] = None, ignore_index: int = -100,
            weights: Optional[torch.Tensor] = None, sequence_ids: Optional[torch.Tensor] = None, *,
            positions: Optional[torch.Tensor] = None, term: Optional[str] = None) -> torch.Tensor:
        """The per-token loss with the probe term added on every valid token (label ≠ ignore_index).

        ``per_token_loss`` is shaped like ``labels`` (as ``cross_entropy(..., reduction='none')`` gives
        it); padding gets no term. Without ``labels`` every position is a valid token. ``weights``
        (shaped like ``labels``) are the per-token weights the step's objective uses, if any (the dump is
        then a weighted one). ``sequence_ids`` (shaped like ``labels``) names each token's sequence;
        otherwise sequences come from ``sequences()``, the model's inputs or the rows of 2-D labels.
        ``positions`` (shaped like the loss, integers): on a mesh with sequence dimensions, each token's
        position in its whole sequence; a sequence is then a slice, joined by normcheck with the slices of
        the same sequence (the same row, or ID) on the other ranks of its context-parallel group.
        ``term`` names the auxiliary loss term these tokens belong to (multi-token prediction, a load-balancing
        loss): they get groups and components of their own, in the microbatch of the main loss before them, and
        normcheck judges the term on its own tokens against its weight and objective (``term()``; weight 1 and
        the token mean by default), with or without a mesh. Normalize the result exactly as the step normalizes
        its loss.
        """
        if term is not None:
            self._check_term_name(term)
        if labels is None:
            labels = torch.zeros(per_token_loss.shape, dtype=torch.int64, device=per_token_loss.device)
            ignore_index = -1
        if positions is not None:
            if not any(role == "sequence" for _, _, role in self.mesh_dims):
                raise ProbeError("positions= are for context parallelism: construct the probe with mesh= and "
                                 "sequence_dims=")
            if tuple(positions.shape) != tuple(per_token_loss.shape):
                raise ProbeError(f"positions of shape {tuple(positions.shape)} for a loss of shape "
                                 f"{tuple(per_token_loss.shape)}: give one position per token")
            if positions.is_floating_point() or positions.dtype == torch.bool:
                raise ProbeError("positions are integers (each token's position in its sequence), "
                                 f"not {positions.dtype}")
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
                                                         per_token_loss.dtype, per_token_loss, term)
        if positions is not None:
            batch = self._microbatches[-1] if term is None else self._terms[term][-1]
            batch.positions[len(batch.calls) - 1] = positions.detach().reshape(-1).to("cpu", torch.int64)
        probe_term = self._per_position(components, magnitudes, witnessed)
        return per_token_loss + probe_term.to(device=per_token_loss.device,
                                              dtype=per_token_loss.dtype).view(per_token_loss.shape)

    def log_probs(self, values: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
                  sequence_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Selected log-probabilities (shaped like ``labels``) plus the term of their loss −log p on valid tokens."""
        return routes.log_probs(self, values, labels, ignore_index, sequence_ids)

    def fused_loss(self, loss: torch.Tensor, hidden_states: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                   *, bias: Optional[torch.Tensor] = None, ignore_index: int = -100,
                   reduction: Reduction = "mean") -> torch.Tensor:
        """A fused linear cross-entropy's loss plus the probe term, reduced as ``reduction`` says (checked)."""
        return routes.fused_loss(self, loss, hidden_states, weight, labels, bias=bias, ignore_index=ignore_index,
                                 reduction=reduction)

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
        components, magnitudes, witnessed = self._record(valid, token_weights, target, None, loss.dtype, loss)
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
            if any(self.is_probe(t) for t in listed):
                if self._pending:
                    self._capture("gradient clipping")  # the gradients are final once they are clipped
                self._release()
            return original(listed, *args, **kwargs)

        return guarded

    def _guard_norm(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``get_total_norm(tensors, ...)``: a norm over gradients that holds a probe gradient captures it first,
        then leaves it out, so that the norm (and the clipping it feeds) is the unprobed one."""
        def guarded(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            listed = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
            probes = [h.current().grad for h in self._holders]
            if any(t is g for t in listed for g in probes if g is not None):
                if self._pending:
                    self._capture("gradient clipping")
                self._release()
                listed = [t for t in listed if not any(t is g for g in probes)]
            return original(listed, *args, **kwargs)

        return guarded

    @contextlib.contextmanager
    def step(self, wrap: bool = True) -> Iterator["Probe"]:
        """Context manager for one step: captures cross_entropy and nll_loss, then the probe's gradient.

        ``wrap=False`` leaves the losses alone (and a fused LM head's output), for a step that calls
        ``probe.add`` or ``probe.log_probs`` itself.

        Inside it, ``torch.nn.functional.cross_entropy`` and ``nll_loss`` (and ``nn.CrossEntropyLoss``,
        ``nn.NLLLoss``) keep the caller's reduction, ignore_index, weight and label_smoothing and gain
        the probe term on valid tokens, reduced as torch reduces. Each call is one microbatch unless
        ``microbatch()`` marks them. The probe's gradient is stored after the synchronizing backward (and set
        aside until the next forward), before torch's clipping and norm functions inside the step, or when the
        step ends, whichever comes first.
        """
        if self._active:
            raise ProbeError("probe.step() is already active")
        self._reset(keep_declared=True)
        originals = [(owner, name, getattr(owner, name)) for owner in (torch.nn.utils, torch.nn.utils.clip_grad)
                     for name in _GUARDED if hasattr(owner, name)]
        guards: Dict[int, Callable[..., Any]] = {}  # one guard per function, whichever module names it
        for owner, name, original in originals:
            if id(original) not in guards:
                guards[id(original)] = (self._guard_norm(original) if name == "get_total_norm"
                                        else self._guard_clipping(original))
            setattr(owner, name, guards[id(original)])
        self._active = True
        try:
            with (capture.loss_capture(self._loss, self._seen, self.module) if wrap
                  else routes.without_output_route(self)):
                yield self
            if self._pending:
                self._capture("the end of probe.step()")
            self._release()
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)
            self._active = False

    # -- judging ----------------------------------------------------------------------------------

    def _no_loss_message(self) -> str:
        text = ("the probe saw no loss this step: compute it inside `with probe.step():` with "
                "torch.nn.functional.cross_entropy or nll_loss (or nn.CrossEntropyLoss), or pass per-token "
                "losses through probe.add(...)")
        for note in self._seen.notes:
            text += ". " + note[0].upper() + note[1:]
        if self._seen.log_softmax:
            text += (f". The step called log_softmax {self._seen.log_softmax} time(s) without cross_entropy or "
                     "nll_loss, as a hand-written loss or transformers' LabelSmoother (label_smoothing_factor > 0) "
                     "does: for the probed step use cross_entropy(..., label_smoothing=ε), which is the same "
                     "loss, or add the per-token losses with probe.add")
        if self._seen.selected:
            text += (f". The step selected values with gather or take_along_dim {self._seen.selected} time(s), as a "
                     "loss of selected log-probabilities does (TRL's selective_log_softmax): pass them through "
                     "probe.log_probs(values, labels) before the loss is formed")
        return text

    def dump(self, model: Optional[nn.Module] = None, *, optimizer: Any = None, scaler: Any = None,
             reducer: Optional[Reducer] = None, reduction_dtype: Optional[FloatDtype] = None,
             objective: Optional[Objective] = None, normalizer: Optional[Number] = None,
             description: Optional[str] = None, path: Optional[str] = None) -> Optional[str]:
        """Collective: gathers every rank's part and writes the per-group dump on rank 0, without judging it.

        Returns the dump's path on rank 0 and None elsewhere; the options are ``judge``'s. The step's
        record is cleared afterwards, as by ``judge``.
        """
        outcome = gather.gathered(self, model, optimizer, scaler, reducer, reduction_dtype, objective, normalizer,
                                  description, path, judge=False)
        assert outcome is None or isinstance(outcome, str)
        return outcome

    def judge(self, model: Optional[nn.Module] = None, *, optimizer: Any = None, scaler: Any = None,
              reducer: Optional[Reducer] = None, reduction_dtype: Optional[FloatDtype] = None,
              objective: Optional[Objective] = None, normalizer: Optional[Number] = None,
              description: Optional[str] = None, path: Optional[str] = None,
              framework: Optional[Framework] = None) -> Verdict:
        """Collective: gathers every rank's part, writes the dump on rank 0, runs normcheck, returns its verdict.

        Call it on every rank once the step's gradient is final: after the synchronizing backward,
        and, since the probe keeps its own copy of p.grad, just as well after clipping or after
        ``optimizer.step()``; it prints nothing (``check`` reports). ``model``: the DDP-wrapped model (by
        default the one the probe saw run the module), whose communication hook names the reducer and the
        reduction's dtype (torch's allreduce_hook, fp16_compress_hook and bf16_compress_hook are known);
        for another hook, or without DDP, the reducer is inferred by comparing each rank's local gradient
        of p with the reduced one. ``reducer`` and ``reduction_dtype`` override both. ``objective`` and
        ``normalizer`` override the probe's for this step, ``framework`` the probe's framework. A failing
        verdict's message gives the remedy in the framework's terms after its first line, and names the
        picture of the weight table (an SVG beside the dump) when the dump is kept. ``optimizer`` (one or
        a list) is checked to hold no probe parameter; ``scaler``, a GradScaler whose scale p.grad still
        carries (before its ``update()``). Misuse raises ``ProbeError`` on every rank; an executable that
        cannot run raises ``NormcheckError``.
        """
        outcome = gather.gathered(self, model, optimizer, scaler, reducer, reduction_dtype, objective, normalizer,
                                  description, path, judge=True, framework=framework)
        assert isinstance(outcome, Verdict)
        return outcome

    def check(self, model: Optional[nn.Module] = None, *, optimizer: Any = None, scaler: Any = None,
              reducer: Optional[Reducer] = None, reduction_dtype: Optional[FloatDtype] = None,
              objective: Optional[Objective] = None, normalizer: Optional[Number] = None,
              description: Optional[str] = None, path: Optional[str] = None, framework: Optional[Framework] = None,
              step: Optional[int] = None, raise_on_failure: bool = True) -> Verdict:
        """``judge``, then its report: one line on rank 0 when it passes, else ``NormcheckFailure`` on every rank.

        The failure (an AssertionError) holds the whole diagnosis on rank 0 and a line pointing to it on
        the others; with ``raise_on_failure=False`` the same texts are ``NormcheckWarning``s and the
        verdict is returned. ``step``: the optimizer step the line names. The other options are ``judge``'s.
        """
        verdict = self.judge(model, optimizer=optimizer, scaler=scaler, reducer=reducer,
                             reduction_dtype=reduction_dtype, objective=objective, normalizer=normalizer,
                             description=description, path=path, framework=framework)
        return self.conclude(verdict, step=step, raise_on_failure=raise_on_failure)

    def conclude(self, verdict: Verdict, *, step: Optional[int] = None, raise_on_failure: bool = True) -> Verdict:
        """What ``check`` does with a verdict ``judge`` returned: call it on every rank with that verdict."""
        synchronize = dist.barrier if gather.distributed() else None
        return conclude(verdict, gather.current_rank(), step, raise_on_failure, synchronize)
