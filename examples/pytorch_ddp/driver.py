#!/usr/bin/env python3
"""Runs one DistributedDataParallel update under every normalization variant and dumps each one.

    python3 driver.py --normcheck build/normcheck --out ddp-out
    normcheck check ddp-out/dumps

For each world size W and dtype, the driver starts W real processes (torch.multiprocessing, gloo on
loopback, a free port chosen at run time) that form one process group and run every planned update
in it, one after another: each builds a fresh one-parameter model and its DDP wrapper, runs the
variant (see variants.py), dumps what it saw and produced as a normcheck/1 file (rank 0 gathers and
writes atomically) and takes the optimizer step. Partitions: those `normcheck suggest` designs for W
and the dtype, and the seed example [[0], [2, 2, 2]] at θ = 0 (for W = 2).

Every launch has a time limit: when it passes, the driver kills the launch's workers and reports the
launch as failed. Workers end themselves when the driver dies, and leave through os._exit once their
output is flushed (torch 1.13's gloo can hang in interpreter teardown).

Files: OUT/inputs/ the suggested partitions, OUT/dumps/ one normcheck/1 file per update,
OUT/manifest.jsonl one line per launch and per dump.

Exit status: 0 every launch completed and wrote its files, 1 some launch failed (time limit, a worker
error), 2 a wrong command line or input, 3 torch (with gloo) cannot be imported by this interpreter.
"""

import argparse
import datetime
import fractions
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # variants.py
# The normcheck package of this checkout (python/), ahead of any installed one; installed, it is found anyway.
CHECKOUT_PACKAGE = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
if os.path.isdir(os.path.join(CHECKOUT_PACKAGE, "normcheck")):
    sys.path.insert(0, CHECKOUT_PACKAGE)
from normcheck import dump  # noqa: E402 (standard library only at import)
from normcheck.launch import exit_process  # noqa: E402

TORCH_UNAVAILABLE = 3
DTYPES = ("float32", "float64")
SEED_THETA = 0.0
# The seed example: one rank holds the target 0, the other 2, 2, 2.
SEED_RANKS = [[[0.0]], [[2.0, 2.0, 2.0]]]
# The same tokens in microbatches, for the accumulation variants (G differs between the ranks).
SEED_MICROBATCHES = [[[0.0]], [[2.0], [2.0, 2.0]]]


def fail_usage(message):
    print(f"driver: {message}", file=sys.stderr)
    sys.exit(2)


def import_torch():
    """torch, or exit 3 saying why this interpreter cannot run the example."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # ImportError, or a broken installation
        print(f"driver: torch unavailable under {sys.executable}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(TORCH_UNAVAILABLE)
    if not (dist.is_available() and dist.is_gloo_available()):
        print(f"driver: torch {torch.__version__} under {sys.executable} has no gloo backend", file=sys.stderr)
        sys.exit(TORCH_UNAVAILABLE)
    return torch


# ---------------------------------------------------------------------------------------------------
# Partitions

def token_value(value, where):
    """A target as the program will hold it before conversion to the dtype; None for padding."""
    if value is None:
        return None
    if isinstance(value, bool):
        fail_usage(f"{where}: a boolean is not a target")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float.fromhex(value) if "0x" in value.lower() else float(fractions.Fraction(value))
        except (ValueError, ZeroDivisionError):
            pass
    fail_usage(f"{where}: {value!r} is not a target value")


def read_partition(path):
    """(per rank a list of microbatches, θ) from a normcheck/1 file."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError) as e:
        fail_usage(f"cannot read partition {path}: {e}")
    ranks = []
    for r, rank in enumerate(document.get("ranks", [])):
        batches = rank["microbatches"] if "microbatches" in rank else [rank.get("targets", [])]
        ranks.append([[token_value(y, f"{path}: rank {r}") for y in tokens] for tokens in batches])
    if not ranks:
        fail_usage(f"{path}: no ranks")
    return ranks, token_value(document.get("theta", 0), f"{path}: theta")


