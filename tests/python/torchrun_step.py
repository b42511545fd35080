"""One probed step per variant under torchrun (env:// initialisation), as a user's job would run it.

    python -m torch.distributed.run --nproc_per_node 2 torchrun_step.py OUT.json

Rank 0 judges the dumps and writes {variant: {verdict, diagnosis}} to OUT.json. Every rank leaves through os._exit once
its output is flushed (gloo can hang in interpreter teardown).
"""

import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_loops  # noqa: E402
from normcheck import dump  # noqa: E402
from normcheck.check import run_check  # noqa: E402
from normcheck.launch import exit_process  # noqa: E402
from normcheck.torch import Probe  # noqa: E402

VARIANTS = ("global_count", "local_mean")
"""Loops of probe_loops run under torchrun: the correct global count and the per-rank mean."""


def main(out):
    dist.init_process_group("gloo")  # env://: torchrun sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world_size = dist.get_rank(), dist.get_world_size()
    assert int(os.environ["LOCAL_RANK"]) == rank
    loops = {loop.name: loop for loop in probe_loops.LOOPS}
    paths = {name: probe_loops.run(loops[name], 2, rank, world_size, torch.float32, Probe) for name in VARIANTS}
    if rank == 0:
        verdicts = {v.file: v for v in run_check(list(paths.values()))}
        results = {name: {"verdict": verdicts[path].verdict, "diagnosis": list(verdicts[path].diagnosis)}
                   for name, path in paths.items()}
        results["world_size"] = world_size
        dump.write_atomically(out, json.dumps(results))
    dist.barrier()


if __name__ == "__main__":
    status = 0
    try:
        main(sys.argv[1])
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_process(status)
