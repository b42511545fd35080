"""The picture of a weight table and the remedies, read against the reports the executable prints on cases/groups.

No torch and no processes: every report is ``normcheck check --json`` on a file of cases/groups, and
every number the tests compare is read from that report's JSON.
"""

import os
import xml.etree.ElementTree as ET
from fractions import Fraction

import pytest

from normcheck import picture
from normcheck._probe_report import conclude, framed, passed_line, pointer_line
from normcheck.check import NormcheckFailure, run_check
from normcheck.remedies import FRAMEWORK_NAMES, REMEDIES, remedies, remedy

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cases", "groups")
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def verdicts(executable):
    """{case file name: its Verdict}."""
    return {os.path.basename(v.file): v for v in run_check(CASES, executable=executable)}


def drawn(report):
    """The picture of ``report``, parsed by an XML parser."""
    return ET.fromstring(picture.weight_picture(report))


def test_every_bar_is_its_group_s_ratio_from_the_report(verdicts):
    checked = 0
    for name, verdict in verdicts.items():
        if not picture.has_picture(verdict.report):
            continue
        root = drawn(verdict.report)
        assert root.tag == f"{SVG}svg"
        weights = verdict.report["gate"]["weights"]
        zero = float(root.find(f"{SVG}line[@id='zero']").get("y1"))
        one = float(root.find(f"{SVG}line[@id='one']").get("y1"))
        bars = {int(r.get("data-group")): r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"}
        empty = {int(c.get("data-group")) for c in root.iter(f"{SVG}circle")}
        labels = {int(t.get("data-group")): t.text for t in root.iter(f"{SVG}text") if t.get("class") == "ratio"}
        assert len(bars) + len(empty) == len(weights["rows"]), name
        for row in weights["rows"]:
            group = row["group"]
            if row["ratio"] is None:
                assert group in empty, (name, group)
                continue
            bar = bars[group]
            ratio = Fraction(row["ratio"])
            assert bar.get("data-ratio") == row["ratio"] and bar.get("data-rank") == str(row["rank"])
            height = float(bar.get("height")) / (zero - one)
            assert height == pytest.approx(abs(float(ratio)), rel=1e-3, abs=2e-3), (name, group)
            top = float(bar.get("y"))
            assert (top < zero) == (ratio > 0) or ratio == 0, (name, group)
            title = bar.find(f"{SVG}title").text
            for key in ("code", "code_decimal", "objective", "objective_decimal", "ratio_decimal"):
                assert str(row[key]) in title, (name, group, key)
            assert ("outside its bound" in title) == (row["within_bound"] is False)
            assert bar.get("fill") == ("#c33" if row["within_bound"] is False else "#48c")
            if len(weights["rows"]) <= 48:
                assert labels[group] == row["ratio_decimal"]
        ranks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "rank"]
        assert ranks == [f"rank {r}" for r in sorted({row["rank"] for row in weights["rows"]})]
        source = next(t.text for t in root.iter(f"{SVG}text") if t.get("class") == "source")
        assert source == f"{name}: {weights['groups']} groups, gate {verdict.report['gate']['verdict']}"
        checked += 1
    assert checked >= 20


def test_a_report_without_a_table_has_no_picture():
    assert not picture.has_picture({"gate": {"verdict": "pass"}})
    with pytest.raises(ValueError):
        picture.weight_picture({"gate": {"weights": {"rows": []}}})


def test_remedies_are_looked_up_by_the_names_the_report_gives(verdicts):
    for name, verdict in verdicts.items():
        diagnosis = [e["name"] for e in verdict.report["gate"].get("diagnosis", [])]
        for framework in FRAMEWORK_NAMES:
            found = remedies(verdict.report, framework)
            assert [n for n, _ in found] == [n for n in diagnosis if remedy(n, framework) is not None]
            if verdict.report["gate"]["verdict"] != "fail":
                assert found == [], name
    named = {n for v in verdicts.values() for n in v.explanations}
    for wanted in ("local_mean", "microbatch_mean", "count_before_shift", "count_padding", "objective/G",
                   "short_window", "local_sum"):
        assert wanted in named  # the core reports it on some case: its remedy is not for a name nobody gives
        for framework in ("transformers", "accelerate", "lightning"):
            assert remedy(wanted, framework) == REMEDIES[wanted][framework]