def suggested(normcheck, world_size, microbatches, dtype, folder):
    """The partition `normcheck suggest` designs for this shape and dtype, kept in `folder`."""
    path = os.path.join(folder, f"suggest-w{world_size}-g{microbatches}-{dtype}.json")
    command = [normcheck, "suggest", "-W", str(world_size), "-G", str(microbatches), "--dtype", dtype, "-o", path]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        fail_usage(f"cannot run {' '.join(command)}: {e}")
    if done.returncode != 0:
        fail_usage(f"{' '.join(command)} exited with {done.returncode}: {done.stderr.strip()}")
    return read_partition(path)


def moved_off_rank_zero(ranks):
    """Rank 0 keeps its positions, all padding, and its valid tokens move to the last rank's last
    microbatch: a rank with no valid token, while N and the objective stay those of `ranks` (so
    what separated the mistakes there still separates them)."""
    moved = [y for tokens in ranks[0] for y in tokens if y is not None]
    last = [list(tokens) for tokens in ranks[-1]]
    last[-1] += moved
    return [[[None] * len(tokens) for tokens in ranks[0]]] + ranks[1:-1] + [last]


def partitions_for(world_size, dtype, sources, normcheck, folder):
    """name → (ranks, θ, kind); kind is "single" (one microbatch per rank), "accumulated" or "empty"."""
    found = {}
    if "suggest" in sources:
        single, theta = suggested(normcheck, world_size, 1, dtype, folder)
        accumulated, theta_g = suggested(normcheck, world_size, 2, dtype, folder)
        found["suggest"] = (single, theta, "single")
        found["suggest-g2"] = (accumulated, theta_g, "accumulated")
        found["suggest-empty-rank"] = (moved_off_rank_zero(single), theta, "empty")
    if "seed" in sources and world_size == len(SEED_RANKS):
        found["seed"] = (SEED_RANKS, SEED_THETA, "single")
        found["seed-microbatches"] = (SEED_MICROBATCHES, SEED_THETA, "accumulated")
        found["seed-empty-rank"] = (moved_off_rank_zero(SEED_RANKS), SEED_THETA, "empty")
    return found


def plan(world_size, dtype, variant_names, sources, normcheck, folders):
    """The updates of one launch, in order: dicts with variant, partition, ranks, theta, path."""
    import variants

    found = partitions_for(world_size, dtype, sources, normcheck, folders["inputs"])
    jobs = []
    for variant in variant_names:
        kind = ("accumulated" if variant in variants.ACCUMULATING
                else "empty" if variant in ("empty_rank", "hang") else "single")
        names = [name for name, (_, _, k) in found.items() if k == kind]
        if variant == "hang":
            names = names[-1:]  # one hanging update is enough
        for name in names:
            ranks, theta, _ = found[name]
            path = os.path.join(folders["dumps"], f"w{world_size}-{dtype}-{name}-{variant}.json")
            weights = ([variants.weights_for(rank, start=r) for r, rank in enumerate(ranks)]
                       if variant in variants.WEIGHTED else None)
            jobs.append({"variant": variant, "partition": name, "ranks": ranks, "theta": theta, "path": path,
                         "weights": weights})
    return jobs


# ---------------------------------------------------------------------------------------------------
# Workers

def watch_driver(driver_pid):
    """Ends this worker when the driver is gone (the worker is then re-parented)."""
    while True:
        if os.getppid() != driver_pid:
            os._exit(4)
        time.sleep(0.1)


