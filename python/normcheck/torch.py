"""The probe parameter: judge a real PyTorch training step's loss normalization with normcheck.

``Probe(model)`` adds to the model a scalar parameter p, initialised to 0, before the model is wrapped
in DistributedDataParallel, so that DDP reduces p's gradient like every other. To each valid token's
loss it adds p·(−y), y a probe value chosen per token. Because p = 0 the loss and every other gradient
are unchanged, and because the term is linear in p, p.grad after the synchronizing backward is exactly
what normcheck/1 calls the observed gradient at θ = 0 with targets y: it has travelled the step's real
normalization path (its divisions, accumulation, the reducer, communication hooks). ``check`` gathers
every rank's tokens and p.grad, writes the normcheck/1 file and lets ``normcheck check`` judge it.

Two ways in: ``probe.add(per_token_loss, labels)`` where the step computes per-token losses itself,
and ``with probe.step():``, which wraps ``torch.nn.functional.cross_entropy`` and
``torch.nn.CrossEntropyLoss`` for the duration of the step so that a loss computed inside an unmodified
model is probed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import tempfile
import weakref
from fractions import Fraction
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import dump
from .check import NormcheckError, NormcheckFailure, Suggestion, Verdict, run_check, suggest_for_counts
from .replicas import ReplicaDivergence, ReplicaSummary, check_replicas  # noqa: F401 (re-exported)
from .collectives import record_collectives  # noqa: F401 (re-exported)

__all__ = ["Probe", "ProbeError", "default_value", "gather_counts", "count_valid", "own_bucket_dtype", "DEFAULT_NAME"]
__all__ += ["check_replicas", "ReplicaDivergence", "ReplicaSummary", "record_collectives"]

DEFAULT_NAME = "normcheck_probe"

_DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16",
                torch.float16: "float16"}
# Unit roundoff by dtype name, to pick the coarsest arithmetic the probe's gradient met.
_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
_files = itertools.count()
_default_folder: Optional[str] = None  # one temporary folder per process for dumps nobody placed


class ProbeError(RuntimeError):
    """The probe was used in a way that makes p.grad mean something else than the observed gradient."""


# ---------------------------------------------------------------------------------------------------
# Probe values

_primes: List[int] = [2]


def _prime(k: int) -> int:
    candidate = _primes[-1]
    while len(_primes) <= k:
        candidate += 1
        if all(candidate % p for p in _primes if p * p <= candidate):
            _primes.append(candidate)
    return _primes[k]


def default_value(rank: int, microbatch: int) -> int:
    """The probe value every valid token of (rank, microbatch) gets when no plan is set.

    The k-th prime (2, 3, 5, 7, …) with k the Cantor pairing of (rank, microbatch): positive (so the
    objective is not 0), a distinct constant per microbatch whatever its count (so microbatch means and,
    with uneven counts, rank means differ), small and exact in every floating dtype up to ~200 pairs.
    """
    if rank < 0 or microbatch < 0:
        raise ValueError("rank and microbatch are non-negative")
    k = (rank + microbatch) * (rank + microbatch + 1) // 2 + microbatch
    return _prime(k)


def count_valid(labels: torch.Tensor, ignore_index: int = -100) -> int:
    """The number of valid tokens in ``labels`` (those not equal to ``ignore_index``)."""
    return int((labels != ignore_index).sum().item())


def gather_counts(local_counts: Sequence[int]) -> List[List[int]]:
    """Collective: every rank's per-microbatch valid-token counts, in rank order (for ``Probe.plan``)."""
    mine = [int(n) for n in local_counts]
    if not (dist.is_available() and dist.is_initialized()):
        return [mine]
    everyone: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return [list(counts) for counts in everyone]


# ---------------------------------------------------------------------------------------------------
# Routing p through the forward pass

