"""Real DistributedDataParallel loops, measured by the per-group probe and judged by normcheck.

For W = 2 and 3 and float32 and float64, one launch (W processes, gloo on loopback) runs every loop of
probe_loops.LOOPS for its G values and writes one per-group dump per update, then takes AdamW updates
with and without the probe. Each test item asserts one thing about one update:

- ``test_weights``: the dump's groups and every rank's measured weight table are the loop's exact
  per-token weights (the oracle in probe_loops), primary and witness components, p and every site;
- ``test_verdict``: ``normcheck check`` gives the table's verdict and names;
- ``test_update_unchanged``: the model's parameters after AdamW with clipping are bitwise those
  without the probe, with and without sites.

Select one launch with ``-k "w2 and float32"``.
"""

import json
import math
import os
import time
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
try:  # DistributedDataParallel imports torch._dynamo on first use (seconds): once here, not in every forked rank
    import torch._dynamo  # noqa: F401
except ImportError:  # torch 1.13
    pass

import probe_loops  # noqa: E402
import tiny_lm  # noqa: E402
from normcheck.check import run_check  # noqa: E402
from normcheck.launch import launch  # noqa: E402

CONFIGS = [(2, "float32"), (2, "float64"), (3, "float32"), (3, "float64")]
HOOKS = (None, "fp16_hook")
SITES = ("children", None)


def every_step(rank, world_size, probe, dtype_name):
    """The launch's work on one rank: every loop's dump, then every update with and without the probe."""
    dtype = getattr(torch, dtype_name)
    dumps, updates = {}, {}
    for loop, g in probe_loops.cases(world_size):
        try:
            dumps[(loop.name, g)] = {"path": probe_loops.run(loop, g, rank, world_size, dtype, probe)}
        except Exception as e:  # reported by the item, the other loops still run
            dumps[(loop.name, g)] = {"exception": f"{type(e).__name__}: {e}"}
    for g in (1, 2):
        for patched in (False, True):
            for hook in HOOKS:
                plain, _ = tiny_lm.one_update(dtype, g, rank, world_size, None, patched, hook)
                for sites in SITES:
                    probed, path = tiny_lm.one_update(dtype, g, rank, world_size, probe, patched, hook, sites=sites)
                    updates[(g, patched, hook, sites)] = {"equal": tiny_lm.bitwise_equal(plain, probed), "path": path}
    return {"dumps": dumps, "updates": updates}


_launches = {}


@pytest.fixture(scope="session")
def dumps_folder(tmp_path_factory):
    """Where the launches' probes write their dumps (kept with pytest's temporary folders)."""
    return tmp_path_factory.mktemp("dumps")


def launched(world_size, dtype, executable, folder):
    """Every rank's results of the (W, dtype) launch and normcheck's verdicts on its dumps, once per session."""
    key = (world_size, dtype)
    if key not in _launches:
        started = time.monotonic()
        try:
            ranks = launch(every_step, world_size, args=(dtype,), executable=executable, timeout=240,
                           directory=str(folder / f"w{world_size}-{dtype}"))
            paths = [d["path"] for d in ranks[0]["dumps"].values() if d.get("path")]
            paths += [u["path"] for u in ranks[0]["updates"].values() if u.get("path")]
            verdicts = {v.file: v for v in run_check(paths, executable=executable)} if paths else {}
            _launches[key] = (ranks, verdicts)
        except Exception as e:
            _launches[key] = e
        print(f"launch W={world_size} {dtype}: {time.monotonic() - started:.1f} s")
    if isinstance(_launches[key], Exception):
        raise _launches[key]
    return _launches[key]


def case_params():
    for world_size, dtype in CONFIGS:
        for loop, g in probe_loops.cases(world_size):
            yield pytest.param(world_size, dtype, loop.name, g, id=f"w{world_size}-{dtype}-g{g}-{loop.name}")


def dump_of(world_size, dtype, name, g, executable, folder):
    ranks, verdicts = launched(world_size, dtype, executable, folder)
    result = ranks[0]["dumps"][(name, g)]
    errors = [r["dumps"][(name, g)].get("exception") for r in ranks]
    assert not any(errors), f"the step failed: {errors}"
    with open(result["path"], encoding="utf-8") as f:
        return json.load(f), verdicts.get(result["path"])


# ---------------------------------------------------------------------------------------------------
# The oracle: the weight table the loop gives, against what the probe measured

def value(text):
    """A dump's number (float.hex text or an integer) as a float."""
    if isinstance(text, int):
        return float(text)
    return float.fromhex(text) if "0x" in text or text in ("nan", "inf", "-inf") else float(text)


