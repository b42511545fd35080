"""normcheck.check: finding the executable, reading its verdicts, the diagnosis message, suggest --counts.

Standard library only (no torch). Fake executables (small shell scripts) stand in where a test needs
an executable that behaves a particular way; the real one ($NORMCHECK) judges real files.
"""

import json
import os
import stat
import subprocess

import pytest

from normcheck import check, dump


def fake(folder, name, script):
    """An executable shell script `name` in `folder`."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def seed_example(path, per_rank, **observed):
    """The README's seed example with an observed gradient: rank 0 holds 0, rank 1 holds 2, 2, 2 and padding."""
    dump.write(path, dump.document([[[0]], [[2, 2, 2, None]]], world_size=2, reducer="mean", theta=0,
                                   observed=dump.observed(dtype="float32", per_rank=per_rank, **observed)))
    return path


def test_the_executable_comes_from_the_argument_then_the_environment_then_path(tmp_path, monkeypatch):
    given = fake(tmp_path, "given", "exit 0\n")
    (tmp_path / "bin").mkdir()
    on_path = fake(tmp_path / "bin", "normcheck", "exit 0\n")
    from_environment = fake(tmp_path, "from-environment", "exit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("NORMCHECK", from_environment)
    assert check.find_executable(given) == given
    assert check.find_executable() == from_environment
    monkeypatch.delenv("NORMCHECK")
    assert check.find_executable() == on_path
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(check.NormcheckError, match="NORMCHECK"):
        check.find_executable()
    with pytest.raises(check.NormcheckError, match="does not exist"):
        check.find_executable(str(tmp_path / "missing"))


def test_a_failing_gate_raises_an_assertion_error_with_the_whole_diagnosis(tmp_path, executable):
    path = seed_example(tmp_path / "local_mean.json", [-1.0, -1.0])  # S_r/n_r: (0 + (−2))/2 = −1
    with pytest.raises(AssertionError) as raised:
        check.assert_passes(path, executable=executable)
    failure = raised.value
    assert isinstance(failure, check.NormcheckFailure)
    assert failure.verdict == "fail" and failure.explanations == ("local_mean",)
    message = str(failure)
    for needed in ("FAILED", str(path), "objective         FAIL", "diagnosis: local_mean = -1", "what was computed:",
                   "why it is wrong:", "instead:", "W·Sᵣ/N"):
        assert needed in message, (needed, message)


def test_explanations_alike_on_this_dump_are_both_given_with_the_run_that_separates_them(executable):
    # Two ranks of two microbatches, each rank's S/N under DDP's mean: divided by W, or by G, for all it shows.
    case = os.path.join(os.path.dirname(__file__), "..", "..", "cases", "groups", "divided_twice_G_is_W.json")
    with pytest.raises(check.NormcheckFailure) as raised:
        check.assert_passes(case, executable=executable)
    verdict = raised.value.verdicts[0]
    assert verdict.explanations == ("global_share", "objective/G")
    alike = {e.name: e.alike for e in verdict.details}
    assert alike["global_share"] == (check.LookAlike("objective/G", "G ≠ W (here G = W = 2)"),)
    assert alike["objective/G"] == (check.LookAlike("global_share", "G ≠ W (here G = W = 2)"),)
    assert ("alike here: objective/G fits this update as well; a run with G ≠ W (here G = W = 2) tells them apart"
            in str(raised.value))


def test_a_mesh_dump_is_diagnosed_in_the_mesh_s_terms_and_its_rows_carry_coordinates(executable):
    # dp 2 × cp 2, each rank's count reduced over dp only: the rows say where each rank sits in the mesh.
    case = os.path.join(os.path.dirname(__file__), "..", "..", "cases", "mesh", "dp2_cp2_count_over_dp.json")
    with pytest.raises(check.NormcheckFailure) as raised:
        check.assert_passes(case, executable=executable)
    verdict = raised.value.verdicts[0]
    assert verdict.explanations == ("count_over_data_dims",)
    assert "reduced over dp only, not over dp × cp" in verdict.details[0].computed
    assert verdict.weights is not None
    assert [row.coords for row in verdict.weights.rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert "rank 1 (dp 0, cp 1), mb 0" in str(raised.value)


def test_a_correct_gradient_passes(tmp_path, executable):
    path = seed_example(tmp_path / "scaled_sum.json", [-1.5, -1.5], tokens_global=4, tokens_per_rank=[1, 3])
    verdicts = check.assert_passes(path, executable=executable)
    assert [v.verdict for v in verdicts] == ["pass"] and verdicts[0].passed and verdicts[0].explanations == ()


def test_inconclusive_names_what_could_hide(tmp_path, executable):
    path = tmp_path / "equal.json"  # equal counts: the local mean is the objective
    dump.write(path, dump.document([[[1, 3]], [[2, 2]]], world_size=2, theta=0,
                                   observed=dump.observed(dtype="float32", per_rank=[-2.0, -2.0])))
    [verdict] = check.run_check(path, executable=executable)
    assert verdict.verdict == "inconclusive" and not verdict.passed and "local_mean" in verdict.could_hide
    assert "could hide" in verdict.message and "local_mean" in verdict.message
    with pytest.raises(check.NormcheckFailure):
        verdict.raise_for_failure()


def test_a_rejected_dump_fails_with_its_error(tmp_path, executable):
    path = tmp_path / "rejected.json"
    path.write_text('{"format": "normcheck/1", "ranks": [{"targets": [1]}], "world_size": 2}')
    with pytest.raises(check.NormcheckFailure, match="world_size_mismatch"):
        check.assert_passes(path, executable=executable)


def test_a_file_without_observed_never_passes(tmp_path, executable):
    path = tmp_path / "no-gate.json"
    dump.write(path, dump.document([[[0]], [[2, 2, 2]]], world_size=2))
    [required] = check.run_check(path, executable=executable)
    assert not required.passed and "nothing was judged" in required.message
    [lenient] = check.run_check(path, executable=executable, require_gate=False)
    assert lenient.status == "pass"  # what --require-gate is there for


def test_nothing_to_check_is_an_error(tmp_path, executable):
    with pytest.raises(check.NormcheckError, match="nothing to check"):
        check.run_check(tmp_path, executable=executable)
    with pytest.raises(check.NormcheckError, match="nothing to check"):
        check.run_check([], executable=executable)


RECORDING = """
echo "$@" >> "{log}"
case " $* " in
  *" --require-gate "*) {require_gate} ;;
esac
cat "{report}"
exit {status}
"""


def recording_executable(tmp_path, require_gate, report, status=0):
    log = tmp_path / "arguments.log"
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(report))
    return fake(tmp_path, "normcheck", RECORDING.format(log=log, report=report_path, status=status,
                                                        require_gate=require_gate)), log


def test_require_gate_is_passed_and_an_older_executable_is_an_error_in_its_own_words(tmp_path):
    judged = {"reports": [{"file": "f.json", "status": "pass", "failures": [],
                           "gate": {"verdict": "pass", "text": "  verdict: pass\n"}}]}
    current, log = recording_executable(tmp_path, ":", judged)
    [verdict] = check.run_check("f.json", executable=current)
    assert log.read_text().split("\n")[0] == "check --json --require-gate f.json"
    assert verdict.passed
    log.unlink()
    older, log = recording_executable(tmp_path,
                                      "echo 'The following argument was not expected: --require-gate' >&2; exit 2",
                                      {"not": "reached"})
    with pytest.raises(check.NormcheckError, match="without a JSON report: The following argument was not expected"):
        check.run_check("f.json", executable=older)
    assert log.read_text().split("\n")[:2] == ["check --json --require-gate f.json", ""]  # run once, never without


def test_output_that_is_not_a_report_is_an_error(tmp_path):
    broken = fake(tmp_path, "normcheck", "echo 'Segmentation fault' >&2; exit 139\n")
    with pytest.raises(check.NormcheckError, match="139"):
        check.run_check("f.json", executable=broken)
    garbage = fake(tmp_path, "garbage", "echo 'not json'; exit 1\n")
    with pytest.raises(check.NormcheckError, match="without a JSON report"):
        check.run_check("f.json", executable=garbage)


SUGGESTION = {
    "partition": {"format": "normcheck/1", "ranks": [{"microbatches": [[3, -1], []]}, {"targets": [5]}],
                  "world_size": 2, "reducer": "mean", "theta": 0},
    "separation": "1234/5", "closest_pair": "the objective and local_mean", "inseparable": [], "required": 100,
}


def test_suggest_for_counts_reads_the_partition(tmp_path):
    script = 'cat "$3" > "{counts}"; cat "{answer}"; exit {status}\n'
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps(SUGGESTION))
    counts = tmp_path / "counts-seen.json"
    program = fake(tmp_path, "normcheck", script.format(counts=counts, answer=answer, status=0))
    suggestion = check.suggest_for_counts([[2, 0], [1]], executable=program)
    assert json.loads(counts.read_text()) == {"counts": [[2, 0], [1]]}
    assert suggestion.targets == (((3, -1), ()), ((5,),)) and suggestion.separated
    assert suggestion.separation == "1234/5" and suggestion.required == 100
    program = fake(tmp_path, "inseparable", script.format(counts=counts, answer=answer, status=1))
    assert not check.suggest_for_counts([[2, 0], [1]], executable=program).separated


