#!/usr/bin/env python3
"""Writes cases/mesh/: dp×cp meshes under the token mean, whole sequences or zigzag slices of them, values
computed with Fractions, not normcheck."""

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


# Two data groups of the dp2×cp2 mesh, each a microbatch of whole sequences split zigzag between its two
# CP ranks: sequence ID -> every position's target (None: padding) in the whole sequence. The groups reuse
# their IDs: a sequence is its ID within its data coordinates and microbatch.
SEQUENCES = [
    {"a": [1, 2, None, 4, 5, 6, 7, 8], "b": [3, 9, 2, 2]},
    {"a": [5, None, 1, 6], "b": [10, 20, 30, 40, 50, 60, 70, 80]},
]


def zigzag(length: int, cp_rank: int) -> list[list[int]]:
    """The load-balanced split: the sequence in 2·CP chunks, rank i holding chunks i and 2·CP − 1 − i."""
    chunk = length // 4
    first, second = cp_rank, 3 - cp_rank
    return [[first * chunk, (first + 1) * chunk], [second * chunk, (second + 1) * chunk]]


def sliced_ranks() -> list[list[dict[str, object]]]:
    """Each rank's slices, in the mesh's row-major order: rank 2·dp + cp."""
    ranks = []
    for group in SEQUENCES:
        for cp_rank in range(2):
            slices = []
            for sequence, targets in group.items():
                positions = zigzag(len(targets), cp_rank)
                held = [targets[i] for start, end in positions for i in range(start, end)]
                slices.append({"sequence": sequence, "positions": positions, "targets": held})
            ranks.append(slices)
    return ranks


def valid(slices: list[dict[str, object]]) -> list[int]:
    """The valid targets a rank holds over its slices."""
    return [y for s in slices for y in s["targets"] if y is not None]  # type: ignore[attr-defined]


def sliced_case(description: str, value: Fraction, gate: dict[str, object]) -> dict[str, object]:
    """The dp2×cp2 mesh holding SEQUENCES as zigzag slices, every rank holding `value` after the all-reduce."""
    ranks = sliced_ranks()
    return {
        "format": "normcheck/1",
        "description": description,
        "mesh": MESH,
        "ranks": [{"coords": coords(r), "targets": {"sequences": slices}} for r, slices in enumerate(ranks)],
        "reducer": "mean",
        "theta": 0,
        "observed": {"per_rank": [text(value)] * len(ranks), "dtype": "exact"},
        "expect_gate": gate,
    }


def peers(rank: int, along: int) -> list[int]:
    """The ranks of the 2×2 mesh whose coordinates differ from `rank`'s only along dimension `along`."""
    return [r for r in range(4) if all(coords(r)[d] == coords(rank)[d] for d in range(2) if d != along)]


def grouped_case(description: str, ranks: list[list[int]], weights: list[Fraction],
                 gate: dict[str, object]) -> dict[str, object]:
    """A per-group measurement: each rank one group, whose tokens weigh `weights[r]` in the synchronized
    gradient; every rank holds the same vector of the groups' components, weight × Σ(θ − y) at θ = 0."""
    document = case(description, ranks, Fraction(0), gate)
    vector = [text(w * -sum(rank)) for w, rank in zip(weights, ranks)]
    document["observed"] = {"per_rank": [vector] * len(ranks), "dtype": "exact"}
    return document


def count_over_dp(ranks: list[list[int]]) -> list[Fraction]:
    """Each rank backpropagates W·Sᵣ/n, n its count summed over dp only (the ranks of its cp coordinate);
    DDP's mean divides by W: its tokens weigh 1/n."""
    return [Fraction(1, sum(len(ranks[p]) for p in peers(r, along=0))) for r in range(4)]


def count_over_cp(ranks: list[list[int]]) -> list[Fraction]:
    """Each rank backpropagates CP·Sᵣ/n, n its cp group's count; DDP's mean divides by W = 4."""
    return [Fraction(2, sum(len(ranks[p]) for p in peers(r, along=1))) / 4 for r in range(4)]


