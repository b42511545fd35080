"""Running the ``normcheck`` executable: ``check --json`` on dumps, ``suggest --counts`` for probe values.

The executable is the one given explicitly, else ``$NORMCHECK``, else ``normcheck`` on ``PATH``.
A gate that does not pass raises ``NormcheckFailure``, an ``AssertionError`` whose message is the
diagnosis a person needs: a first line with the verdict, then the gate's part of the text report as
``normcheck check`` prints it (``gate.text`` of the JSON report: each check, each explanation's name,
what was computed, why it is wrong and what to do instead, what could hide, the weight tables, the
sites). The diagnosis is worded once, in the executable; this module only indents it.

Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import Error

__all__ = [
    "NormcheckError", "NormcheckFailure", "Verdict", "Explanation", "LookAlike", "WeightRow", "WeightTable",
    "SiteVerdict", "TermVerdict", "Suggestion", "find_executable", "run_check", "assert_passes", "describe",
    "weight_table", "suggest_for_counts",
]

PathLike = Union[str, "os.PathLike[str]"]


class NormcheckError(RuntimeError, Error):
    """The executable could not be found or run, or it printed something that is not its report."""


class NormcheckFailure(AssertionError, Error):
    """A dump that does not pass the gate; the message is normcheck's diagnosis.

    ``verdicts`` holds every file's ``Verdict``; the properties read the first one that did not pass.
    """

    def __init__(self, message: str, verdicts: Sequence["Verdict"] = ()) -> None:
        super().__init__(message)
        self.verdicts: Tuple[Verdict, ...] = tuple(verdicts)

    def __reduce__(self) -> Any:
        return (NormcheckFailure, (str(self), self.verdicts))

    def _failing(self) -> Optional["Verdict"]:
        return next((v for v in self.verdicts if not v.passed), None)

    @property
    def verdict(self) -> Optional[str]:
        """The first failing dump's gate verdict ('fail', 'inconclusive'), or None when it was rejected."""
        failing = self._failing()
        return failing.verdict if failing else None

    @property
    def explanations(self) -> Tuple[str, ...]:
        """The first failing dump's failure names (``Verdict.explanations``): empty unless it is a 'fail'."""
        failing = self._failing()
        return failing.explanations if failing else ()

    @property
    def diagnosis(self) -> Tuple[str, ...]:
        """The first failing dump's diagnosis: the names of what the code computed instead of the objective."""
        failing = self._failing()
        return failing.diagnosis if failing else ()

    @property
    def could_hide(self) -> Tuple[str, ...]:
        """The first failing dump's could-hide names: mistakes the partition cannot tell from the objective."""
        failing = self._failing()
        return failing.could_hide if failing else ()

    @property
    def weights(self) -> Optional["WeightTable"]:
        """The first failing dump's weight table, when the dump measured groups."""
        failing = self._failing()
        return failing.weights if failing else None


@dataclass(frozen=True)
class LookAlike:
    """Another explanation that fits this dump only because of its shape, and the run that tells them apart."""

    name: str
    """The other explanation's name, e.g. 'objective/G' beside 'global_share' where G = W."""
    told_apart_by: str
    """The change to the run that separates the two, e.g. 'G ≠ W (here G = W = 2)'."""


@dataclass(frozen=True)
class Explanation:
    """One named explanation of the report: a diagnosis entry or a could-hide entry."""

    name: str
    """The stable name, e.g. 'local_mean', 'objective×W', 'sequence_mean'."""
    value: str = ""
    """What the named computation gives on this file, exact."""
    bound: Optional[str] = None
    computed: str = ""
    """What the code computed."""
    why_wrong: str = ""
    instead: str = ""
    """What to compute instead."""
    alike: Tuple[LookAlike, ...] = ()
    """The other explanations of the same list that fit this dump as well, each with what would tell them apart."""


