"""Running the ``normcheck`` executable: ``check --json`` on dumps, ``suggest --counts`` for probe values.

The executable is the one given explicitly, else ``$NORMCHECK``, else ``normcheck`` on ``PATH``.
A gate that does not pass raises ``NormcheckFailure``, an ``AssertionError`` whose message is the
diagnosis a person needs: the verdict, each failing check's detail, and each explanation's name, what
was computed, why it is wrong and what to do instead (or what could hide, for ``inconclusive``).

Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = [
    "NormcheckError", "NormcheckFailure", "Verdict", "Suggestion", "find_executable", "run_check",
    "assert_passes", "describe", "suggest_for_counts",
]

PathLike = Union[str, "os.PathLike[str]"]


class NormcheckError(RuntimeError):
    """The executable could not be found or run, or it printed something that is not its report."""


class NormcheckFailure(AssertionError):
    """A dump that does not pass the gate; the message is normcheck's diagnosis."""

    def __init__(self, message: str, verdicts: Sequence["Verdict"] = ()) -> None:
        super().__init__(message)
        self.verdicts: Tuple[Verdict, ...] = tuple(verdicts)

    def __reduce__(self) -> Any:
        return (NormcheckFailure, (str(self), self.verdicts))

    @property
    def verdict(self) -> Optional[str]:
        """The first failing dump's gate verdict ('fail', 'inconclusive'), or None when it was rejected."""
        failing = [v for v in self.verdicts if not v.passed]
        return failing[0].verdict if failing else None

    @property
    def explanations(self) -> Tuple[str, ...]:
        """The first failing dump's explanation names: its diagnosis, or what could hide."""
        failing = [v for v in self.verdicts if not v.passed]
        return failing[0].explanations if failing else ()


@dataclass(frozen=True)
class Verdict:
    """normcheck's conclusion on one file, read from ``check --json``."""

    file: str
    status: str
    """'pass', 'fail' or 'error' (the file was rejected)."""
    verdict: Optional[str]
    """The gate's verdict ('pass', 'fail', 'inconclusive'), or None without a gate."""
    diagnosis: Tuple[str, ...] = ()
    could_hide: Tuple[str, ...] = ()
    report: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    message: str = ""

    @property
    def passed(self) -> bool:
        """True when the file holds and its gate concluded ``pass``."""
        return self.status == "pass" and self.verdict == "pass"

    @property
    def explanations(self) -> Tuple[str, ...]:
        """The diagnosis names for a failure, the could-hide names for an inconclusive verdict."""
        return self.diagnosis if self.verdict == "fail" else self.could_hide

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


def describe(report: Dict[str, Any]) -> str:
    """The diagnosis a person needs, from one report of ``check --json``."""
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
    lines = [f"normcheck: the gate {heading} on {name} ({shape})",
             f"  observed {gate.get('observed')}, objective {gate.get('objective')}, bound {gate.get('bound')}"]
    for check in gate.get("checks", []):
        if not check.get("passed"):
            lines.append(f"  check {check.get('name')} failed: {check.get('detail')}")
    entries = gate.get("diagnosis", []) if verdict == "fail" else gate.get("could_hide", [])
    if entries:
        lines.append("  diagnosis:" if verdict == "fail" else
                     "  could hide (the partition cannot tell these from the objective; plan the probe values "
                     "from the real counts, or make the counts uneven):")
    for entry in entries:
        lines.append(f"    {entry.get('name')} = {entry.get('value')}")
        for key, label in (("computed", "what was computed"), ("why_wrong", "why it is wrong"),
                           ("instead", "instead")):
            if entry.get(key):
                lines.append(f"      {label}: {entry[key]}")
    if verdict == "fail" and not entries and gate.get("ratio") is not None:
        lines.append(f"  unexplained: observed / objective = {gate['ratio']}")
    for failure in report.get("failures", []):
        if not str(failure).startswith("gate:"):
            lines.append(f"  {failure}")
    return "\n".join(lines)


def _verdict(report: Dict[str, Any], require_gate: bool) -> Verdict:
    gate = report.get("gate") or {}
    status = str(report.get("status", "error"))
    if require_gate and not gate and status == "pass":
        status = "fail"  # what --require-gate does, for an executable that predates it
    return Verdict(file=str(report.get("file", "")), status=status, verdict=gate.get("verdict"),
                   diagnosis=tuple(e.get("name", "") for e in gate.get("diagnosis", [])),
                   could_hide=tuple(e.get("name", "") for e in gate.get("could_hide", [])),
                   report=report, message=describe(report))


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
    reports = result.get("reports", [])
    if not reports:
        raise NormcheckError(f"nothing to check: {' '.join(files)} holds no file normcheck reads")
    return [_verdict(report, require_gate) for report in reports]


def assert_passes(paths: Union[PathLike, Sequence[PathLike]], *, executable: Optional[PathLike] = None,
                  require_gate: bool = True, timeout: float = 120.0) -> List[Verdict]:
    """``run_check``, raising ``NormcheckFailure`` with every failing file's diagnosis unless all pass."""
    verdicts = run_check(paths, executable=executable, require_gate=require_gate, timeout=timeout)
    failing = [v for v in verdicts if not v.passed]
    if failing:
        raise NormcheckFailure("\n".join(v.message for v in failing), verdicts)
    return verdicts


def suggest_for_counts(counts: Sequence[Sequence[int]], *, dtype: str = "float32", objective: Optional[str] = None,
                       executable: Optional[PathLike] = None, timeout: float = 120.0) -> Suggestion:
    """Runs ``normcheck suggest --counts FILE --json`` for rank → microbatch → valid-token counts.

    The result's targets have exactly those counts. ``separated`` is False when some named mistakes
    cannot be told from the objective on these counts (``inseparable`` names them); the gate then
    concludes ``inconclusive`` on such a step, never ``pass``.
    """
    table = [[int(n) for n in rank] for rank in counts]
    if not table or any(n < 0 for rank in table for n in rank):
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
