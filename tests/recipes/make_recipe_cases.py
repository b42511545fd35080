#!/usr/bin/env python3
"""Writes cases/recipes/: each named recipe applied to one uneven, accumulated partition, with the
recipe's gradient computed here independently (fractions.Fraction, straight from the definition), so
that `normcheck check cases/recipes` confirms the library's value. Run from the repository's top folder."""
import json
import os
from fractions import Fraction as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cases", "recipes")

# W = 2 ranks, G = 2 microbatches each, uneven counts, θ = 0.
RANKS = [[[1, 2], [3]], [[4], [5, 6, 7]]]
THETA = F(0)

RECIPES = [
    # name, scale, reducer, scale as a function of (W, N, n_r, n_m, G), one-line explanation
    ("token_mean_mean_reducer", "W / N", "mean", lambda W, N, nr, nm, G: F(W, N),
     "the token mean under DDP's mean reducer: W compensates the division by W"),
    ("token_mean_sum_reducer", "1 / N", "sum", lambda W, N, nr, nm, G: F(1, N),
     "the token mean under a summing reducer: no world-size factor"),
    ("local_mean", "1 / n_r", "mean", lambda W, N, nr, nm, G: F(1, nr),
     "each rank's own mean: ranks weighted equally, not tokens"),
    ("average_of_microbatch_means", "1 / (n_m * G)", "mean", lambda W, N, nr, nm, G: F(1, nm * G),
     "each microbatch's mean, averaged over the accumulation steps: microbatches weighted equally"),
    ("missing_world_size", "1 / N", "mean", lambda W, N, nr, nm, G: F(1, N),
     "the global count without W under DDP's mean: the objective divided by W"),
    ("world_size_under_sum", "W / N", "sum", lambda W, N, nr, nm, G: F(W, N),
     "W applied although the reducer does not divide: W times the objective"),
    ("accumulation_divided_twice", "W / (N * G)", "mean", lambda W, N, nr, nm, G: F(W, N * G),
     "the update-unit N and again the accumulation steps: the objective divided by G"),
    ("world_size_on_local_mean", "W / n_m", "mean", lambda W, N, nr, nm, G: F(W, nm),
     "W applied to a microbatch-normalized loss: still one weight per microbatch, not per token"),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    W = len(RANKS)
    N = sum(len(mb) for rank in RANKS for mb in rank)
    objective = sum((THETA - y for rank in RANKS for mb in rank for y in mb), F(0)) / N
    for name, scale, reducer, c, why in RECIPES:
        total = F(0)
        for rank in RANKS:
            n_r = sum(len(mb) for mb in rank)
            for mb in rank:
                s = sum((THETA - y for y in mb), F(0))
                total += c(W, N, n_r, len(mb), len(rank)) * s
        if reducer == "mean":
            total /= W
        right = total == objective
        doc = {
            "format": "normcheck/1",
            "description": f"Recipe {scale} under the {reducer} reducer: {why}. "
                           + ("It equals the objective." if right else "It is not the objective."),
            "ranks": [{"microbatches": rank} for rank in RANKS],
            "world_size": W,
            "reducer": reducer,
            "recipe": {"scale": scale, "reducer": reducer},
            "expect": {"global_mean": str(objective), "recipe": str(total)},
        }
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
