"""normcheck.native from a checkout, where the package has no extension, and its Python side on stand-ins.

The extension itself (built by ``pip install .``) is compared with the executable report for report over
every file of cases/ in tests/package/pip_install.py. Here: what the module says without it, and that it
reads what an extension returns as strictly as run_check reads the executable's output (a stale
extension, text that is not JSON, a report of another shape, reports left out of a folder).
"""

import json
import sys
import types

import pytest

import normcheck
from normcheck import native
from normcheck.check import NormcheckError

PASSING = {"file": "f.json", "status": "pass", "failures": [],
           "gate": {"verdict": "pass", "text": "gate (float32): the gradient is 1 times the objective's\n"}}


def test_a_checkout_has_no_extension_and_says_how_to_get_one():
    assert not native.available()
    with pytest.raises(NormcheckError, match=r"no native extension \(normcheck._core\): `pip install .`.*python3-dev"):
        native.check("f.json")
    with pytest.raises(NormcheckError, match="no native extension"):
        native.check_text("{}")
    with pytest.raises(NormcheckError, match="no native extension"):
        native.names()


@pytest.fixture
def extension(monkeypatch):
    """A stand-in for normcheck._core whose answers a test sets."""
    fake = types.ModuleType("normcheck._core")
    fake.version = normcheck.__version__
    fake.answer = {"format": "normcheck-report/1", "reports": [PASSING]}
    fake.skipped = []
    fake.calls = []

    def check_paths_json(paths, require_gate, jobs):
        fake.calls.append(("paths", paths, require_gate, jobs))
        return (fake.answer if isinstance(fake.answer, str) else json.dumps(fake.answer)), list(fake.skipped)

    def check_text_json(text, source, require_gate):
        fake.calls.append(("text", text, source, require_gate))
        return fake.answer if isinstance(fake.answer, str) else json.dumps(fake.answer)

    fake.check_paths_json = check_paths_json
    fake.check_text_json = check_text_json
    fake.names = {"format": "normcheck-names/1", "reducers": ["mean", "sum"]}
    fake.names_json = lambda: json.dumps(fake.names)
    monkeypatch.setitem(sys.modules, "normcheck._core", fake)
    return fake


def test_the_options_reach_the_extension_and_its_reports_become_verdicts(extension):
    assert native.available()
    [verdict] = native.check(["a.json"], jobs=3)
    assert verdict.passed and verdict.file == "f.json"
    [verdict] = native.check("b.json", require_gate=False)
    assert extension.calls == [("paths", ["a.json"], True, 3), ("paths", ["b.json"], False, 1)]
    assert native.check_text("{...}", name="mine.json").passed
    assert extension.calls[-1] == ("text", "{...}", "mine.json", True)


def test_the_extension_lists_its_names_and_nothing_else_is_taken_for_them(extension):
    assert native.names() == extension.names
    extension.names = {"format": "normcheck-report/1", "reports": []}
    with pytest.raises(NormcheckError, match="not normcheck-names/1"):
        native.names()


def test_a_stale_extension_is_refused(extension):
    extension.version = "0.0.1"
    with pytest.raises(NormcheckError, match="version 0.0.1, the package"):
        native.check("f.json")


@pytest.mark.parametrize("answer", ["not json", json.dumps({"reports": [{"file": "f.json", "status": "maybe"}]}),
                                    json.dumps({"reports": []}), json.dumps([{"reports": []}])])
def test_what_is_not_a_report_is_an_error(extension, answer):
    extension.answer = answer
    with pytest.raises(NormcheckError, match="not JSON|not shaped|nothing to check"):
        native.check("f.json")


def test_reports_left_out_of_a_folder_are_named_in_a_warning(extension):
    extension.skipped = ["out/report.json"]
    with pytest.warns(UserWarning, match="skipped out/report.json: a report normcheck wrote"):
        native.check("out")


@pytest.mark.parametrize("jobs", [0, 1025, True, 2.0])
def test_jobs_is_a_count(extension, jobs):
    with pytest.raises(ValueError, match="jobs is a number of files"):
        native.check("f.json", jobs=jobs)


def test_nothing_to_check_and_bytes_are_refused(extension):
    with pytest.raises(NormcheckError, match="nothing to check"):
        native.check([])
    with pytest.raises(TypeError, match="text \\(str\\), not bytes"):
        native.check_text(b"{}")
