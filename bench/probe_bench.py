"""What the per-group probe costs: a probed training step against the same step without it, and one check.

    NORMCHECK=build/normcheck python3 bench/probe_bench.py [--rounds 60] [--world-sizes 2,4]
                                                          [--output bench/PROBE_RESULTS.md]

Two launches for each world size W (2 and 4 by default; gloo on loopback), under the interpreter that
runs this script:

1. Overhead. Each rank holds two copies of tests/python/tiny_lm.py's model, one with the probe and
   one without, and runs their training steps interleaved (plain, probed, probed, plain, …), each
   between two barriers: G microbatches of forward and backward (no_sync on all but the last, the
   loss sum divided by the update's token count times W), clipping, AdamW. Variants: G = 1 and 2,
   the loss captured inside the model (the TorchFunctionMode on torch 2, the replaced functions on
   1.13) or added with probe.add, sites or none. The table gives the median step time of each and
   their ratio (probed / plain, from the interleaved rounds), the per-step check excluded, in wall
   time and in CPU time of the rank's process (which waiting for a core on a loaded machine leaves out).
2. Check. The update holds 10⁶ valid tokens, 10⁶/W per rank, recorded through probe.add as sequences of
   1 000 tokens with padding, or as 8 microbatches without sequences; one backward; then
   ``probe.judge()`` is timed: gather to rank 0, the dump, ``normcheck check``, the verdict sent back.
   The table gives that time (median of a few), the dump's size, and the recording's time.

Wall times on a shared machine include waiting for a core, and W = 4 puts four processes on a machine
of two cores: its wall times include waiting at every barrier and collective, so its CPU ratios are the
figures to read. The ratios come from interleaved runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

try:  # DistributedDataParallel imports torch._dynamo on first use: once here, before the ranks fork
    import torch._dynamo  # noqa: F401
except ImportError:
    pass

import tiny_lm  # noqa: E402
from normcheck.launch import launch  # noqa: E402

VARIANTS = [(g, patched, sites) for g in (1, 2) for patched in (True, False) for sites in ("children", None)]
LENGTHS = [[[6, 4, 5, 3], [5, 6, 2, 6]], [[3, 2, 6, 4], [4, 2, 5, 5]], [[5, 5, 2, 3], [6, 3, 4, 2]],
           [[2, 6, 6, 4], [3, 5, 4, 6]]]
"""Each rank's rows per microbatch (valid lengths): uneven counts on every rank, for up to four ranks."""


def training_step(ddp, optimizer, parameters, batches, total, world_size, probe, patched):
    g = len(batches)
    with (probe.step(wrap=patched) if probe is not None else contextlib.nullcontext()):
        for m, (tokens, labels) in enumerate(batches):
            with (ddp.no_sync() if m + 1 < g else contextlib.nullcontext()):
                if patched:
                    loss = ddp(tokens, labels, reduction="sum")[0]
                else:
                    logits = ddp(tokens)
                    targets = labels[:, 1:].reshape(-1)
                    per_token = F.cross_entropy(logits[:, :-1].reshape(-1, tiny_lm.VOCAB), targets, reduction="none")
                    if probe is not None:
                        per_token = probe.add(per_token, targets)
                    loss = per_token.sum()
                (loss * world_size / total).backward()
    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
    optimizer.step()
    optimizer.zero_grad()
    if probe is not None:
        probe._reset()  # the record of a step nobody checks: what judge() would clear


def overhead(rank, world_size, probe_factory, rounds):
    torch.set_num_threads(1)
    results = {}
    for g, patched, sites in VARIANTS:
        batches = [tiny_lm.make_batch(lengths, seed=10 * rank + m) for m, lengths in enumerate(LENGTHS[rank][:g])]
        local = sum(int((labels[:, 1:] != -100).sum()) for _, labels in batches)
        total = torch.tensor(float(local))
        dist.all_reduce(total)
        runs = {}
        for probed in (False, True):
            model = tiny_lm.make_model(torch.float32)
            probe = probe_factory(model, sites=sites) if probed else None
            ddp = DistributedDataParallel(model)
            parameters = list(probe.model_parameters()) if probe is not None else list(model.parameters())
            runs[probed] = (ddp, torch.optim.AdamW(parameters, lr=1e-3), parameters, probe)
        times = {False: [], True: []}
        cpu = {False: [], True: []}
        for r in range(rounds + 5):
            for probed in ((False, True) if r % 2 == 0 else (True, False)):
                ddp, optimizer, parameters, probe = runs[probed]
                dist.barrier()
                started, started_cpu = time.perf_counter(), time.process_time()
                training_step(ddp, optimizer, parameters, batches, total, world_size, probe, patched)
                used = time.process_time() - started_cpu
                dist.barrier()
                if r >= 5:  # warm-up rounds are not counted
                    times[probed].append(time.perf_counter() - started)
                    cpu[probed].append(used)
        plain, probed = statistics.median(times[False]), statistics.median(times[True])
        ratios = [b / a for a, b in zip(times[False], times[True])]
        results[(g, patched, sites)] = {"plain_ms": plain * 1e3, "probed_ms": probed * 1e3,
                                        "ratio": probed / plain, "ratio_of_pairs": statistics.median(ratios),
                                        "cpu_ratio": sum(cpu[True]) / sum(cpu[False]),
                                        "cpu_plain_ms": statistics.median(cpu[False]) * 1e3,
                                        "cpu_probed_ms": statistics.median(cpu[True]) * 1e3}
    return results


