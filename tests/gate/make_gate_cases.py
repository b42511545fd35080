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
    if dtype == "float16":
        return lambda x: struct.unpack("<e", struct.pack("<e", x))[0]
    raise ValueError(dtype)


def hexf(x):
    return float(x).hex()


def run(ranks, theta, reducer, scale, dtype, reduction_dtype=None):
    """ranks: rank -> microbatch -> targets (None = padding). scale(r, m, counts) -> the factor the
    code multiplies microbatch m's loss sum by (a float; nan where the code divides 0 by 0). Returns every
    rank's synchronized gradient. With reduction_dtype the all-reduce runs as a compressing communication
    hook does: each local gradient cast to that dtype and divided by W there, summed there, cast back."""
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
    if reduction_dtype is not None:
        low = rounder(reduction_dtype)
        total = low(0.0)
        for g in local:
            total = low(total + low(low(g) / world))
        return [fl(total)] * world
    total = fl(0.0)
    for g in local:  # the all-reduce, in rank order
        total = fl(total + g)
    if reducer == "mean":
        total = fl(total / world)
    return [total] * world


def divide(numerator, denominator):
    """numerator / denominator as float code computes it: 0/0 is NaN."""
    return float("nan") if denominator == 0 else numerator / denominator


def counts(ranks):
    n_rm = [[sum(1 for y in mb if y is not None) for mb in rank] for rank in ranks]
    n_r = [sum(row) for row in n_rm]
    return n_rm, n_r, sum(n_r)


def write(name, description, ranks, theta, reducer, dtype, per_rank, expect_gate, tokens=None, **observed):
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
    doc["observed"].update(observed)
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
             "N counts the padded positions: a wrong denominator, and the gradient scaled by N/(N + P).",
             "mean", lambda r, m: w / (n + 2), {"verdict": "fail", "explanations": ["count_padding"]},
             tokens={"global": n + 2})
        case("padding_counted_without_tokens",
             "W*S_r/(N + P), padding counted, with no token counts dumped: named from the file's nulls alone.",
             "mean", lambda r, m: w / (n + 2), {"verdict": "fail", "explanations": ["count_padding"]})
        case("divided_by_own_count",
             "Every rank counted its valid tokens right but divided by its own count: divided_by names it.",
             "mean", lambda r, m: 1 / n_r[r], {"verdict": "fail", "explanations": ["local_mean"]},
             tokens={"divided_by": n_r})
        case("divided_by_global_count", "W*S_r/N, and every rank reports dividing by N: the objective.",
             "mean", lambda r, m: w / n, {"verdict": "pass", "explanations": []}, tokens={"divided_by": [n] * w})
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

        # G = W = 2: S_r/N under DDP's mean is also the objective divided by G; both are named, and the
        # report says a run with G ≠ W tells the accumulation's division from the world size's.
        square = [[[fl(0.1), fl(2.5)], [fl(1.3)]], [[fl(-0.7), fl(0.2), fl(3.1)], [fl(1.9), None]]]
        _, _, s_n = counts(square)
        case("divided_twice_G_is_W",
             "S_r/N under DDP's mean at G = W = 2: divided by W, or by G, as far as this update shows.",
             "mean", lambda r, m: 1 / s_n,
             {"verdict": "fail", "explanations": ["global_share", "objective/G", "objective/W"]}, part=square)

        # A reduction='mean' over a microbatch without valid tokens: 0/0, NaN on every rank after the all-reduce.
        holes = [[[0.1, 2.5], [None, None]], [[1.3, -0.7], [0.2]]]
        h = [[[None if y is None else fl(y) for y in mb] for mb in rank] for rank in holes]
        h_rm, _, h_n = counts(h)
        case("mean_over_empty_microbatch",
             "Each microbatch takes its own mean; rank 0's second microbatch is all padding, so 0/0 is NaN.",
             "mean", lambda r, m: divide(1.0, h_rm[r][m] * 2), {"verdict": "fail", "explanations": ["mean_of_empty"]},
             part=h)
        write(f"infinite_gradient_{dtype}", "An infinite gradient: no known mistake computes one on this partition.",
              ranks, theta, "mean", dtype, [float("inf")] * w, {"verdict": "fail", "explanations": []})

        # Replicas that diverged: rank 1 holds a different value after the all-reduce.
        good = run(ranks, theta, "mean", lambda r, m: w / n, dtype)
        write(f"diverged_replicas_{dtype}", "Rank 1 holds a different synchronized value: the replicas diverged.",
              ranks, theta, "mean", dtype, [good[0], fl(good[1] * 1.5), good[2]],
              {"verdict": "fail", "explanations": []})

    # A compressing communication hook: the right W*S_r/N, all-reduced in float16. Declared, it passes; the
    # same values declared as a float32 reduction exceed the float32 bound and fail unexplained.
    fp16_ranks = [[[0.1, 2.5, None]], [[1.3]], [[-0.7, 0.2, 3.1, 1.9, None]]]
    fl32 = rounder("float32")
    f = [[[None if y is None else fl32(y) for y in mb] for mb in rank] for rank in fp16_ranks]
    _, _, f_n = counts(f)
    compressed = run(f, fl32(0.25), "mean", lambda r, m: 3 / f_n, "float32", reduction_dtype="float16")
    write("fp16_compress_hook_declared", "W*S_r/N all-reduced by fp16_compress_hook, declared as a float16 reduction.",
          f, fl32(0.25), "mean", "float32", compressed, {"verdict": "pass", "explanations": []},
          reduction_dtype="float16")
    write("fp16_compress_hook_undeclared", "The same fp16-reduced gradient declared as a float32 reduction: "
          "beyond the float32 bound, so the gate fails it (declare reduction_dtype).",
          f, fl32(0.25), "mean", "float32", compressed, {"verdict": "fail", "explanations": []})

    # Equal counts: the local-mean bug gives exactly the objective, so this partition cannot catch it.
    equal = [[[1.0, 3.0]], [[2.0, 6.0]]]
    write("equal_counts_inconclusive", "Equal counts per rank: local means and the token mean coincide, so a "
          "local-mean bug could hide here. Use normcheck suggest for a partition that separates them.",
          equal, 0.0, "mean", "float32", run(equal, 0.0, "mean", lambda r, m: 1 / 2, "float32"),
          {"verdict": "inconclusive", "explanations": ["local_mean"]})


if __name__ == "__main__":
    main()
