"""Real DistributedDataParallel steps of a small causal language model, judged through the probe.

For W = 2 and 3 and float32 and float64, one launch (W processes, gloo on loopback) runs every
variant of tiny_lm for G = 1 and 2, through ``probe.add`` and through the wrapped cross_entropy inside
the model, and takes one optimizer step with and without the probe. Each test item then asserts one
verdict, or that one update is bit for bit the same with the probe. Select one launch with
``-k "w2 and float32"``.
"""

import time

import pytest

torch = pytest.importorskip("torch")

import tiny_lm  # noqa: E402
from normcheck.launch import launch  # noqa: E402

CONFIGS = [(2, "float32"), (2, "float64"), (3, "float32"), (3, "float64")]
HOOKS = (None, "fp16_hook")


def variants(g):
    for variant in tiny_lm.EXPECTED:
        if (tiny_lm.dataset_for(variant, g), g) not in tiny_lm.DATASETS:
            continue
        for patched in (False, True) if variant in tiny_lm.PATCHED else (False,):
            yield variant, patched


def every_step(rank, world_size, probe, dtype_name):
    """The launch's work on one rank: every variant's verdict, then every update with and without the probe."""
    dtype = getattr(torch, dtype_name)
    verdicts, updates = {}, {}
    for g in (1, 2):
        for variant, patched in variants(g):
            try:
                verdicts[(g, variant, patched)] = tiny_lm.run_variant(variant, patched, dtype, g, rank, world_size,
                                                                      probe, find_unused=g == 2)
            except Exception as e:  # reported by the item, the other variants still run
                verdicts[(g, variant, patched)] = {"exception": f"{type(e).__name__}: {e}"}
        for patched in (False, True):
            for hook in HOOKS:
                plain, _ = tiny_lm.one_update(dtype, g, rank, world_size, None, patched, hook)
                probed, verdict = tiny_lm.one_update(dtype, g, rank, world_size, probe, patched, hook)
                updates[(g, patched, hook)] = {"equal": tiny_lm.bitwise_equal(plain, probed),
                                               "verdict": verdict.verdict, "message": verdict.message}
    return {"verdicts": verdicts, "updates": updates}


_launches = {}


@pytest.fixture(scope="session")
def dumps(tmp_path_factory):
    """Where the launches' probes write their dumps (kept with pytest's temporary folders)."""
    return tmp_path_factory.mktemp("dumps")


def launched(world_size, dtype, executable, folder):
    """Every rank's results of the (W, dtype) launch, run once per session."""
    key = (world_size, dtype)
    if key not in _launches:
        started = time.monotonic()
        try:
            _launches[key] = launch(every_step, world_size, args=(dtype,), executable=executable, timeout=240,
                                    directory=str(folder / f"w{world_size}-{dtype}"))
        except Exception as e:
            _launches[key] = e
        print(f"launch W={world_size} {dtype}: {time.monotonic() - started:.1f} s")
    if isinstance(_launches[key], Exception):
        raise _launches[key]
    return _launches[key]


def verdict_cases():
    for world_size, dtype in CONFIGS:
        for g in (1, 2):
            for variant, patched in variants(g):
                path = "patched" if patched else "explicit"
                yield pytest.param(world_size, dtype, g, variant, patched, id=f"w{world_size}-{dtype}-g{g}-{variant}-{path}")


@pytest.mark.parametrize("world_size, dtype, g, variant, patched", verdict_cases())
def test_verdict(world_size, dtype, g, variant, patched, executable, dumps):
    ranks = launched(world_size, dtype, executable, dumps)
    results = [rank["verdicts"][(g, variant, patched)] for rank in ranks]
    first = results[0]
    assert "exception" not in first, first.get("exception")
    assert first["error"] is None, f"normcheck rejected the dump: {first['error']}"
    assert all(r == first for r in results), "the ranks did not get the same verdict"
    want, name = tiny_lm.expected(variant, g)
    assert first["verdict"] == want, first["message"]
    if name is not None:
        named = first["diagnosis"] if want == "fail" else first["could_hide"]
        assert name in named, first["message"]


def update_cases():
    for world_size, dtype in CONFIGS:
        for g in (1, 2):
            for patched in (False, True):
                for hook in HOOKS:
                    yield pytest.param(world_size, dtype, g, patched, hook,
                                       id=f"w{world_size}-{dtype}-g{g}-{'patched' if patched else 'explicit'}-{hook or 'allreduce'}")


@pytest.mark.parametrize("world_size, dtype, g, patched, hook", update_cases())
def test_update_unchanged(world_size, dtype, g, patched, hook, executable, dumps):
    """AdamW with weight decay and clipping: the weights after one step are bitwise those without the probe."""
    ranks = launched(world_size, dtype, executable, dumps)
    for rank, results in enumerate(ranks):
        update = results["updates"][(g, patched, hook)]
        assert update["equal"], f"rank {rank}: the probed update differs from the unprobed one"

