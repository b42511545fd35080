#!/usr/bin/env python3
"""Writes cases/weighted/: partitions under the weighted token mean (each valid token carries an exact
non-negative weight), with every expected gradient computed here independently (fractions.Fraction,
straight from the definitions), so that `normcheck check cases/weighted` confirms the library's values.
Also writes the documents the weighted objective must reject. Run from anywhere."""
import json
import os
from fractions import Fraction as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cases", "weighted")
FORMAT = "normcheck/1"
OBJECTIVE = "weighted_token_mean"


def exact(x):
    """A Fraction as the file writes it: an integer when whole, else the string "p/q"."""
    if x is None:
        return None
    x = F(x)
    return x.numerator if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def parse(v):
    """A target or weight as the file writes it (integer, "p/q" or decimal string) as a Fraction."""
    return None if v is None else F(v)


class Rank:
    """One rank: its microbatches of targets (None = padding) and, beside each, the weight as written.
    flat=True writes the rank as {"targets": [...]} (one microbatch)."""

    def __init__(self, microbatches, weights, flat=False):
        self.microbatches = microbatches
        self.weights = weights
        self.flat = flat
        if flat:
            assert len(microbatches) == 1

    def to_json(self, with_weights=True):
        if self.flat:
            doc = {"targets": self.microbatches[0]}
            if with_weights:
                doc["weights"] = self.weights[0]
        else:
            doc = {"microbatches": self.microbatches}
            if with_weights:
                doc["weights"] = self.weights
        return doc

    def pairs(self):
        """Per microbatch, the (target, weight) pairs of its valid tokens, as Fractions."""
        out = []
        for targets, weights in zip(self.microbatches, self.weights):
            assert len(targets) == len(weights)
            mb = []
            for y, w in zip(targets, weights):
                if y is None:
                    assert w is None
                    continue
                w = parse(w)
                assert w is not None and w >= 0
                mb.append((parse(y), w))
            out.append(mb)
        return out


def divide(a, b):
    return None if b == 0 else a / b


def gradients(ranks, theta, reducer):
    """The six gradients of the weighted definitions (None = undefined)."""
    W = len(ranks)
    d = W if reducer == "mean" else 1
    theta = F(theta)
    per_rank = []  # (S_r, m_r, [(S_m, m_m)])
    for rank in ranks:
        mbs = []
        for mb in rank.pairs():
            S_m = sum((w * (theta - y) for y, w in mb), F(0))
            m_m = sum((w for _, w in mb), F(0))
            mbs.append((S_m, m_m))
        S_r = sum((s for s, _ in mbs), F(0))
        m_r = sum((m for _, m in mbs), F(0))
        per_rank.append((S_r, m_r, mbs))
    M = sum(m for _, m, _ in per_rank)
    assert M > 0
    total = sum(s for s, _, _ in per_rank)
    g = {"global_mean": total / M}
    if any(m == 0 for _, m, _ in per_rank):
        g["local_mean"] = None
    else:
        g["local_mean"] = sum(s / m for s, m, _ in per_rank) / d
    g["local_sum"] = sum(s for s, _, _ in per_rank) / d
    g["scaled_sum"] = sum(W * s / M for s, _, _ in per_rank) / d
    g["global_share"] = sum(s / M for s, _, _ in per_rank) / d
    if any(m == 0 for _, _, mbs in per_rank for _, m in mbs):
        g["microbatch_mean"] = None
    else:
        g["microbatch_mean"] = sum(sum(s / m for s, m in mbs) / len(mbs) for _, _, mbs in per_rank) / d
    return g


def token_mean_gradients(ranks, theta, reducer):
    """The six gradients of the unweighted token mean, from counts alone (no weights read)."""
    W = len(ranks)
    d = W if reducer == "mean" else 1
    theta = F(theta)
    rows = []  # per rank: (S_r, n_r, [(S_m, n_m)])
    for rank in ranks:
        mbs = []
        for targets in rank.microbatches:
            valid = [F(y) for y in targets if y is not None]
            mbs.append((sum((theta - y for y in valid), F(0)), len(valid)))
        rows.append((sum(s for s, _ in mbs), sum(n for _, n in mbs), mbs))
    N = sum(n for _, n, _ in rows)
    total = sum(s for s, _, _ in rows)
    g = {"global_mean": total / N}
    g["local_mean"] = None if any(n == 0 for _, n, _ in rows) else sum(F(s, 1) / n for s, n, _ in rows) / d
    g["local_sum"] = total / d
    g["scaled_sum"] = sum(W * s / N for s, _, _ in rows) / d
    g["global_share"] = sum(s / N for s, _, _ in rows) / d
    if any(n == 0 for _, _, mbs in rows for _, n in mbs):
        g["microbatch_mean"] = None
    else:
        g["microbatch_mean"] = sum(sum(s / n for s, n in mbs) / len(mbs) for _, _, mbs in rows) / d
    return g


