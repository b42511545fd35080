"""Judging a probed step: each rank's ``RankRecord``, gathered on rank 0, made a document, written, judged.

``rank_record`` reads what the probe kept of the step into a frozen record (a problem goes into the
record instead of being raised, so that no rank hangs in the collective); ``gathered`` sends every
record to rank 0, which makes and writes the document (``_probe_document``) and runs normcheck on it,
and hands the outcome, or the error, back to every rank.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
from torch import nn

from . import _probe_capture as capture
from . import dump, picture
from ._probe_step import Microbatch
from ._probe_document import document, replica_losses
from ._probe_report import framed
from ._probe_record import Geometry, ProbeError, RankRecord, TermRecord
from .check import NormcheckError, Verdict, run_check
from .options import FloatDtype, Framework, Number, Objective, Reducer

if TYPE_CHECKING:
    from .probe import Probe

__all__ = ["rank_record", "gathered", "output_path", "dtype_name", "distributed", "current_rank"]

_DTYPE_NAMES: Dict[torch.dtype, FloatDtype] = {torch.float64: "float64", torch.float32: "float32",
                                               torch.bfloat16: "bfloat16", torch.float16: "float16"}
_files = itertools.count()
_default_folder: Optional[str] = None  # one temporary folder per process for dumps nobody placed


def distributed() -> bool:
    """True inside an initialized process group."""
    return dist.is_available() and dist.is_initialized()


def current_rank() -> int:
    """This process's rank in the process group, 0 outside one."""
    return dist.get_rank() if distributed() else 0


