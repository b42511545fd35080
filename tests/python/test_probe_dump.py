"""The per-group shapes of the normcheck/1 writer: compact groups, sequences, vector gradients, witness, sites.

Standard library only. Each test checks the written document (the contract the gate reads), and the
writer's refusals of what the format forbids.
"""

import json

import pytest

from normcheck import dump


def rendered(document):
    """The document as normcheck reads it: rendered text, parsed back."""
    return json.loads(dump.render(document))


def test_a_compact_group_leaves_out_what_it_does_not_need():
    assert dump.group(3) == {"count": 3, "value": 1}
    assert dump.group(3, value=2.5, padding=2) == {"count": 3, "value": "0x1.4000000000000p+1", "padding": 2}
    assert dump.group(0, padding=4) == {"count": 0, "padding": 4}
    assert dump.group(0) == {"count": 0}
    for wrong in (-1, 1.5, True):
        with pytest.raises(ValueError):
            dump.group(wrong)
    with pytest.raises(ValueError):
        dump.group(2, padding=-1)


def test_a_microbatch_with_sequences():
    value = dump.sequences([dump.group(2), [1, None, 1], [], dump.group(0, padding=3)])
    assert value == {"sequences": [{"count": 2, "value": 1}, [1, None, 1], [], {"count": 0, "padding": 3}]}
    with pytest.raises(ValueError, match="at least one sequence"):
        dump.sequences([])


def test_documents_of_groups_keep_every_shape():
    document = dump.document(
        [[dump.group(3, padding=1), dump.sequences([dump.group(2), dump.group(0, padding=5)])],
         [dump.sequences([[1, 1, None]])]],
        world_size=2, reducer="mean", theta=0, objective="sequence_mean",
        observed=dump.observed(dtype="float32", per_rank=[[-0.25, -0.125, 0.0, -0.5]] * 2,
                               witness=[[-0.5, -0.25, 0.0, -1.5]] * 2))
    read = rendered(document)
    assert read["objective"] == "sequence_mean" and read["theta"] == 0
    assert read["ranks"] == [
        {"microbatches": [{"count": 3, "value": 1, "padding": 1},
                          {"sequences": [{"count": 2, "value": 1}, {"count": 0, "padding": 5}]}]},
        {"targets": {"sequences": [[1, 1, None]]}},
    ]
    assert read["observed"]["per_rank"] == [["-0x1.0000000000000p-2", "-0x1.0000000000000p-3", "0x0.0p+0",
                                             "-0x1.0000000000000p-1"]] * 2
    assert read["observed"]["witness"][0][3] == "-0x1.8000000000000p+0"


def test_the_nominal_accumulation_steps_are_a_positive_count():
    assert rendered(dump.document([[dump.group(2)]], accumulation_steps=4))["accumulation_steps"] == 4
    assert "accumulation_steps" not in rendered(dump.document([[dump.group(2)]]))
    for wrong in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="accumulation_steps"):
            dump.document([[dump.group(2)]], accumulation_steps=wrong)


def test_the_constant_objective_takes_a_normalizer_and_only_it():
    read = rendered(dump.document([[dump.group(2)]], objective="constant", normalizer=30))
    assert read["objective"] == "constant" and read["normalizer"] == 30
    with pytest.raises(ValueError, match="normalizer"):
        dump.document([[dump.group(2)]], objective="constant")
    with pytest.raises(ValueError, match="normalizer"):
        dump.document([[dump.group(2)]], objective="token_mean", normalizer=3)
    with pytest.raises(ValueError, match="objective"):
        dump.document([[dump.group(2)]], objective="sequence_median")


