"""The probe under its first name: ``normcheck.torch`` re-exports ``normcheck.probe``'s public names.

Code written as ``from normcheck.torch import Probe`` keeps working; new code imports ``normcheck.probe``,
whose name does not read as torch itself after ``from normcheck import ...``.
"""

from __future__ import annotations

from .probe import (DEFAULT_NAME, DEFAULT_SLOTS, OBJECTIVES, CaptureMode, FloatDtype, Number, Objective, Probe,
                    ProbeError, Reducer, ReplicaDivergence, ReplicaSummary, SitesOption, check_replicas, count_valid,
                    default_dtype, default_value, gather_counts, own_bucket_dtype, record_collectives)

__all__ = ["Probe", "ProbeError", "OBJECTIVES", "DEFAULT_SLOTS", "default_value", "gather_counts", "count_valid",
           "own_bucket_dtype", "default_dtype", "DEFAULT_NAME", "Objective", "Reducer", "CaptureMode", "FloatDtype",
           "Number", "SitesOption", "check_replicas", "ReplicaDivergence", "ReplicaSummary", "record_collectives"]