def microbatches_of(rank):
    return rank["microbatches"] if "microbatches" in rank else [rank["targets"]]


def expected_components(loop, counts, document, site=None):
    """Per rank, per group: the exact (primary, witness) components the loop's weights give (None: NaN)."""
    weighted = document.get("objective") == "weighted_token_mean"
    weight_of = (loop.site_weight or {}).get(site, loop.weight)
    if weighted:
        counts.mass = sum(Fraction(value(w)) for rank in document["ranks"] for batch in weights_of(rank)
                          for w in flatten(batch) if w is not None)
    table = []
    for r, rank in enumerate(document["ranks"]):
        batches = microbatches_of(rank)
        weights = weights_of(rank) if weighted else None
        for m, batch in enumerate(batches):
            rows = counts.n[r][m]
            row_weights = [weight_of(counts, r, m, s) for s in range(len(rows))]
            if isinstance(batch, dict) and "sequences" in batch:
                groups = [[s] for s in range(len(rows))]
                assert len(batch["sequences"]) == len(rows), f"rank {r} microbatch {m}: a group per row"
            else:
                groups = [list(range(len(rows)))]
            for k, members in enumerate(groups):
                if any(row_weights[s] is None for s in members):  # a mean over no token: NaN everywhere
                    table.append(None)
                    continue
                if weighted:
                    token_weights = flatten(weights[m]["sequences"][k] if "sequences" in weights[m] else weights[m])
                    mass = sum(Fraction(value(w)) for w in token_weights if w is not None)
                    table.append((-mass * row_weights[members[0]], None))
                    continue
                primary, witness, ordinal = Fraction(0), Fraction(0), 0
                for s in members:
                    for _ in range(rows[s]):
                        ordinal += 1
                        primary -= row_weights[s]
                        witness -= ordinal * row_weights[s]
                table.append((primary, witness))
    return table


def weights_of(rank):
    return rank["weights"] if "microbatches" in rank else [rank["weights"]]


def flatten(batch):
    if isinstance(batch, dict):
        return [w for seq in batch["sequences"] for w in seq]
    return list(batch)


def tolerance(document, loop):
    """Relative tolerance of a measurement: the coarsest arithmetic it met (the dump's dtype, the fp16 hook)."""
    if loop.hook == "fp16":
        return 2e-3
    return 1e-5 if document["observed"]["dtype"] == "float32" else 1e-12


def check_vector(observed, expected, rel, what):
    assert len(observed) == len(expected), f"{what}: {len(observed)} components for {len(expected)} groups"
    for k, (got, want) in enumerate(zip(observed, expected)):
        got = value(got)
        if want is None:
            assert math.isnan(got), f"{what}, group {k}: {got!r}, expected NaN"
            continue
        want = float(want)
        assert math.isfinite(got) and abs(got - want) <= rel * max(abs(want), 1e-30), \
            f"{what}, group {k}: measured {got!r}, the loop gives {want!r}"


@pytest.mark.parametrize("world_size, dtype, name, g", list(case_params()))
def test_weights(world_size, dtype, name, g, executable, dumps_folder):
    """The probe measures exactly the weights the loop gives: every group, every rank's copy, every site."""
    loop = probe_loops.BY_NAME[name]
    document, _ = dump_of(world_size, dtype, name, g, executable, dumps_folder)
    counts = probe_loops.Counts(probe_loops.window(loop.dataset, g, world_size))
    assert document["world_size"] == world_size and document["theta"] == 0
    assert document.get("objective", "token_mean") == (
        "weighted_token_mean" if loop.name.startswith("weighted") else loop.objective)
    observed = document["observed"]
    rel = tolerance(document, loop)
    # p takes the model's dtype on two ranks (and for PowerSGD), the other one on three.
    shared = world_size == 2 or loop.hook == "powersgd"
    want_dtype = "float64" if dtype == "float64" and shared else "float32"
    assert observed["dtype"] == want_dtype, "the coarsest arithmetic of the loss and of p"
    sites = {None: observed}
    for entry in observed.get("sites", []):
        sites[entry["name"]] = entry
    assert set(sites) == {None, "embed", "layer", "head"}, "a site per child that owns parameters"
    for site, where in sites.items():
        table = expected_components(loop, counts, document, site)
        for r, vector in enumerate(where["per_rank"]):
            check_vector(vector, [None if t is None else t[0] for t in table], rel, f"{site or 'p'} rank {r}")
        if "witness" in where:
            for r, vector in enumerate(where["witness"]):
                check_vector(vector, [None if t is None else t[1] for t in table], rel * 4,
                             f"{site or 'p'} witness rank {r}")
        else:
            assert document.get("objective") == "weighted_token_mean", "a witness unless the step is weighted"


