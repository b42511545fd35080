"""A correct per-group run on every partition `normcheck suggest` returns passes the gate.

For each shape and dtype: suggest a partition, add the observation a correct token-mean program makes
(every microbatch's loss sum scaled by W/N, DDP's mean reducer: group k's component is Σ(θ − y)/N on
every rank, its witness Σⱼ(θ − j)/N), and require `normcheck check --json` to say the gate passed; the
same on device meshes (`suggest --mesh`: every dimension of size 2, the replicas holding their first's
tokens and measuring the same vectors). A
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


def first_replicas(partition: dict) -> list:
    """The ranks whose replica coordinates are all 0: the update's groups are theirs (every rank without a mesh)."""
    dims = partition.get("mesh", {}).get("dims", [])
    replica = [i for i, dim in enumerate(dims) if dim["role"] == "replica"]
    return [rank for rank in partition["ranks"] if all(rank["coords"][i] == 0 for i in replica)]


def correct_observation(partition: dict, dtype: str, over_data_dims: bool = False) -> dict:
    """Every group weighed 1/N; with `over_data_dims`, 1/(its rank's count summed over the data dimension),
    the mistake of a count reduced over dp only (W·Sᵣ/N_dp under DDP's mean)."""
    theta = Fraction(partition.get("theta", 0))
    ranks = first_replicas(partition)
    n = sum(len(microbatch) for rank in ranks for microbatch in microbatches_of(rank))
    dims = partition.get("mesh", {}).get("dims", [])
    sequence = [i for i, dim in enumerate(dims) if dim["role"] == "sequence"]

    def divisor(rank: dict) -> int:
        if not over_data_dims:
            return n
        column = [other for other in ranks if all(other["coords"][i] == rank["coords"][i] for i in sequence)]
        return sum(len(microbatch) for other in column for microbatch in microbatches_of(other))

    weighed = [([Fraction(y) for y in microbatch], divisor(rank)) for rank in ranks
               for microbatch in microbatches_of(rank)]
    component = [str(sum((theta - y for y in g), Fraction(0)) / d) for g, d in weighed]
    witness = [str(sum((theta - j for j in range(1, len(g) + 1)), Fraction(0)) / d) for g, d in weighed]
    world = len(partition["ranks"])  # one vector per rank of the mesh, replicas included
    return {"per_rank": [component] * world, "witness": [witness] * world, "dtype": dtype}


def main() -> int:
    normcheck, workdir = sys.argv[1], Path(sys.argv[2])
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    workdir.mkdir(parents=True, exist_ok=True)
    failures = []
    judged = 0
    refused: list = []
    shapes = [(["-W", str(world)], f"W{world}", microbatches, dtype) for world in (2, 3, 4, 5, 6, 8)
              for microbatches in (1, 2, 3, 4)
              for dtype in ("float64", "float32", "exact")]  # bfloat16: suggest separates no shape here
    meshes = ("dp:data,cp:sequence", "cp:sequence", "dp:data,tp:replica", "dp:data,cp:sequence,tp:replica")
    shapes += [(["--mesh", mesh], mesh.replace(":", "_").replace(",", "_"), microbatches, dtype) for mesh in meshes
               for microbatches in (1, 2) for dtype in ("float32", "exact")]
    for shape, name, microbatches, dtype in shapes[::every]:
        path = workdir / f"suggested_{name}_G{microbatches}_{dtype}.json"
        suggested = subprocess.run([normcheck, "suggest", *shape, "-G", str(microbatches),
                                    "--dtype", dtype, "-o", str(path)], capture_output=True)
        if suggested.returncode == 1:  # suggest says no partition of this shape separates every mistake
            refused.append(f"{name} G={microbatches} {dtype}")
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
            failures.append(f"{name} G={microbatches} {dtype}: exit {run.returncode}, verdict {verdict}")
        if "data" in name and "sequence" in name:  # the wrong run a mesh suggestion must tell apart
            partition["observed"] = correct_observation(partition, dtype, over_data_dims=True)
            path.write_text(json.dumps(partition))
            run = subprocess.run([normcheck, "check", "--json", str(path)], capture_output=True, text=True)
            gate = json.loads(run.stdout)["reports"][0].get("gate", {})
            named = [e["name"] for e in gate.get("diagnosis", [])]
            if gate.get("verdict") != "fail" or "count_over_data_dims" not in named:
                failures.append(f"{name} G={microbatches} {dtype}: a count over dp only gives {gate.get('verdict')}, "
                                f"diagnosis {named}")
    for failure in failures:
        print(failure)
    print(f"{judged - len(failures)} of {judged} correct runs on suggested partitions pass; "
          f"no partition suggested for {', '.join(refused) or 'no shape'}")
    return 1 if failures or judged == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