def test_weighted_sequences_are_lists_mirrored_by_their_weights():
    read = rendered(dump.document([[{"sequences": [[1, None], [1]]}]],
                                  weights=[[{"sequences": [[0.5, None], [2]]}]]))
    assert read["objective"] == "weighted_token_mean"
    assert read["ranks"][0]["weights"] == {"sequences": [["0x1.0000000000000p-1", None], [2]]}
    with pytest.raises(ValueError, match="lists, not as compact groups"):
        dump.document([[dump.group(2)]], weights=[[[1, 1]]])
    with pytest.raises(ValueError, match="weighted tokens are written as lists"):
        dump.document([[{"sequences": [dump.group(1)]}]], weights=[[{"sequences": [[1]]}]])
    with pytest.raises(ValueError, match="mirror"):
        dump.document([[{"sequences": [[1], [1]]}]], weights=[[{"sequences": [[1]]}]])


def test_observed_vectors_witness_and_sites():
    seen = dump.observed(dtype="float64", per_rank=[[-1.0, float("nan")], [-1.0, float("nan")]],
                         witness=[[-2.0, 0.0], [-2.0, 0.0]],
                         sites=[dump.site("layers.0", [[-0.5, 0.0]] * 2, [[-1.0, 0.0]] * 2),
                                dump.site("head", [[-1, 0]] * 2)])
    assert seen["per_rank"][0] == ["-0x1.0000000000000p+0", "nan"]
    assert seen["sites"] == [
        {"name": "layers.0", "per_rank": [["-0x1.0000000000000p-1", "0x0.0p+0"]] * 2,
         "witness": [["-0x1.0000000000000p+0", "0x0.0p+0"]] * 2},
        {"name": "head", "per_rank": [[-1, 0]] * 2},
    ]
    assert dump.observed(dtype="float32", gradient=[-1.0, -2.0])["gradient"] == ["-0x1.0000000000000p+0",
                                                                               "-0x1.0000000000000p+1"]
    assert dump.observed(dtype="float32", per_rank=[-1.0, -1.0])["per_rank"] == ["-0x1.0000000000000p+0"] * 2


def test_observed_refuses_what_the_format_forbids():
    with pytest.raises(ValueError, match="mixes numbers and vectors"):
        dump.observed(dtype="float32", per_rank=[-1.0, [-1.0]])
    with pytest.raises(ValueError, match="beside a per-group"):
        dump.observed(dtype="float32", per_rank=[-1.0, -1.0], witness=[[-1.0], [-1.0]])
    with pytest.raises(ValueError, match="witness has 1 ranks"):
        dump.observed(dtype="float32", per_rank=[[-1.0], [-1.0]], witness=[[-1.0]])
    with pytest.raises(ValueError, match="unique"):
        dump.observed(dtype="float32", per_rank=[[-1.0]], sites=[dump.site("a", [[-1.0]]), dump.site("a", [[-1.0]])])
    with pytest.raises(ValueError, match="non-empty name"):
        dump.site("", [[-1.0]])
    with pytest.raises(ValueError, match="at least one component"):
        dump.observed(dtype="float32", per_rank=[[]])
    with pytest.raises(TypeError):  # a float left in a site entry is never written with repr()
        dump.render(dump.document([[dump.group(1)]], observed=dict(
            dump.observed(dtype="float32", per_rank=[[-1.0]]), sites=[{"name": "a", "per_rank": [[-1.0]]}])))


def test_every_compact_form_reads_back_through_normcheck(tmp_path, executable):
    """The executable reads the forms: compact groups, sequences, an empty rank, vector gradients, witness."""
    import subprocess

    path = tmp_path / "groups.json"
    dump.write(path, dump.document(
        [[dump.sequences([dump.group(2), dump.group(1, padding=1)])], [dump.group(0, padding=3)]],
        world_size=2, reducer="mean", theta=0,
        observed=dump.observed(dtype="float64", per_rank=[[-2 / 3, -1 / 3, 0.0]] * 2,
                               witness=[[-1.0, -1 / 3, 0.0]] * 2)))
    done = subprocess.run([executable, "check", "--json", str(path)], capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)["reports"][0]
    assert report.get("status") != "error", report.get("error")
    assert report["valid_tokens"] == 3 and report["gate"]["verdict"] in ("pass", "inconclusive")
