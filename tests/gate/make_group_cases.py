#!/usr/bin/env python3
"""Writes cases/groups/: per-group dumps of the mistakes the gate names, computed as a float32 program would.

Each case is one update and one normalization written as the code of a training loop would compute it:
rank r multiplies every token of group g by a local coefficient c (a float32), the probe's component for g
sums those products token by token in float32, and the all-reduce divides by W in float32 under DDP's
mean. Probe values are 1 for the primary component and j for the j-th valid token in the witness. The
expected verdict and explanation names are written into each file, so that `normcheck check cases/groups`
holds exactly when the gate names each mistake as it is meant to.

Run from the repository root: python3 tests/gate/make_group_cases.py
"""

import json
import os
import struct
from fractions import Fraction as F

OUT = os.path.join("cases", "groups")


def f32(x):
    """x rounded to the nearest float32, as a Fraction (exact)."""
    return F(struct.unpack("f", struct.pack("f", float(x)))[0])


def hexf(x):
    return float(x).hex()


class Update:
    """ranks → microbatches → groups; a group is (valid tokens, padding) and belongs to a sequence or not."""

    def __init__(self, ranks, sequences=False, objective=None, normalizer=None, reducer="mean",
                 accumulation_steps=None):
        self.ranks = ranks  # [[ [ (n, pad), ... ] per microbatch ] per rank]
        self.sequences = sequences
        self.accumulation_steps = accumulation_steps
        self.objective = objective
        self.normalizer = normalizer
        self.reducer = reducer
        self.W = len(ranks)

    def groups(self):
        for r, microbatches in enumerate(self.ranks):
            for m, groups in enumerate(microbatches):
                for g, (n, pad) in enumerate(groups):
                    yield r, m, g, n, pad

    def N(self):
        return sum(n for *_, n, _ in self.groups())

    def B(self):
        return sum(1 for *_, n, _ in self.groups() if n > 0)

    def n_r(self, r):
        return sum(n for groups in self.ranks[r] for n, _ in groups)

    def n_rm(self, r, m):
        return sum(n for n, _ in self.ranks[r][m])

    def G(self, r):
        return len(self.ranks[r])

    def microbatch_value(self, groups):
        compact = [{"count": n, "value": 1, **({"padding": pad} if pad else {})} for n, pad in groups]
        if self.sequences:
            return {"sequences": compact}
        (only,) = compact
        return only

    def document(self, description, local, witness=True, expect=None, sites=None):
        """`local(r, m, g, n)`: the coefficient rank r gives each token of that group (a Fraction)."""
        vector, witnesses = [], []
        for r, m, g, n, _ in self.groups():
            c = f32(local(r, m, g, n))
            total, seen = F(0), F(0)
            for j in range(1, n + 1):
                total = f32(total - c)          # the term p·(−1), summed in float32
                seen = f32(seen - f32(c * j))   # the witness term p_w·(−j)
            if self.reducer == "mean":
                total, seen = f32(total / self.W), f32(seen / self.W)
            vector.append(hexf(total))
            witnesses.append(hexf(seen))
        observed = {"per_rank": [vector] * self.W, "dtype": "float32"}
        if witness:
            observed["witness"] = [witnesses] * self.W
        if sites:
            observed["sites"] = []
            for name, site_local in sites:
                site_vector = []
                for r, m, g, n, _ in self.groups():
                    c = f32(site_local(r, m, g, n))
                    total = F(0)
                    for _ in range(n):
                        total = f32(total - c)
                    if self.reducer == "mean":
                        total = f32(total / self.W)
                    site_vector.append(hexf(total))
                observed["sites"].append({"name": name, "per_rank": [site_vector] * self.W})
        doc = {"format": "normcheck/1", "description": description}
        if self.objective:
            doc["objective"] = self.objective
        if self.normalizer is not None:
            doc["normalizer"] = self.normalizer
        ranks = []
        for microbatches in self.ranks:
            values = [self.microbatch_value(groups) for groups in microbatches]
            ranks.append({"targets": values[0]} if len(values) == 1 else {"microbatches": values})
        doc["ranks"] = ranks
        doc["world_size"] = self.W
        if self.accumulation_steps is not None:
            doc["accumulation_steps"] = self.accumulation_steps
        if self.reducer != "mean":
            doc["reducer"] = self.reducer
        doc["observed"] = observed
        if expect:
            verdict, names = expect
            doc["expect_gate"] = {"verdict": verdict, "explanations": names}
        return doc


