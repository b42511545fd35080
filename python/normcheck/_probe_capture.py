"""How the probe finds the step's loss and the moment its gradient is final.

The loss: where torch has a usable ``TorchFunctionMode`` (torch 2), a mode active for the step sees
every call of ``torch.nn.functional.cross_entropy`` and ``nll_loss`` (also through
``nn.CrossEntropyLoss``, and under a name bound before the step); on older torch the step replaces
those functions' attributes instead.

The gradient: a tensor hook on p queues an autograd callback that runs at the end of the backward;
that callback queues a second one, which runs after every callback queued during the backward,
DistributedDataParallel's ``finalize_backward`` among them (the reducer queues it when its last
bucket is ready). The second callback therefore sees p.grad as the reducer left it.

Sharded p (FSDP2's ``fully_shard``): outside a forward the module holds a DTensor shard of p and,
after the reduce-scatter, a shard of its gradient; ``shard_span`` says which components a rank's
shard holds, so that rank 0 reassembles the whole gradient from every rank's part without a
collective of its own.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .options import FloatDtype, Reducer

__all__ = ["has_function_mode", "loss_capture", "enclosing_ddp", "ddp_holds", "registered_hook", "known_hook",
           "queue_after_backward", "is_distributed_tensor", "shard_span"]

LossHandler = Callable[[str, Callable[..., torch.Tensor], Dict[str, Any]], torch.Tensor]
"""(which loss, the original function, its bound arguments) → the probed loss."""

_MAJOR = int(torch.__version__.split(".")[0])


def has_function_mode() -> bool:
    """True where the probe captures losses through a TorchFunctionMode (torch 2 and later)."""
    return _MAJOR >= 2 and hasattr(torch.overrides, "TorchFunctionMode")


_ORIGINALS: Dict[str, Callable[..., torch.Tensor]] = {"cross_entropy": F.cross_entropy, "nll_loss": F.nll_loss}
_SIGNATURES = {name: inspect.signature(function) for name, function in _ORIGINALS.items()}
# Functions a loss computed without cross_entropy or nll_loss typically goes through (transformers'
# LabelSmoother: log_softmax, then gather): noted so that "no loss seen" can say what the step did.
_LOG_SOFTMAX = {F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax}
# Functions that select one value per position (log-probabilities of the labels, as TRL's selective_log_softmax).
_SELECTS = {torch.gather, torch.Tensor.gather, torch.take_along_dim, torch.Tensor.take_along_dim}


_PARAMETERS = {name: [(p.name, p.default) for p in signature.parameters.values()]
               for name, signature in _SIGNATURES.items()}


def bind(name: str, args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The call's arguments by name, defaults filled in (as ``inspect.Signature.bind``, without its cost)."""
    parameters = _PARAMETERS[name]
    if len(args) > len(parameters):
        raise TypeError(f"{name}() takes {len(parameters)} arguments, {len(args)} given")
    bound = {parameter: value for (parameter, _), value in zip(parameters, args)}
    for key, value in kwargs.items():
        if key in bound:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        bound[key] = value
    for parameter, default in parameters:
        if parameter not in bound:
            if default is inspect.Parameter.empty:
                raise TypeError(f"{name}() missing required argument {parameter!r}")
            bound[parameter] = default
    if len(bound) != len(parameters):
        unknown = sorted(set(bound) - {p for p, _ in parameters})
        raise TypeError(f"{name}() got unexpected keyword arguments {unknown}")
    return bound


class _Seen:
    """What the step computed that the probe did not wrap, and whether a wrapped loss is being computed."""

    def __init__(self) -> None:
        self.log_softmax = 0
        self.selected = 0  # gather and take_along_dim calls the step's mode saw
        self.inside = False  # the probe's handler is running: its own call of the loss is not a loss
        self.mode: Any = None  # the step's TorchFunctionMode, where there is one
        self.notes: List[str] = []  # where a loss no route takes was computed, and how to route it

    def note(self, text: Optional[str]) -> None:
        """Keeps ``text`` (once) for the message of a step that saw no loss."""
        if text is not None and text not in self.notes:
            self.notes.append(text)


if has_function_mode():
    from torch.overrides import TorchFunctionMode

    class _LossMode(TorchFunctionMode):
        """Routes cross_entropy and nll_loss calls to the probe; everything else runs untouched."""

        def __init__(self, handler: LossHandler, seen: _Seen) -> None:
            super().__init__()
            self.handler = handler
            self.seen = seen
            self.targets = {function: name for name, function in _ORIGINALS.items()}

        def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                               kwargs: Optional[Dict[str, Any]] = None) -> Any:
            name = self.targets.get(func)
            if name is None:
                if func in _LOG_SOFTMAX:
                    self.seen.log_softmax += 1
                elif func in _SELECTS:
                    self.seen.selected += 1
                return func(*args, **(kwargs or {}))
            return _handled(self.handler, self.seen, name, func, bind(name, args, kwargs or {}))


