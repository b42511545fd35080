"""One probed step per variant under torchrun (env:// initialisation), as a user's job would run it.

    python -m torch.distributed.run --nproc_per_node 2 torchrun_step.py OUT.json

Rank 0 writes {variant: {verdict, diagnosis}} to OUT.json. Every rank leaves through os._exit once
its output is flushed (gloo can hang in interpreter teardown).
"""

import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_lm  # noqa: E402
from normcheck import dump  # noqa: E402
from normcheck.launch import exit_process  # noqa: E402
from normcheck.torch import Probe  # noqa: E402


def main(out):
    dist.init_process_group("gloo")  # env://: torchrun sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world_size = dist.get_rank(), dist.get_world_size()
    assert int(os.environ["LOCAL_RANK"]) == rank
    results = {}
    for variant in ("global_count", "local_mean"):
        for patched in (False, True):
            result = tiny_lm.run_variant(variant, patched, torch.float32, 2, rank, world_size, Probe, find_unused=False)
            results[f"{variant}-{'patched' if patched else 'explicit'}"] = {
                "verdict": result["verdict"], "diagnosis": result["diagnosis"], "error": result["error"]}
    results["world_size"] = world_size
    if rank == 0:
        dump.write_atomically(out, json.dumps(results))


if __name__ == "__main__":
    status = 0
    try:
        main(sys.argv[1])
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_process(status)
