#!/usr/bin/env python3
"""Writes cases/terms/: updates with auxiliary loss terms (multi-token prediction, a load-balancing loss), each
loss measured per group, every weight computed here with Fractions, not by normcheck.

A loss's tokens are ranks → microbatches → token values (None: a position without a valid token); each
microbatch is one group. At θ = 0 a group's component is the weight the code gave its tokens times
Σ(θ − y) = −Σy. Under DDP's mean a rank that backpropagates c·S delivers c/W to each of its tokens.
"""

import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Callable, Optional

Tokens = list[list[list[Optional[int]]]]  # rank → microbatch → positions
Weigh = Callable[[int, int], Fraction]  # (rank, microbatch) → the weight a token of that group gets

DP_CP = {"dims": [{"name": "dp", "size": 2, "role": "data"}, {"name": "cp", "size": 2, "role": "sequence"}]}
DP_TP = {"dims": [{"name": "dp", "size": 3, "role": "data"}, {"name": "tp", "size": 2, "role": "replica"}]}
WEIGHT = Fraction(3, 10)  # the terms' weight: not a binary fraction, so every table carries it exactly


def text(value: Fraction) -> str:
    """An exact literal: "p" or "p/q"."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def valid(group: list[Optional[int]]) -> list[int]:
    return [y for y in group if y is not None]


def count(tokens: Tokens) -> int:
    """N: the valid tokens of the whole update."""
    return sum(len(valid(group)) for rank in tokens for group in rank)


def rank_count(tokens: Tokens, r: int) -> int:
    return sum(len(valid(group)) for group in tokens[r])


def vector(tokens: Tokens, weigh: Weigh) -> list[str]:
    """The measured vector: each group's weight times its derivative sum at θ = 0, in group order."""
    return [text(weigh(r, m) * -sum(valid(group))) for r, rank in enumerate(tokens) for m, group in enumerate(rank)]


# What code gives a token of a loss of weight w (1 for the main loss) under DDP's mean over W ranks.

def correct(tokens: Tokens, w: Fraction = Fraction(1)) -> Weigh:
    """Each rank backpropagates w·W·Sᵣ/N with N the loss's own count: every token weighs w/N."""
    return lambda r, m: w / count(tokens)


def divided_by(total: int, w: Fraction = Fraction(1)) -> Weigh:
    """Each rank backpropagates w·W·Sᵣ/total, total another loss's count: every token weighs w/total."""
    return lambda r, m: w / total


def local_mean(tokens: Tokens, w: Fraction) -> Weigh:
    """Each rank backpropagates w·Sᵣ/nᵣ, its own count: a token weighs w/(W·nᵣ)."""
    return lambda r, m: w / (len(tokens) * rank_count(tokens, r))


def microbatch_mean(tokens: Tokens, w: Fraction) -> Weigh:
    """Each microbatch's own mean, the accumulation divided by G: w/(W·G·nᵣₘ)."""
    return lambda r, m: w / (len(tokens) * len(tokens[r]) * len(valid(tokens[r][m])))


def prefix_count(tokens: Tokens, w: Fraction) -> Weigh:
    """Each microbatch divided by the count seen so far in the window (Megatron #7213): w/(W·(nᵣ₀ + … + nᵣₘ))."""
    return lambda r, m: w / (len(tokens) * sum(len(valid(group)) for group in tokens[r][: m + 1]))