def verdict_params():
    for param in case_params():
        loop = probe_loops.BY_NAME[param.values[2]]
        if loop.known:
            yield pytest.param(*param.values, id=param.id, marks=pytest.mark.xfail(strict=True, reason=loop.known))
        else:
            yield param


@pytest.mark.parametrize("world_size, dtype, name, g", list(verdict_params()))
def test_verdict(world_size, dtype, name, g, executable, dumps_folder):
    """normcheck's verdict and names on the loop's dump are the table's."""
    loop = probe_loops.BY_NAME[name]
    _, verdict = dump_of(world_size, dtype, name, g, executable, dumps_folder)
    problem = probe_loops.named_as_expected(loop, world_size, g, verdict)
    assert problem is None, f"{problem}\n{verdict.message if verdict else ''}"


def update_cases():
    for world_size, dtype in CONFIGS:
        for g in (1, 2):
            for patched in (False, True):
                for hook in HOOKS:
                    for sites in SITES:
                        yield pytest.param(world_size, dtype, g, patched, hook, sites,
                                           id=f"w{world_size}-{dtype}-g{g}-{'patched' if patched else 'explicit'}-"
                                              f"{hook or 'allreduce'}-{'sites' if sites else 'nosites'}")


@pytest.mark.parametrize("world_size, dtype, g, patched, hook, sites", list(update_cases()))
def test_update_unchanged(world_size, dtype, g, patched, hook, sites, executable, dumps_folder):
    """AdamW with weight decay and clipping: the weights after one step are bitwise those without the probe."""
    ranks, verdicts = launched(world_size, dtype, executable, dumps_folder)
    for rank, results in enumerate(ranks):
        update = results["updates"][(g, patched, hook, sites)]
        assert update["equal"], f"rank {rank}: the probed update differs from the unprobed one"


@pytest.mark.parametrize("world_size, dtype, g, patched, hook, sites", list(update_cases()))
def test_update_judged_after_the_step(world_size, dtype, g, patched, hook, sites, executable, dumps_folder):
    """The same updates, judged after clipping every parameter and after optimizer.step(): they pass."""
    ranks, verdicts = launched(world_size, dtype, executable, dumps_folder)
    verdict = verdicts.get(ranks[0]["updates"][(g, patched, hook, sites)]["path"])
    assert verdict is not None and verdict.passed, verdict.message if verdict else "no verdict"


# ---------------------------------------------------------------------------------------------------
# The weight table docs/python.md shows: copied from this run, never written by hand

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")
DOCUMENTED = ("hf_before_fix", 2)
"""The mistake the documentation shows: transformers before #34191, W = 2, G = 2, float32."""
BEGIN, END = "<!-- weight table of hf_before_fix, W = 2, G = 2: begin -->", "<!-- end of the weight table -->"


def documented_block(verdict):
    """What docs/python.md shows of a verdict's message: its first line, the gate's objective check, its verdict,
    each diagnosis's name and value (not its words), and the weight table, each line as the message has it."""
    lines = verdict.message.replace(verdict.file, "probe-dump.json").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    weights per group"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("      "):
        end += 1
    shown = [line for line in lines[1:start] if line.startswith(("    objective ", "    verdict:", "    diagnosis:"))]
    return "\n".join(["```", lines[0], *shown, *lines[start:end], "```"])


def test_w2_float32_the_documented_weight_table_is_this_run_s(executable, dumps_folder):
    """docs/python.md's table is this run's (NORMCHECK_WRITE_DOCS=1 rewrites it from the run)."""
    name, g = DOCUMENTED
    _, verdict = dump_of(2, "float32", name, g, executable, dumps_folder)
    assert verdict is not None and verdict.verdict == "fail" and "microbatch_mean" in verdict.diagnosis
    block = documented_block(verdict)
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    assert BEGIN in text and END in text, f"docs/python.md has no {BEGIN} … {END} block"
    head, rest = text.split(BEGIN, 1)
    shown, tail = rest.split(END, 1)
    if os.environ.get("NORMCHECK_WRITE_DOCS") == "1":
        with open(DOCS, "w", encoding="utf-8") as f:
            f.write(f"{head}{BEGIN}\n{block}\n{END}{tail}")
        return
    assert shown.strip() == block.strip(), f"docs/python.md shows another table than this run's:\n{block}"