def worker(rank, world_size, port, dtype_name, jobs, settings, driver_pid):
    """One rank: joins the group and runs every job of the launch, then leaves through os._exit."""
    # A forked worker inherits the driver's handlers, which kill workers: restore the defaults.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=watch_driver, args=(driver_pid,), daemon=True).start()
    status = 0
    try:
        import torch
        import torch.distributed as dist
        import variants

        torch.set_num_threads(1)
        dtype = {"float32": torch.float32, "float64": torch.float64}[dtype_name]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=settings["collective_timeout"]))
        side_group = dist.new_group(backend="gloo") if any(j["variant"] == "hang" for j in jobs) else None
        for job in jobs:
            weights = None if job["weights"] is None else job["weights"][rank]
            batch, gradient, theta, outcome = variants.one_update(
                job["variant"], job["ranks"][rank], job["theta"], dtype, world_size, side_group, weights=weights)
            description = (f"PyTorch {torch.__version__} DistributedDataParallel on gloo, W = {world_size}, "
                           f"{dtype_name}, partition {job['partition']}: {variants.DESCRIPTIONS[job['variant']]}")
            dump.dump_update(
                job["path"], microbatches=batch, gradient=gradient, theta=theta, dtype=dtype_name,
                reducer=outcome["reducer"], counted_tokens=outcome["counted_tokens"],
                global_tokens=outcome["global_tokens"], weights=None if weights is None else variants.make_weights(weights, dtype),
                counted_mass=outcome["counted_mass"], global_mass=outcome["global_mass"], description=description,
                pause_mid_write=settings["pause_mid_write"])
            if rank == 0:
                print(f"  wrote {job['path']}", flush=True)
        dist.barrier()
    except BaseException:
        traceback.print_exc()
        status = 1
    exit_process(status)


# ---------------------------------------------------------------------------------------------------
# Launches

def free_port():
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


running = []  # the workers of the current launch, for the signal handler


def kill_workers(processes):
    """SIGKILL every worker that still runs; returns the ranks that were killed."""
    killed = []
    for rank, process in enumerate(processes):
        if process.exitcode is None:
            process.kill()
            killed.append(rank)
    for process in processes:
        process.join(5)
    return killed


def on_signal(number, frame):
    kill_workers(running)
    print(f"driver: interrupted by signal {number}: workers killed", file=sys.stderr, flush=True)
    os._exit(128 + number)


def launch(torch, world_size, dtype, jobs, settings):
    """Runs the jobs in one process group of `world_size` workers. Returns the launch record."""
    from multiprocessing.connection import wait

    context = torch.multiprocessing.get_context(settings["start_method"])
    port = free_port()
    args = (world_size, port, dtype, jobs, settings, os.getpid())
    processes = [context.Process(target=worker, args=(rank,) + args, name=f"ddp-rank-{rank}")
                 for rank in range(world_size)]
    for path in (job["path"] for job in jobs):
        if os.path.exists(path):
            os.unlink(path)  # a file from an earlier run must not pass for this run's
    start = time.monotonic()
    for process in processes:
        process.start()
        running.append(process)
    print(f"launch W={world_size} {dtype}: {len(jobs)} updates on port {port}, workers "
          f"{' '.join(str(p.pid) for p in processes)}", flush=True)
    deadline = start + settings["timeout"]
    status, message = "ok", ""
    while True:
        codes = [p.exitcode for p in processes]
        if all(code is not None for code in codes):
            failed = [f"rank {r} exited with {code}" for r, code in enumerate(codes) if code != 0]
            if failed:
                status, message = "failed", "; ".join(failed)
            break
        if any(code not in (None, 0) for code in codes):
            early = [f"rank {r} exited with {code}" for r, code in enumerate(codes) if code not in (None, 0)]
            killed = kill_workers(processes)
            status = "failed"
            message = "; ".join(early) + f"; killed ranks {' '.join(map(str, killed))} waiting for it"
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            killed = kill_workers(processes)
            status = "timeout"
            message = (f"time limit of {settings['timeout']:g} s reached: killed ranks "
                       f"{' '.join(map(str, killed))} (pids {' '.join(str(processes[r].pid) for r in killed)})")
            break
        wait([p.sentinel for p in processes if p.exitcode is None], timeout=min(remaining, 0.5))
    seconds = time.monotonic() - start
    running.clear()
    missing = [job["path"] for job in jobs if not os.path.exists(job["path"])]
    if status == "ok" and missing:
        status, message = "failed", f"{len(missing)} dumps not written, first {missing[0]}"
    verdict = "completed" if status == "ok" else "FAILED"
    print(f"launch W={world_size} {dtype}: {verdict} in {seconds:.2f} s" + (f": {message}" if message else ""),
          flush=True)
    return {"kind": "launch", "world_size": world_size, "dtype": dtype, "updates": len(jobs),
            "seconds": round(seconds, 3), "status": status, "message": message}


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for inputs/, dumps/ and manifest.jsonl")
    parser.add_argument("--normcheck", help="the normcheck executable (for `normcheck suggest`)")
    parser.add_argument("-W", "--world-size", type=int, action="append", help="ranks per launch (default 2 and 3)")
    parser.add_argument("--dtype", action="append", choices=DTYPES, help="default float32 and float64")
    parser.add_argument("--variants", default="all",
                        help="comma-separated variant names, or all (the hanging variant is never in all)")
    parser.add_argument("--partitions", default="suggest,seed", help="suggest, seed or both (comma-separated)")
    parser.add_argument("--timeout", type=float, default=120.0, help="time limit per launch, seconds")
    parser.add_argument("--start-method", default="fork", choices=("fork", "spawn"),
                        help="fork (default: the workers share the driver's imported torch) or spawn")
    parser.add_argument("--pause-mid-write", type=float, default=0.0,
                        help="sleep this long with half of each dump written (to test interruption)")
    return parser.parse_args(argv)