def case(description: str, main: Tokens, main_weigh: Weigh, terms: list[dict[str, object]],
         gate: dict[str, object], mesh: Optional[dict[str, object]] = None) -> dict[str, object]:
    """One normcheck/1 file: the main loss and its terms (each {"name", "tokens", "weigh", and optionally
    "weight", "objective"}), every rank holding the same vectors after the all-reduce."""
    def ranks(tokens: Tokens) -> list[dict[str, object]]:
        listed = []
        for r, rank in enumerate(tokens):
            entry: dict[str, object] = {"targets": rank[0]} if len(rank) == 1 else {"microbatches": rank}
            if mesh:
                entry = {"coords": [r // 2, r % 2], **entry}
            listed.append(entry)
        return listed

    # On dp × tp each data group's tokens stand on both of its tp ranks (rank 2·dp + tp), and so does every
    # rank's measurement: the weights below are those of the data groups.
    replicas = 2 if mesh is DP_TP else 1
    main = [rank for rank in main for _ in range(replicas)]
    terms = [{**t, "tokens": [rank for rank in t["tokens"] for _ in range(replicas)]} for t in terms]  # type: ignore

    document: dict[str, object] = {"format": "normcheck/1", "description": description}
    if mesh:
        document["mesh"] = mesh
    document["ranks"] = ranks(main)
    declared = []
    for term in terms:
        entry = {"name": term["name"], "weight": text(term.get("weight", WEIGHT))}  # type: ignore[arg-type]
        if "objective" in term:
            entry["objective"] = term["objective"]
        entry["ranks"] = ranks(term["tokens"])  # type: ignore[arg-type]
        declared.append(entry)
    document["terms"] = declared
    document["reducer"] = "mean"
    document["theta"] = 0
    def replicated(weigh: Weigh) -> Weigh:
        return lambda r, m: weigh(r // replicas, m)

    observed: dict[str, object] = {"per_rank": [vector(main, replicated(main_weigh))[::replicas]] * len(main),
                                   "dtype": "exact"}
    measured = []
    for t in terms:
        components = vector(t["tokens"], replicated(t["weigh"]))[::replicas]  # type: ignore[arg-type]
        # A scalar probe's value is the sum of the components.
        value = text(sum(map(Fraction, components))) if t.get("scalar") else components
        measured.append({"name": t["name"], "per_rank": [value] * len(main)})
    observed["terms"] = measured
    document["observed"] = observed
    document["expect_gate"] = gate
    return document


# W = 2. The main loss's tokens, and a multi-token-prediction term's: each microbatch's shifted labels, one
# fewer per sequence (values of their own); G = 1 and G = 2.
MAIN_W2 = [[[1, 2, 3, None]], [[4, 5, 6, 7, 8, 9]]]
MTP_W2 = [[[2, 3, None, None]], [[5, 6, 7, 8, 9, None]]]
MAIN_W2_G2 = [[[1, 2, 3], [4, 5]], [[6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17]]]
MTP_W2_G2 = [[[2, 3, None], [5, None]], [[7, 8, 9, 10, None], [12, 13, 14, 15, 16, 17, None]]]
# A load-balancing term over the router's tokens: another count again.
MOE_W2 = [[[1, 1, 1, 1]], [[2, 2]]]
# dp 2 × cp 2 (ranks 2·dp + cp): each CP rank holds slices of its data group's sequences.
MAIN_MESH = [[[1, 2]], [[3, 4, 5, None]], [[6]], [[7, 8, 9, 10, 11]]]
MTP_MESH = [[[2]], [[4, 5, None, None]], [[None]], [[8, 9, 10, 11, None]]]
MAIN_MESH_G2 = [[[1, 2], [3]], [[4, 5, 6], [7, None]], [[8], [9, 10, 11]], [[12, 13], [14, 15, 16, 17]]]
MTP_MESH_G2 = [[[2], [None]], [[5, 6, None], [7, None]], [[None], [10, 11, None]], [[13, None], [15, 16, 17, None]]]
# dp 3 × tp 2: each data group's tokens (listed on its two tp replicas).
MAIN_TP = [[[1, 2, None]], [[3, 4, 5, 6]], [[7]]]
MTP_TP = [[[2, None]], [[4, 5, 6, None]], [[None]]]
# Equal counts per rank for the term: its own mean cannot be told from the token mean.
EVEN_MTP_W2 = [[[2, 3, 4]], [[6, 7, 8]]]


def term(name: str, tokens: Tokens, weigh: Weigh, **more: object) -> dict[str, object]:
    return {"name": name, "tokens": tokens, "weigh": weigh, **more}


def judged_cases() -> dict[str, dict[str, object]]:
    w = WEIGHT
    n_main, n_mtp = count(MAIN_W2), count(MTP_W2)
    cases = {
        "w2_correct.json": case(
            "W = 2: the main loss and a multi-token-prediction term, each divided by its own count over the update",
            MAIN_W2, correct(MAIN_W2), [term("mtp", MTP_W2, correct(MTP_W2, w))], {"verdict": "pass"}),
        "w2_g2_correct.json": case(
            "W = 2, G = 2: each loss divided by its own count over the whole window",
            MAIN_W2_G2, correct(MAIN_W2_G2), [term("mtp", MTP_W2_G2, correct(MTP_W2_G2, w))], {"verdict": "pass"}),
        "w2_main_count.json": case(
            "W = 2: the MTP term divided by the main loss's count (Megatron-LM #2417, #3159)",
            MAIN_W2, correct(MAIN_W2), [term("mtp", MTP_W2, divided_by(n_main, w))],
            {"verdict": "fail", "explanations": ["term mtp: main_count"]}),
        "w2_local_mean.json": case(
            "W = 2: the MTP term divided by each rank's own count (Megatron-LM #7452 finding 3)",
            MAIN_W2, correct(MAIN_W2), [term("mtp", MTP_W2, local_mean(MTP_W2, w))],
            {"verdict": "fail", "explanations": ["term mtp: local_mean", "term mtp: sum_of_microbatch_means"]}),
        "w2_g2_microbatch_mean.json": case(
            "W = 2, G = 2: the term divided by each microbatch's own count, the accumulation by G",
            MAIN_W2_G2, correct(MAIN_W2_G2), [term("mtp", MTP_W2_G2, microbatch_mean(MTP_W2_G2, w))],
            {"verdict": "fail", "explanations": ["term mtp: microbatch_mean"]}),
        "w2_g2_prefix_count.json": case(
            "W = 2, G = 2: a load-balancing term divided by the count seen so far in the window (Megatron-LM #7213)",
            MAIN_W2_G2, correct(MAIN_W2_G2), [term("moe", MTP_W2_G2, prefix_count(MTP_W2_G2, w))],
            {"verdict": "fail", "explanations": ["term moe: prefix_count"]}),
        "w2_other_term_count.json": case(
            "W = 2: the load-balancing term divided by the MTP term's count",
            MAIN_W2, correct(MAIN_W2),
            [term("mtp", MTP_W2, correct(MTP_W2, w)), term("moe", MOE_W2, divided_by(n_mtp, w))],
            {"verdict": "fail", "explanations": ["term moe: count_of(mtp)"]}),
        "w2_main_overwritten.json": case(
            "W = 2: the main loss divided by the term's count, which overwrote the shared count in place "
            "(Megatron-LM #7452 finding 10)",
            MAIN_W2, divided_by(n_mtp), [term("mtp", MTP_W2, correct(MTP_W2, w))],
            {"verdict": "fail", "explanations": ["count_of(mtp)"]}),
        "w2_weight_missing.json": case(
            "W = 2: the term's loss was not multiplied by its weight",
            MAIN_W2, correct(MAIN_W2), [term("mtp", MTP_W2, correct(MTP_W2))],
            {"verdict": "fail", "explanations": ["term mtp: objective/weight"]}),
        "w2_main_fails_term_passes.json": case(
            "W = 2: the main loss divided by each rank's own count, the term right: the update fails on the main loss",
            MAIN_W2, local_mean(MAIN_W2, Fraction(1)), [term("mtp", MTP_W2, correct(MTP_W2, w))],
            {"verdict": "fail", "explanations": ["local_mean", "sum_of_microbatch_means"]}),
        "w2_equal_counts.json": case(
            "W = 2: the term's ranks hold as many tokens each, so its own mean cannot be told from its token mean",
            MAIN_W2, correct(MAIN_W2), [term("mtp", EVEN_MTP_W2, correct(EVEN_MTP_W2, w))],
            {"verdict": "inconclusive", "explanations": ["term mtp: local_mean"]}),
        "w2_same_tokens.json": case(
            "W = 2: a load-balancing term over the main loss's own tokens, divided by their count",
            MAIN_W2, correct(MAIN_W2), [term("moe", MAIN_W2, correct(MAIN_W2, w))], {"verdict": "pass"}),
        "w4_dp2_cp2_correct.json": case(
            "dp 2 × cp 2: the main loss and the MTP term, each counted over dp × cp",
            MAIN_MESH, correct(MAIN_MESH), [term("mtp", MTP_MESH, correct(MTP_MESH, w))], {"verdict": "pass"},
            DP_CP),
        "w4_dp2_cp2_g2_correct.json": case(
            "dp 2 × cp 2, G = 2: each loss counted over dp × cp and the whole window",
            MAIN_MESH_G2, correct(MAIN_MESH_G2), [term("mtp", MTP_MESH_G2, correct(MTP_MESH_G2, w))],
            {"verdict": "pass"}, DP_CP),
        "w4_dp2_cp2_without_cp_compensation.json": case(
            "dp 2 × cp 2, one value per rank: the term averaged over cp once too often, the CP compensation missing "
            "(Megatron-LM #3674, #5244; verl #6609)",
            MAIN_MESH, correct(MAIN_MESH), [term("mtp", MTP_MESH, divided_by(2 * count(MTP_MESH), w), scalar=True)],
            {"verdict": "fail", "explanations": ["term mtp: objective/cp"]}, DP_CP),
        "w4_dp2_cp2_without_cp_compensation_per_group.json": case(
            "dp 2 × cp 2, per group: the CP compensation missing, a weight table of the objective's ÷ CP, as when the "
            "count is taken before the sequences are split",
            MAIN_MESH, correct(MAIN_MESH), [term("mtp", MTP_MESH, divided_by(2 * count(MTP_MESH), w))],
            {"verdict": "fail", "explanations": ["term mtp: count_before_sequence_sharding"]}, DP_CP),
        "w4_dp2_cp2_local_mean.json": case(
            "dp 2 × cp 2: each CP rank divided the term by its own slices' count (Megatron-LM #7498)",
            MAIN_MESH_G2, correct(MAIN_MESH_G2), [term("mtp", MTP_MESH_G2, local_mean(MTP_MESH_G2, w))],
            {"verdict": "fail", "explanations": ["term mtp: local_mean"]}, DP_CP),
        "w6_dp3_tp2_correct.json": case(
            "dp 3 × tp 2: the main loss and the term listed on both tp replicas, each counted once over dp",
            MAIN_TP, correct(MAIN_TP), [term("mtp", MTP_TP, correct(MTP_TP, w))], {"verdict": "pass"}, DP_TP),
        "w6_dp3_tp2_count_with_replicas.json": case(
            "dp 3 × tp 2: the term's count reduced over every rank, tp included: each of its tokens counted twice",
            MAIN_TP, correct(MAIN_TP), [term("mtp", MTP_TP, divided_by(2 * count(MTP_TP), w))],
            {"verdict": "fail", "explanations": ["term mtp: count_with_replicas"]}, DP_TP),
        "w4_dp2_cp2_main_count.json": case(
            "dp 2 × cp 2, G = 2: the MTP term divided by the main loss's count over dp × cp",
            MAIN_MESH_G2, correct(MAIN_MESH_G2), [term("mtp", MTP_MESH_G2, divided_by(count(MAIN_MESH_G2), w))],
            {"verdict": "fail", "explanations": ["term mtp: main_count"]}, DP_CP),
    }
    # The planted mistakes differ from the objective on these updates (else they could not be named), and the
    # equal-count update is one where the term's own mean is the token mean.
    def table(tokens: Tokens, weigh: Weigh) -> list[str]:
        return vector(tokens, weigh)

    assert n_main != n_mtp and count(MOE_W2) != n_mtp
    assert table(MTP_W2, local_mean(MTP_W2, w)) != table(MTP_W2, correct(MTP_W2, w))
    assert table(MTP_W2_G2, microbatch_mean(MTP_W2_G2, w)) != table(MTP_W2_G2, correct(MTP_W2_G2, w))
    assert table(MTP_W2_G2, prefix_count(MTP_W2_G2, w)) != table(MTP_W2_G2, correct(MTP_W2_G2, w))
    assert table(MTP_MESH_G2, local_mean(MTP_MESH_G2, w)) != table(MTP_MESH_G2, correct(MTP_MESH_G2, w))
    assert table(EVEN_MTP_W2, local_mean(EVEN_MTP_W2, w)) == table(EVEN_MTP_W2, correct(EVEN_MTP_W2, w))
    return cases


def rejected(expected: str, description: str, change: Callable[[dict[str, object]], None]) -> dict[str, object]:
    """A correct W = 2 file broken by `change`, which normcheck must reject with `expected`."""
    document = case(description, MAIN_W2, correct(MAIN_W2), [term("mtp", MTP_W2, correct(MTP_W2, WEIGHT))],
                    {"verdict": "pass"})
    del document["expect_gate"]
    document = {"format": document.pop("format"), "expect_error": expected, **document}
    change(document)
    return document


def declared(document: dict[str, object]) -> dict[str, object]:
    return document["terms"][0]  # type: ignore[index, no-any-return]


def measured(document: dict[str, object]) -> list[dict[str, object]]:
    return document["observed"]["terms"]  # type: ignore[index, no-any-return]


def rejection_cases() -> dict[str, dict[str, object]]:
    def twice(d: dict[str, object]) -> None:
        d["terms"].append(dict(declared(d)))  # type: ignore[attr-defined]

    def replica(d: dict[str, object]) -> None:
        d["mesh"] = {"dims": [{"name": "dp", "size": 1, "role": "data"}, {"name": "tp", "size": 2, "role": "replica"}]}
        d["ranks"] = [{"coords": [0, t], "targets": MAIN_W2[0][0]} for t in range(2)]
        declared(d)["ranks"] = [{"coords": [0, 0], "targets": [2, 3]}, {"coords": [0, 1], "targets": [2, 4]}]
        d["observed"]["per_rank"] = [[text(Fraction(-6, 3))]] * 2  # type: ignore[index]
        measured(d)[0]["per_rank"] = [[text(WEIGHT * Fraction(-5, 2))]] * 2

    return {
        "error_term_name_twice.json": rejected("schema_error", "two terms named mtp", twice),
        "error_term_name_main.json": rejected("schema_error", "a term named main, the main loss's name",
                                              lambda d: declared(d).update(name="main")),
        "error_term_name.json": rejected("schema_error", "a term's name that is not an identifier",
                                         lambda d: declared(d).update(name="MTP-1")),
        "error_term_without_name.json": rejected("schema_error", "a term without a name",
                                                 lambda d: declared(d).pop("name")),
        "error_term_without_ranks.json": rejected("schema_error", "a term without its tokens",
                                                  lambda d: declared(d).pop("ranks")),
        "error_term_unknown_key.json": rejected("schema_error", "a key a term does not have",
                                                lambda d: declared(d).update(mask=[1, 0])),
        "error_term_weight_zero.json": rejected("schema_error", "a term of weight 0",
                                                lambda d: declared(d).update(weight=0)),
        "error_term_weight.json": rejected("bad_number", "a weight that is not an exact number",
                                           lambda d: declared(d).update(weight="three tenths")),
        "error_term_ranks.json": rejected("schema_error", "a term on fewer ranks than the update",
                                          lambda d: declared(d).update(ranks=declared(d)["ranks"][:1])),
        "error_term_microbatches.json": rejected(
            "schema_error", "a term whose rank accumulates another number of microbatches than the main loss's",
            lambda d: declared(d)["ranks"].__setitem__(1, {"microbatches": [[5], [6]]})),  # type: ignore[index]
        "error_term_no_tokens.json": rejected(
            "no_valid_tokens", "a term without a valid token",
            lambda d: declared(d).update(ranks=[{"targets": [None]}, {"targets": []}])),
        "error_term_normalizer.json": rejected("schema_error", "a normalizer under the term's token mean",
                                               lambda d: declared(d).update(normalizer=4)),
        "error_term_coords.json": rejected("schema_error", "coords on a term's rank without a mesh",
                                           lambda d: declared(d)["ranks"][0].update(coords=[0])),  # type: ignore
        "error_term_replica.json": rejected("schema_error", "a term's tp replica holding other tokens", replica),
        "error_term_not_measured.json": rejected("schema_error", "a declared term without a measurement",
                                                 lambda d: d["observed"].pop("terms")),  # type: ignore[attr-defined]
        "error_term_measured_unknown.json": rejected("schema_error", "a measurement of an undeclared term",
                                                     lambda d: measured(d)[0].update(name="moe")),
        "error_term_measured_twice.json": rejected("schema_error", "a term measured twice",
                                                   lambda d: measured(d).append(dict(measured(d)[0]))),
        "error_term_measured_shape.json": rejected(
            "schema_error", "a term's vector with another number of values than its groups",
            lambda d: measured(d)[0].update(per_rank=[["-1", "-2", "-3"]] * 2)),
        "error_term_measured_both.json": rejected(
            "schema_error", "a term's measurement with both gradient and per_rank",
            lambda d: measured(d)[0].update(gradient=["-1", "-2"])),
        "error_term_measured_key.json": rejected("schema_error", "a key a term's measurement does not have",
                                                 lambda d: measured(d)[0].update(dtype="float32")),
    }


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "cases" / "terms"
    out.mkdir(parents=True, exist_ok=True)
    for name, document in {**judged_cases(), **rejection_cases()}.items():
        (out / name).write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
