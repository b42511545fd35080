"""Which optimizer steps a run's callback judges (``due``), and the record and log of them (``JudgedSteps``)."""

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
from normcheck import due  # noqa: E402
from normcheck.integrations._shared import JudgedSteps  # noqa: E402
from normcheck.torch import ProbeError  # noqa: E402


def test_due_is_the_first_step_and_every_kth_after_it():
    assert [s for s in range(12) if due(s)] == [0]
    assert [s for s in range(12) if due(s, first=3)] == [3]
    assert [s for s in range(12) if due(s, every=5)] == [0, 5, 10]
    assert [s for s in range(12) if due(s, first=2, every=4)] == [2, 6, 10]
    assert [s for s in range(4) if due(s, every=1)] == [0, 1, 2, 3]


@pytest.mark.parametrize("first, every", [(-1, None), (0, 0), (0, -2), (1.5, None), (0, 2.0), (True, None),
                                          (0, True)])
def test_a_schedule_that_names_no_step_is_refused(first, every):
    with pytest.raises(ValueError):
        JudgedSteps(first=first, every=every)


def verdict(status, name, diagnosis=()):
    return SimpleNamespace(status=status, verdict=name, diagnosis=tuple(diagnosis), could_hide=(),
                           failed_checks=("objective",) if status == "fail" else (), file="/nonexistent/dump.json")


def test_each_step_is_judged_once_and_logged_by_rank_0(tmp_path):
    log = tmp_path / "logs" / "normcheck.jsonl"
    steps = JudgedSteps(every=2, log=str(log))
    assert not steps.any
    assert steps.due(0) and not steps.due(1) and steps.due(2)
    steps.judged(0, verdict("pass", "pass"))
    assert not steps.due(0), "a judged step is not judged again"
    steps.judged(2, verdict("fail", "fail", ["local_mean"]))
    steps.failed(4, ProbeError("the probe saw no loss this step"))
    assert steps.any and [s for s, _ in steps.verdicts] == [0, 2] and [s for s, _ in steps.errors] == [4]
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert lines == [
        {"step": 0, "status": "pass", "verdict": "pass", "diagnosis": [], "could_hide": [], "failed_checks": [],
         "dump": None},
        {"step": 2, "status": "fail", "verdict": "fail", "diagnosis": ["local_mean"], "could_hide": [],
         "failed_checks": ["objective"], "dump": None},
        {"step": 4, "status": "error", "error": "the probe saw no loss this step"},
    ]
    other = JudgedSteps(every=2, log=str(tmp_path / "other.jsonl"), rank=1)
    other.judged(0, verdict("pass", "pass"))
    assert not (tmp_path / "other.jsonl").exists(), "only rank 0 writes the log"


def test_a_run_that_never_reached_its_step_is_an_error():
    error = JudgedSteps(first=7).never_judged(3)
    assert isinstance(error, ProbeError) and "training ended at step 3 before step 7 was judged" in str(error)