def test_suggest_for_counts_with_the_real_executable(executable):
    counts = [[3, 0], [5, 2], [1, 4]]
    suggestion = check.suggest_for_counts(counts, executable=executable)
    assert [[len(batch) for batch in rank] for rank in suggestion.targets] == counts
    assert suggestion.separated and suggestion.inseparable == ()
    equal = check.suggest_for_counts([[4], [4]], executable=executable)
    assert not equal.separated and "local_mean" in equal.inseparable


@pytest.mark.parametrize("report", [
    {"reports": {"f.json": "pass"}},
    {"reports": [["f.json", "pass"]]},
    {"reports": [{"file": "f.json", "status": "pass", "gate": "pass"}]},
    {"reports": [{"file": "f.json", "status": "pass", "gate": {"verdict": "pass", "diagnosis": "local_mean"}}]},
    {"reports": [{"file": "f.json", "status": "pass", "gate": {"verdict": "pass", "checks": [["objective"]]}}]},
    {"reports": [{"file": "f.json", "status": "error", "error": "bad"}]},
    {"reports": [{"file": "f.json", "status": "maybe"}]},
])
def test_a_report_of_another_shape_is_an_error_not_an_attribute_error(tmp_path, report):
    status = 2 if any(isinstance(r, dict) and r.get("status") == "error" for r in report["reports"]) else 0
    program, _ = recording_executable(tmp_path, ":", report, status=status)
    with pytest.raises(check.NormcheckError, match="shaped"):
        check.run_check("f.json", executable=program)