@dataclass(frozen=True)
class WeightRow:
    """One group of the weight table: the weight the code gave its tokens and the weight the objective wants."""

    group: int
    rank: int
    microbatch: int
    sequence: Optional[int]
    """The sequence's index in its microbatch, or None when the microbatch is the group."""
    tokens: int
    code: Optional[str]
    """The weight the code gave each token of the group, exact (``code_decimal``: as a decimal); None when
    the group has no token to give one to, or its component is not a number."""
    code_decimal: Optional[str]
    objective: str
    """The weight the declared objective gives each token of the group, exact."""
    objective_decimal: str
    ratio: Optional[str]
    """code / objective, exact (None without both)."""
    ratio_decimal: Optional[str]
    within_bound: bool
    """True when the code's weight is the objective's within the float bound."""
    observed: str = ""
    """The group's component as observed (exact)."""
    witness_agrees: bool = True
    """False when the witness shows the weight varies among the group's tokens."""
    coords: Optional[Tuple[int, ...]] = None
    """The rank's coordinates in the dump's device mesh along its data and sequence dimensions, in their order
    (replica dimensions left out: every replica holds the row); None without a mesh."""


@dataclass(frozen=True)
class WeightTable:
    """The weight table of a per-group dump: one row per group (``omitted`` rows left out of very large files)."""

    groups: int
    rows: Tuple[WeightRow, ...]
    omitted: int = 0


@dataclass(frozen=True)
class SiteVerdict:
    """The gate's conclusion on one site (a probe parameter in a submodule)."""

    name: str
    verdict: Optional[str]
    """'pass' when the site's weights are the objective's (and its replicas agree), else 'fail'."""
    diagnosis: Tuple[str, ...] = ()
    weights: Optional[WeightTable] = None
    detail: str = ""
    could_hide: Tuple[str, ...] = ()


@dataclass(frozen=True)
class TermVerdict:
    """The gate's conclusion on one auxiliary loss term, judged on its own tokens against its weight and objective."""

    name: str
    verdict: Optional[str]
    """'pass', 'fail' or 'inconclusive', the term's own (the file's verdict is the worst of every loss's)."""
    diagnosis: Tuple[str, ...] = ()
    """For a 'fail': what the term's code computed, by name ('main_count', 'local_mean', …)."""
    could_hide: Tuple[str, ...] = ()
    weights: Optional[WeightTable] = None
    in_words: str = ""


@dataclass(frozen=True)
class Verdict:
    """normcheck's conclusion on one file, read from ``check --json``.

    ``diagnosis`` and ``could_hide`` are kept apart: the first names what the code computed when the
    gate fails (a failure), the second the mistakes the file cannot tell from the objective (the
    reason for 'inconclusive'). ``explanations`` is the failure names only.
    """

    file: str
    """The dump the verdict is about."""
    status: str
    """'pass', 'fail' or 'error' (the file was rejected)."""
    verdict: Optional[str]
    """The gate's verdict ('pass', 'fail', 'inconclusive'), or None without a gate."""
    diagnosis: Tuple[str, ...] = ()
    """For a 'fail': the names of what the code computed instead of the objective (may be empty)."""
    could_hide: Tuple[str, ...] = ()
    """Names of mistakes that give the same gradient as the objective on this file (never failures)."""
    report: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The file's report as ``check --json`` printed it."""
    message: str = ""
    """The diagnosis a person needs (``describe``), with the probe's notes."""
    failed_checks: Tuple[str, ...] = ()
    """The gate's checks that failed ('replicas', 'denominator', 'objective', …)."""
    weights: Optional[WeightTable] = field(default=None, compare=False)
    """The weight table of a per-group dump, else None."""
    sites: Tuple[SiteVerdict, ...] = field(default=(), compare=False)
    """The per-site conclusions of a dump with sites."""
    notes: Tuple[str, ...] = ()
    """What the probe adds about how the gradient was captured."""
    details: Tuple[Explanation, ...] = field(default=(), compare=False, repr=False)
    """The diagnosis entries in full (what was computed, why it is wrong, what instead)."""
    picture: Optional[str] = field(default=None, compare=False)
    """The SVG of the weight table written beside the dump (``normcheck.picture``), when one was kept."""
    terms: Tuple[TermVerdict, ...] = field(default=(), compare=False)
    """Each auxiliary term's own conclusion; ``diagnosis`` and ``could_hide`` also name its explanations, as
    'term mtp: main_count'."""

    @property
    def passed(self) -> bool:
        """True when the file holds and its gate concluded ``pass``."""
        return self.status == "pass" and self.verdict == "pass"

    @property
    def explanations(self) -> Tuple[str, ...]:
        """The failure names: ``diagnosis`` for a 'fail', empty otherwise (could-hide names are never failures)."""
        return self.diagnosis if self.verdict == "fail" else ()

    def with_notes(self, notes: Sequence[str]) -> "Verdict":
        """This verdict with ``notes`` added to ``notes`` and to the message."""
        if not notes:
            return self
        added = tuple(notes)
        message = self.message + "".join(f"\n  note: {n}" for n in added)
        return replace(self, notes=self.notes + added, message=message)

    def with_failed_check(self, name: str, detail: str) -> "Verdict":
        """This verdict failed by one more check, ``name``, found outside the gate (``detail`` says what)."""
        lines = self.message.split("\n")
        for heading in ("the gate passed on", "the gate was INCONCLUSIVE on"):
            lines[0] = lines[0].replace(heading, "the gate FAILED on")
        lines.insert(1, f"  check {name} failed: {detail}")
        return replace(self, status="fail", verdict="fail", failed_checks=self.failed_checks + (name,),
                       message="\n".join(lines))

    def raise_for_failure(self) -> None:
        """Raises ``NormcheckFailure`` with the diagnosis unless the gate passed."""
        if not self.passed:
            raise NormcheckFailure(self.message, [self])


