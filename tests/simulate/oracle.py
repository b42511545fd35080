#!/usr/bin/env python3
"""An independent oracle for `normcheck simulate`: the scenario semantics re-implemented with Python's
Fraction, compared value by value with `normcheck simulate --json` on scenario files.

    oracle.py [--planted-wrong] NORMCHECK SCENARIO...

Scenarios with expect_error are passed over. Exits 1 on the first disagreement, naming it. With
--planted-wrong the oracle adds weight decay after the momentum buffer instead of before it (a
plausible mistake), and must then disagree.
"""

import json
import math
import subprocess
import sys
from fractions import Fraction

STRATEGIES = ("local_mean", "local_sum", "scaled_sum", "global_share", "microbatch_mean")


def number(value):
    if isinstance(value, str) and value.lower().lstrip("-").startswith("0x"):
        return Fraction(float.fromhex(value))  # exact: a hexadecimal float is a double
    return Fraction(str(value))


def vec(value, scalar):
    return [number(value)] if scalar else [number(v) for v in value]


def tokens_of(microbatch, scalar):
    out = []
    for token in microbatch:
        if token is None:
            continue
        out.append(([Fraction(1)], number(token)) if scalar else (vec(token["x"], False), number(token["y"])))
    return out


def grad_sum(tokens, theta):
    g = [Fraction(0)] * len(theta)
    for x, y in tokens:
        residual = sum(t * xi for t, xi in zip(theta, x)) - y
        g = [gi + residual * xi for gi, xi in zip(g, x)]
    return g


def scale(v, f):
    return [x * f for x in v]


def add(a, b):
    return [x + y for x, y in zip(a, b)]