def dtype_name(dtype: torch.dtype) -> FloatDtype:
    """The name normcheck gives a loss's or p's dtype; ProbeError for a dtype the probe does not handle."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        raise ProbeError(f"the probe handles float64, float32, bfloat16 and float16 losses, not {dtype}")
    return name


def rank_record(probe: "Probe", model: Optional[nn.Module], optimizer: Any, scaler: Any, reducer: Optional[Reducer],
                reduction_dtype: Optional[FloatDtype]) -> RankRecord:
    """What this rank contributes; a problem is reported in the record, not raised, so no rank hangs."""
    try:
        if distributed() and (dist.get_world_size() != probe.world_size or dist.get_rank() != probe.rank):
            raise ProbeError(f"the probe was built for rank {probe.rank} of {probe.world_size}, the process group "
                             f"has rank {dist.get_rank()} of {dist.get_world_size()}: construct it after "
                             "init_process_group, or pass world_size= and rank=")
        for item in (optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]):
            if item is not None:
                probe.check_optimizer(item)
        for holder in probe._holders:
            held: Any = holder.current().detach()
            if bool((held.to_local() if capture.is_distributed_tensor(held) else held).ne(0).any()):
                raise ProbeError("p is not 0: an optimizer or an update moved it; build optimizers from "
                                 "probe.model_parameters(model)")
        if not probe._microbatches:
            raise ProbeError(probe._no_loss_message())
        refused = probe._refused()
        if refused:
            raise ProbeError(refused)
        written = [h.site or "p" for h in probe._holders if probe._released and h.current().grad is not None]
        if (probe._pending or written) and probe._captures:
            what = (f"a backward reached p after its gradient was captured at {probe._captures[-1]}, so that "
                    "gradient was never reduced with the others" if probe._pending else
                    f"{', '.join(written)}.grad was written to after it was captured at {probe._captures[-1]}")
            raise ProbeError(f"{what}: the probe judges what it captured; run every backward of the step "
                             "before the synchronizing one (or inside probe.step())")
        if probe._pending or written:
            probe._capture("probe.check()")
        probe._release()
        notes: Tuple[str, ...] = ()
        if probe.capture_mode == "reduction" and probe._reduced:
            notes = ("the probe's gradient was captured at the synchronizing backward: gradients "
                     "scaled after it (a division of the reduced gradients by hand) are not judged; "
                     "if the step normalizes there, construct the probe with capture='step'",)
        if not probe._captures and probe._sharded and probe._local is not None:
            raise ProbeError("FSDP never reduced p's gradient: the step's last backward ran with "
                             "set_requires_gradient_sync(False); call set_requires_gradient_sync(True) "
                             "before the last microbatch's backward")
        if not probe._captures:
            raise ProbeError("p has no gradient: call probe.check() after the step's backward")
        scale = 1.0
        if scaler is not None and getattr(scaler, "is_enabled", lambda: True)():
            scale = float(scaler.get_scale())
        weighted = {b.weighted for b in probe._microbatches if b.weighted is not None}
        if len(weighted) > 1:
            raise ProbeError("some losses of the step had weights and some did not")
        ddp_model = model if isinstance(model, nn.parallel.DistributedDataParallel) else None
        if ddp_model is None and probe._ddp is not None:
            ddp_model = probe._ddp()
        ddp = ddp_model is not None
        has_hook, hook_name, hook = capture.registered_hook(ddp_model) if ddp else (False, None, None)
        hook_reducer, hook_dtype = capture.known_hook(hook_name, hook) if has_hook else (None, None)
        terms = []
        for name, listed in probe._terms.items():
            batches = listed + [Microbatch() for _ in range(len(probe._microbatches) - len(listed))]
            terms.append(TermRecord(name=name, microbatches=tuple(b.written() for b in batches),
                                    sequences=tuple(bool(b.sequences) for b in batches),
                                    valid=tuple(b.valid for b in batches),
                                    slots=tuple(slot for b in batches for slot in b.slots)))
        vectors = {site: tuple(v / scale for v in value.tolist()) for site, value in probe._captured.items()}
        for holder in probe._holders:
            vectors.setdefault(holder.site, (0.0,) * probe.components)
        return RankRecord(
            rank=probe.rank,
            notes=notes,
            microbatches=tuple(b.written() for b in probe._microbatches),
            weighted=weighted == {True},
            sequences=tuple(bool(b.sequences) for b in probe._microbatches),
            valid=tuple(b.valid for b in probe._microbatches),
            used=probe._allocator.used,
            vectors=vectors,
            spans=dict(probe._spans) if probe._sharded else None,
            local=tuple(v / scale for v in probe._local.tolist()) if probe._local is not None else None,
            dtype=dtype_name(probe.parameter.dtype),
            loss_dtypes=tuple(sorted(dtype_name(d) for d in probe._loss_dtypes)),
            divided_by=probe._divided_by,
            ddp=ddp,
            ddp_forward=probe._ddp_forward,
            reduced=probe._reduced,
            hook=hook_name if has_hook else None,
            hook_reducer=hook_reducer,
            hook_dtype=hook_dtype,
            reducer=reducer,
            reduction_dtype=reduction_dtype,
            losses=tuple(torch.cat(probe._replica_losses).tolist()) if probe._replica_losses else (),
            slots=tuple(slot for b in probe._microbatches for slot in b.slots) if terms else None,
            terms=tuple(terms),
        )
    except ProbeError as e:
        return RankRecord(rank=probe.rank, error=str(e))
    except Exception as e:  # reported, not raised: the other ranks are about to wait for this one
        return RankRecord(rank=probe.rank, error=f"rank {probe.rank}: {type(e).__name__}: {e}")


def output_path(directory: Optional[str], path: Optional[str], temporary: bool = False) -> Tuple[str, Optional[str]]:
    """Where rank 0 writes a dump, and the temporary folder made for it (None when the place was given).

    ``path``, else a new file in ``directory``, in $NORMCHECK_PROBE_DIR, or in a temporary folder: with
    ``temporary`` a new one its caller removes, else this process's own (what ``Probe.dump`` returns
    stays there).
    """
    if path is not None:
        return os.fspath(path), None
    global _default_folder
    folder = directory or os.environ.get("NORMCHECK_PROBE_DIR")
    made = None
    if not folder:
        if temporary:
            folder = made = tempfile.mkdtemp(prefix="normcheck-probe-")
        else:
            if _default_folder is None:
                _default_folder = tempfile.mkdtemp(prefix="normcheck-probe-")
            folder = _default_folder
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"probe-{os.getpid()}-{next(_files):03d}.json"), made


def _judged(probe: "Probe", target: str, parts: List[Any], geometry: Geometry, framework: Optional[Framework],
            kept: bool) -> Verdict:
    """Runs normcheck on the written dump, and compares the replicas' losses (``replica_losses``); a failing
    verdict's picture goes beside it when the files are kept."""
    verdict = run_check(target, executable=probe.executable, require_gate=True)[0].with_notes(parts[0].notes)
    disagreement = replica_losses(parts, geometry)
    if disagreement is not None:
        verdict = verdict.with_failed_check("replica_losses", disagreement)
    picture_path = None
    if kept and not verdict.passed and picture.has_picture(verdict.report):
        picture_path = picture.write_picture(verdict.report, os.path.splitext(target)[0] + ".svg")
    return framed(verdict, framework, picture_path, kept)