@dataclass(frozen=True)
class Suggestion:
    """What ``normcheck suggest --counts`` chose for given valid-token counts."""

    targets: Tuple[Tuple[Tuple[Any, ...], ...], ...]
    """rank → microbatch → target values (ints, or exact literals as written)."""
    separated: bool
    """True when every named mistake is at least ``required`` bounds away (exit status 0)."""
    separation: str = ""
    closest_pair: str = ""
    inseparable: Tuple[str, ...] = ()
    required: Optional[int] = None
    partition: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _bundled_executable() -> Optional[str]:
    """The executable built into this package by ``pip install`` (normcheck/bin/normcheck), if there is one."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "normcheck")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def find_executable(executable: Optional[PathLike] = None) -> str:
    """The normcheck executable: ``executable`` if given, else the one installed with this package, else
    ``$NORMCHECK``, else ``normcheck`` on PATH."""
    if executable is None:
        bundled = _bundled_executable()
        if bundled is not None:
            return bundled
    chosen = os.fspath(executable) if executable is not None else os.environ.get("NORMCHECK") or None
    if chosen is not None:
        found = shutil.which(chosen) if os.sep not in chosen else (chosen if os.access(chosen, os.X_OK) else None)
        if not found or not os.path.isfile(found):
            where = "given" if executable is not None else "named by $NORMCHECK"
            raise NormcheckError(f"the normcheck executable {where}, {chosen}, does not exist or is not executable")
        return os.path.abspath(found)
    found = shutil.which("normcheck")
    if not found:
        raise NormcheckError("no normcheck executable: pass its path, set $NORMCHECK, or put normcheck on PATH "
                             "(`pip install .` of the repository builds one into the package; "
                             "`cmake --build build --target normcheck` builds build/normcheck)")
    return found


def _run(command: List[str], timeout: float, stdin: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, input=stdin)
    except subprocess.TimeoutExpired:
        raise NormcheckError(f"{' '.join(command)} did not finish within {timeout:g} s") from None
    except OSError as e:
        raise NormcheckError(f"cannot run {command[0]}: {e}") from None


def _json_output(done: "subprocess.CompletedProcess[str]", command: List[str]) -> Dict[str, Any]:
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise NormcheckError(f"{' '.join(command)} exited with {done.returncode} without a JSON report: "
                             f"{(done.stderr or done.stdout).strip()[:2000]}") from None
    if not isinstance(result, dict):
        raise NormcheckError(f"{' '.join(command)} printed JSON that is not an object")
    return result


def _look_alikes(entries: Any) -> Tuple[LookAlike, ...]:
    """The ``alike`` list of a report's explanation."""
    if not isinstance(entries, list):
        return ()
    return tuple(LookAlike(name=str(e.get("name", "")), told_apart_by=str(e.get("told_apart_by", "")))
                 for e in entries if isinstance(e, dict))