# The sequence objectives on dp2×cp2 (RL fine-tuning: each row a prompt, masked, then a response and padding):
# sequence ID -> every position's target (None: no valid token) in the whole sequence, per data group. Some
# slices hold no valid token (a prompt chunk, a padding chunk), so a count of each rank's own sequences
# differs between the cp ranks.
ROLLOUTS = [
    {"a": [None, None, None, None, 2, 4, 6, None], "b": [None, 1, 3, 5, 7, 9, 11, 13]},
    {"a": [None, None, 8, 10], "b": [None, None, None, None, None, None, 3, 5], "c": [1, 2, 3, 4]},
]
# Every slice holds a valid token: counting each rank's sequences over dp only gives B on every rank.
FULL_ROLLOUTS = [
    {"a": [1, 2, 3, 4, 5, 6, 7, 8], "b": [2, 4, 6, 8]},
    {"a": [1, 1, 2, 2], "b": [3, 5, 7, 9, 11, 13, 15, 17], "c": [4, 4, 4, 4]},
]


def contiguous(length: int, cp_rank: int) -> list[list[int]]:
    """The plain split: rank i holds the i-th half of the sequence."""
    half = length // 2
    return [[cp_rank * half, (cp_rank + 1) * half]]


def rollout_slices(rollouts: list[dict[str, list[int | None]]],
                   split: object) -> list[list[tuple[str, list[int | None]]]]:
    """Each rank's slices (sequence ID and targets) in the mesh's row-major order, as `split` deals them."""
    ranks = []
    for group in rollouts:
        for cp_rank in range(2):
            slices = []
            for sequence, targets in group.items():
                ranges = split(len(targets), cp_rank)  # type: ignore[operator]
                slices.append((sequence, [targets[i] for start, end in ranges for i in range(start, end)]))
            ranks.append(slices)
    return ranks


def sequence_lengths(rollouts: list[dict[str, list[int | None]]]) -> dict[tuple[int, str], int]:
    """nₛ of each whole sequence, by data coordinate and ID."""
    return {(dp, sequence): sum(y is not None for y in targets)
            for dp, group in enumerate(rollouts) for sequence, targets in group.items()}


def slice_weights(rollouts: list[dict[str, list[int | None]]], split: object, objective: str,
                  mistake: str | None) -> list[list[Fraction]]:
    """The weight of each slice's tokens in the synchronized gradient, per rank and slice: the objective's
    (1/(B·nₛ) or 1/B), or a mistake's. Each rank's code is written out: the loss a rank backpropagates is
    Σₖ c(k)·Sₖ over its slices, and DDP's mean over W = 4 divides it by 4."""
    ranks = rollout_slices(rollouts, split)
    lengths = sequence_lengths(rollouts)
    b = sum(n > 0 for n in lengths.values())
    held = [sum(any(y is not None for y in targets) for _, targets in slices) for slices in ranks]
    weights = []
    for r, slices in enumerate(ranks):
        dp, cp = coords(r)
        row = []
        for sequence, targets in slices:
            n_s = lengths[(dp, sequence)]
            n_k = sum(y is not None for y in targets)
            per_token = Fraction(1, n_s) if objective == "sequence_mean" else Fraction(1)
            count = b
            if mistake == "slice_length":
                per_token = Fraction(1, n_k) if n_k else Fraction(0)
            elif mistake == "sequences_over_data_dims":
                count = sum(held[p] for p in peers(r, along=0))
            elif mistake == "sequences_counted_per_slice":
                count = 2 * b
            row.append(Fraction(4, count) * per_token / 4)
        weights.append(row)
    return weights


