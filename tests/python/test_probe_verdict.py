"""normcheck.check.Verdict: failure names kept apart from could-hide names, the weight table, sites, notes.

Standard library only: the reports are written here in the shape ``check --json`` prints (contract:
the gate's ``weights``, ``sites`` and ``text``), so that the reading and the message are tested on their own.
The message's wording is the executable's (``gate.text``): tests/python/test_check.py compares it with
``normcheck check``'s text report on every file of cases/groups, cases/gate and cases/mesh.
"""

import pytest

from normcheck import check
from normcheck.check import NormcheckFailure, Verdict


def entry(name, value="1/2"):
    return {"name": name, "value": value, "bound": "1/1000", "computed": f"what {name} computes",
            "why_wrong": f"why {name} is wrong", "instead": "backpropagate W·S/N"}


def rows(count, outside=()):
    return [{"group": k, "rank": k % 2, "microbatch": k // 2, "sequence": None if k % 3 else 0, "tokens": k + 1,
             "code": f"1/{6 + k}", "code_decimal": f"0.{k:03d}", "objective": "1/6", "objective_decimal": "0.1666667",
             "ratio": f"6/{6 + k}", "ratio_decimal": f"0.{k:02d}", "within_bound": k not in outside}
            for k in range(count)]


def gate_text(verdict, diagnosis=(), could_hide=(), checks=()):
    """A stand-in for the executable's ``gate.text``: some of its lines, in its layout."""
    lines = ["gate (float32): the gradient is 0.67 times the token_mean objective's"]
    lines += [f"  {n:<18}{'ok    ' if p else 'FAIL  '}{n} detail" for n, p in checks]
    lines += [f"  verdict: {verdict}"]
    lines += [f"  diagnosis: {n} = 1/2 (≈ 0.5)" for n in diagnosis]
    lines += [f"  could hide: {n} = 1/2 (≈ 0.5)" for n in could_hide]
    return "".join(f"{line}\n" for line in lines)


def report(verdict, diagnosis=(), could_hide=(), checks=(), weights=None, sites=(), ratio=None):
    gate = {"verdict": verdict, "observed": "-1/2", "objective": "-3/4", "bound": "1/1000", "dtype": "float32",
            "text": gate_text(verdict, diagnosis, could_hide, checks),
            "checks": [{"name": n, "passed": p, "detail": f"{n} detail"} for n, p in checks],
            "diagnosis": [entry(n) for n in diagnosis], "could_hide": [entry(n) for n in could_hide]}
    if ratio is not None:
        gate["ratio"] = ratio
    if weights is not None:
        gate["weights"] = weights
    if sites:
        gate["sites"] = list(sites)
    return {"file": "dump.json", "status": "pass" if verdict == "pass" else "fail", "world_size": 2,
            "reducer": "mean", "valid_tokens": 12, "gate": gate}


def test_failure_names_and_could_hide_names_are_kept_apart():
    """The negative-control trap: on a correct step with equal counts local_mean only could hide."""
    inconclusive = check._verdict(report("inconclusive", could_hide=["local_mean"]), True)
    assert inconclusive.could_hide == ("local_mean",) and inconclusive.diagnosis == ()
    assert inconclusive.explanations == ()  # `"local_mean" in e.explanations` no longer passes on a correct step
    failed = check._verdict(report("fail", diagnosis=["local_mean"], checks=[("objective", False)]), True)
    assert failed.explanations == failed.diagnosis == ("local_mean",) and failed.failed_checks == ("objective",)
    assert failed.details[0].computed == "what local_mean computes" and failed.details[0].instead
    raised = NormcheckFailure(inconclusive.message, [inconclusive])
    assert raised.explanations == () and raised.could_hide == ("local_mean",) and raised.verdict == "inconclusive"


def test_a_failure_by_a_check_shows_what_could_hide_too():
    """divided_by with equal counts: the denominator check fails, the gradient is the objective's, local_mean
    could hide. The failure's names are empty; the message says which check failed and what could hide."""
    verdict = check._verdict(report("fail", could_hide=["local_mean"],
                                    checks=[("replicas", True), ("denominator", False), ("objective", True)]), True)
    assert verdict.explanations == () and verdict.could_hide == ("local_mean",)
    assert verdict.failed_checks == ("denominator",)
    assert "denominator       FAIL  denominator detail" in verdict.message
    assert "could hide: local_mean" in verdict.message