class _One(torch.autograd.Function):
    """1, as a function of p whose gradient is 0: multiplying an output by it routes p through forward."""

    @staticmethod
    def forward(ctx: Any, p: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.ones((), dtype=p.dtype, device=p.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        # Exactly 0 whatever flows back: sum(grad·output) can be inf or NaN, and 0·inf would be NaN.
        return torch.zeros_like(grad)


def _route(value: Any, p: torch.Tensor) -> Tuple[Any, bool]:
    """``value`` with its first floating tensor multiplied by 1(p); whether one was found."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value * _One.apply(p).to(device=value.device, dtype=value.dtype), True
        return value, False
    if isinstance(value, dict):
        for key in list(value.keys()):
            routed, found = _route(value[key], p)
            if found:
                value[key] = routed  # in place: a ModelOutput keeps its attributes in step
                return value, True
        return value, False
    if isinstance(value, (tuple, list)):
        items = list(value)
        for i, item in enumerate(items):
            routed, found = _route(item, p)
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
# Bookkeeping of one step

class _Microbatch:
    """What the loss saw of one microbatch: every position in order, its probe value or None, weights."""

    def __init__(self) -> None:
        self.values: List[Optional[Union[int, Fraction, str]]] = []
        self.weights: List[Optional[float]] = []
        self.weighted: Optional[bool] = None
        self.valid = 0


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        raise ProbeError(f"the probe handles float64, float32, bfloat16 and float16 losses, not {dtype}")
    return name


def _as_float(value: Union[int, Fraction, str]) -> float:
    """A probe value as the float the loss holds; exact for the small values the probe uses."""
    if isinstance(value, str):
        text = value.strip()
        return float.fromhex(text) if "0x" in text.lower() else float(Fraction(text))
    return float(value)


def _known_hook(name: Optional[str], hook: Optional[Callable]) -> Tuple[Optional[str], Optional[str]]:
    """(reducer, reduction dtype) of a registered communication hook: (None, …) when the reducer is unknown."""
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    except ImportError:  # pragma: no cover - every torch with DDP hooks has it
        default_hooks = None
    if hook is not None and default_hooks is not None:
        for attribute, dtype in (("allreduce_hook", None), ("fp16_compress_hook", "float16"),
                                 ("bf16_compress_hook", "bfloat16")):
            if hook is getattr(default_hooks, attribute, object()):
                return "mean", dtype
        name = getattr(hook, "__qualname__", name)
    if name is None:
        return None, None
    if hook is None:  # only the name is known (torch 1.13 keeps no reference to the hook)
        exact = {"allreduce_hook": ("mean", None), "fp16_compress_hook": ("mean", "float16"),
                 "bf16_compress_hook": ("mean", "bfloat16")}
        if name in exact:
            return exact[name]
    if "fp16_compress_wrapper" in name:
        return None, "float16"
    if "bf16_compress_wrapper" in name:
        return None, "bfloat16"
    return None, None


def _registered_hook(model: nn.Module) -> Tuple[bool, Optional[str], Optional[Callable]]:
    """(has a hook, its name, the hook itself where torch keeps it) of a DistributedDataParallel model."""
    hooks = getattr(model, "_comm_hooks", None)  # torch ≥ 2.1 keeps (hook, state) pairs
    if isinstance(hooks, list):
        if not hooks:
            return False, None, None
        first = hooks[0]
        hook = first[0] if isinstance(first, tuple) and callable(first[0]) else None
        return True, getattr(hook, "__qualname__", "unknown hook"), hook
    logging_data = getattr(model, "_get_ddp_logging_data", None)
    if callable(logging_data):
        try:
            name = logging_data().get("comm_hook")
        except Exception:  # a private API: absent or changed, fall back to inference
            name = "unknown hook"
        if not name:
            return False, None, None
        return True, str(name), None
    return True, "unknown hook", None


def _infer_reducer(local: Sequence[float], reduced: float) -> Optional[str]:
    """'mean' or 'sum': which combination of the ranks' local probe gradients gives the reduced one."""
    world_size = len(local)
    total = math.fsum(local)
    if world_size == 1:
        return "mean"
    if not (math.isfinite(total) and math.isfinite(reduced)) or total == 0:
        return None
    errors = {name: abs(reduced - value) / abs(value) for name, value in (("mean", total / world_size), ("sum", total))}
    best = min(errors, key=errors.__getitem__)
    return best if errors[best] < 0.05 else None


def own_bucket_dtype(module: nn.Module) -> torch.dtype:
    """float64 or float32, whichever no parameter of ``module`` has (float32 when it has both)."""
    present = {parameter.dtype for parameter in module.parameters()}
    return torch.float64 if torch.float64 not in present else torch.float32


class Probe:
    """The probe parameter p on one module: attach before wrapping the module in DDP."""

    def __init__(self, module: nn.Module, *, dtype: Optional[torch.dtype] = None, name: str = DEFAULT_NAME,
                 executable: Optional[str] = None, directory: Optional[str] = None,
                 description: Optional[str] = None) -> None:
        """Registers p (a scalar parameter, 0) on ``module`` as ``name`` and hooks it up.

        ``dtype``: float32 or float64; by default the one of the two that no parameter of the module
        has (float64 for a float32, bfloat16 or float16 model, float32 for a float64 one), so that DDP
        puts p in a bucket of its own and the model's buckets, and so its all-reduce, stay bit for bit
        what they are without the probe. ``executable``: the normcheck executable (else ``$NORMCHECK``,
        else PATH); ``directory``: where rank 0 writes the dumps (else ``$NORMCHECK_PROBE_DIR``, else a
        new temporary folder); ``description``: a line written into every dump.
        """
        if dtype is None:
            dtype = own_bucket_dtype(module)
        if dtype not in (torch.float32, torch.float64):
            raise ProbeError(f"p is float32 or float64, not {dtype}: its gradient is the observed value")
        if hasattr(module, name):
            raise ProbeError(f"the module already has an attribute {name!r}: one probe per module")
        first = next(module.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
        self.module = module
        self.name = name
        self.parameter = nn.Parameter(torch.zeros((), dtype=dtype, device=device))
        self.executable = executable
        self.directory = directory
        self.description = description
        module.register_parameter(name, self.parameter)
        self._handles: List[Any] = [
            module.register_forward_hook(self._route_forward),
            self.parameter.register_hook(self._capture_local),
            module.register_load_state_dict_post_hook(self._forgive_missing),
        ]
        self._handles.append(self._keep_out_of_state_dict(module))
        self._plan: Optional[Tuple[Tuple[Tuple[Any, ...], ...], ...]] = None
        self._suggestion: Optional[Suggestion] = None
        self._patched = False
        self._probed: Dict[int, Any] = {}
        self._reset()

    # -- keeping p invisible ----------------------------------------------------------------------

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

    def is_probe(self, parameter: Any) -> bool:
        """True when ``parameter`` is p."""
        return parameter is self.parameter

    def named_model_parameters(self, module: Optional[nn.Module] = None) -> Iterator[Tuple[str, nn.Parameter]]:
        """``module.named_parameters()`` without p (default: the module the probe is attached to)."""
        for name, parameter in (module if module is not None else self.module).named_parameters():
            if parameter is not self.parameter:
                yield name, parameter

    def model_parameters(self, module: Optional[nn.Module] = None) -> Iterator[nn.Parameter]:
        """``module.parameters()`` without p: give these to the optimizer and to gradient clipping."""
        for _, parameter in self.named_model_parameters(module):
            yield parameter

    def check_optimizer(self, optimizer: Any) -> None:
        """Raises ``ProbeError`` when p is in one of the optimizer's parameter groups."""
        for group in getattr(optimizer, "param_groups", []):
            if any(parameter is self.parameter for parameter in group.get("params", [])):
                raise ProbeError(f"p reached the optimizer {type(optimizer).__name__}: build it from "
                                 "probe.model_parameters(model), so that p is never updated")

    def remove(self) -> None:
        """Detaches the probe: removes p and every hook from the module."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if getattr(self.module, self.name, None) is self.parameter:
            delattr(self.module, self.name)

    # -- one step ---------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._probed.clear()
        self._microbatches: List[_Microbatch] = []
        self._marked = False
        self._local: List[float] = []
        self._loss_dtypes: set = set()
        self._divided_by: Optional[Any] = None
        self.parameter.grad = None

    def _route_forward(self, module: nn.Module, inputs: Any, output: Any) -> Any:
        routed, found = _route(output, self.parameter)
        if not found:
            raise ProbeError(f"{type(module).__name__}'s output holds no floating tensor to route p through: "
                             "DDP would not see p used by the forward pass")
        return routed

    def _capture_local(self, grad: torch.Tensor) -> None:
        self._local.append(grad.detach().double().item())

    def _rank(self) -> int:
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    def microbatch(self) -> None:
        """Marks the start of a microbatch: every loss until the next mark belongs to it.

        Without marks, each wrapped call (or ``add``) is one microbatch. Once marked, every loss of the
        step must come after a mark.
        """
        if self._microbatches and not self._marked:
            raise ProbeError("probe.microbatch() came after losses of the step: mark every microbatch, "
                             "from the first, or none")
        self._marked = True
        self._microbatches.append(_Microbatch())

    def divided_by(self, value: Union[int, float, Fraction, Sequence[Union[int, float, Fraction]]]) -> None:
        """Tells the probe what this rank divided its loss sum by (N, or one number per microbatch).

        Written to ``observed.tokens.divided_by`` only when every rank tells it; never guessed.
        """
        if isinstance(value, (list, tuple)):
            self._divided_by = [dump.literal(v) for v in value]
        else:
            self._divided_by = dump.literal(value)

    def plan(self, counts: Sequence[Sequence[int]], *, objective: Optional[str] = None) -> Suggestion:
        """Chooses the probe values with ``normcheck suggest --counts`` for the step's real counts.

        ``counts[r][m]`` is the number of valid tokens rank r's loss will see in microbatch m (all ranks:
        see ``gather_counts``). Collective when a process group is up: rank 0 runs normcheck and every
        rank gets its answer. The i-th valid token of (r, m) then gets the i-th target normcheck chose
        there. The plan holds for the next checked step only. Returns the suggestion; when ``separated``
        is False, the counts cannot tell the mistakes in ``inseparable`` from the objective and the gate
        will conclude ``inconclusive``.
        """
        table = [[int(n) for n in rank] for rank in counts]
        # The arithmetic the dump will declare: p's, or the model's when coarser (a float32 model's
        # losses are float32 even with a float64 p), so that the separation holds at that dtype.
        names = {_dtype_name(self.parameter.dtype)}
        names.update(_DTYPE_NAMES[q.dtype] for q in self.model_parameters() if q.dtype in _DTYPE_NAMES)
        dtype = max(names, key=_ROUNDOFF.__getitem__)
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        outcome: Any = None
        if not distributed or dist.get_rank() == 0:
            try:
                outcome = suggest_for_counts(table, dtype=dtype, objective=objective, executable=self.executable)
            except (NormcheckError, ValueError) as e:
                outcome = NormcheckError(str(e))
        if distributed:
            box = [outcome]
            dist.broadcast_object_list(box, src=0)
            outcome = box[0]
        if isinstance(outcome, Exception):
            raise outcome
        if str(outcome.partition.get("theta", 0)) not in ("0", "0x0.0p+0"):
            raise NormcheckError(f"normcheck suggested θ = {outcome.partition['theta']}; the probe needs θ = 0")
        if distributed and len(table) != dist.get_world_size():
            raise ProbeError(f"counts for {len(table)} ranks, but the group has {dist.get_world_size()}")
        for r, (rank, wanted) in enumerate(zip(outcome.targets, table)):
            if [len(batch) for batch in rank] != wanted:
                raise NormcheckError(f"normcheck suggested {[len(b) for b in rank]} targets for rank {r}, "
                                     f"not the counts {wanted}")
        self._plan = outcome.targets
        self._suggestion = outcome
        return outcome

    def _values(self, microbatch: int, start: int, count: int) -> List[Union[int, Fraction, str]]:
        rank = self._rank()
        if self._plan is None:
            return [default_value(rank, microbatch)] * count
        if rank >= len(self._plan) or microbatch >= len(self._plan[rank]):
            raise ProbeError(f"the plan has no microbatch {microbatch} on rank {rank}: plan with the step's "
                             "real counts")
        planned = self._plan[rank][microbatch]
        if start + count > len(planned):
            raise ProbeError(f"rank {rank} microbatch {microbatch} has more valid tokens than the "
                             f"{len(planned)} the plan was made for")
        return list(planned[start:start + count])

    def _record(self, valid: torch.Tensor, token_weights: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        """Records one loss call's positions; returns −y (−y·w with weights) shaped like ``valid``, −0 where invalid."""
        if not self._marked:
            self._microbatches.append(_Microbatch())
        elif not self._microbatches:
            raise ProbeError("a loss came before the first probe.microbatch() mark")
        batch = self._microbatches[-1]
        index = len(self._microbatches) - 1
        weighted = token_weights is not None
        if batch.weighted is not None and batch.weighted != weighted:
            raise ProbeError("one microbatch mixed losses with and without weights")
        batch.weighted = weighted
        flags = valid.reshape(-1).tolist()
        count = sum(1 for f in flags if f)
        values = iter(self._values(index, batch.valid, count))
        weights = iter(token_weights.reshape(-1).tolist()) if token_weights is not None else None
        targets: List[float] = []
        for flag in flags:
            w = next(weights) if weights is not None else None
            if flag:
                y = next(values)
                batch.values.append(y)
                batch.weights.append(w)
                targets.append(_as_float(y))
            else:
                batch.values.append(None)
                batch.weights.append(None)
                targets.append(0.0)
        batch.valid += count
        self._loss_dtypes.add(_dtype_name(dtype))
        exact = torch.tensor(targets, dtype=torch.float64)
        y = exact.to(dtype)
        if not torch.equal(y.double(), exact):
            raise ProbeError(f"a probe value is not exact in {dtype}: plan smaller values")
        y = y.to(valid.device)
        flat = valid.reshape(-1)
        negated = torch.where(flat, -y, torch.full((), -0.0, dtype=dtype, device=valid.device))
        if token_weights is not None:
            negated = negated * token_weights.reshape(-1).to(dtype)  # −0 stays −0 beside padding (w = 0)
        return negated.reshape(valid.shape)

    def add(self, per_token_loss: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
            weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The per-token loss with p·(−y) added on every valid token (label ≠ ignore_index).

        ``per_token_loss`` is shaped like ``labels`` (as ``cross_entropy(..., reduction='none')`` gives
        it); padding gets no term. ``weights`` (shaped like ``labels``) are the per-token weights the
        step's objective uses, if any: the term is then w·p·(−y) and the dump is a weighted one.
        Normalize the result exactly as the step normalizes its loss.
        """
        earlier = self._probed.get(id(per_token_loss))
        if earlier is not None and earlier() is per_token_loss:
            raise ProbeError("this loss already carries the probe term: it came from the cross_entropy that "
                             "probe.step() wraps; with probe.add, use probe.step(wrap=False)")
        if per_token_loss.shape != labels.shape:
            raise ProbeError(f"per-token loss of shape {tuple(per_token_loss.shape)} for labels of shape "
                             f"{tuple(labels.shape)}: add() takes the loss before any reduction")
        valid = labels != ignore_index
        if not torch.is_grad_enabled():
            return per_token_loss
        token_weights = None
        if weights is not None:
            token_weights = torch.where(valid, weights.to(per_token_loss.dtype), torch.zeros_like(per_token_loss))
        negated = self._record(valid, token_weights, per_token_loss.dtype)
        p = self.parameter.to(device=per_token_loss.device, dtype=per_token_loss.dtype)
        return per_token_loss + p * negated

    # -- the wrapped cross-entropy ----------------------------------------------------------------

    def _cross_entropy(self, original: Callable, input: torch.Tensor, target: torch.Tensor,
                       weight: Optional[torch.Tensor] = None, size_average: Optional[bool] = None,
                       ignore_index: int = -100, reduce: Optional[bool] = None, reduction: str = "mean",
                       label_smoothing: float = 0.0) -> torch.Tensor:
        loss = original(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
        if not torch.is_grad_enabled():
            return loss
        if size_average is not None or reduce is not None:  # the legacy arguments, as torch maps them
            if reduce is False:
                reduction = "none"
            else:
                reduction = "sum" if size_average is False else "mean"
        if target.is_floating_point():
            raise ProbeError("cross_entropy with class-probability targets: the probe needs class indices "
                             "(use probe.add on a per-token loss instead)")
        valid = target != ignore_index
        token_weights = None
        if weight is not None:
            safe = torch.where(valid, target, torch.zeros_like(target))
            token_weights = torch.where(valid, weight.to(loss.dtype)[safe], torch.zeros((), dtype=loss.dtype,
                                                                                        device=loss.device))
        negated = self._record(valid, token_weights, loss.dtype)
        p = self.parameter.to(device=loss.device, dtype=loss.dtype)
        if reduction == "none":
            probed = loss + p * negated
            self._probed[id(probed)] = weakref.ref(probed)
            return probed
        total = negated.sum()
        if reduction == "sum":
            return loss + p * total
        if reduction != "mean":
            raise ProbeError(f"unknown reduction {reduction!r}")
        # torch's mean: the sum over the number of non-ignored targets, or over their class weights.
        denominator = token_weights.sum() if token_weights is not None else valid.sum().to(loss.dtype)
        return loss + p * total / denominator

    def _guard_clipping(self, original: Callable) -> Callable:
        def guarded(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            listed = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            if any(t is self.parameter for t in listed) and self.parameter.grad is not None:
                raise ProbeError("p reached gradient clipping before probe.check(): clip "
                                 "probe.model_parameters(model), and check right after backward")
            return original(listed, *args, **kwargs)

        return guarded

    @contextlib.contextmanager
    def step(self, wrap: bool = True) -> Iterator["Probe"]:
        """Context manager for one step: wraps cross_entropy and CrossEntropyLoss and guards clipping.

        ``wrap=False`` leaves cross_entropy alone, for a step that calls ``probe.add`` itself.

        Inside it, ``torch.nn.functional.cross_entropy`` and ``torch.nn.CrossEntropyLoss`` keep the
        caller's reduction, ignore_index, weight and label_smoothing and add the probe term on valid
        tokens, reduced as torch reduces: 'mean' divides it by the number of non-ignored targets (by
        the sum of their class weights when ``weight`` is given), 'sum' sums. Each call is one
        microbatch unless ``microbatch()`` marks them. Clipping that would include p's gradient raises.
        A name bound with ``from torch.nn.functional import cross_entropy`` before the step is not seen.
        """
        if self._patched:
            raise ProbeError("probe.step() is already active")
        self._reset()
        original_function = F.cross_entropy
        original_forward = nn.CrossEntropyLoss.forward
        clip_module = torch.nn.utils.clip_grad
        originals = {name: getattr(clip_module, name) for name in ("clip_grad_norm_", "clip_grad_value_")}
        probe = self

        def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor] = None,
                          size_average: Optional[bool] = None, ignore_index: int = -100,
                          reduce: Optional[bool] = None, reduction: str = "mean",
                          label_smoothing: float = 0.0) -> torch.Tensor:
            return probe._cross_entropy(original_function, input, target, weight, size_average, ignore_index,
                                        reduce, reduction, label_smoothing)

        def forward(module: nn.CrossEntropyLoss, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return probe._cross_entropy(original_function, input, target, module.weight, None,
                                        module.ignore_index, None, module.reduction,
                                        getattr(module, "label_smoothing", 0.0))

        if wrap:
            F.cross_entropy = cross_entropy  # type: ignore[assignment]
            nn.CrossEntropyLoss.forward = forward  # type: ignore[assignment]
        for name, original in originals.items():
            guarded = self._guard_clipping(original)
            setattr(clip_module, name, guarded)
            if getattr(torch.nn.utils, name, None) is original:
                setattr(torch.nn.utils, name, guarded)
        self._patched = True
        try:
            yield self
        finally:
            F.cross_entropy = original_function  # type: ignore[assignment]
            nn.CrossEntropyLoss.forward = original_forward  # type: ignore[assignment]
            for name, original in originals.items():
                if getattr(torch.nn.utils, name, None) is not original:
                    setattr(torch.nn.utils, name, original)
                setattr(clip_module, name, original)
            self._patched = False

    # -- judging ----------------------------------------------------------------------------------

    def _local_part(self, model: Optional[nn.Module], optimizer: Any, scaler: Any,
                    reducer: Optional[str], reduction_dtype: Optional[str]) -> Dict[str, Any]:
        """What this rank contributes; a problem is reported in the part, not raised, so no rank hangs."""
        part: Dict[str, Any] = {"rank": self._rank(), "error": None}
        try:
            for item in (optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]):
                if item is not None:
                    self.check_optimizer(item)
            value = self.parameter.detach().double().item()
            if value != 0:
                raise ProbeError(f"p is {value!r}, not 0: an optimizer or an update moved it; build optimizers "
                                 "from probe.model_parameters(model)")
            if not self._microbatches:
                raise ProbeError("the probe saw no loss this step: use probe.add(...) or compute the loss "
                                 "inside `with probe.step():` with torch.nn.functional.cross_entropy")
            if self.parameter.grad is None:
                raise ProbeError("p has no gradient: call probe.check() after the step's backward")
            scale = 1.0
            if scaler is not None and getattr(scaler, "is_enabled", lambda: True)():
                scale = float(scaler.get_scale())
            gradient = self.parameter.grad.detach().double().item() / scale
            weighted = {b.weighted for b in self._microbatches if b.weighted is not None}
            if len(weighted) > 1:
                raise ProbeError("some losses of the step had weights and some did not")
            ddp = isinstance(model, nn.parallel.DistributedDataParallel)
            has_hook, hook_name, hook = _registered_hook(model) if ddp else (False, None, None)  # type: ignore[arg-type]
            hook_reducer, hook_dtype = _known_hook(hook_name, hook) if has_hook else (None, None)
            part.update({
                "microbatches": [list(b.values) for b in self._microbatches],
                "weights": [list(b.weights) for b in self._microbatches] if weighted == {True} else None,
                "gradient": gradient,
                "local": math.fsum(self._local) / scale,
                "dtype": _dtype_name(self.parameter.dtype),
                "loss_dtypes": sorted(self._loss_dtypes),
                "divided_by": self._divided_by,
                "ddp": ddp,
                "hook": hook_name if has_hook else None,
                "hook_reducer": hook_reducer,
                "hook_dtype": hook_dtype,
                "reducer": reducer,
                "reduction_dtype": reduction_dtype,
            })
            if self._plan is not None:
                planned = [len(b) for b in self._plan[part["rank"]]] if part["rank"] < len(self._plan) else []
                seen = [b.valid for b in self._microbatches]
                if planned != seen:
                    raise ProbeError(f"rank {part['rank']}: the plan was made for counts {planned}, the step "
                                     f"had {seen}")
        except ProbeError as e:
            part["error"] = str(e)
        except Exception as e:  # reported, not raised: the other ranks are about to wait for this one
            part["error"] = f"rank {part['rank']}: {type(e).__name__}: {e}"
        return part

    def _document(self, parts: List[Dict[str, Any]], description: Optional[str]) -> Tuple[Dict[str, Any], str]:
        errors = [p["error"] for p in parts if p["error"]]
        if errors:
            raise ProbeError("; ".join(dict.fromkeys(errors)))
        first = parts[0]
        if len({p["weights"] is None for p in parts}) > 1:
            raise ProbeError("some ranks' losses had weights and some did not")
        reducer = first["reducer"]
        how = "given"
        hook_name = first["hook"]
        if reducer is None and first["ddp"]:
            if hook_name is None:
                reducer, how = "mean", "DDP without a communication hook"
            elif first["hook_reducer"] is not None:
                reducer, how = first["hook_reducer"], f"the hook {hook_name}"
        if reducer is None:
            reducer = _infer_reducer([p["local"] for p in parts], first["gradient"])
            how = "inferred from the local and reduced gradients of p"
            if reducer is None:
                combined = f"the communication hook {hook_name}" if hook_name else "the step"
                raise ProbeError(
                    f"cannot tell how {combined} combined the ranks' gradients of p (reduced "
                    f"{first['gradient']!r}, local {[p['local'] for p in parts]!r}): pass reducer='mean' or "
                    "'sum' to check()")
        reduction_dtype = first["reduction_dtype"] or first["hook_dtype"]
        names = {first["dtype"], *(d for p in parts for d in p["loss_dtypes"])}
        dtype = max(names, key=_ROUNDOFF.__getitem__)
        divided = [p["divided_by"] for p in parts]
        if any(d is not None for d in divided) and not all(d is not None for d in divided):
            raise ProbeError("probe.divided_by() was called on some ranks and not on others")
        seen = dump.observed(
            dtype=dtype, per_rank=[p["gradient"] for p in parts],
            reduction_dtype=reduction_dtype if reduction_dtype not in (None, dtype) else None,
            divided_by=divided if all(d is not None for d in divided) else None)
        world_size = len(parts)
        backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else "one process"
        text = description or self.description or (
            f"normcheck.torch.Probe on {type(self.module).__name__}, PyTorch {torch.__version__}, "
            f"W = {world_size} ({backend}), reducer {reducer} ({how})"
            + (f", communication hook {hook_name}" if hook_name else ""))
        weighted = first["weights"] is not None
        return dump.document([p["microbatches"] for p in parts],
                             weights=[p["weights"] for p in parts] if weighted else None,
                             world_size=world_size, reducer=reducer, theta=0, description=text,
                             observed=seen), reducer

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

    def judge(self, model: Optional[nn.Module] = None, *, optimizer: Any = None, scaler: Any = None,
              reducer: Optional[str] = None, reduction_dtype: Optional[str] = None,
              description: Optional[str] = None, path: Optional[str] = None) -> Verdict:
        """Collective: gathers every rank's part, writes the dump on rank 0, runs normcheck, returns its verdict.

        Call it right after the step's synchronizing backward (after ``scaler.unscale_``, before
        clipping), on every rank. ``model``: the DDP-wrapped model, whose communication hook names the
        reducer and the reduction's dtype (torch's allreduce_hook, fp16_compress_hook and
        bf16_compress_hook are known); for an unknown hook, or without ``model``, the reducer is inferred
        by comparing each rank's local p gradient with the reduced one. ``reducer`` and
        ``reduction_dtype`` override both. ``optimizer`` (one or a list) is checked to hold no p;
        ``scaler``, a GradScaler whose scale p.grad still carries. Afterwards p.grad is None, so an
        optimizer or clipping that still sees p leaves it alone. Misuse raises ``ProbeError`` on every
        rank; an executable that cannot run raises ``NormcheckError``.
        """
        if reducer not in (None, "mean", "sum"):
            raise ValueError(f"reducer is 'mean' or 'sum', not {reducer!r}")
        part = self._local_part(model, optimizer, scaler, reducer, reduction_dtype)
        distributed = dist.is_available() and dist.is_initialized()
        rank = dist.get_rank() if distributed else 0
        parts: Optional[List[Any]] = [part]
        if distributed:
            parts = [None] * dist.get_world_size() if rank == 0 else None
            dist.gather_object(part, parts, dst=0)
        outcome: Any = None
        if rank == 0:
            assert parts is not None
            try:
                document, _ = self._document(parts, description)
                target = self._output_path(path)
                dump.write(target, document)
                verdicts = run_check(target, executable=self.executable, require_gate=True)
                outcome = verdicts[0]
            except (ProbeError, NormcheckError) as e:
                outcome = e
            except Exception as e:  # anything else: every rank must still hear of it
                outcome = ProbeError(f"{type(e).__name__}: {e}")
        if distributed:
            box = [outcome]
            dist.broadcast_object_list(box, src=0)
            outcome = box[0]
        self._reset()
        self._plan = None  # a plan is made for one step's counts
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def check(self, model: Optional[nn.Module] = None, **options: Any) -> Verdict:
        """``judge``, raising ``NormcheckFailure`` (an AssertionError holding the diagnosis) unless it passes."""
        verdict = self.judge(model, **options)
        if not verdict.passed:
            raise NormcheckFailure(verdict.message, [verdict])
        return verdict

    @property
    def suggestion(self) -> Optional[Suggestion]:
        """The last ``plan``'s suggestion, or None when the default values are in use."""
        return self._suggestion

