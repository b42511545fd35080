#!/usr/bin/env python3
"""Runs one DistributedDataParallel update under every normalization variant and dumps each one.

    python3 driver.py --normcheck build/normcheck --out ddp-out
    normcheck check ddp-out/dumps

For each world size W and dtype, the driver starts W real processes (normcheck.launch: forked with
torch.multiprocessing, gloo on loopback, meeting in a FileStore) that form one process group and run
every planned update in it, one after another: each builds a fresh one-parameter model and its DDP
wrapper, runs the variant (see variants.py), dumps what it saw and produced as a normcheck/1 file (rank
0 gathers and writes atomically) and takes the optimizer step. Partitions: those `normcheck suggest`
designs for W and the dtype, and the seed example [[0], [2, 2, 2]] at θ = 0 (for W = 2).

Every launch has a time limit: when it passes, the launcher kills the launch's workers and the driver
reports the launch as failed. Workers end themselves when the driver dies, and leave through os._exit
once their output is flushed (torch 1.13's gloo can hang in interpreter teardown).

Files: OUT/inputs/ the suggested partitions, OUT/dumps/ one normcheck/1 file per update,
OUT/manifest.jsonl one line per launch and per dump.

Exit status: 0 every launch completed and wrote its files, 1 some launch failed (time limit, a worker
error), 2 a wrong command line or input, 3 torch (with gloo) cannot be imported by this interpreter.
"""

import argparse
import fractions
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # variants.py
# The normcheck package of this checkout (python/), ahead of any installed one; installed, it is found anyway.
CHECKOUT_PACKAGE = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
if os.path.isdir(os.path.join(CHECKOUT_PACKAGE, "normcheck")):
    sys.path.insert(0, CHECKOUT_PACKAGE)
from normcheck import dump  # noqa: E402 (standard library only at import)
from normcheck.launch import LaunchError  # noqa: E402
from normcheck.launch import launch as launch_ranks  # noqa: E402

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
# Launches (normcheck.launch: W forked ranks meeting in a FileStore, a time limit, hung ranks killed)

def run_jobs(rank, world_size, probe, dtype_name, jobs, settings):
    """One rank: runs every job of the launch in its process group, one after another."""
    import torch
    import torch.distributed as dist
    import variants

    dtype = {"float32": torch.float32, "float64": torch.float64}[dtype_name]
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
            global_tokens=outcome["global_tokens"],
            weights=None if weights is None else variants.make_weights(weights, dtype),
            counted_mass=outcome["counted_mass"], global_mass=outcome["global_mass"], description=description,
            pause_mid_write=settings["pause_mid_write"])
        if rank == 0:
            print(f"  wrote {job['path']}", flush=True)
    dist.barrier()
    return len(jobs)


def on_signal(number, frame):
    # Leaving through an exception lets normcheck.launch kill the workers on its way out.
    print(f"driver: interrupted by signal {number}: workers killed", file=sys.stderr, flush=True)
    raise SystemExit(128 + number)


def launch(world_size, dtype, jobs, settings):
    """Runs the jobs in one process group of `world_size` workers. Returns the launch record."""
    for path in (job["path"] for job in jobs):
        if os.path.exists(path):
            os.unlink(path)  # a file from an earlier run must not pass for this run's

    def started(pids):
        print(f"launch W={world_size} {dtype}: {len(jobs)} updates, workers {' '.join(map(str, pids))}", flush=True)

    start = time.monotonic()
    status, message = "ok", ""
    try:
        launch_ranks(run_jobs, world_size, args=(dtype, jobs, settings), timeout=settings["timeout"],
                     start_method=settings["start_method"], threads=1, started=started)
    except LaunchError as e:
        if e.timed_out:
            status = "timeout"
            message = (f"time limit of {settings['timeout']:g} s reached: killed ranks {' '.join(map(str, e.killed))} "
                       f"(pids {' '.join(str(e.pids[r]) for r in e.killed)})")
        else:
            status = "failed"
            message = str(e)
    seconds = time.monotonic() - start
    missing = [job["path"] for job in jobs if not os.path.exists(job["path"])]
    if status == "ok" and missing:
        status, message = "failed", f"{len(missing)} dumps not written, first {missing[0]}"
    verdict = "completed" if status == "ok" else "FAILED"
    print(f"launch W={world_size} {dtype}: {verdict} in {seconds:.2f} s" + (f": {message}" if message else ""),
          flush=True)
    return {"kind": "launch", "world_size": world_size, "dtype": dtype, "updates": len(jobs),
            "seconds": round(seconds, 3), "status": status, "message": message.splitlines()[0] if message else ""}


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
            record = launch(world_size, dtype, jobs, settings)
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