TABLE_TEXT = "weights per group (what the code gave a token, what the objective gives it):\n  row 3 outside\n"
GATE_TEXT = f"gate (float32): the gradient is 7/3 times the objective's\n  verdict: fail\n  {TABLE_TEXT}"


def test_the_weight_table_is_typed_and_in_the_message():
    table = {"groups": 5, "text": TABLE_TEXT, "rows": rows(5, outside=(3,)), "omitted": 0}
    verdict = check._verdict(report("fail", diagnosis=["microbatch_mean"], weights=table), True)
    assert verdict.weights is not None and verdict.weights.groups == 5 and len(verdict.weights.rows) == 5
    row = verdict.weights.rows[3]
    assert (row.group, row.rank, row.microbatch, row.sequence, row.tokens) == (3, 1, 1, 0, 4)
    assert (row.code, row.objective, row.ratio, row.within_bound) == ("1/9", "1/6", "6/9", False)
    assert verdict.weights.rows[1].sequence is None


def test_the_message_prints_the_executable_s_text_as_it_is():
    """One renderer: after its first line the message is the report's gate text line by line, two spaces in, then
    the file's failures that are not the gate's, and nothing of its own."""
    table = {"groups": 30, "text": TABLE_TEXT, "rows": rows(30, outside=(25, 27)), "omitted": 220}
    written = report("fail", diagnosis=["local_mean"], could_hide=["local_sum"], ratio="7/3", weights=table,
                     sites=[{"name": "head", "verdict": "fail", "diagnosis": [entry("objective/G")],
                             "weights": table}])
    written["gate"]["text"] = GATE_TEXT
    written["failures"] = ["gate: fail", "expect_gate: verdict pass, but the gate concluded fail"]
    lines = check._verdict(written, True).message.splitlines()
    assert lines[0] == "normcheck: the gate FAILED on dump.json (W = 2, reducer mean, float32, N = 12)"
    assert lines[1:] == [f"  {line}" for line in GATE_TEXT.splitlines()] + [f"  {written['failures'][1]}"]


def test_a_passing_verdict_carries_the_table_and_prints_the_gate_s_text():
    verdict = check._verdict(report("pass", weights={"groups": 1, "text": TABLE_TEXT, "rows": rows(1), "omitted": 0}),
                             True)
    assert verdict.passed and verdict.weights is not None
    assert verdict.message.splitlines()[1:] == [
        "  gate (float32): the gradient is 0.67 times the token_mean objective's", "    verdict: pass"]


def test_a_report_without_the_gate_s_text_is_refused():
    """An executable older than the package prints no gate.text: refused, not a message without its diagnosis."""
    old = report("fail", diagnosis=["local_mean"])
    del old["gate"]["text"]
    with pytest.raises(check.NormcheckError, match="older than the package"):
        check.well_shaped_reports({"reports": [old]}, ["dump.json"], "normcheck check --json")


def test_sites_are_read_and_the_differing_one_is_shown():
    site = {"name": "layers.0", "verdict": "fail", "diagnosis": [entry("objective/G")],
            "weights": {"groups": 2, "rows": rows(2), "omitted": 0}}
    other = {"name": "head", "verdict": "pass", "diagnosis": [],
             "weights": {"groups": 2, "rows": rows(2), "omitted": 0}}
    verdict = check._verdict(report("fail", sites=[site, other]), True)
    assert [(s.name, s.verdict, s.diagnosis) for s in verdict.sites] == [("layers.0", "fail", ("objective/G",)),
                                                                         ("head", "pass", ())]
    assert verdict.sites[0].weights is not None and len(verdict.sites[0].weights.rows) == 2


def test_notes_join_the_message():
    verdict = check._verdict(report("fail", diagnosis=["local_sum"]), True).with_notes(["captured at the reduction"])
    assert (verdict.notes == ("captured at the reduction",)
            and verdict.message.endswith("note: captured at the reduction"))
    assert verdict.with_notes([]) is verdict


def test_a_verdict_pickles_with_its_failure():
    import pickle

    verdict = check._verdict(report("fail", diagnosis=["local_mean"], weights={"groups": 1, "rows": rows(1)}), True)
    raised = pickle.loads(pickle.dumps(NormcheckFailure(verdict.message, [verdict])))
    assert raised.diagnosis == ("local_mean",) and raised.weights == verdict.weights
    assert isinstance(raised.verdicts[0], Verdict)


@pytest.mark.parametrize("verdict", ["fail", "inconclusive"])
def test_raise_for_failure(verdict):
    with pytest.raises(AssertionError):
        check._verdict(report(verdict), True).raise_for_failure()
