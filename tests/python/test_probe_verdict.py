"""normcheck.check.Verdict: failure names kept apart from could-hide names, the weight table, sites, notes.

Standard library only: the reports are written here in the shape ``check --json`` prints (contract:
the gate's ``weights`` and ``sites``), so that the reading and the message are tested on their own.
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


def report(verdict, diagnosis=(), could_hide=(), checks=(), weights=None, sites=(), ratio=None):
    gate = {"verdict": verdict, "observed": "-1/2", "objective": "-3/4", "bound": "1/1000", "dtype": "float32",
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
    assert "check denominator failed" in verdict.message
    assert "could hide" in verdict.message and "local_mean" in verdict.message


TABLE_TEXT = "weights per group (what the code gave a token, what the objective gives it):\n  row 3 outside\n"


def test_the_weight_table_is_typed_and_in_the_message():
    table = {"groups": 5, "text": TABLE_TEXT, "rows": rows(5, outside=(3,)), "omitted": 0}
    verdict = check._verdict(report("fail", diagnosis=["microbatch_mean"], weights=table), True)
    assert verdict.weights is not None and verdict.weights.groups == 5 and len(verdict.weights.rows) == 5
    row = verdict.weights.rows[3]
    assert (row.group, row.rank, row.microbatch, row.sequence, row.tokens) == (3, 1, 1, 0, 4)
    assert (row.code, row.objective, row.ratio, row.within_bound) == ("1/9", "1/6", "6/9", False)
    assert verdict.weights.rows[1].sequence is None


def test_the_message_prints_the_executable_s_table_as_it_is():
    """One renderer: the message holds the report's table text line by line, indented, and nothing of its own."""
    table = {"groups": 30, "text": TABLE_TEXT, "rows": rows(30, outside=(25, 27)), "omitted": 220}
    message = check._verdict(report("fail", ratio="7/3", weights=table), True).message
    assert "unexplained: observed / objective = 7/3" in message
    assert "\n".join(f"  {line}" for line in TABLE_TEXT.splitlines()) in message
    assert "6/31" not in message  # no row rebuilt from the typed rows


def test_a_passing_verdict_carries_the_table_but_does_not_print_it():
    verdict = check._verdict(report("pass", weights={"groups": 1, "text": TABLE_TEXT, "rows": rows(1), "omitted": 0}),
                             True)
    assert verdict.passed and verdict.weights is not None and "weights per group" not in verdict.message


def test_sites_are_read_and_the_differing_one_is_shown():
    site = {"name": "layers.0", "verdict": "fail", "diagnosis": [entry("objective/G")],
            "weights": {"groups": 2, "rows": rows(2), "omitted": 0}}
    other = {"name": "head", "verdict": "pass", "diagnosis": [],
             "weights": {"groups": 2, "rows": rows(2), "omitted": 0}}
    verdict = check._verdict(report("fail", sites=[site, other]), True)
    assert [(s.name, s.verdict, s.diagnosis) for s in verdict.sites] == [("layers.0", "fail", ("objective/G",)),
                                                                         ("head", "pass", ())]
    assert verdict.sites[0].weights is not None and len(verdict.sites[0].weights.rows) == 2
    assert "site layers.0: fail, diagnosis objective/G" in verdict.message and "site head" not in verdict.message


def test_sites_that_weigh_as_p_does_are_said_once():
    """A loss normalized wrong makes every site fail with p's table: one line, not each site's diagnosis again;
    a site whose table differs from p's is still shown in full."""
    table = {"groups": 3, "rows": rows(3, outside=(0, 1, 2)), "omitted": 0}
    alike = [{"name": n, "verdict": "fail", "diagnosis": [entry("microbatch_mean")], "weights": table}
             for n in ("embed", "head")]
    differing = {"name": "layer", "verdict": "fail", "diagnosis": [entry("objective/G")],
                 "weights": {"groups": 3, "rows": rows(3, outside=(1,))[::-1], "omitted": 0}}
    verdict = check._verdict(report("fail", diagnosis=("microbatch_mean", "embed: microbatch_mean",
                                                      "head: microbatch_mean", "layer: objective/G"),
                                    weights=table, sites=[alike[0], differing, alike[1]]), True)
    assert "sites embed, head: the same weights as p" in verdict.message
    assert "site embed:" not in verdict.message and "embed: microbatch_mean =" not in verdict.message
    assert "site layer: fail, diagnosis objective/G" in verdict.message
    assert "layer: objective/G =" in verdict.message
    assert verdict.explanations == ("microbatch_mean", "embed: microbatch_mean", "head: microbatch_mean",
                                    "layer: objective/G"), "the names stay the gate's"


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
