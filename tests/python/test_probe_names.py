"""The table of loops against the gate without floats: each loop's exact weight table, as the probe would
write it, is judged by normcheck and must get the table's verdict and names.

Fast (no process group, one run of the executable for every loop, W and G), so that a name the gate gives
differently shows here first, apart from what the measurement of a real step adds; test_ddp.py then
checks that the probe measures these weights in real DDP steps and that the gate names those too.
"""

import json
from fractions import Fraction

import pytest

pytest.importorskip("torch")

import probe_loops  # noqa: E402
from normcheck import dump  # noqa: E402
from normcheck.check import run_check  # noqa: E402

_verdicts = {}


def cases():
    for world_size in (2, 3):
        for loop, g in probe_loops.cases(world_size):
            if loop.name.startswith("weighted"):
                continue
            marks = [pytest.mark.xfail(strict=True, reason=loop.known)] if loop.known else []
            yield pytest.param(loop.name, world_size, g, id=f"w{world_size}-g{g}-{loop.name}", marks=marks)


@pytest.fixture(scope="module")
def verdicts(executable, tmp_path_factory):
    if not _verdicts:
        folder = tmp_path_factory.mktemp("exact")
        paths = {}
        for param in cases():
            name, world_size, g = param.values
            path = folder / f"{name}-w{world_size}-g{g}.json"
            dump.write(path, probe_loops.exact_document(probe_loops.BY_NAME[name], world_size, g))
            paths[str(path)] = (name, world_size, g)
        for verdict in run_check(list(paths), executable=executable):
            _verdicts[paths[verdict.file]] = verdict
    return _verdicts


@pytest.mark.parametrize("name, world_size, g", list(cases()))
def test_the_exact_table_is_named_as_the_loop_table_says(name, world_size, g, verdicts):
    loop = probe_loops.BY_NAME[name]
    verdict = verdicts.get((name, world_size, g))
    problem = probe_loops.named_as_expected(loop, world_size, g, verdict)
    assert problem is None, f"{problem}\n{verdict.message if verdict else ''}"


def test_the_exact_documents_are_the_probe_s_shape():
    """The exact document of a loop has the groups, sites and witness the probe writes."""
    document = json.loads(dump.render(probe_loops.exact_document(probe_loops.BY_NAME["global_count"], 2, 1)))
    assert document["ranks"][0] == {"targets": {"sequences": [{"count": 5, "value": 1}, {"count": 3, "value": 1,
                                                                                         "padding": 2}]}}
    assert [site["name"] for site in document["observed"]["sites"]] == ["embed", "layer", "head"]
    counts = probe_loops.Counts(probe_loops.window("uneven", 1, 2))
    assert Fraction(document["observed"]["per_rank"][0][0]) == Fraction(-5, counts.N)