def write(name, doc):
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    # Two ranks, three microbatches each, uneven counts: one group per microbatch.
    u = Update([[[(3, 1)], [(1, 0)], [(4, 2)]], [[(2, 0)], [(5, 1)], [(2, 0)]]])
    W, N = u.W, u.N()
    write("correct_scaled_sum", u.document("W·S_rm/N with the update's N: every token weighs 1/N",
                                           lambda r, m, g, n: F(W, N), expect=("pass", [])))
    write("local_mean", u.document("each rank divides by its own count over the window",
                                   lambda r, m, g, n: F(1, u.n_r(r)), expect=("fail", ["local_mean"])))
    write("microbatch_mean", u.document("each microbatch's mean, divided by G",
                                        lambda r, m, g, n: F(1, u.G(r) * u.n_rm(r, m)),
                                        expect=("fail", ["microbatch_mean"])))
    write("sum_of_microbatch_means", u.document("each microbatch's mean, and no division by G",
                                                lambda r, m, g, n: F(1, u.n_rm(r, m)),
                                                expect=("fail", ["sum_of_microbatch_means"])))
    write("local_mean_times_W", u.document("a per-device count over the window, times W",
                                           lambda r, m, g, n: F(W, u.n_r(r)), expect=("fail", ["local_mean×W"])))
    write("divided_twice", u.document("normalized over the window, then divided by G again",
                                      lambda r, m, g, n: F(W, N * 3), expect=("fail", ["objective/G"])))
    # A short window is named only where the document declares the nominal steps it was divided by: a window of
    # 3 microbatches divided by 4 is otherwise a factor 3/4 on the microbatch mean (a GRPO loop's windows need
    # not be whole windows of a nominal G), and so where the declared steps are another number.
    for name, declared, expected in (("short_window", 4, "short_window"),
                                     ("short_window_undeclared", None, "microbatch_mean×3/4"),
                                     ("short_window_other_nominal", 5, "microbatch_mean×3/4")):
        window = Update(u.ranks, accumulation_steps=declared)
        write(name, window.document("microbatch means divided by 4 where the window holds 3" +
                                    (f", accumulation_steps {declared} declared" if declared else
                                     ", no accumulation_steps declared"),
                                    lambda r, m, g, n: F(1, 4 * u.n_rm(r, m)), expect=("fail", [expected])))
    write("raw_sums", u.document("raw loss sums under DDP's mean", lambda r, m, g, n: F(1),
                                 expect=("fail", ["local_sum"])))
    P = sum(pad for *_, pad in u.groups())
    write("count_padding", u.document("divided by every position, padding included",
                                      lambda r, m, g, n: F(W, N + P), expect=("fail", ["count_padding"])))
    # N plus one per microbatch: the labels before the shift if each microbatch were one row, but a microbatch
    # that declares no sequences may hold any number of rows, so count_before_shift is not named.
    G_all = sum(u.G(r) for r in range(W))
    write("count_before_shift_rows_undeclared",
          u.document("divided by N plus one per microbatch, in microbatches that declare no rows (sequences)",
                     lambda r, m, g, n: F(W, N + G_all), expect=("fail", [f"objective×{N}/{N + G_all}"])))
    write("times_k", u.document("a world size that also counts 4 ranks that do not average",
                                lambda r, m, g, n: F(4 * W, N), expect=("fail", ["objective×4"])))
    write("geometric", u.document("the accumulated buffer halved after every microbatch",
                                  lambda r, m, g, n: F(W, N) / 2 ** (u.G(r) - 1 - m), expect=("fail", ["geometric"])))
    write("times_W_G", u.document("the world size and the accumulation factor both applied once too often",
                                  lambda r, m, g, n: F(W * W * 3, N), expect=("fail", ["objective×W·G"])))
    # Four microbatches per rank, so that G/3 is neither a world-size nor an accumulation factor.
    four = Update([[[(3, 1)], [(1, 0)], [(4, 2)], [(2, 0)]], [[(2, 0)], [(5, 1)], [(2, 0)], [(6, 0)]]])
    write("other_window", four.document("microbatch means divided by 3 where the window accumulated G = 4",
                                        lambda r, m, g, n: F(1, 3 * four.n_rm(r, m)),
                                        expect=("fail", ["other_window"])))
    write("microbatch_global_count", u.document("each microbatch divided by its own count summed over the ranks",
                                                lambda r, m, g, n: F(W, 3 * sum(u.n_rm(q, m) for q in range(W))),
                                                expect=("fail", ["microbatch_global_count"])))
    write("prefix_count", u.document("each microbatch divided by the count seen so far in the window",
                                     lambda r, m, g, n: F(1, sum(u.n_rm(r, k) for k in range(m + 1))),
                                     expect=("fail", ["prefix_count"])))
    # An empty microbatch on rank 0 still counted in its G.
    e = Update([[[(3, 1)], [(0, 4)], [(4, 0)]], [[(2, 0)], [(5, 1)], [(2, 0)]]])
    write("empty_microbatches_counted",
          e.document("microbatch means over the non-empty ones, divided by G = 3 all the same",
                     lambda r, m, g, n: F(1, e.G(r) * e.n_rm(r, m)) if n else F(0),
                     expect=("fail", ["empty_microbatches_counted"])))
    # A weight that varies inside a group: two sequences of a microbatch that declares none, each given its
    # own mean. The witness sees it.
    varying = Update([[[(5, 0)]], [[(3, 0)]]])
    doc = varying.document("per-sequence means inside microbatches that declare no sequences",
                           lambda r, m, g, n: F(2, 8), expect=("pass", []))
    # Rank 0's microbatch holds sequences of 2 and 3 tokens, each its own mean ÷ (2 sequences) ÷ W.
    weights = [F(1, 2 * 2)] * 2 + [F(1, 3 * 2)] * 3
    total, seen = F(0), F(0)
    for j, c in enumerate(weights, start=1):
        c = f32(c)
        total, seen = f32(total - c), f32(seen - f32(c * j))
    vector = doc["observed"]["per_rank"][0][:]
    witness = doc["observed"]["witness"][0][:]
    vector[0], witness[0] = hexf(f32(total / 2)), hexf(f32(seen / 2))
    doc["observed"]["per_rank"] = [vector] * 2
    doc["observed"]["witness"] = [witness] * 2
    doc["expect_gate"] = {"verdict": "fail", "explanations": ["varies_within_group"]}
    write("varies_within_group", doc)
    # Equal counts hide the per-rank mean.
    even = Update([[[(3, 0)], [(2, 0)]], [[(2, 0)], [(3, 0)]]])
    write("equal_counts", even.document("equal counts per rank: the local mean cannot be told apart",
                                        lambda r, m, g, n: F(2, even.N()), expect=("inconclusive", ["local_mean"])))
    # G = W = 2: dividing once more by W and once more by G give every group the same weight here; both are
    # named, each with the change that tells them apart.
    square = Update([[[(3, 1)], [(1, 0)]], [[(2, 0)], [(5, 1)]]])
    write("divided_twice_G_is_W",
          square.document("each rank's share S/N of the update, where DDP's mean divides by W too",
                          lambda r, m, g, n: F(1, square.N()),
                          expect=("fail", ["global_share", "objective/G"])))
    # Sequences: rows of a padded batch.
    s = Update([[[(3, 1), (1, 3)], [(2, 2)]], [[(4, 0), (2, 2)], [(1, 3), (5, 0)]]], sequences=True)
    B, NS = s.B(), s.N()
    write("sequences_correct_token_mean", s.document("token mean over rows of a padded batch",
                                                      lambda r, m, g, n: F(2, NS), expect=("pass", [])))
    write("sequences_code_sequence_mean", s.document("per-sequence means averaged, where the token mean is declared",
                                                      lambda r, m, g, n: F(2, B * n),
                                                      expect=("fail", ["sequence_mean"])))
    write("count_before_shift", s.document("labels counted before the shift: N plus one per row",
                                           lambda r, m, g, n: F(2, NS + B), expect=("fail", ["count_before_shift"])))
    # Sequences per token differ between microbatches here, so that a share of sequences is not a share of
    # tokens (which would be the local mean).
    shares = Update([[[(3, 0), (1, 0), (2, 0)], [(5, 0)]], [[(2, 0)], [(4, 0), (4, 0)]]], sequences=True)

    def b_rm(r, m):
        return sum(1 for n, _ in shares.ranks[r][m] if n > 0)

    def b_r(r):
        return sum(b_rm(r, m) for m in range(shares.G(r)))

    write("sequence_share",
          shares.document("microbatch means weighted by the microbatch's share of the rank's sequences",
                          lambda r, m, g, n: F(b_rm(r, m), b_r(r) * shares.n_rm(r, m)),
                          expect=("fail", ["sequence_share"])))
    write("sequence_positions", s.document("each sequence divided by its positions, padding included",
                                           lambda r, m, g, n: F(1, n + s.ranks[r][m][g][1]),
                                           expect=("fail", ["sequence_positions"])))
    so = Update(s.ranks, sequences=True, objective="sequence_mean")
    write("sequence_mean_correct", so.document("GRPO's per-sequence token mean, averaged over the update's sequences",
                                               lambda r, m, g, n: F(2, B * n), expect=("pass", [])))
    write("sequence_mean_token_code", so.document("the token mean where the sequence mean is declared",
                                                  lambda r, m, g, n: F(2, NS), expect=("fail", ["token_mean"])))
    write("sum_of_sequence_means", so.document("each rank sums its sequence means and DDP averages",
                                               lambda r, m, g, n: F(1, n), expect=("fail", ["sum_of_sequence_means"])))
    C = 64
    co = Update(s.ranks, sequences=True, objective="constant", normalizer=C)
    write("constant_correct", co.document("Dr. GRPO: the loss sum over a constant normalizer",
                                          lambda r, m, g, n: F(2, C), expect=("pass", [])))
    write("constant_token_code", co.document("the token mean where a constant normalizer is declared",
                                             lambda r, m, g, n: F(2, NS), expect=("fail", ["token_mean"])))
    # A site whose module's gradients a hook divides by G once more.
    write("site_divided", u.document("a gradient hook divides one module's gradients by G again",
                                     lambda r, m, g, n: F(W, N), witness=False,
                                     sites=[("body", lambda r, m, g, n: F(W, N)),
                                            ("head", lambda r, m, g, n: F(W, N * 3))],
                                     expect=("fail", ["head: objective/G"])))
    # The loss itself normalized per rank: every module carries p's table, which is one mistake, not one per site.
    write("sites_as_p", u.document("each rank's own mean, seen alike by p and by the probes in two modules",
                                   lambda r, m, g, n: F(1, u.n_r(r)), witness=False,
                                   sites=[("body", lambda r, m, g, n: F(1, u.n_r(r))),
                                          ("head", lambda r, m, g, n: F(1, u.n_r(r)))],
                                   expect=("fail", ["local_mean"])))


if __name__ == "__main__":
    main()