def test_a_report_that_disagrees_with_the_exit_status_is_not_trusted(tmp_path):
    passing = {"reports": [{"file": "f.json", "status": "pass", "failures": [],
                            "gate": {"verdict": "pass", "text": "  verdict: pass\n"}}]}
    for status in (1, 2):
        program, _ = recording_executable(tmp_path, ":", passing, status=status)
        with pytest.raises(check.NormcheckError, match="disagree"):
            check.run_check("f.json", executable=program)
    failing = {"reports": [{"file": "f.json", "status": "fail", "failures": ["x"],
                            "gate": {"verdict": "fail", "text": "  verdict: fail\n"}}]}
    program, _ = recording_executable(tmp_path, ":", failing, status=0)
    with pytest.raises(check.NormcheckError, match="disagree"):
        check.run_check("f.json", executable=program)
    program, _ = recording_executable(tmp_path, ":", passing, status=0)
    assert check.run_check("f.json", executable=program)[0].passed


def test_an_internal_error_of_the_executable_is_an_error(tmp_path):
    crashed = fake(tmp_path, "normcheck", "echo 'normcheck: internal error: boom; please report it' >&2; exit 3\n")
    with pytest.raises(check.NormcheckError, match="internal error"):
        check.run_check("f.json", executable=crashed)