def gathered(probe: "Probe", model: Optional[nn.Module], optimizer: Any, scaler: Any, reducer: Optional[Reducer],
             reduction_dtype: Optional[FloatDtype], objective: Optional[Objective], normalizer: Optional[Number],
             description: Optional[str], path: Optional[str], judge: bool,
             framework: Optional[Framework] = None) -> Union[Verdict, str, None]:
    """Collective: every rank's record to rank 0, the dump written there and, with ``judge``, its verdict to all."""
    if reducer not in (None, "mean", "sum"):
        raise ValueError(f"reducer is 'mean' or 'sum', not {reducer!r}")
    if objective is None:
        objective, normalizer = probe.objective, normalizer if normalizer is not None else probe.normalizer
    probe._check_objective(objective, normalizer)
    if framework is None:
        framework = probe.framework
    part = rank_record(probe, model, optimizer, scaler, reducer, reduction_dtype)
    is_distributed = distributed()
    rank = dist.get_rank() if is_distributed else 0
    parts: Optional[List[Any]] = [part]
    if is_distributed:
        parts = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(part, parts, dst=0)
    outcome: Any = None
    temporary: Optional[str] = None
    if rank == 0:
        assert parts is not None
        try:
            if len(parts) != probe.world_size:
                raise ProbeError(f"the probe was built for W = {probe.world_size}, the step ran on {len(parts)} "
                                 "ranks: construct it after init_process_group, or pass world_size=")
            geometry = Geometry(probe.slots, probe.world_size, probe.witness, tuple(h.site for h in probe._holders[1:]),
                                probe.mesh_dims)
            backend = dist.get_backend() if is_distributed else "one process"
            origin = f"normcheck.torch.Probe on {type(probe.module).__name__}, PyTorch {torch.__version__}"
            made = document(parts, geometry, objective=objective, normalizer=normalizer,
                            description=description or probe.description, origin=origin, backend=str(backend),
                            terms=probe._term_declarations, accumulation_steps=probe.accumulation_steps)
            target, temporary = output_path(probe.directory, path, temporary=judge)
            dump.write(target, made)
            outcome = (_judged(probe, target, parts, geometry, framework, temporary is None or probe.keep) if judge
                       else target)
        except (ProbeError, NormcheckError) as e:
            outcome = e
        except Exception as e:  # anything else: every rank must still hear of it
            outcome = ProbeError(f"{type(e).__name__}: {e}")
        finally:
            if temporary is not None and not probe.keep:
                shutil.rmtree(temporary, ignore_errors=True)
    if is_distributed:
        box = [outcome]
        dist.broadcast_object_list(box, src=0)
        outcome = box[0] if judge or isinstance(box[0], Exception) else (outcome if rank == 0 else None)
    probe._reset()
    if isinstance(outcome, Exception):
        raise outcome
    return outcome  # type: ignore[no-any-return]