def recipe_gradient(ranks, theta, scale, reducer):
    """Every microbatch multiplies S_m by scale(W, N, n_r, n_m, G, M, m_r, m_m); the sum over all
    microbatches of all ranks is divided by the recipe reducer's d."""
    W = len(ranks)
    d = W if reducer == "mean" else 1
    theta = F(theta)
    pairs = [rank.pairs() for rank in ranks]
    N = sum(len(mb) for rank in pairs for mb in rank)
    M = sum(w for rank in pairs for mb in rank for _, w in mb)
    total = F(0)
    for rank in pairs:
        G = len(rank)
        n_r = sum(len(mb) for mb in rank)
        m_r = sum(w for mb in rank for _, w in mb)
        for mb in rank:
            S_m = sum((w * (theta - y) for y, w in mb), F(0))
            m_m = sum((w for _, w in mb), F(0))
            total += scale(W, N, n_r, len(mb), G, M, m_r, m_m) * S_m
    return total / d


def document(description, ranks, theta=None, reducer=None, objective=True, with_weights=True,
             expect=None, recipe=None, expect_error=None, world_size=True):
    doc = {"format": FORMAT, "description": description}
    if objective:
        doc["objective"] = OBJECTIVE
    if expect_error is not None:
        doc["expect_error"] = expect_error
    doc["ranks"] = [r.to_json(with_weights) if isinstance(r, Rank) else r for r in ranks]
    if world_size:
        doc["world_size"] = len(ranks)
    if theta is not None:
        doc["theta"] = exact(theta)
    if reducer is not None:
        doc["reducer"] = reducer
    if recipe is not None:
        doc["recipe"] = {"scale": recipe[0], "reducer": recipe[1]}
    if expect is not None:
        doc["expect"] = {k: exact(v) for k, v in expect.items()}
    return doc


def write(name, doc):
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")


def scaled(ranks, k):
    """The same tokens with every weight multiplied by k."""
    return [Rank(r.microbatches,
                 [[None if w is None else exact(parse(w) * k) for w in ws] for ws in r.weights],
                 r.flat) for r in ranks]


def gradient_case(objectives, name, description, ranks, theta, reducer):
    """Writes a weighted case that expects all six gradients; returns them for further assertions."""
    expected = gradients(ranks, theta, reducer)
    write(name, document(description, ranks, theta, reducer, expect=expected))
    objectives[name] = expected["global_mean"]
    return expected


