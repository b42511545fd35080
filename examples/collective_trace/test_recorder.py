#!/usr/bin/env python3
"""Records real gloo runs of two processes with normcheck.collectives and checks the traces with normcheck.

    test_recorder.py NORMCHECK WORKDIR

Each worker records its collectives as a user would, around its own training loop:

    with record_collectives(folder) as recorder:      # folder/rank-<r>.jsonl
        for step in ...:
            recorder.step = step
            with recorder.label("valid_tokens"):
                dist.all_reduce(count, group=group)
            ...                                       # DDP's buckets are recorded by themselves

A clean run must give a trace that `normcheck collectives` accepts (exit 0). In the second run rank 1
holds no label at step 2 and skips that step, a classic bug: its next collectives pair with the other
rank's calls of the step before, and the run ends in a hang or an error, cut short by a time limit.
The trace must show rank 1 missing the first call of step 2 (exit 1). Exits 77 when torch or gloo is
not available, which CTest reports as skipped.
"""

import os
import shutil
import subprocess
import sys
import time

SKIP = 77
WORLD_SIZE = 2
STEPS = 3
RUN_SECONDS = 90     # each launch of both workers, including torch's import
START_SECONDS = 60   # rendezvous, while the other worker may still be importing torch
GLOO_SECONDS = 2     # a collective of the training group that waits longer fails
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT_PACKAGE = os.path.normpath(os.path.join(HERE, "..", "..", "python"))  # ahead of an installed one


def worker(rank, store, out_dir, mode):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if os.path.isdir(os.path.join(CHECKOUT_PACKAGE, "normcheck")):
        sys.path.insert(0, CHECKOUT_PACKAGE)
    from normcheck.collectives import record_collectives

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=WORLD_SIZE,
                            timeout=timedelta(seconds=START_SECONDS))
    group = dist.new_group(timeout=timedelta(seconds=GLOO_SECONDS))
    status = 0
    with record_collectives(os.path.join(out_dir, "traces")) as recorder:
        try:
            torch.manual_seed(0)
            model = DistributedDataParallel(torch.nn.Linear(4, 1), process_group=group)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(1, STEPS + 1):
                recorder.step = step
                valid = 0 if (rank == 1 and step == 2) else rank + 1
                if mode == "skip" and valid == 0:
                    continue  # the bug: no label here, so this rank skips the step and its collectives
                count = torch.tensor([valid], dtype=torch.int64)
                with recorder.label("valid_tokens"):
                    dist.all_reduce(count, group=group)
                inputs = torch.ones(max(valid, 1), 4) * step
                targets = torch.full((max(valid, 1), 1), float(rank))
                losses = 0.5 * (model(inputs) - targets) ** 2
                weight = 1.0 if valid > 0 else 0.0  # a rank without labels backpropagates a zero that still syncs
                loss = WORLD_SIZE * weight * losses.sum() / count.item()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            recorder.step = STEPS + 1
            dist.barrier(group=group)
        except Exception as e:  # the skip run ends here: a mismatched or abandoned collective
            print("rank %d stopped: %s" % (rank, str(e).splitlines()[0] if str(e) else type(e).__name__), flush=True)
            status = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # destroy_process_group can hang in teardown after a failed collective


def launch(mode, work):
    out_dir = os.path.join(work, mode)
    os.makedirs(out_dir, exist_ok=True)
    shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    store = os.path.join(out_dir, "store")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(rank), store, out_dir,
                                 mode], env=env)
               for rank in range(WORLD_SIZE)]
    deadline = time.monotonic() + RUN_SECONDS
    for process in workers:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print("a %s worker passed the time limit of %d s and is killed" % (mode, RUN_SECONDS))
            process.kill()
            process.wait()
    return [os.path.join(out_dir, "traces", "rank-%d.jsonl" % rank) for rank in range(WORLD_SIZE)]


def check(normcheck, traces, expected_status, expected_text):
    result = subprocess.run([normcheck, "collectives"] + traces, capture_output=True, text=True, timeout=60)
    print(result.stdout + result.stderr, end="")
    if result.returncode != expected_status:
        print("FAILED: normcheck collectives exited %d, expected %d" % (result.returncode, expected_status))
        return False
    for text in expected_text:
        if text not in result.stdout:
            print("FAILED: the report does not say: %s" % text)
            return False
    return True


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    try:
        import torch.distributed as dist
    except Exception as e:
        print("skipped: torch cannot be imported (%s)" % e)
        return SKIP
    if not dist.is_available() or not dist.is_gloo_available():
        print("skipped: torch.distributed with gloo is not available")
        return SKIP
    normcheck, work = sys.argv[1], sys.argv[2]
    ok = check(normcheck, launch("clean", work), 0, ["OK: every rank issued the same collectives"])
    ok = check(normcheck, launch("skip", work), 1,
               ["MISSING CALL at step 2, position 0", "rank 1 did not issue this call; rank 0 waits in it"]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
