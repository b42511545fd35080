#!/usr/bin/env python3
"""Writes cases/gate/: what each classic normalization mistake produces, computed as a float program
would (each operation rounded to the dtype, in the order of a real reduction), dumped as hex floats.

Run from the repository's top folder: python3 tests/gate/make_gate_cases.py
The expected verdicts and explanations in each file are stated by hand from the algebra; the files are
checked by `normcheck check cases/gate`.
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cases", "gate")


def rounder(dtype):
    if dtype == "float64":
        return lambda x: float(x)
    if dtype == "float32":
        # float64 arithmetic then rounding to float32 equals float32 arithmetic for + - * /
        # (53 >= 2*24 + 2), so each operation below is rounded once, as in float32 code.
        return lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    raise ValueError(dtype)


def hexf(x):
    return float(x).hex()


def run(ranks, theta, reducer, scale, dtype):
    """ranks: rank -> microbatch -> targets (None = padding). scale(r, m, counts) -> the factor the
    code multiplies microbatch m's loss sum by. Returns every rank's synchronized gradient."""
    fl = rounder(dtype)
    world = len(ranks)
    local = []
    for r, microbatches in enumerate(ranks):
        grad = fl(0.0)
        for m, targets in enumerate(microbatches):
            s = fl(0.0)
            for y in targets:
                if y is not None:
                    s = fl(s + fl(fl(theta) - fl(y)))
            grad = fl(grad + fl(s * fl(scale(r, m))))
        local.append(grad)
    total = fl(0.0)
    for g in local:  # the all-reduce, in rank order
        total = fl(total + g)
    if reducer == "mean":
        total = fl(total / world)
    return [total] * world


def counts(ranks):
    n_rm = [[sum(1 for y in mb if y is not None) for mb in rank] for rank in ranks]
    n_r = [sum(row) for row in n_rm]
    return n_rm, n_r, sum(n_r)


def write(name, description, ranks, theta, reducer, dtype, per_rank, expect_gate, tokens=None):
    doc = {
        "format": "normcheck/1",
        "description": description,
        "ranks": [
            {"targets": [None if y is None else hexf(y) for y in rank[0]]}
            if len(rank) == 1
            else {"microbatches": [[None if y is None else hexf(y) for y in mb] for mb in rank]}
            for rank in ranks
        ],
        "world_size": len(ranks),
        "reducer": reducer,
        "theta": hexf(theta),
        "observed": {"per_rank": [hexf(v) for v in per_rank], "dtype": dtype},
        "expect_gate": expect_gate,
    }
    if tokens:
        doc["observed"]["tokens"] = tokens
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    # Uneven partitions with targets that are not short binary fractions, so rounding really happens.
    uneven = [[[0.1, 2.5, None]], [[1.3]], [[-0.7, 0.2, 3.1, 1.9, None]]]
    accumulated = [[[0.1, 2.5], [1.3, -0.7, 0.2], [0.9]], [[3.1], [1.9, 0.4, None], [-1.1, 0.6]]]
    for dtype in ("float32", "float64"):
        fl = rounder(dtype)
        ranks = [[[None if y is None else fl(y) for y in mb] for mb in rank] for rank in uneven]
        acc = [[[None if y is None else fl(y) for y in mb] for mb in rank] for rank in accumulated]
        theta = fl(0.25)
        n_rm, n_r, n = counts(ranks)
        w = len(ranks)

        def case(name, description, reducer, scale, expect, part=ranks, tokens=None):
            write(f"{name}_{dtype}", description, part, theta, reducer, dtype,
                  run(part, theta, reducer, scale, dtype), expect, tokens)

        case("correct_scaled_sum", "W*S_r/N under the mean reducer, with N all-reduced: the objective.",
             "mean", lambda r, m: w / n, {"verdict": "pass", "explanations": []})
        case("correct_global_share_sum_reducer", "S_r/N under a summing reducer: the objective.",
             "sum", lambda r, m: 1 / n, {"verdict": "pass", "explanations": []})
        case("local_mean", "Each rank backpropagates its local mean: ranks weighted equally, not tokens.",
             "mean", lambda r, m: 1 / n_r[r], {"verdict": "fail", "explanations": ["local_mean"]})
        case("local_sum", "Each rank backpropagates its loss sum: N/W times the objective.",
             "mean", lambda r, m: 1.0, {"verdict": "fail", "explanations": ["local_sum"]})
        case("missing_world_size", "S_r/N under DDP's mean: the objective divided by W.",
             "mean", lambda r, m: 1 / n, {"verdict": "fail", "explanations": ["global_share", "objective/W"]})
        case("world_size_under_sum", "W*S_r/N under a summing hook: W times the objective.",
             "sum", lambda r, m: w / n, {"verdict": "fail", "explanations": ["scaled_sum", "objective×W"]})
        case("padding_in_denominator",
             "N counts the padded positions: a wrong denominator, and a gradient no known mistake explains.",
             "mean", lambda r, m: w / (n + 2), {"verdict": "fail", "explanations": []},
             tokens={"global": n + 2})
        case("rank_local_denominator",
             "Rank 2's own count used as N on every rank (the count was never all-reduced).",
             "mean", lambda r, m: w / n_r[2], {"verdict": "fail", "explanations": []},
             tokens={"global": n_r[2]})

        a_rm, a_r, a_n = counts(acc)
        g = 3
        case("accumulation_microbatch_means",
             "Gradient accumulation over 3 microbatches, each dividing by its own count and by G.",
             "mean", lambda r, m: 1 / (a_rm[r][m] * g), {"verdict": "fail", "explanations": ["microbatch_mean"]},
             part=acc)
        case("accumulation_correct", "Gradient accumulation with the update-unit N: W*S_rm/N.",
             "mean", lambda r, m: 2 / a_n, {"verdict": "pass", "explanations": []}, part=acc)
        case("accumulation_divided_twice", "W*S_rm/(N*G): the update-unit N and an extra division by G.",
             "mean", lambda r, m: 2 / (a_n * g), {"verdict": "fail", "explanations": ["objective/G"]}, part=acc)

        # Replicas that diverged: rank 1 holds a different value after the all-reduce.
        good = run(ranks, theta, "mean", lambda r, m: w / n, dtype)
        write(f"diverged_replicas_{dtype}", "Rank 1 holds a different synchronized value: the replicas diverged.",
              ranks, theta, "mean", dtype, [good[0], fl(good[1] * 1.5), good[2]], {"verdict": "fail", "explanations": []})

    # Equal counts: the local-mean bug gives exactly the objective, so this partition cannot catch it.
    equal = [[[1.0, 3.0]], [[2.0, 6.0]]]
    write("equal_counts_inconclusive", "Equal counts per rank: local means and the token mean coincide, so a "
          "local-mean bug could hide here. Use normcheck suggest for a partition that separates them.",
          equal, 0.0, "mean", "float32", run(equal, 0.0, "mean", lambda r, m: 1 / 2, "float32"),
          {"verdict": "inconclusive", "explanations": ["local_mean"]})


if __name__ == "__main__":
    main()