def _site_verdict(entry: Dict[str, Any]) -> Optional[str]:
    """A site's verdict: its own, or whether its weights are the objective's (``matches_objective``)."""
    if entry.get("verdict") is not None:
        return str(entry["verdict"])
    if "matches_objective" in entry:
        return "pass" if entry["matches_objective"] else "fail"
    return None


def describe(report: Dict[str, Any]) -> str:
    """The diagnosis a person needs, from one report of ``check --json``: a first line with the verdict and the
    update's shape, the gate's text as the executable's text report prints it (``gate.text``), two spaces in,
    and the file's failures that are not the gate's."""
    name = report.get("file", "?")
    if report.get("status") == "error" or report.get("error"):
        error = report.get("error") or {}
        where = f":{error['line']}:{error['column']}" if error.get("line") else ""
        return (f"normcheck rejected {name}{where}: {error.get('code', 'error')}: {error.get('message', '')}\n"
                "  the dump is not a normcheck/1 document normcheck accepts; nothing was judged")
    gate = report.get("gate")
    if not gate:
        lines = [f"normcheck found no observed gradient in {name}: nothing was judged (a gate that checked "
                 "nothing must not pass)"]
        lines += [f"  {failure}" for failure in report.get("failures", [])]
        return "\n".join(lines)
    verdict = gate.get("verdict")
    heading = {"pass": "passed", "fail": "FAILED", "inconclusive": "was INCONCLUSIVE"}.get(verdict, str(verdict))
    shape = (f"W = {report.get('world_size')}, reducer {report.get('reducer')}, {gate.get('dtype')}, "
             f"N = {report.get('valid_tokens')}")
    if report.get("objective") and report.get("objective") != "token_mean":
        shape += f", objective {report.get('objective')}"
    if report.get("mesh"):
        shape += ", mesh " + " × ".join(f"{d.get('name')} {d.get('size')}" + ("" if d.get("role") == "data" else
                                                                           f" ({d.get('role')})")
                                        for d in report["mesh"])
    lines = [f"normcheck: the gate {heading} on {name} ({shape})"]
    lines += [f"  {line}" for line in str(gate.get("text", "")).splitlines()]
    for failure in report.get("failures", []):
        if not str(failure).startswith("gate:"):
            lines.append(f"  {failure}")
    return "\n".join(lines)


def weight_table(weights: Any) -> Optional[WeightTable]:
    """The typed weight table of a report's ``gate.weights`` (or a site's), or None."""
    if not isinstance(weights, dict):
        return None
    rows = []
    for row in weights.get("rows", []):
        if not isinstance(row, dict):
            continue
        sequence = row.get("sequence")
        coords = row.get("coords")
        rows.append(WeightRow(
            group=int(row.get("group", 0)), rank=int(row.get("rank", 0)), microbatch=int(row.get("microbatch", 0)),
            sequence=None if sequence is None else int(sequence), tokens=int(row.get("tokens", 0)),
            code=_optional(row.get("code")), code_decimal=_optional(row.get("code_decimal")),
            objective=str(row.get("objective", "")), objective_decimal=str(row.get("objective_decimal", "")),
            ratio=_optional(row.get("ratio")), ratio_decimal=_optional(row.get("ratio_decimal")),
            within_bound=bool(row.get("within_bound", False)), observed=str(row.get("observed", "")),
            witness_agrees=bool(row.get("witness_agrees", True)),
            coords=tuple(int(c) for c in coords) if isinstance(coords, list) else None))
    return WeightTable(groups=int(weights.get("groups", len(rows))), rows=tuple(rows),
                       omitted=int(weights.get("omitted", 0) or 0))


