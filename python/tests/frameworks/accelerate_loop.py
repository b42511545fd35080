"""An accelerate training loop on two CPU processes, judged by the probe: ``python accelerate_loop.py OUT``.

accelerate's own route to several processes on CPU without MPI is ``accelerate.debug_launcher``: it
forks the processes and joins them in a gloo group through a file store (``accelerate launch --cpu
--num_processes 2`` starts one process unless mpirun runs it; ``notebook_launcher`` on a machine
without GPUs takes the GPU path and starts processes that are not distributed). Each process runs
every variant: ``Accelerator(gradient_accumulation_steps=G)``, ``accelerator.prepare`` of the model,
optimizer and data, ``with accelerator.accumulate(model)`` around each microbatch, and
``accelerator.backward``, which divides by G. Each rank writes OUT/rank-R.json and leaves through
``os._exit``.
"""

from __future__ import annotations

import json
import os
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
    """Starts the two processes with accelerate's CPU launcher."""
    from accelerate import debug_launcher

    debug_launcher(rank_main, args=(argv[1],), num_processes=2)


if __name__ == "__main__":
    main(sys.argv)