def main():
    os.makedirs(OUT, exist_ok=True)
    objectives = {}

    # uneven_ranks: W = 3, θ = 1/2, counts 2, 1, 4, one padding position, one weight of 0.
    uneven = [
        Rank([[1, None, 3]], [["1/2", None, "3/2"]], flat=True),
        Rank([[2]], [["0.25"]], flat=True),
        Rank([[0, 4, 5, -1]], [[2, 0, 1, "1/3"]], flat=True),
    ]
    theta_u = F(1, 2)
    g_uneven = gradient_case(
        objectives, "uneven_ranks",
        "Three ranks of 2, 1 and 4 valid tokens with fractional weights, one padding position and one "
        "token of weight 0: only the scaled sum W*S_r/M reproduces the weighted mean under DDP's mean.",
        uneven, theta_u, "mean")

    # accumulated: W = 2, G = 2 and G = 3, one microbatch whose tokens all weigh 0.
    accumulated = [
        Rank([[1, 2], [3]], [[1, "1/2"], [2]]),
        Rank([[4], [5, 6, None], [7]], [[3], [0, 0, None], ["1/4"]]),
    ]
    g_acc = gradient_case(
        objectives, "accumulated",
        "Rank 0 accumulates two microbatches and rank 1 three, one of whose tokens all weigh 0: that "
        "microbatch has no weighted mean, so microbatch_mean is undefined while the others are not.",
        accumulated, F(2), "mean")
    assert g_acc["microbatch_mean"] is None

    # sum_reducer: W = 2, reducer sum.
    summed = [
        Rank([[3, 1, None]], [["2/3", 4, None]], flat=True),
        Rank([[2, 6]], [["0.5", "5/2"]], flat=True),
    ]
    gradient_case(
        objectives, "sum_reducer",
        "Two weighted ranks under a reducer that sums without dividing by W: the global share S_r/M "
        "now gives the weighted mean and the scaled sum is W times it.",
        summed, F(-1), "sum")

    # weights_all_one and its unweighted twin.
    ones_tokens = [[[1, 4], [2, None, 7]], [[3], [0, 5, 5]]]
    ones = [Rank(mbs, [[None if y is None else 1 for y in mb] for mb in mbs]) for mbs in ones_tokens]
    theta_o = F(1, 3)
    g_ones = gradients(ones, theta_o, "mean")
    g_plain = token_mean_gradients(ones, theta_o, "mean")
    assert g_ones == g_plain, (g_ones, g_plain)
    write("weights_all_one", document(
        "Every valid token weighs 1: each weighted gradient is the token-mean gradient of the same "
        "tokens in weights_all_one_unweighted.json.",
        ones, theta_o, "mean", expect=g_ones))
    write("weights_all_one_unweighted", document(
        "The tokens of weights_all_one.json without weights under the token mean: the same gradients "
        "as with every weight 1.",
        ones, theta_o, "mean", objective=False, with_weights=False, expect=g_plain))
    objectives["weights_all_one"] = g_ones["global_mean"]
    objectives["weights_all_one_unweighted"] = g_plain["global_mean"]

    # weights_scaled: uneven_ranks with every weight times 7/3.
    k = F(7, 3)
    g_scaled = gradient_case(
        objectives, "weights_scaled",
        "The tokens of uneven_ranks.json with every weight multiplied by 7/3: the normalized gradients "
        "are unchanged and only the unnormalized local sum grows by 7/3.",
        scaled(uneven, k), theta_u, "mean")
    for name in ("global_mean", "local_mean", "scaled_sum", "global_share", "microbatch_mean"):
        assert g_scaled[name] == g_uneven[name], name
    assert g_scaled["local_sum"] == k * g_uneven["local_sum"]
    assert g_scaled["local_sum"] != g_uneven["local_sum"]

    # empty_rank: one rank without any token.
    empty = [
        Rank([[2, 5]], [["3/4", 2]], flat=True),
        Rank([[]], [[]], flat=True),
        Rank([[1, None, 8]], [[1, None, "0.2"]], flat=True),
    ]
    g_empty = gradient_case(
        objectives, "empty_rank",
        "The middle rank of three holds no token and so no mass: its local mean is undefined, while "
        "W*S_r/M, its zero sum included, still gives the weighted mean.",
        empty, F(0), "mean")
    assert g_empty["local_mean"] is None

    # recipes on one accumulated, non-uniformly weighted partition.
    rec = [
        Rank([[1, 2], [3, None]], [["1/2", 3], [1, None]]),
        Rank([[4, 6, 0]], [[2, "0.25", "3/2"]], flat=True),
    ]
    theta_r = F(1)
    objective = gradients(rec, theta_r, "mean")["global_mean"]
    RECIPES = [
        ("recipe_weighted_mean", "W / M", "mean", lambda W, N, nr, nm, G, M, mr, mm: F(W) / M, True,
         "the weighted mean under DDP's mean reducer: W compensates the division by W"),
        ("recipe_weighted_sum", "1 / M", "sum", lambda W, N, nr, nm, G, M, mr, mm: 1 / M, True,
         "the weighted mean under a summing reducer: no world-size factor"),
        ("recipe_count_instead_of_mass", "W / N", "mean", lambda W, N, nr, nm, G, M, mr, mm: F(W, N), False,
         "the token count N in place of the mass M"),
        ("recipe_rank_mass", "1 / m_r", "mean", lambda W, N, nr, nm, G, M, mr, mm: 1 / mr, False,
         "each rank's own weighted mean: ranks weighted equally, not mass"),
    ]
    for name, scale, reducer, c, right, why in RECIPES:
        value = recipe_gradient(rec, theta_r, c, reducer)
        assert (value == objective) == right, (name, value, objective)
        write(name, document(
            f"Recipe {scale} under the {reducer} reducer: {why}. "
            + ("It equals the objective." if right else "It is not the objective."),
            rec, theta_r, reducer, recipe=(scale, reducer),
            expect={"global_mean": objective, "recipe": value}))
        objectives[name] = objective

    # the gate under the weighted objective: exact dumps (dtype "exact", so the bound is 0) of the right
    # gradient with the masses it divided by, of the weighted sum divided by the count N instead of M,
    # and of a right gradient whose dumped global mass is the count N.
    n_rec = sum(1 for r in rec for mb in r.microbatches for y in mb if y is not None)
    mass_rec = sum(parse(w) for r in rec for ws in r.weights for w in ws if w is not None)
    rank_masses = [sum(parse(w) for ws in r.weights for w in ws if w is not None) for r in rec]
    assert mass_rec != n_rec
    gates = [
        ("gate_weighted_pass", "The scaled sum W*S_r/M dumped exactly with the masses it used: the gate passes.",
         objective, {"global": exact(mass_rec), "per_rank": [exact(m) for m in rank_masses]},
         {"verdict": "pass", "explanations": []}),
        ("gate_count_denominator", "The weighted loss sum divided by the token count N instead of the mass M: "
         "the gate fails and names count_denominator.",
         objective * mass_rec / n_rec, None, {"verdict": "fail", "explanations": ["count_denominator"]}),
        ("gate_mass_is_count", "The right gradient, but the dumped global mass is the token count N: the "
         "denominator check fails.",
         objective, {"global": n_rec}, {"verdict": "fail", "explanations": []}),
    ]
    for name, description, observed, mass, verdict in gates:
        doc = document(description, rec, theta_r, "mean", expect={"global_mean": objective})
        doc["observed"] = {"gradient": exact(observed), "dtype": "exact"}
        if mass is not None:
            doc["observed"]["mass"] = mass
        doc["expect_gate"] = verdict
        write(name, doc)

    # documents to reject.
    two = lambda w0, w1: [Rank([[1, 2]], [w0], flat=True), Rank([[3]], [w1], flat=True)]
    write("error_negative_weight", document(
        "A weight of -1/2 is not a non-negative mass: rejected as bad_number.",
        two([1, "-1/2"], [1]), expect_error="bad_number"))
    write("error_zero_mass", document(
        "Three valid tokens that all weigh 0 leave the update without mass (M = 0): rejected as no_valid_tokens.",
        two([0, 0], [0]), expect_error="no_valid_tokens"))
    write("error_weights_without_objective", document(
        "Weights under the default token mean would be silently ignored: rejected as schema_error.",
        two([1, 2], [3]), objective=False, expect_error="schema_error"))
    write("error_objective_without_weights", document(
        "The weighted objective with a rank that gives no weights: rejected as schema_error.",
        [{"targets": [1, 2], "weights": [1, 2]}, {"targets": [3]}], expect_error="schema_error"))
    write("error_weights_length", document(
        "A rank of two targets with three weights: the weights must be shaped like the targets, "
        "rejected as schema_error.",
        [{"targets": [1, 2], "weights": [1, 2, 3]}, {"targets": [3], "weights": [1]}], expect_error="schema_error"))
    write("error_weight_beside_padding", document(
        "A weight of 1 beside a padding target: padding carries no mass, rejected as schema_error.",
        [{"targets": [1, None], "weights": [1, 1]}, {"targets": [3], "weights": [1]}], expect_error="schema_error"))
    write("error_mass_in_token_mean_recipe", document(
        "A recipe dividing by the mass M under the default token mean, which has no weights: rejected as recipe_error.",
        [{"targets": [1, 2]}, {"targets": [3]}], objective=False, reducer="mean",
        recipe=("W / M", "mean"), expect_error="recipe_error"))

    for name, value in objectives.items():
        print(f"{name}: global_mean = {value}")


if __name__ == "__main__":
    main()