def _handled(handler: LossHandler, seen: _Seen, name: str, original: Callable[..., torch.Tensor],
             arguments: Dict[str, Any]) -> torch.Tensor:
    """``handler`` on one captured loss, with the mode off the stack: the loss and the probe's own
    operations run as they would without it (and the loss's own dispatch to the mode is not a loss)."""
    mode = seen.mode
    popped = False
    if mode is not None:
        top = torch._C._len_torch_function_stack() - 1
        if top >= 0 and torch._C._get_function_stack_at(top) is mode:
            torch._C._pop_torch_function_stack()
            popped = True
    seen.inside = True
    try:
        return handler(name, original, arguments)
    finally:
        seen.inside = False
        if popped:
            torch._C._push_on_torch_function_stack(mode)


class _Pause:
    """Takes the mode off the stack while a submodule runs, and puts it back when it returns.

    Every operation under an active TorchFunctionMode goes through Python; inside the model's blocks
    that is most of a step's operations and none of its losses (those go through the replaced
    attributes, or run in the probed module's own forward or after it, where the mode is active).
    """

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.depth = 0
        self.paused = False

    def before(self, module: nn.Module, args: Any) -> None:
        if self.depth == 0:
            top = torch._C._len_torch_function_stack() - 1
            if top >= 0 and torch._C._get_function_stack_at(top) is self.mode:
                torch._C._pop_torch_function_stack()
                self.paused = True
        self.depth += 1

    def after(self, module: nn.Module, args: Any, output: Any) -> None:
        self.depth -= 1
        if self.depth == 0 and self.paused:
            torch._C._push_on_torch_function_stack(self.mode)
            self.paused = False