def _optional(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def _names(entries: Any) -> Tuple[str, ...]:
    return tuple(str(e.get("name", "")) for e in entries or [] if isinstance(e, dict))


def _verdict(report: Dict[str, Any], require_gate: bool) -> Verdict:
    gate = report.get("gate") or {}
    status = str(report.get("status", "error"))
    if require_gate and not gate and status == "pass":
        status = "fail"  # what --require-gate does, for an executable that predates it
    verdict = gate.get("verdict")
    diagnosis = gate.get("diagnosis", []) if verdict == "fail" else []
    sites = tuple(SiteVerdict(name=str(e.get("name", "")), verdict=_site_verdict(e),
                              diagnosis=_names(e.get("diagnosis")),
                              weights=weight_table(e.get("weights")), detail=str(e.get("detail", "") or ""),
                              could_hide=_names(e.get("could_hide")))
                  for e in gate.get("sites", []) or [] if isinstance(e, dict))
    details = tuple(Explanation(name=str(e.get("name", "")), value=str(e.get("value", "")),
                                bound=None if e.get("bound") is None else str(e.get("bound")),
                                computed=str(e.get("computed", "")), why_wrong=str(e.get("why_wrong", "")),
                                instead=str(e.get("instead", "")), alike=_look_alikes(e.get("alike")))
                    for e in diagnosis if isinstance(e, dict))
    terms = tuple(TermVerdict(name=str(e.get("name", "")), verdict=e.get("verdict"),
                              diagnosis=_names(e.get("diagnosis")) if e.get("verdict") == "fail" else (),
                              could_hide=_names(e.get("could_hide")), weights=weight_table(e.get("weights")),
                              in_words=str(e.get("in_words", "") or ""))
                  for e in gate.get("terms", []) or [] if isinstance(e, dict))
    return Verdict(file=str(report.get("file", "")), status=status, verdict=verdict, diagnosis=_names(diagnosis),
                   could_hide=_names(gate.get("could_hide")), report=report, message=describe(report),
                   failed_checks=tuple(str(c.get("name", "")) for c in gate.get("checks", [])
                                       if isinstance(c, dict) and not c.get("passed")),
                   weights=weight_table(gate.get("weights")), sites=sites, details=details, terms=terms)


def run_check(paths: Union[PathLike, Sequence[PathLike]], *, executable: Optional[PathLike] = None,
              require_gate: bool = True, timeout: float = 120.0) -> List[Verdict]:
    """Runs ``normcheck check --json`` (with ``--require-gate`` unless told otherwise) on files or folders.

    Returns one ``Verdict`` per file normcheck reported. Raises ``NormcheckError`` when there is nothing
    to check or the executable cannot be run, or when it printed no JSON report (so does an executable
    too old for these options: its own message says which).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = [os.fspath(p) for p in paths]
    if not files:
        raise NormcheckError("nothing to check: no files given")
    program = find_executable(executable)
    options = ["--require-gate"] if require_gate else []
    command = [program, "check", "--json", *options, *files]
    done = _run(command, timeout)
    if done.returncode not in (0, 1, 2):
        raise NormcheckError(f"{' '.join(command)} exited with {done.returncode}: {done.stderr.strip()[:2000]}")
    result = _json_output(done, command)
    reports = well_shaped_reports(result, files, f"{' '.join(command)} (exit {done.returncode})")
    statuses = [report.get("status") for report in reports]
    agreed = 2 if "error" in statuses else 1 if "fail" in statuses else 0
    if done.returncode != agreed:
        raise NormcheckError(f"{' '.join(command)} exited with {done.returncode}, but its report says "
                             f"{', '.join(str(s) for s in statuses)}, which is exit {agreed}: the two disagree, so "
                             f"neither is trusted: {done.stderr.strip()[:2000]}")
    return verdicts_of(reports, require_gate)


def well_shaped_reports(result: Any, files: Sequence[str], source: str) -> List[Dict[str, Any]]:
    """The reports of one ``check --json`` result, refused unless shaped as normcheck-report/1 and not empty.

    ``source`` names what printed the result (the command, or the extension) in the errors.
    """
    reports = result.get("reports", []) if isinstance(result, dict) else None
    if not isinstance(reports, list) or not all(_well_shaped(report) for report in reports):
        raise NormcheckError(f"{source} printed a report that is not shaped as normcheck-report/1: "
                             f"{json.dumps(result)[:2000]}")
    if any(report.get("gate") and not isinstance(report["gate"].get("text"), str) for report in reports):
        raise NormcheckError(f"{source} printed a gate without its text (gate.text), which this package prints as "
                             "the diagnosis: the executable is older than the package; use the one built with it")
    if not reports:
        raise NormcheckError(f"nothing to check: {' '.join(files)} holds no file normcheck reads")
    return reports


def verdicts_of(reports: Sequence[Dict[str, Any]], require_gate: bool) -> List[Verdict]:
    """One ``Verdict`` per report of ``check --json`` (``require_gate`` as the check was run)."""
    return [_verdict(report, require_gate) for report in reports]


def _well_shaped(report: Any) -> bool:
    """Whether one report has the shape ``_verdict`` and ``describe`` read: objects and lists where expected."""
    if not isinstance(report, dict) or report.get("status") not in ("pass", "fail", "error"):
        return False
    if not isinstance(report.get("failures", []), list) or not isinstance(report.get("error") or {}, dict):
        return False
    gate = report.get("gate")
    if gate is None:
        return True
    if not isinstance(gate, dict) or not isinstance(gate.get("checks", []), list):
        return False
    if not all(isinstance(check, dict) for check in gate.get("checks", [])):
        return False
    for key in ("diagnosis", "could_hide"):
        entries = gate.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return False
    return True


def assert_passes(paths: Union[PathLike, Sequence[PathLike]], *, executable: Optional[PathLike] = None,
                  require_gate: bool = True, timeout: float = 120.0) -> List[Verdict]:
    """``run_check``, raising ``NormcheckFailure`` with every failing file's diagnosis unless all pass."""
    verdicts = run_check(paths, executable=executable, require_gate=require_gate, timeout=timeout)
    failing = [v for v in verdicts if not v.passed]
    if failing:
        raise NormcheckFailure("\n".join(v.message for v in failing), verdicts)
    return verdicts


def _count(value: Any) -> int:
    """A valid-token count as given, refused unless it is a non-negative integer (never 2.7 → 2 or True → 1)."""
    if hasattr(value, "item") and not isinstance(value, int):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"counts: each count is a non-negative integer, not {value!r}")
    return value


