"""A correct per-group run on every partition `normcheck suggest` returns passes the gate.

For each shape and dtype: suggest a partition, add the observation a correct token-mean program makes
(every microbatch's loss sum scaled by W/N, DDP's mean reducer: group k's component is Σ(θ − y)/N on
every rank, its witness Σⱼ(θ − j)/N), and require `normcheck check --json` to say the gate passed. A
suggestion on which some diagnosed normalization computes the objective's value makes that run
inconclusive, and this test fails.

usage: suggested_run_passes.py NORMCHECK WORKDIR [EVERY]

With EVERY, only every EVERY-th shape (in the order below, the first included): the sanitized build,
where the executable runs ten times slower, samples the shapes the dev build runs in full.
"""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path


def microbatches_of(rank: dict) -> list:
    return rank["microbatches"] if "microbatches" in rank else [rank["targets"]]


def correct_observation(partition: dict, dtype: str) -> dict:
    theta = Fraction(partition.get("theta", 0))
    groups = [[Fraction(y) for y in microbatch] for rank in partition["ranks"] for microbatch in microbatches_of(rank)]
    n = sum(len(g) for g in groups)
    component = [str(sum((theta - y for y in g), Fraction(0)) / n) for g in groups]
    witness = [str(sum((theta - j for j in range(1, len(g) + 1)), Fraction(0)) / n) for g in groups]
    world = partition["world_size"]
    return {"per_rank": [component] * world, "witness": [witness] * world, "dtype": dtype}


def main() -> int:
    normcheck, workdir = sys.argv[1], Path(sys.argv[2])
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    workdir.mkdir(parents=True, exist_ok=True)
    failures = []
    judged = 0
    refused: list = []
    shapes = [(world, microbatches, dtype) for world in (2, 3, 4, 5, 6, 8) for microbatches in (1, 2, 3, 4)
              for dtype in ("float64", "float32", "exact")]  # bfloat16: suggest separates no shape here
    for world, microbatches, dtype in shapes[::every]:
        path = workdir / f"suggested_W{world}_G{microbatches}_{dtype}.json"
        suggested = subprocess.run([normcheck, "suggest", "-W", str(world), "-G", str(microbatches),
                                    "--dtype", dtype, "-o", str(path)], capture_output=True)
        if suggested.returncode == 1:  # suggest says no partition of this shape separates every mistake
            refused.append(f"W={world} G={microbatches} {dtype}")
            continue
        suggested.check_returncode()
        partition = json.loads(path.read_text())
        if any(isinstance(y, dict) for r in partition["ranks"] for m in microbatches_of(r) for y in m):
            raise SystemExit(f"{path}: suggest wrote targets this test does not read")
        partition["observed"] = correct_observation(partition, dtype)
        path.write_text(json.dumps(partition))
        run = subprocess.run([normcheck, "check", "--json", str(path)], capture_output=True, text=True)
        report = json.loads(run.stdout)
        verdict = report["reports"][0].get("gate", {}).get("verdict")
        judged += 1
        if run.returncode != 0 or verdict != "pass":
            failures.append(f"W={world} G={microbatches} {dtype}: exit {run.returncode}, verdict {verdict}")
    for failure in failures:
        print(failure)
    print(f"{judged - len(failures)} of {judged} correct runs on suggested partitions pass; "
          f"no partition suggested for {', '.join(refused) or 'no shape'}")
    return 1 if failures or judged == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
