"""An accelerate training loop on two CPU processes, judged by the probe: ``python accelerate_loop.py OUT LAUNCHER``.

LAUNCHER is how the two processes start, both accelerate's own routes on CPU without MPI:

- ``debug_launcher``: ``accelerate.debug_launcher`` forks them and joins them in a gloo group through a
  file store;
- ``accelerate_launch``: the ``accelerate launch`` command, ``--multi_gpu --num_processes 2`` (its
  multi-process launcher, torch's elastic agent; ``--cpu`` selects the single-process launcher, which
  starts one process unless mpirun runs it), the script building ``Accelerator(cpu=True)``, which joins
  the processes on gloo (``DistributedType.MULTI_CPU``).

Each process runs every variant: ``Accelerator(gradient_accumulation_steps=G)``, ``accelerator.prepare``
of the model, optimizer and data, ``with accelerator.accumulate(model)`` around each microbatch, and
``accelerator.backward``, which divides by G. Each rank writes OUT/rank-R.json and leaves through
``os._exit``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

VARIANTS = [("token_count", 2), ("mean", 2), ("token_count", 4), ("mean", 4)]


def one_variant(kind: str, g: int, folder: str) -> Dict[str, Any]:
    """One optimizer step of the loop; returns its verdict."""
    import torch
    import torch.nn.functional as F
    from accelerate import Accelerator

    from normcheck.torch import Probe
    from tiny import LENGTHS, Rows, TinyLM, collate, shifted, valid_count

    accelerator = Accelerator(gradient_accumulation_steps=g, cpu=True)
    model = TinyLM()
    probe = Probe(model, directory=folder)                        # before prepare wraps it
    optimizer = torch.optim.AdamW(probe.model_parameters(), lr=1e-2)
    # Two windows of data, the first one judged: prefetching the dataloader's last window would end the
    # dataloader early, and accelerate then synchronizes (and steps) on every microbatch of that window.
    data = torch.utils.data.DataLoader(Rows((LENGTHS * 2)[: 2 * 2 * g * accelerator.num_processes]), batch_size=2,
                                       collate_fn=collate)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    batches = iter(data)
    window = [next(batches) for _ in range(g)]
    # The documented pattern: count the window's valid tokens on this process, then across processes.
    local = torch.tensor(sum(valid_count(b["labels"]) for b in window))
    num_items = accelerator.gather(local).sum()
    verdict = None
    syncs = 0
    with probe.step():
        for batch in window:
            with accelerator.accumulate(model):
                logits, labels = shifted(model(batch["input_ids"]), batch["labels"])
                if kind == "token_count":
                    loss = F.cross_entropy(logits, labels, reduction="sum")
                    loss = loss * g * accelerator.num_processes / num_items
                else:
                    loss = F.cross_entropy(logits, labels)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    syncs += 1
                    verdict = probe.judge(model, optimizer=optimizer)
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
    if verdict is None or syncs != 1:
        return {"error": f"accelerate synchronized {syncs} times in a window of {g} microbatches"}
    return {"verdict": verdict.verdict, "passed": verdict.passed, "diagnosis": list(verdict.diagnosis),
            "could_hide": list(verdict.could_hide), "message": verdict.message,
            "distributed_type": str(accelerator.distributed_type), "num_processes": accelerator.num_processes,
            "backend": str(accelerator.state.backend)}


def rank_main(out: str) -> None:
    """What each process runs: every variant, then its results, then os._exit."""
    import torch.distributed as dist

    from normcheck.launch import exit_process

    results: Dict[str, Any] = {}
    for kind, g in VARIANTS:
        try:
            results[f"{kind}-G{g}"] = one_variant(kind, g, os.path.join(out, "dumps"))
        except Exception as e:  # reported per variant; both ranks raise alike
            results[f"{kind}-G{g}"] = {"error": f"{type(e).__name__}: {e}"}
    rank = dist.get_rank()
    with open(os.path.join(out, f"rank-{rank}.json.tmp"), "w", encoding="utf-8") as f:
        json.dump(results, f)
    os.replace(os.path.join(out, f"rank-{rank}.json.tmp"), os.path.join(out, f"rank-{rank}.json"))
    exit_process(0)


def main(argv: List[str]) -> None:
    """Starts the two processes with the launcher named by ``argv[2]``, or is one of them (``rank``)."""
    out, launcher = argv[1], argv[2]
    if launcher == "rank":
        rank_main(out)
    elif launcher == "debug_launcher":
        from accelerate import debug_launcher

        debug_launcher(rank_main, args=(out,), num_processes=2)
    elif launcher == "accelerate_launch":
        command = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu",
                   "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", "0", os.path.abspath(__file__), out, "rank"]
        sys.exit(subprocess.run(command, check=False).returncode)
    else:
        sys.exit(f"unknown launcher {launcher!r}: debug_launcher, accelerate_launch")


if __name__ == "__main__":
    main(sys.argv)
