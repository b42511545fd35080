"""What judging every K-th step of a real run costs: a 200-step run with the probe (every=50) against the same
run without it.

    NORMCHECK=build/normcheck python3 bench/every_bench.py [--steps 200] [--every 50] [--repeats 3]
                                                         [--model tiny|llama] [--output FILE]

One launch of W = 2 ranks (gloo on loopback), under the interpreter that runs this script. Each rank
runs the whole run ``repeats`` times without the probe and ``repeats`` times with it, interleaved (plain,
probed, probed, plain, …), each run between two barriers: the model under DDP, ``steps`` optimizer steps of
G = 2 microbatches (no_sync on the first, the loss sum times W over the update's tokens), clipping, AdamW.
The model is tests/python/tiny_lm.py's (``tiny``: a step of a few milliseconds, where the judged steps'
fixed cost dominates) or a two-layer transformers Llama (``llama``: hidden size 256, rows of up to 64
tokens, a step of tens of milliseconds, closer to what a run spends per step; its loss is the model's own,
from ``labels`` and ``num_items_in_batch``). The probed run is the probe on the model, steps 0, K, 2K, …
inside ``probe.step()`` and judged (``probe.judge``: gather, dump, ``normcheck check``), every other step
with the probe only routed, as ``attach(trainer, every=K)`` runs it. The table gives each run's median wall
and CPU time, the overhead (probed / plain − 1, median of the interleaved pairs), and how the probed run's
time splits between its judged steps and the others.

Wall times on a shared machine include waiting for a core; the pairs are interleaved for that reason.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

try:  # DistributedDataParallel imports torch._dynamo on first use: once here, before the ranks fork
    import torch._dynamo  # noqa: F401
except ImportError:
    pass

import tiny_lm  # noqa: E402
from normcheck import due  # noqa: E402
from normcheck.launch import launch  # noqa: E402

LENGTHS = [[[6, 4, 5, 3], [5, 6, 2, 6]], [[3, 2, 6, 4], [4, 2, 5, 5]]]
SCALE = {"tiny": 1, "llama": 10}
"""Row lengths are LENGTHS times this: up to 60 tokens a row for the Llama."""


def llama_model():
    """A two-layer Llama with random weights (transformers, from a config: nothing is downloaded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config)


def token_mean_loss(kind, ddp, tokens, labels, total, world_size):
    """The microbatch's loss sum times W over the update's count: by hand (tiny), or the Llama's own loss over
    ``num_items_in_batch``, times W."""
    if kind == "tiny":
        return ddp(tokens, labels, reduction="sum")[0] * world_size / total
    return ddp(input_ids=tokens, labels=labels, num_items_in_batch=total).loss * world_size


def make_batch(kind, lengths, seed):
    if kind == "tiny":
        return tiny_lm.make_batch(lengths, seed)
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    tokens = torch.zeros(len(lengths), width, dtype=torch.long)
    labels = torch.full((len(lengths), width), -100, dtype=torch.long)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(3, 512, (n,), generator=generator)
        labels[i, :n] = tokens[i, :n]
    return tokens, labels


def one_run(rank, world_size, probe_factory, steps, every, probed, kind="tiny"):
    """A whole run; its wall and CPU seconds, and for the probed run the seconds of its judged steps."""
    model = tiny_lm.make_model(torch.float32) if kind == "tiny" else llama_model()
    probe = probe_factory(model, sites=None) if probed else None
    ddp = DistributedDataParallel(model)
    parameters = list(probe.model_parameters()) if probe is not None else list(model.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=1e-3)
    judged_seconds = 0.0
    dist.barrier()
    started, started_cpu = time.perf_counter(), time.process_time()
    for step in range(steps):
        judged = probe is not None and due(step, every=every)
        step_started = time.perf_counter()
        batches = [make_batch(kind, [n * SCALE[kind] for n in lengths], seed=1000 * step + 10 * rank + m)
                   for m, lengths in enumerate(LENGTHS[rank])]
        local = sum(int((labels[:, 1:] != -100).sum()) for _, labels in batches)
        total = torch.tensor(float(local))
        dist.all_reduce(total)
        with probe.step() if judged else contextlib.nullcontext():
            for m, (tokens, labels) in enumerate(batches):
                with ddp.no_sync() if m + 1 < len(batches) else contextlib.nullcontext():
                    token_mean_loss(kind, ddp, tokens, labels, total, world_size).backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        if judged:
            verdict = probe.judge(ddp)
            if verdict.verdict != "pass":
                raise AssertionError(f"step {step}: {verdict.verdict}: {verdict.message}")
        optimizer.step()
        optimizer.zero_grad()
        if judged:
            judged_seconds += time.perf_counter() - step_started
    used = time.process_time() - started_cpu
    dist.barrier()
    return time.perf_counter() - started, used, judged_seconds


def runs(rank, world_size, probe_factory, steps, every, repeats, kind):
    torch.set_num_threads(1)
    one_run(rank, world_size, probe_factory, 5, every, True, kind)  # warm-up: imports, the executable's first start
    out = {False: [], True: []}
    for r in range(repeats):
        for probed in ((False, True) if r % 2 == 0 else (True, False)):
            out[probed].append(one_run(rank, world_size, probe_factory, steps, every, probed, kind))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", choices=sorted(SCALE), default="tiny", help="the model each step trains")
    parser.add_argument("--output", help="also write the table to this file")
    options = parser.parse_args()
    results = launch(runs, 2, args=(options.steps, options.every, options.repeats, options.model), timeout=3600)
    rank0 = results[0]
    plain, probed = rank0[False], rank0[True]
    wall = [b[0] / a[0] - 1 for a, b in zip(plain, probed)]
    cpu = [b[1] / a[1] - 1 for a, b in zip(plain, probed)]
    judged = statistics.median(r[2] for r in probed)
    judged_steps = len([s for s in range(options.steps) if due(s, every=options.every)])
    idle = statistics.median(b[0] - b[2] for b in probed) - statistics.median(a[0] for a in plain)
    lines = [
        f"# Judging every {options.every}th step of a {options.steps}-step run",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with "
        f"`python bench/every_bench.py --steps {options.steps} --every {options.every} --repeats {options.repeats} "
        f"--model {options.model}` (W = 2, gloo; torch {torch.__version__}, Python {platform.python_version()}; "
        f"load average {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} cores). Rank 0's figures.",
        "",
        "| run | median wall s | median CPU s |",
        "|---|---|---|",
        f"| without the probe | {statistics.median(a[0] for a in plain):.3f} | "
        f"{statistics.median(a[1] for a in plain):.3f} |",
        f"| probe, every={options.every} ({judged_steps} judged steps) | "
        f"{statistics.median(b[0] for b in probed):.3f} | "
        f"{statistics.median(b[1] for b in probed):.3f} |",
        "",
        f"- overhead, probed / plain − 1 (median of {options.repeats} interleaved pairs): wall "
        f"{100 * statistics.median(wall):.2f} %, CPU {100 * statistics.median(cpu):.2f} %",
        f"- the judged steps took {judged:.3f} s in all ({1000 * judged / judged_steps:.0f} ms each, the check "
        f"included); the {options.steps - judged_steps} others {idle:+.3f} s against the plain run",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if options.output:
        with open(options.output, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