def test_counts_for_suggest_are_integers_not_rounded_or_booleans(tmp_path):
    program = fake(tmp_path, "normcheck", "exit 0\n")
    for refused in ([[2.7]], [[True]], [[-1]], [["3"]]):
        with pytest.raises(ValueError, match="non-negative integer"):
            check.suggest_for_counts(refused, executable=program)


# ---------------------------------------------------------------------------------------------------
# One wording of a verdict: the message's diagnosis is the text report's gate lines, line by line

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cases")
JUDGED = ("groups", "gate", "mesh")
"""The folders of cases whose files the gate judges: every kind of verdict, diagnosis, site and mesh."""


def text_report_gates(printed):
    """{file: its gate's lines in ``normcheck check``'s text report, without the report's six spaces}."""
    gates, lines = {}, None
    for line in printed.splitlines():
        if line.startswith(("PASS  ", "FAIL  ", "ERROR ")):
            file, lines = line[6:], None
        elif line.startswith("      gate ("):
            lines = gates[file] = [line[6:]]
        elif lines is not None and line.startswith("        "):
            lines.append(line[6:])
        else:
            lines = None
    return gates


def diagnosis_differences(printed, verdicts):
    """Each verdict whose message does not hold its file's gate lines of the text report, two spaces in, right after
    its first line, with the first line that differs; empty when every message does."""
    gates = text_report_gates(printed)
    problems = []
    for verdict in verdicts:
        expected = gates.get(verdict.file)
        if expected is None:
            if verdict.report.get("gate"):
                problems.append(f"{verdict.file}: the text report shows no gate")
            continue
        shown = verdict.message.splitlines()[1:]
        for k, want in enumerate(expected):
            got = shown[k] if k < len(shown) else None
            if got != f"  {want}":
                problems.append(f"{verdict.file}, line {k + 2}: {got!r} where the text report has {want!r}")
                break
    return problems


@pytest.fixture(scope="module")
def judged(executable):
    """The verdicts of every file of the judged folders, and ``normcheck check``'s text report on them."""
    folders = [os.path.join(CASES, folder) for folder in JUDGED]
    verdicts = check.run_check(folders, executable=executable, require_gate=False)
    printed = subprocess.run([executable, "check", "--verbose", *folders], capture_output=True, text=True).stdout
    return verdicts, printed


def test_every_message_s_diagnosis_is_the_text_report_s_line_by_line(judged):
    """One renderer: after its first line the message holds the file's gate lines as ``normcheck check`` prints them
    (the checks, the verdict, the explanations and their look-alikes, what could hide, the tables, the sites)."""
    verdicts, printed = judged
    gated = {v.file for v in verdicts if v.report.get("gate")}
    assert len(gated) >= 80 and set(text_report_gates(printed)) == gated
    assert diagnosis_differences(printed, verdicts) == []
    assert any("alike here" in v.message for v in verdicts) and any("site head: differs" in v.message for v in verdicts)


@pytest.mark.parametrize("plant", ["drops the reason", "rewrites the look-alike", "rebuilds the verdict line"])
def test_a_renderer_of_its_own_is_caught(judged, plant, monkeypatch):
    """A message that drops or rewrites a line of the executable's text (here, as the package's own renderer once
    worded a look-alike) differs from the text report, and the comparison names the file."""
    verdicts, printed = judged
    describe = check.describe

    def planted(report):
        lines = describe(report).splitlines()
        if plant == "drops the reason":
            lines = [line for line in lines if "why it is wrong:" not in line]
        elif plant == "rewrites the look-alike":
            lines = [line.replace("fits this update as well", "fits this dump as well") for line in lines]
        else:
            lines = [line.replace("verdict: fail", "verdict: FAIL") for line in lines]
        return "\n".join(lines)

    monkeypatch.setattr(check, "describe", planted)
    replanted = check.verdicts_of([v.report for v in verdicts], False)
    problems = diagnosis_differences(printed, replanted)
    assert problems and all(", line " in problem for problem in problems)
    if plant == "rewrites the look-alike":
        assert any("divided_twice_G_is_W" in problem for problem in problems)
