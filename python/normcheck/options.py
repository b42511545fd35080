"""The names that options take, as ``Literal`` types, so that ``mypy --strict`` catches a misspelt one.

Each tuple holds its type's names in order; the checks at run time read the tuples, the type checker
the types. Standard library only.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal, Tuple, Union, get_args

__all__ = ["Objective", "Reducer", "CaptureMode", "FloatDtype", "Dtype", "Reduction", "Framework", "OBJECTIVES",
           "REDUCERS", "CAPTURE_MODES", "FLOAT_DTYPES", "DTYPES", "REDUCTIONS", "FRAMEWORKS", "Number"]

Objective = Literal["token_mean", "weighted_token_mean", "sequence_mean", "sequence_sum_mean", "constant"]
"""What a step claims to compute, as normcheck names it (``constant`` divides by a given normalizer)."""
Reducer = Literal["mean", "sum"]
"""How the ranks' gradients are combined."""
CaptureMode = Literal["reduction", "step"]
"""When the probe's gradient is final: right after the synchronizing backward, or when ``probe.step()`` ends."""
FloatDtype = Literal["float64", "float32", "bfloat16", "float16"]
"""A floating dtype by its name: of a gradient, a loss or a reduction."""
Framework = Literal["transformers", "trl", "accelerate", "lightning"]
"""The framework a step runs in, for remedies in its own terms (``normcheck.remedies``)."""
Dtype = Literal["float64", "float32", "bfloat16", "float16", "exact"]
"""What a normcheck/1 document's numbers were computed in (``exact``: rationals)."""
Reduction = Literal["mean", "sum", "none"]
"""How a loss function reduces its per-token losses, as torch's ``reduction=`` names it."""

Number = Union[int, float, Fraction, str]
"""A number an option takes (a normalizer, a divisor): exact unless it is a float; a string is a literal."""

OBJECTIVES: Tuple[Objective, ...] = get_args(Objective)
REDUCERS: Tuple[Reducer, ...] = get_args(Reducer)
CAPTURE_MODES: Tuple[CaptureMode, ...] = get_args(CaptureMode)
FLOAT_DTYPES: Tuple[FloatDtype, ...] = get_args(FloatDtype)
DTYPES: Tuple[Dtype, ...] = get_args(Dtype)
REDUCTIONS: Tuple[Reduction, ...] = get_args(Reduction)
FRAMEWORKS: Tuple[Framework, ...] = get_args(Framework)