def suggest_for_counts(counts: Sequence[Sequence[int]], *, dtype: str = "float32", objective: Optional[str] = None,
                       executable: Optional[PathLike] = None, timeout: float = 120.0) -> Suggestion:
    """Runs ``normcheck suggest --counts FILE --json`` for rank → microbatch → valid-token counts.

    The result's targets have exactly those counts. ``separated`` is False when some named mistakes
    cannot be told from the objective on these counts (``inseparable`` names them); the gate then
    concludes ``inconclusive`` on such a step, never ``pass``.
    """
    table = [[_count(n) for n in rank] for rank in counts]
    if not table:
        raise ValueError("counts: one list of non-negative counts per rank, at least one rank")
    program = find_executable(executable)
    with tempfile.TemporaryDirectory(prefix="normcheck-counts-") as folder:
        path = os.path.join(folder, "counts.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"counts": table}, f)
        command = [program, "suggest", "--counts", path, "--dtype", dtype, "--json"]
        if objective is not None:
            command[-1:-1] = ["--objective", objective]
        done = _run(command, timeout)
    if done.returncode not in (0, 1):
        raise NormcheckError(f"{' '.join(command)} exited with {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[:2000]}")
    result = _json_output(done, command)
    partition = result.get("partition")
    if not isinstance(partition, dict) or not isinstance(partition.get("ranks"), list):
        raise NormcheckError(f"{' '.join(command)} printed no partition")
    targets = []
    for rank in partition["ranks"]:
        batches = rank["microbatches"] if "microbatches" in rank else [rank.get("targets", [])]
        targets.append(tuple(tuple(batch) for batch in batches))
    return Suggestion(targets=tuple(targets), separated=done.returncode == 0,
                      separation=str(result.get("separation", "")), closest_pair=str(result.get("closest_pair", "")),
                      inseparable=tuple(result.get("inseparable", [])), required=result.get("required"),
                      partition=partition)
