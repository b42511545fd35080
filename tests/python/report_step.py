"""One rank of a probed step per scenario, started with env:// as a user's job starts it; what it prints is the test.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python report_step.py SCENARIO...

Each scenario prints a line ``=== SCENARIO`` to standard output and standard error, runs its step and
``probe.check()``, and prints what an uncaught exception would print (its traceback) to standard error:

- ``pass``: the global count, checked (one line on rank 0);
- ``fail``: each rank's own mean, checked with the accelerate framework (the diagnosis, with its remedy);
- ``warn``: the same with ``raise_on_failure=False`` (warnings instead of errors);
- ``keep``: the same with ``keep=True`` (the temporary folder stays, named with its picture);
- ``error``: the global count, judged by an executable that does not exist (an error on every rank).

Every rank leaves through os._exit once its output is flushed (gloo can hang in interpreter teardown).
"""

import os
import sys
import traceback
import warnings

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_loops  # noqa: E402
import tiny_lm  # noqa: E402
from normcheck.launch import exit_process  # noqa: E402
from normcheck.torch import Probe  # noqa: E402

LOOPS = {loop.name: loop for loop in probe_loops.LOOPS}
SCENARIOS = {
    "pass": ("global_count", {}, {}),
    "fail": ("local_mean", {}, {"framework": "accelerate"}),
    "warn": ("local_mean", {}, {"framework": "accelerate", "raise_on_failure": False}),
    "keep": ("local_mean", {"keep": True}, {}),
    "error": ("global_count", {"executable": "/nonexistent/normcheck"}, {}),
}


def run(scenario, rank, world_size):
    name, probe_options, check_options = SCENARIOS[scenario]
    loop = LOOPS[name]
    counts = probe_loops.Counts(probe_loops.window(loop.dataset, 2, world_size))
    model = tiny_lm.make_model(torch.float32)
    probe = Probe(model, slots=16, **probe_options)
    ddp, _ = probe_loops.wrap(model, loop.hook, find_unused=True)
    with probe.step(wrap=loop.patched):
        loop.step(probe_loops.Step(ddp, probe, counts, rank, torch.float32))
    probe.check(ddp, step=0, **check_options)


def main(scenarios):
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    warnings.simplefilter("always")
    for scenario in scenarios:
        for stream in (sys.stdout, sys.stderr):
            print(f"=== {scenario}", file=stream, flush=True)
        try:
            run(scenario, rank, world_size)
        except Exception:
            traceback.print_exc()
        sys.stderr.flush()
        dist.barrier()


if __name__ == "__main__":
    status = 0
    try:
        main(sys.argv[1:])
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_process(status)