def rollout_case(description: str, rollouts: list[dict[str, list[int | None]]], split: object, objective: str,
                 mistake: str | None, gate: dict[str, object]) -> dict[str, object]:
    """dp2×cp2 under a sequence objective, the sequences split by `split` into slices with their positions,
    measured per group: every rank holds the vector of the slices' components, weight × Σ(θ − y) at θ = 0."""
    ranks = rollout_slices(rollouts, split)
    weights = slice_weights(rollouts, split, objective, mistake)
    listed = []
    vector = []
    for r, slices in enumerate(ranks):
        written = []
        for (sequence, targets), weight in zip(slices, weights[r]):
            dp, cp = coords(r)
            ranges = split(len(rollouts[dp][sequence]), cp)  # type: ignore[operator]
            written.append({"sequence": sequence, "positions": ranges, "targets": targets})
            vector.append(text(weight * -sum(y for y in targets if y is not None)))
        listed.append({"coords": coords(r), "targets": {"sequences": written}})
    return {"format": "normcheck/1", "description": description, "objective": objective, "mesh": MESH,
            "ranks": listed, "reducer": "mean", "theta": 0,
            "observed": {"per_rank": [vector] * 4, "dtype": "exact"}, "expect_gate": gate}


def rollout_objective(rollouts: list[dict[str, list[int | None]]], objective: str) -> Fraction:
    """The sequence objective's gradient at θ = 0 from the whole sequences, no slice in sight."""
    means = []
    for group in rollouts:
        for targets in group.values():
            valid = [y for y in targets if y is not None]
            if valid:
                means.append(Fraction(-sum(valid), len(valid) if objective == "sequence_mean" else 1))
    return sum(means, Fraction(0)) / len(means)


REPLICA_MESH = {"dims": [{"name": "dp", "size": 3, "role": "data"}, {"name": "tp", "size": 2, "role": "replica"}]}