@contextlib.contextmanager
def loss_capture(handler: LossHandler, seen: _Seen, module: Optional[nn.Module] = None) -> Iterator[None]:
    """For the duration of the block, cross_entropy and nll_loss (functional and module) call ``handler``.

    Everywhere: the attributes of torch.nn.functional and the loss modules' forward are replaced. Where
    torch has a TorchFunctionMode, a mode also sees calls through names bound before the step, in the
    probed ``module``'s own forward and outside the model; it is paused while the module's children
    (other than loss modules) run.
    """
    functions: Dict[str, Callable[..., torch.Tensor]] = {name: getattr(F, name) for name in _ORIGINALS}
    forwards: Dict[type, Any] = {nn.CrossEntropyLoss: nn.CrossEntropyLoss.forward, nn.NLLLoss: nn.NLLLoss.forward}

    def wrapped(name: str) -> Callable[..., torch.Tensor]:
        original = functions[name]

        def call(*args: Any, **kwargs: Any) -> torch.Tensor:
            if seen.inside:
                return original(*args, **kwargs)
            return _handled(handler, seen, name, original, bind(name, args, kwargs))

        return call

    def module_forward(name: str) -> Callable[..., torch.Tensor]:
        original = functions[name]

        def forward(module: Any, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            options = {"weight": module.weight, "ignore_index": module.ignore_index, "reduction": module.reduction}
            if name == "cross_entropy":
                options["label_smoothing"] = getattr(module, "label_smoothing", 0.0)
            return _handled(handler, seen, name, original, bind(name, (input, target), options))

        return forward

    log_softmax = F.log_softmax

    def counted_log_softmax(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.log_softmax += 1
        return log_softmax(*args, **kwargs)

    for name in _ORIGINALS:
        setattr(F, name, wrapped(name))
    setattr(F, "log_softmax", counted_log_softmax)
    setattr(nn.CrossEntropyLoss, "forward", module_forward("cross_entropy"))
    setattr(nn.NLLLoss, "forward", module_forward("nll_loss"))
    handles: List[Any] = []
    try:
        if has_function_mode():
            mode = _LossMode(handler, seen)
            seen.mode = mode
            with mode:
                pause = _Pause(mode)
                for child in (module.children() if module is not None else ()):
                    if isinstance(child, nn.modules.loss._Loss):
                        continue
                    handles.append(child.register_forward_pre_hook(pause.before))
                    handles.append(child.register_forward_hook(pause.after, always_call=True))
                yield
                if pause.paused:  # the block ended inside a child (an exception): the mode is on no stack
                    torch._C._push_on_torch_function_stack(mode)
        else:
            yield
    finally:
        seen.mode = None
        for handle in handles:
            handle.remove()
        for name, function in functions.items():
            setattr(F, name, function)
        setattr(F, "log_softmax", log_softmax)
        for cls, forward in forwards.items():
            setattr(cls, "forward", forward)


def seen() -> _Seen:
    """A fresh record of what a step computed without the wrapped losses."""
    return _Seen()


# ---------------------------------------------------------------------------------------------------
# DistributedDataParallel

_DDP_CODES = {getattr(nn.parallel.DistributedDataParallel, name).__code__
              for name in ("forward", "_run_ddp_forward") if hasattr(nn.parallel.DistributedDataParallel, name)}


def enclosing_ddp(module: nn.Module, depth: int = 24) -> Optional[nn.parallel.DistributedDataParallel]:
    """The DistributedDataParallel whose forward is running ``module``, found on the call stack, or None."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code in _DDP_CODES:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, nn.parallel.DistributedDataParallel) and candidate.module is module:
                return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def ddp_holds(ddp: nn.parallel.DistributedDataParallel, parameters: Sequence[nn.Parameter]) -> bool:
    """Whether DDP reduces ``parameters``: it built its reducer before they were registered if not."""
    held = getattr(ddp, "_module_parameters", None)  # torch 2
    if isinstance(held, list):
        ids = {id(q) for q in held}
        return all(id(p) in ids for p in parameters)
    try:  # torch 1.13 keeps no list: compare how many tensors its reducer holds with the module's now
        logging_data: Callable[[], Dict[str, Any]] = getattr(ddp, "_get_ddp_logging_data")
        count = int(logging_data().get("num_parameter_tensors", -1))
    except Exception:
        return True  # cannot tell: the check at judging time still sees an unreduced p
    ignored: Set[str] = set(getattr(ddp, "parameters_to_ignore", ()))
    current = {id(q) for name, q in ddp.module.named_parameters() if q.requires_grad and name not in ignored}
    return count < 0 or count >= len(current)


def registered_hook(model: Any) -> Tuple[bool, Optional[str], Optional[Callable[..., Any]]]:
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


def known_hook(name: Optional[str],
               hook: Optional[Callable[..., Any]]) -> Tuple[Optional[Reducer], Optional[FloatDtype]]:
    """(reducer, reduction dtype) of a registered communication hook: (None, …) when the reducer is unknown."""
    try:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    except ImportError:  # pragma: no cover - every torch with DDP hooks has it
        default_hooks = None  # type: ignore[assignment]
    if hook is not None and default_hooks is not None:
        hooks: Tuple[Tuple[str, Optional[FloatDtype]], ...] = (
            ("allreduce_hook", None), ("fp16_compress_hook", "float16"), ("bf16_compress_hook", "bfloat16"))
        for attribute, dtype in hooks:
            if hook is getattr(default_hooks, attribute, object()):
                return "mean", dtype
        name = getattr(hook, "__qualname__", name)
    if name is None:
        return None, None
    if hook is None:  # only the name is known (torch 1.13 keeps no reference to the hook)
        exact: Dict[str, Tuple[Optional[Reducer], Optional[FloatDtype]]] = {
            "allreduce_hook": ("mean", None), "fp16_compress_hook": ("mean", "float16"),
            "bf16_compress_hook": ("mean", "bfloat16")}
        if name in exact:
            return exact[name]
    if "fp16_compress_wrapper" in name:
        return None, "float16"
    if "bf16_compress_wrapper" in name:
        return None, "bfloat16"
    return None, None


def queue_after_backward(callback: Callable[[], None]) -> None:
    """Runs ``callback`` after every callback queued during the running backward (DDP's finalize too)."""
    engine = torch.autograd.Variable._execution_engine
    engine.queue_callback(lambda: engine.queue_callback(callback))


def is_distributed_tensor(value: Any) -> bool:
    """True for a DTensor (FSDP2's sharded parameters and gradients), without importing DTensor on old torch."""
    return hasattr(value, "placements") and hasattr(value, "device_mesh") and hasattr(value, "to_local")


def shard_span(value: Any) -> Tuple[int, torch.Tensor]:
    """(offset, values): where this rank's shard of a 1-D DTensor starts, and the shard as float64 on the CPU.

    DTensor splits a dimension as ``torch.chunk`` does, mesh dimension after mesh dimension: each of
    s parts gets ⌈L/s⌉ elements but the last ones, which get what is left. A replicated mesh dimension
    leaves the span as it is. Any other placement (a partial sum, a strided shard) is refused rather
    than guessed, and the computed span must have the shard's length.
    """
    local = value.to_local().detach().to(device="cpu", dtype=torch.float64, copy=True).reshape(-1)
    if len(value.shape) != 1:
        raise ValueError(f"a probe parameter is 1-D, this gradient has shape {tuple(value.shape)}")
    coordinate = value.device_mesh.get_coordinate()
    if coordinate is None:
        raise ValueError("this rank is not in the mesh p's gradient is sharded over")
    offset, length = 0, int(value.shape[0])
    for dim, placement in enumerate(value.placements):
        if placement.is_replicate():
            continue
        if type(placement).__name__ != "Shard" or getattr(placement, "dim", None) != 0:
            raise ValueError(f"p's gradient is placed as {placement!r} on mesh dimension {dim}: the probe reads "
                             "shards of dimension 0 and replicas only")
        parts = int(value.device_mesh.size(dim))
        chunk = -(-length // parts)
        start = min(coordinate[dim] * chunk, length)
        offset += start
        length = min(chunk, length - start)
    if local.numel() != length:
        raise ValueError(f"this rank's shard of p's gradient has {local.numel()} components where its placements "
                         f"{value.placements} give {length}")
    return offset, local
