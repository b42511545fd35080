#!/usr/bin/env python3
"""Writes cases/recipes/: each named recipe applied to one uneven, accumulated partition, with the
recipe's gradient computed here independently (fractions.Fraction, straight from the definition), so
that `normcheck check cases/recipes` confirms the library's value; and the mesh's recipes (N_dp, CP, TP, …)
on a dp 2 × cp 2 × tp 2 mesh. Run from the repository's top folder."""
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


# A device mesh dp 2 × cp 2 × tp 2: the ranks of the first replicas (tp coordinate 0) by (dp, cp) coordinates, each
# with two microbatches of uneven counts; the tp replicas hold the same tokens. W = DP·CP = 4 ranks reduce the
# gradient, N counts each token once.
MESH = [("dp", 2, "data"), ("cp", 2, "sequence"), ("tp", 2, "replica")]
MESH_RANKS = {(0, 0): [[1, 2], [3]], (0, 1): [[4], [5, 6, 9]], (1, 0): [[8, 2, 10], [11]], (1, 1): [[12], [1]]}

MESH_RECIPES = [
    # name, scale, scale as a function of the counts (a dict), one-line explanation
    ("mesh_token_mean", "W / N", lambda k: F(k["W"], k["N"]),
     "the token mean on the mesh: W = DP·CP compensates DDP's mean over dp × cp, N counts each token once"),
    ("mesh_sizes", "DP * CP / N", lambda k: F(k["DP"] * k["CP"], k["N"]),
     "the same scale written with the mesh's sizes"),
    ("mesh_count_over_data_dims", "W / N_dp", lambda k: F(k["W"], k["N_dp"]),
     "the count reduced over dp only (verl #5983): each count misses its cp peers' tokens"),
    ("mesh_count_over_sequence_dims", "CP / N_cp", lambda k: F(k["CP"], k["N_cp"]),
     "the count of each cp group, scaled by CP: each data coordinate's tokens weigh the same in all"),
    ("mesh_counted_on_every_tp_rank", "W * TP / N", lambda k: F(k["W"] * k["TP"], k["N"]),
     "the loss scaled by TP, whose replicas do not average their gradients: TP times the objective"),
    ("mesh_count_with_replicas", "W / (TP * N)", lambda k: F(k["W"], k["TP"] * k["N"]),
     "the count reduced over every rank, tp included: each token counted TP times"),
    ("mesh_per_cp_rank_mean", "1 / n_r", lambda k: F(1, k["n_r"]),
     "each cp rank's own mean: ranks weighted equally, not tokens"),
]


def mesh_cases():
    """The mesh's recipes, each on MESH_RANKS, its gradient computed from the definitions of its counts."""
    sizes = {name: size for name, size, _ in MESH}
    W = sizes["dp"] * sizes["cp"]
    N = sum(len(mb) for rank in MESH_RANKS.values() for mb in rank)
    objective = sum((THETA - y for rank in MESH_RANKS.values() for mb in rank for y in mb), F(0)) / N

    def tokens(where):
        return sum(len(mb) for coords, rank in MESH_RANKS.items() if where(coords) for mb in rank)

    listed = [(d, c, t) for d in range(sizes["dp"]) for c in range(sizes["cp"]) for t in range(sizes["tp"])]
    for name, scale, c, why in MESH_RECIPES:
        total = F(0)
        for (d, cp), rank in MESH_RANKS.items():
            counts = {"W": W, "N": N, "DP": sizes["dp"], "CP": sizes["cp"], "TP": sizes["tp"],
                      "n_r": sum(len(mb) for mb in rank),
                      "N_dp": tokens(lambda coords: coords[1] == cp), "N_cp": tokens(lambda coords: coords[0] == d)}
            for mb in rank:
                total += c(counts) * sum((THETA - y for y in mb), F(0))
        total /= W
        write_case(name, f"Recipe {scale} on dp 2 × cp 2 × tp 2 under the mean reducer: {why}", {
            "mesh": {"dims": [{"name": n, "size": size, "role": role} for n, size, role in MESH]},
            "ranks": [{"coords": [d, c, t], "microbatches": MESH_RANKS[(d, c)]} for d, c, t in listed],
        }, scale, "mean", total, objective)


def write_case(name, what, partition, scale, reducer, total, objective):
    """cases/recipes/NAME.json: the partition's keys, the recipe, and its gradient expected beside the objective's."""
    right = total == objective
    doc = {
        "format": "normcheck/1",
        "description": f"{what}. " + ("It equals the objective." if right else "It is not the objective."),
        **partition,
        "reducer": reducer,
        "recipe": {"scale": scale, "reducer": reducer},
        "expect": {"global_mean": str(objective), "recipe": str(total)},
    }
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    mesh_cases()
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
        write_case(name, f"Recipe {scale} under the {reducer} reducer: {why}",
                   {"ranks": [{"microbatches": rank} for rank in RANKS], "world_size": W}, scale, reducer, total,
                   objective)


if __name__ == "__main__":
    main()
