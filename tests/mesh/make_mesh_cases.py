#!/usr/bin/env python3
"""Writes cases/mesh/: dp×cp meshes under the token mean, values computed with Fractions, not normcheck."""

import json
import sys
from fractions import Fraction
from pathlib import Path

MESH = {"dims": [{"name": "dp", "size": 2, "role": "data"}, {"name": "cp", "size": 2, "role": "sequence"}]}


def text(value: Fraction) -> str:
    """An exact literal: "p" or "p/q"."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def coords(rank: int) -> list[int]:
    """Row-major coordinates of `rank` in the 2×2 mesh."""
    return [rank // 2, rank % 2]


def objective(ranks: list[list[int]]) -> Fraction:
    """The token mean's gradient at θ = 0: Σ(0 − y) over every distinct token, divided by N."""
    tokens = [y for rank in ranks for y in rank]
    return Fraction(-sum(tokens), len(tokens))


def local_mean(ranks: list[list[int]]) -> Fraction:
    """Each rank's own mean, then DDP's mean over dp × cp."""
    return sum(Fraction(-sum(rank), len(rank)) for rank in ranks) / len(ranks)


def case(description: str, ranks: list[list[int]], value: Fraction, gate: dict[str, object]) -> dict[str, object]:
    """One normcheck/1 file over the dp2×cp2 mesh, every rank holding `value` after the all-reduce."""
    return {
        "format": "normcheck/1",
        "description": description,
        "mesh": MESH,
        "ranks": [{"coords": coords(r), "targets": targets} for r, targets in enumerate(ranks)],
        "reducer": "mean",
        "theta": 0,
        "observed": {"per_rank": [text(value)] * len(ranks), "dtype": "exact"},
        "expect_gate": gate,
    }


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "cases" / "mesh"
    uneven = [[1], [2, 3, 4], [5, 6], [7, 8, 9, 10, 11]]
    even = [[1, 2], [3, 4], [5, 6], [7, 8]]
    cases = {
        "dp2_cp2_correct.json": case("dp 2 × cp 2, each rank backpropagates W·Sᵣ/N over the distinct tokens",
                                     uneven, objective(uneven), {"verdict": "pass"}),
        "dp2_cp2_local_mean.json": case("dp 2 × cp 2, each rank divided by its own count",
                                        uneven, local_mean(uneven), {"verdict": "fail", "explanations": ["local_mean"]}),
        "dp2_cp2_equal_counts.json": case("dp 2 × cp 2 with equal counts: the local mean cannot be told apart",
                                          even, objective(even),
                                          {"verdict": "inconclusive", "explanations": ["local_mean"]}),
    }
    assert local_mean(uneven) != objective(uneven) and local_mean(even) == objective(even)
    for name, document in cases.items():
        (out / name).write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