class Tokens(torch.nn.Module):
    """A per-token score from a feature vector: the cheapest model whose loss has 10⁶ tokens."""

    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.score(x).squeeze(-1)


def check_cost(rank, world_size, probe_factory, repeats):
    torch.set_num_threads(1)
    results = {}
    per_rank = 1_000_000 // world_size
    for shape in ("sequences", "microbatches"):
        times, recording, sizes, verdicts = [], [], [], []
        for _ in range(repeats):
            model = Tokens()
            slots = per_rank // 1_000 + 12 if shape == "sequences" else 8
            probe = probe_factory(model, slots=slots, sites=None, keep=True)  # the dump's size is read, then removed
            ddp = DistributedDataParallel(model)
            if shape == "sequences":
                batches = [(per_rank // 1_000, 1_010)]  # rows of 1 000 valid tokens and 10 padding positions each
            else:  # 8 microbatches of 500 valid tokens a row, no sequences
                batches = [(per_rank // 4_000, 504)] * 8
            valid_per_row = 1_000 if shape == "sequences" else 500
            total = float(sum(rows for rows, _ in batches) * valid_per_row * world_size)
            dist.barrier()
            started = time.perf_counter()
            for m, (rows, length) in enumerate(batches):
                x = torch.randn(rows, length, 4, generator=torch.Generator().manual_seed(rank * 100 + m))
                labels = torch.ones(rows, length, dtype=torch.long)
                labels[:, -(length - valid_per_row):] = -100
                with (ddp.no_sync() if m + 1 < len(batches) else contextlib.nullcontext()):
                    scores = ddp(x)
                    if shape == "sequences":
                        loss = probe.add(scores, labels)
                    else:
                        loss = probe.add(scores.reshape(-1), labels.reshape(-1))
                    (loss.sum() * world_size / total).backward()
            recording.append(time.perf_counter() - started)
            dist.barrier()
            started = time.perf_counter()
            verdict = probe.judge(ddp)
            times.append(time.perf_counter() - started)
            if rank == 0:
                sizes.append(os.path.getsize(verdict.file))
                shutil.rmtree(os.path.dirname(verdict.file), ignore_errors=True)
            verdicts.append(verdict.verdict or f"{verdict.status}: {verdict.report.get('error', {}).get('code')}")
        results[shape] = {"check_s": statistics.median(times), "checks_s": times,
                          "record_s": statistics.median(recording),
                          "dump_bytes": sizes[0] if sizes else None, "verdict": verdicts[-1]}
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60, help="interleaved pairs of steps per variant")
    parser.add_argument("--repeats", type=int, default=3, help="checks of 10⁶ tokens per shape")
    parser.add_argument("--world-sizes", default="2,4", help="the W to measure, comma-separated (at most 4)")
    parser.add_argument("--output", default=os.path.join(HERE, "PROBE_RESULTS.md"))
    arguments = parser.parse_args()
    world_sizes = [int(w) for w in arguments.world_sizes.split(",")]
    if not world_sizes or any(w < 1 or w > len(LENGTHS) for w in world_sizes):
        parser.error(f"--world-sizes takes sizes from 1 to {len(LENGTHS)}")
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    steps, checks = {}, {}
    for w in world_sizes:
        steps[w] = launch(overhead, w, args=(arguments.rounds,), timeout=1800)[0]
        checks[w] = launch(check_cost, w, args=(arguments.repeats,), timeout=1800)[0]
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()[0]
    lines = [
        "# The probe's cost",
        "",
        f"Measured {datetime.datetime.now():%Y-%m-%d %H:%M} with `bench/probe_bench.py --rounds {arguments.rounds} "
        f"--repeats {arguments.repeats} --world-sizes {arguments.world_sizes}` under {sys.executable} "
        f"(PyTorch {torch.__version__}), on gloo, one thread per rank; {elapsed:.0f} s in all.",
        "",
        f"- {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average (1 min) "
        f"{load_before:.2f} before, {load_after:.2f} after",
        "",
        "## A probed training step against the same step without the probe",
        "",
        "| W | G | loss | sites | wall without the probe, ms | with, ms | ratio of medians "
        "| median of paired ratios | CPU without, ms | with, ms | CPU ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in world_sizes:
        for (g, patched, sites), r in steps[w].items():
            lines.append(f"| {w} | {g} | {'captured in the model' if patched else 'probe.add'} "
                         f"| {'children' if sites else 'none'} "
                         f"| {r['plain_ms']:.2f} | {r['probed_ms']:.2f} | {r['ratio']:.3f} | {r['ratio_of_pairs']:.3f} "
                         f"| {r['cpu_plain_ms']:.2f} | {r['cpu_probed_ms']:.2f} | {r['cpu_ratio']:.3f} |")
    lines += [
        "",
        "## probe.judge() of an update with 10⁶ valid tokens (10⁶/W per rank)",
        "",
        "| W | shape | groups | judge (gather, dump, check), s | each run, s "
        "| recording and backward, s | dump size | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in world_sizes:
        for shape, r in checks[w].items():
            groups = f"{1_000 // w * w} sequences" if shape == "sequences" else f"{8 * w} microbatches"
            size = f"{r['dump_bytes'] / 1024:.1f} KiB" if r["dump_bytes"] else "—"
            lines.append(f"| {w} | {shape} | {groups} | {r['check_s']:.3f} "
                         f"| {', '.join(f'{t:.3f}' for t in r['checks_s'])} "
                         f"| {r['record_s']:.3f} | {size} | {r['verdict']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(arguments.output, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