def norm_bound(square):
    p, q = square.numerator, square.denominator
    rp, rq = math.isqrt(p), math.isqrt(q)
    if rp * rp == p and rq * rq == q:
        return Fraction(rp, rq), False
    e = p.bit_length() - q.bit_length()
    k = max(0, 66 - (e // 2))
    m = -((-(p << (2 * k))) // q)
    a = math.isqrt(m)
    if a * a < m:
        a += 1
    return Fraction(a, 1 << k), True


def clip(g, decide, opt):
    out, decide = list(g), list(decide)
    if "clip_value" in opt:
        c = number(opt["clip_value"])
        for i in range(len(out)):
            if abs(decide[i]) > c:
                decide[i] = c if decide[i] > 0 else -c
                out[i] = max(-c, min(c, out[i]))
    if "clip_norm" in opt:
        c = number(opt["clip_norm"])
        square = sum(x * x for x in decide)
        if square > c * c:
            out = scale(out, c / norm_bound(square)[0])
    return out


def rate(opt, position):
    lrs = opt["lr"] if isinstance(opt["lr"], list) else [opt["lr"]]
    lr = number(lrs[min(position, len(lrs) - 1)])
    if "lr_decay" in opt:
        lr *= number(opt["lr_decay"]["gamma"]) ** (position // opt["lr_decay"]["every"])
    return lr


PLANTED_WRONG = False


def sgd(theta, buf, applied, lr, opt):
    decay = scale(theta, number(opt.get("weight_decay", 0)))
    d = applied if PLANTED_WRONG else add(applied, decay)
    mu = number(opt.get("momentum", 0))
    if mu != 0:
        buf = add(scale(buf, mu), d)
        d = buf
    if PLANTED_WRONG:
        d = add(d, decay)
    return add(theta, scale(d, -lr)), buf


def simulate(doc):
    scalar = not isinstance(doc["theta"], list)
    theta0 = vec(doc["theta"], scalar)
    opt = doc["optimizer"]
    steps = []
    for step in doc["steps"]:
        ranks = [[tokens_of(m, scalar) for m in (r["microbatches"] if "microbatches" in r else [r["targets"]])]
                 for r in step["ranks"]]
        steps += [ranks] * step.get("repeat", 1)
    w = len(steps[0])
    faults = doc.get("faults", [])
    theta = [list(theta0) for _ in range(w)]
    for f in faults:
        if f["kind"] == "initial_parameters":
            theta[f["rank"]] = vec(f["theta"], scalar)
    if doc.get("initial_sync", True):
        theta = [list(theta[0]) for _ in range(w)]
    zero = [Fraction(0)] * len(theta0)
    buf = [list(zero) for _ in range(w)]
    pos = [0] * w
    local_clip = [False] * w
    ref_theta, ref_buf = list(theta0), list(zero)
    records = [{"theta": [list(t) for t in theta], "ref": list(ref_theta)}]
    strategy = doc.get("loss_scale", "scaled_sum")
    mean = doc.get("reducer", "mean") == "mean"
    for index, ranks in enumerate(steps):
        step = index + 1
        skipping = []
        for f in faults:
            if f.get("step") != step:
                continue
            if f["kind"] == "optimizer_state":
                buf[f["rank"]] = vec(f["momentum"], scalar)
            elif f["kind"] == "scheduler_step":
                pos[f["rank"]] += 1
            elif f["kind"] == "local_clipping":
                local_clip[f["rank"]] = True
            elif f["kind"] == "skipped_collective":
                skipping.append(f["rank"])
        if skipping:
            return records, {"step": step, "cause": "skipped_collective"}
        n_total = sum(len(t) for r in ranks for t in r)
        local = []
        for r, microbatches in enumerate(ranks):
            s = grad_sum([t for m in microbatches for t in m], theta[r])
            n = sum(len(m) for m in microbatches)
            if strategy == "local_mean":
                if n == 0:
                    return records, {"step": step, "cause": "undefined_local_loss"}
                g = scale(s, Fraction(1, n))
            elif strategy == "local_sum":
                g = s
            elif strategy == "scaled_sum":
                g = scale(s, Fraction(w, n_total))
            elif strategy == "global_share":
                g = scale(s, Fraction(1, n_total))
            else:
                if any(len(m) == 0 for m in microbatches):
                    return records, {"step": step, "cause": "undefined_local_loss"}
                g = scale([sum(c) for c in zip(*[scale(grad_sum(m, theta[r]), Fraction(1, len(m)))
                                                  for m in microbatches])], Fraction(1, len(microbatches)))
            local.append(g)
        reduced = [sum(c) for c in zip(*local)]
        if mean:
            reduced = scale(reduced, Fraction(1, w))
        record = {"theta": [], "applied": [], "ref": None}
        for r in range(w):
            applied = clip(reduced, local[r] if local_clip[r] else reduced, opt)
            theta[r], buf[r] = sgd(theta[r], buf[r], applied, rate(opt, pos[r]), opt)
            pos[r] += 1
            record["theta"].append(list(theta[r]))
            record["applied"].append(applied)
        all_tokens = [t for r in ranks for m in r for t in m]
        ref_grad = scale(grad_sum(all_tokens, ref_theta), Fraction(1, n_total))
        ref_theta, ref_buf = sgd(ref_theta, ref_buf, clip(ref_grad, ref_grad, opt), rate(opt, index), opt)
        record["ref"] = list(ref_theta)
        records.append(record)
    return records, None


def values(x):
    return [Fraction(v) for v in (x if isinstance(x, list) else [x])]


def compare(path, normcheck):
    doc = json.load(open(path, encoding="utf-8"))
    if "expect_error" in doc:
        return None
    records, halt = simulate(doc)
    result = subprocess.run([normcheck, "simulate", "--json", path], capture_output=True, text=True, timeout=60)
    run = json.loads(result.stdout)
    if [values(s["theta"]) for s in run["start_up"]] != records[0]["theta"]:
        return "start-up θ differs"
    if len(run["steps"]) != len(records) - 1:
        return "%d steps completed, the oracle has %d" % (len(run["steps"]), len(records) - 1)
    for step, mine in zip(run["steps"], records[1:]):
        for r, rank in enumerate(step["ranks"]):
            if values(rank["end"]["theta"]) != mine["theta"][r]:
                return "step %d rank %d: θ %s, the oracle has %s" % (step["step"], r, rank["end"]["theta"],
                                                                     mine["theta"][r])
            if values(rank["applied_gradient"]) != mine["applied"][r]:
                return "step %d rank %d: applied gradient differs" % (step["step"], r)
        if values(step["reference"]["end"]["theta"]) != mine["ref"]:
            return "step %d: reference θ differs" % step["step"]
    actual_halt = run["halt"] and {"step": run["halt"]["step"], "cause": run["halt"]["cause"]}
    if actual_halt != halt:
        return "halt %s, the oracle has %s" % (actual_halt, halt)
    return ""


def main():
    global PLANTED_WRONG
    arguments = sys.argv[1:]
    if arguments and arguments[0] == "--planted-wrong":
        PLANTED_WRONG = True
        arguments = arguments[1:]
    normcheck, paths = arguments[0], arguments[1:]
    compared = 0
    for path in paths:
        problem = compare(path, normcheck)
        if problem is None:
            continue
        if problem:
            print("DISAGREE %s: %s" % (path, problem))
            return 1
        compared += 1
    print("the oracle agrees on %d scenarios" % compared)
    return 0 if compared > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