def replica_case(description: str, groups: list[list[int]], observed: object,
                 gate: dict[str, object]) -> dict[str, object]:
    """dp 3 × tp 2: each data group's tokens listed on both of its tp ranks (rank 2·dp + tp), every rank holding
    `observed` (a number, or the vector of the three data groups' components) after the all-reduce."""
    ranks = [{"coords": [r // 2, r % 2], "targets": groups[r // 2]} for r in range(6)]
    per_rank = ([text(observed)] if isinstance(observed, Fraction)
                else [[text(v) for v in observed]])  # type: ignore[union-attr]
    return {"format": "normcheck/1", "description": description, "mesh": REPLICA_MESH, "ranks": ranks,
            "reducer": "mean", "theta": 0, "observed": {"per_rank": per_rank * 6, "dtype": "exact"},
            "expect_gate": gate}


def accumulated_replica_case(description: str, microbatches: list[list[list[int]]], factor: Fraction,
                             gate: dict[str, object]) -> dict[str, object]:
    """dp 3 × tp 2 accumulating microbatches (rank 2·dp + tp), measured per group (a group a microbatch): every
    token weighs `factor`/N, N the distinct tokens, each replica holding the data groups' vector."""
    n = sum(len(m) for rank in microbatches for m in rank)
    ranks = [{"coords": [r // 2, r % 2], "microbatches": microbatches[r // 2]} for r in range(6)]
    vector = [text(factor / n * -sum(m)) for rank in microbatches for m in rank]
    return {"format": "normcheck/1", "description": description, "mesh": REPLICA_MESH, "ranks": ranks,
            "reducer": "mean", "theta": 0, "observed": {"per_rank": [vector] * 6, "dtype": "exact"},
            "expect_gate": gate}


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "cases" / "mesh"
    uneven = [[1], [2, 3, 4], [5, 6], [7, 8, 9, 10, 11]]
    even = [[1, 2], [3, 4], [5, 6], [7, 8]]
    sliced = [valid(slices) for slices in sliced_ranks()]
    n = sum(len(rank) for rank in uneven)
    cases = {
        "dp2_cp2_correct.json": case("dp 2 × cp 2, each rank backpropagates W·Sᵣ/N over the distinct tokens",
                                     uneven, objective(uneven), {"verdict": "pass"}),
        "dp2_cp2_local_mean.json": case("dp 2 × cp 2, each rank divided by its own count",
                                        uneven, local_mean(uneven),
                                        {"verdict": "fail", "explanations": ["local_mean"]}),
        "dp2_cp2_equal_counts.json": case("dp 2 × cp 2 with equal counts: the local mean cannot be told apart",
                                          even, objective(even),
                                          {"verdict": "inconclusive", "explanations": ["local_mean"]}),
        "dp2_cp2_zigzag_correct.json": sliced_case(
            "dp 2 × cp 2 with zigzag sequence slices, W·Sᵣ/N over the distinct tokens",
            objective(sliced), {"verdict": "pass"}),
        "dp2_cp2_zigzag_local_mean.json": sliced_case("dp 2 × cp 2 with zigzag sequence slices, each rank its own mean",
                                                      local_mean(sliced),
                                                      {"verdict": "fail", "explanations": ["local_mean"]}),
        "dp2_cp2_count_over_dp.json": grouped_case(
            "dp 2 × cp 2, the count reduced over dp only (verl #5983): each count misses the other CP rank's tokens",
            uneven, count_over_dp(uneven), {"verdict": "fail", "explanations": ["count_over_data_dims"]}),
        "dp2_cp2_count_over_cp.json": grouped_case(
            "dp 2 × cp 2, the count reduced over cp only: each data group's own mean", uneven, count_over_cp(uneven),
            {"verdict": "fail", "explanations": ["count_over_sequence_dims"]}),
        "dp2_cp2_count_before_sharding.json": grouped_case(
            "dp 2 × cp 2, every CP rank counted its whole sequences before the split, summed over dp × cp",
            uneven, [Fraction(1, 2 * n)] * 4, {"verdict": "fail", "explanations": ["count_before_sequence_sharding"]}),
        "dp2_cp2_half.json": case(
            "dp 2 × cp 2, the loss averaged over cp once too often: the objective's gradient ÷ CP",
            uneven, objective(uneven) / 2, {"verdict": "fail", "explanations": ["objective/cp"]}),
        "dp2_cp2_grouped_correct.json": grouped_case(
            "dp 2 × cp 2 measured per group, each rank backpropagates W·Sᵣ/N", uneven, [Fraction(1, n)] * 4,
            {"verdict": "pass"}),
    }
    # Replicas: the objective counts each data group's tokens once (N = 8 over W = 3 data ranks).
    groups = [[1, 2], [3, 4, 5, 6, 7], [8]]
    distinct = objective(groups)
    counted_twice = [Fraction(1, 2 * 8) * -sum(g) for g in groups]  # the count summed over dp × tp: 2N
    cases.update({
        "dp3_tp2_correct.json": dict(replica_case("dp 3 × tp 2, W·Sᵣ/N with N over the distinct tokens", groups,
                                                  distinct, {"verdict": "pass"}),
                                     # Sᵣ/N, then ÷W: −36/(8·3), where counting every replica would give −72/(16·6).
                                     expect={"global_share": text(distinct / 3)}),
        "dp3_tp2_count_with_replicas.json": replica_case(
            "dp 3 × tp 2, the count reduced over every rank, tp included: each token counted twice", groups,
            counted_twice, {"verdict": "fail", "explanations": ["count_with_replicas"]}),
        "dp3_tp2_scaled_by_tp.json": replica_case("dp 3 × tp 2, the loss scaled by the tp size", groups, distinct * 2,
                                                  {"verdict": "fail", "explanations": ["objective×tp"]}),
        # A loss scaled by every rank of the mesh, dp·tp = 6 (transformers #39648's DP·TP·CP), which equals W·G at
        # G = 2: both are named, each with the run that tells them apart.
        "dp3_tp2_g2_scaled_by_whole_mesh.json": accumulated_replica_case(
            "dp 3 × tp 2 accumulating G = 2, the loss scaled by dp·tp, every rank of the mesh",
            [[[1, 2], [3]], [[4, 5, 6], [7]], [[8], [9, 10]]], Fraction(6),
            {"verdict": "fail", "explanations": ["objective×W·G", "objective×(dp·tp)"]}),
    })
    # The sequence objectives on slices: correct runs under both, contiguous and zigzag, and each mistake.
    pass_gate = {"verdict": "pass"}
    for kind in ("sequence_mean", "sequence_sum_mean"):
        for split_name, split in (("contiguous", contiguous), ("zigzag", zigzag)):
            cases[f"dp2_cp2_{kind}_{split_name}_correct.json"] = rollout_case(
                f"dp 2 × cp 2 under {kind}, {split_name} slices joined into whole sequences: W·Sᵣ/B, "
                "B counting each sequence once", ROLLOUTS, split, kind, None, pass_gate)
    mistakes = {
        "slice_length": ("sequence_mean", "each cp rank divided its slice by the slice's own length "
                         "(Megatron-LM #7452 finding 9, under the sequence mean)"),
        "sequences_over_data_dims": ("sequence_mean", "B counted over dp only, each cp rank counting the "
                                     "sequences its slices hold a valid token of (verl #5983, for sequences)"),
        "sequences_counted_per_slice": ("sequence_mean", "B summed over dp × cp: each sequence counted on both "
                                        "cp ranks (prime-rl #2562, verl #5869, for sequences)"),
    }
    for mistake, (kind, why) in mistakes.items():
        cases[f"dp2_cp2_{kind}_{mistake}.json"] = rollout_case(
            f"dp 2 × cp 2 under {kind}, zigzag slices: {why}", ROLLOUTS, zigzag, kind, mistake,
            {"verdict": "fail", "explanations": [mistake]})
    cases["dp2_cp2_sequence_sum_mean_sequences_over_data_dims.json"] = rollout_case(
        "dp 2 × cp 2 under sequence_sum_mean, contiguous slices: B counted over dp only", ROLLOUTS, contiguous,
        "sequence_sum_mean", "sequences_over_data_dims",
        {"verdict": "fail", "explanations": ["sequences_over_data_dims"]})
    # A recipe reads the joined counts: n_s is the whole sequence's, so W / (B * n_s) is the objective.
    cases["dp2_cp2_sequence_mean_recipe.json"] = dict(
        rollout_case("dp 2 × cp 2 under sequence_mean, zigzag slices, the recipe W / (B * n_s) with n_s the whole "
                     "sequence's valid tokens", ROLLOUTS, zigzag, "sequence_mean", None, pass_gate),
        recipe={"scale": "W / (B * n_s)"}, expect={"recipe": text(rollout_objective(ROLLOUTS, "sequence_mean"))})
    cases["dp2_cp2_sequence_mean_every_slice_holds_a_token.json"] = rollout_case(
        "dp 2 × cp 2 under sequence_mean, every slice holding a valid token: B counted over dp only is B, "
        "so the count cannot be told apart", FULL_ROLLOUTS, zigzag, "sequence_mean", None,
        {"verdict": "inconclusive", "explanations": ["sequences_over_data_dims"]})
    for kind in ("sequence_mean", "sequence_sum_mean"):
        for split in (contiguous, zigzag):
            # The slices' components add up to the objective's gradient over the whole sequences.
            total = sum(w * -sum(y for y in t if y is not None)
                        for row, slices in zip(slice_weights(ROLLOUTS, split, kind, None),
                                               rollout_slices(ROLLOUTS, split))
                        for w, (_, t) in zip(row, slices))
            assert total == rollout_objective(ROLLOUTS, kind)
    for mistake in mistakes:
        assert slice_weights(ROLLOUTS, zigzag, "sequence_mean", mistake) != slice_weights(
            ROLLOUTS, zigzag, "sequence_mean", None)
    assert slice_weights(FULL_ROLLOUTS, zigzag, "sequence_mean", "sequences_over_data_dims") == slice_weights(
        FULL_ROLLOUTS, zigzag, "sequence_mean", None)
    assert len(set(count_over_dp(uneven))) > 1 and len(set(count_over_cp(uneven))) > 1
    assert local_mean(uneven) != objective(uneven) and local_mean(even) == objective(even)
    assert local_mean(sliced) != objective(sliced)
    for name, document in cases.items():
        (out / name).write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
