"""The names the package spells are the core's: ``normcheck names --json`` lists them from the tables that define
them (the name tables of the objectives, reducers, dtypes and verdicts; the strategy table and the gate's tables of
other names and factors), and the package's copies are held to those lists here: the ``Literal`` types of
normcheck.options (mypy needs them written out) and the names normcheck.remedies keys its remedies on.

Standard library only: the executable ($NORMCHECK) is run, nothing else.
"""

import json
import os
import re
import subprocess

import pytest

from normcheck import options
from normcheck._probe_document import ROUNDOFF
from normcheck.remedies import REMEDIES

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cases")


@pytest.fixture(scope="module")
def core(executable):
    """``normcheck names --json``: {kind: the core's names in its order}."""
    printed = subprocess.run([executable, "names", "--json"], capture_output=True, text=True, check=True).stdout
    listed = json.loads(printed)
    assert listed.pop("format") == "normcheck-names/1"
    return listed


COPIES = {"objectives": options.OBJECTIVES, "reducers": options.REDUCERS, "dtypes": options.DTYPES,
          "float_dtypes": options.FLOAT_DTYPES}
"""The core's kind of name → the package's Literal type of it, as its tuple."""


def list_differences(kind, copied, listed):
    """How the package's list of ``kind`` names differs from the core's: a name missing, one the core does not
    have, or another order; empty when they are equal."""
    problems = [f"{kind}: the core has {name!r}, the package does not" for name in listed if name not in copied]
    problems += [f"{kind}: {name!r} is not a name of the core" for name in copied if name not in listed]
    if not problems and list(copied) != list(listed):
        problems.append(f"{kind}: {list(copied)} is in another order than the core's {list(listed)}")
    return problems


def name_problem(name, core, mesh=(), whole=()):
    """Why ``name`` is no name the gate gives, by the grammar ``normcheck names`` states (None when it is one): a
    normalization or another name; "objective" and a factor; a normalization and a factor, or another objective in
    parentheses. A factor is one of the core's, a plain number, the size of the dimensions named in ``mesh``, or
    the product of those named in ``whole`` (every dimension of a mesh with replicas)."""
    bases = set(core["normalizations"]) | set(core["other_names"])
    if name in bases or re.fullmatch(r"count_of\([a-z][a-z0-9_]*\)", name):
        return None
    sizes = [f"({'·'.join(names)})" for names in (mesh, whole) if len(names) > 1]
    factors = set(core["factors"]) | {f"{how}{size}" for size in [*mesh, *sizes] for how in ("×", "/")}

    def is_factor(text):
        return text in factors or re.fullmatch(r"(×|/|×G/)[0-9]+(/[0-9]+)?", text) is not None

    for base in ["objective", *core["normalizations"]]:
        if name.startswith(base):
            rest = name[len(base):]
            if is_factor(rest) or (base != "objective" and rest in {f"({o})" for o in core["objectives"]}):
                return None
    return f"{name!r} is no name the gate gives"


def test_the_literal_types_are_the_core_s_names_in_its_order(core):
    for kind, copied in COPIES.items():
        assert list_differences(kind, copied, core[kind]) == []
    assert sorted(ROUNDOFF) == sorted(core["float_dtypes"]), "the probe's unit roundoffs, one per float dtype"


@pytest.mark.parametrize("planted", ["a name missing", "a name misspelt", "another order"])
def test_a_literal_that_differs_from_the_core_is_caught(core, planted):
    objectives = list(options.OBJECTIVES)
    wrong = {"a name missing": objectives[:-1], "a name misspelt": ["token_maen", *objectives[1:]],
             "another order": objectives[::-1]}[planted]
    assert list_differences("objectives", wrong, core["objectives"]) != []


def test_every_remedy_is_keyed_on_a_name_the_gate_gives(core):
    assert [problem for problem in (name_problem(name, core) for name in REMEDIES) if problem] == []


@pytest.mark.parametrize("misspelt", ["local_maen", "objective×Q", "objective/GG", "local_mean(token_maen)",
                                      "head: local_mean", "objectivé/G", "count_of(MTP)", "term mtp: main_count"])
def test_a_remedy_for_a_name_the_gate_never_gives_is_caught(core, misspelt):
    assert name_problem(misspelt, core) is not None


def test_every_name_the_gate_gave_on_the_cases_fits_the_listing(core, executable):
    """The grammar is the gate's: every name of every diagnosis on cases/groups, cases/gate, cases/mesh,
    cases/weighted and cases/terms (a site's or a term's after its prefix) is one the listing describes."""
    folders = [os.path.join(CASES, folder) for folder in ("groups", "gate", "mesh", "weighted", "terms")]
    printed = subprocess.run([executable, "check", "--json", *folders], capture_output=True, text=True).stdout
    given = []
    for report in json.loads(printed)["reports"]:
        gate = report.get("gate") or {}
        dims = report.get("mesh", [])
        mesh = [d["name"] for d in dims if d["role"] != "data"]
        whole = [d["name"] for d in dims if d["size"] > 1] if any(d["role"] == "replica" for d in dims) else []
        for entry in [*gate.get("diagnosis", []), *gate.get("could_hide", [])]:
            given.append((entry["name"].split(": ")[-1], mesh, whole))
    assert len(given) >= 60
    assert [problem for problem in (name_problem(name, core, mesh, whole) for name, mesh, whole in given)
            if problem] == []