def main(argv=None):
    options = parse_arguments(argv)
    world_sizes = options.world_size or [2, 3]
    dtypes = options.dtype or list(DTYPES)
    sources = [s for s in options.partitions.split(",") if s]
    if not sources or any(s not in ("suggest", "seed") for s in sources):
        fail_usage(f"--partitions takes suggest and/or seed, not {options.partitions!r}")
    if "suggest" in sources and not options.normcheck:
        fail_usage("--normcheck is needed for the suggested partitions (or use --partitions seed)")
    if any(w < 1 for w in world_sizes) or options.timeout <= 0:
        fail_usage("world sizes and the time limit must be positive")
    torch = import_torch()
    import variants

    names = variants.ALL if options.variants == "all" else tuple(options.variants.split(","))
    unknown = [n for n in names if n not in variants.ALL + variants.TESTING_ONLY]
    if unknown:
        fail_usage(f"unknown variants {', '.join(unknown)} (known: {', '.join(variants.ALL + variants.TESTING_ONLY)})")
    folders = {"inputs": os.path.join(options.out, "inputs"), "dumps": os.path.join(options.out, "dumps")}
    for folder in folders.values():
        os.makedirs(folder, exist_ok=True)
    settings = {"timeout": options.timeout, "collective_timeout": options.timeout + 60,
                "pause_mid_write": options.pause_mid_write, "start_method": options.start_method}
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    print(f"driver: torch {torch.__version__} under {sys.executable}", flush=True)
    started = time.monotonic()
    records = []
    for world_size in world_sizes:
        for dtype in dtypes:
            jobs = plan(world_size, dtype, names, sources, options.normcheck, folders)
            if not jobs:
                continue
            record = launch(torch, world_size, dtype, jobs, settings)
            records.append(record)
            for job in jobs:
                if os.path.exists(job["path"]):
                    records.append({"kind": "dump", "file": os.path.relpath(job["path"], options.out),
                                    "world_size": world_size, "dtype": dtype, "partition": job["partition"],
                                    "variant": job["variant"]})
    manifest = "".join(json.dumps(r) + "\n" for r in records)
    dump.write_atomically(os.path.join(options.out, "manifest.jsonl"), manifest)
    launches = [r for r in records if r["kind"] == "launch"]
    failed = [r for r in launches if r["status"] != "ok"]
    dumps = sum(1 for r in records if r["kind"] == "dump")
    print(f"driver: {len(launches)} launches, {len(failed)} failed, {dumps} dumps in "
          f"{time.monotonic() - started:.2f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