def test_a_composite_name_takes_its_base_s_remedy_and_a_site_s_none(verdicts):
    times_w = verdicts["local_mean_times_W.json"]
    assert times_w.explanations == ("local_mean×W",)
    assert remedies(times_w.report, "lightning") == [("local_mean×W", REMEDIES["local_mean"]["lightning"])]
    site = verdicts["site_divided.json"]
    assert all(": " in n for n in site.explanations) and remedies(site.report, "transformers") == []


def test_trl_falls_back_to_the_trainer_s_remedies(verdicts):
    report = verdicts["microbatch_mean.json"].report
    assert remedies(report, "trl") == [("microbatch_mean", REMEDIES["microbatch_mean"]["transformers"])]
    assert remedy("local_mean", "trl") == REMEDIES["local_mean"]["trl"] != REMEDIES["local_mean"]["transformers"]


def test_the_frame_puts_the_remedy_after_the_first_line_and_the_files_last(verdicts):
    verdict = verdicts["local_mean.json"]
    lines = framed(verdict, "transformers", "/x/probe.svg", kept=True).message.splitlines()
    original = verdict.message.splitlines()
    assert lines[0] == original[0]
    assert lines[1] == "  what to change in transformers' Trainer (the mathematics follows):"
    assert lines[2] == "    if local_mean: " + REMEDIES["local_mean"]["transformers"]
    assert lines[3:-1] == original[1:] and lines[-1] == "  picture of the weight table: /x/probe.svg"
    removed = framed(verdict, None, None, kept=False).message.splitlines()
    assert removed[:-1] == original and "keep=True" in removed[-1]
    passing = verdicts["correct_scaled_sum.json"]
    assert framed(passing, "transformers", None, kept=False).message == passing.message


def test_the_pass_line_and_the_pointer_compute_every_number(verdicts):
    for name in ("correct_scaled_sum.json", "sequence_mean_correct.json", "constant_correct.json"):
        report = verdicts[name].report
        microbatches = sum(r["microbatches"] for r in report["ranks"])
        objective = report["objective"]
        line = passed_line(verdicts[name], 3)
        assert line.startswith(f"normcheck: step 3 judged on {report['world_size']} ranks, "
                               f"{microbatches} microbatches, "
                               f"{report['valid_tokens']} tokens: ")
        if objective == "constant":
            assert line.endswith(f"the gradient of the loss sum over C = {report['normalizer']}")
        else:
            assert line.endswith(f"the {objective.replace('_', '-')} gradient")
    assert passed_line(verdicts["correct_scaled_sum.json"], None).startswith("normcheck: the step judged on ")
    hidden = verdicts["equal_counts.json"]
    assert pointer_line(hidden, 0) == (f"normcheck: step 0 was INCONCLUSIVE ({', '.join(hidden.could_hide)}): "
                                       "rank 0 reports the whole diagnosis")


@pytest.mark.parametrize("torchrun", [False, True])
def test_under_torchrun_rank_0_prints_the_diagnosis_before_any_rank_raises(verdicts, torchrun, monkeypatch, capsys):
    failed = verdicts["local_mean.json"]
    assert not failed.passed
    if torchrun:
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    else:
        monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    events = []
    for rank in (0, 1):
        with pytest.raises(NormcheckFailure) as raised:
            conclude(failed, rank, 0, True, lambda: events.append(("barrier", capsys.readouterr().err)))
        events.append(("raised", str(raised.value)))
    printed = [text for kind, text in events if kind == "barrier" and text]
    raised_texts = [text for kind, text in events if kind == "raised"]
    if torchrun:  # the diagnosis printed once, by rank 0, before its barrier; every rank raises one line
        assert [kind for kind, _ in events] == ["barrier", "raised", "barrier", "raised"]
        assert printed == [failed.message + "\n"]
        assert raised_texts == [pointer_line(failed, 0, "the whole diagnosis is printed above"),
                                pointer_line(failed, 0)]
    else:  # no barrier: rank 0's exception carries the diagnosis
        assert [kind for kind, _ in events] == ["raised", "raised"]
        assert raised_texts == [failed.message, pointer_line(failed, 0)]
