"""The pytest plugin: the ``normcheck_gate`` fixture, registered through the ``pytest11`` entry point.

    def test_my_step(normcheck_gate):
        normcheck_gate(my_step, world_size=2, replicas=True, collectives=True)

runs ``my_step(rank, world_size, probe)`` on W fresh ranks (``normcheck.launch``) and fails the test
with normcheck's diagnosis when a rank's ``probe.check()`` does not pass, when the replicas the step
named with ``probe.replicas(model, optimizer, scheduler)`` differ after it (``replicas=True`` also
requires the step to name some), or, with ``collectives=True``, when the ranks' recorded collectives
do not match (a hang is reported as the call a rank did not issue). A failing gate's dump and the
picture of its weight table (an SVG beside it) are named in the test's JUnit report, as the properties
``normcheck_dump`` and ``normcheck_picture``. torch is imported only when the fixture is used.
"""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

import pytest

__all__ = ["Gate", "normcheck_gate", "pytest_addoption"]


def pytest_addoption(parser: Any) -> None:
    """Adds --normcheck (the executable) and --normcheck-timeout (seconds per launch)."""
    group = parser.getgroup("normcheck")
    group.addoption("--normcheck", default=None,
                    help="the normcheck executable for normcheck_gate (default: $NORMCHECK, else PATH)")
    group.addoption("--normcheck-timeout", type=float, default=120.0,
                    help="time limit of each normcheck_gate launch, in seconds (default 120)")


class Gate:
    """The fixture's value: call it with a step function to run it on W ranks and judge it."""

    def __init__(self, directory: str, executable: Optional[str], timeout: float,
                 record: Optional[Callable[[str, str], None]] = None) -> None:
        self.directory = directory
        self.executable = executable
        self.timeout = timeout
        self.record = record
        """Adds a property to the test's JUnit report."""
        self.last: Optional[Any] = None
        """The ``normcheck.launch.LaunchResult`` of the last launch that completed (summaries, trace verdict)."""

    def __call__(self, step: Callable[..., Any], world_size: int = 2, *, replicas: bool = False,
                 collectives: bool = False, **options: Any) -> List[Any]:
        """Runs ``step(rank, world_size, probe)`` on ``world_size`` ranks; returns each rank's value.

        A failing ``probe.check()`` raises ``NormcheckFailure``, replicas that differ after the step
        ``ReplicaDivergence``, collectives that do not match ``CollectiveMismatch`` (all AssertionErrors:
        the test fails with the diagnosis); a rank that raises, crashes or hangs past the time limit
        raises ``LaunchError``. ``options`` go to ``normcheck.launch.launch`` (args, timeout, backend, …).
        """
        from .check import NormcheckFailure
        from .launch import launch_result

        options.setdefault("timeout", self.timeout)
        options.setdefault("executable", self.executable)
        options.setdefault("directory", self.directory)
        try:
            self.last = launch_result(step, world_size, replicas=replicas, collectives=collectives, **options)
        except NormcheckFailure as failure:
            for verdict in failure.verdicts:
                if self.record is not None and not verdict.passed:
                    self.record("normcheck_dump", verdict.file)
                    if verdict.picture is not None:
                        self.record("normcheck_picture", verdict.picture)
            raise
        return self.last.values


@pytest.fixture
def normcheck_gate(request: Any, tmp_path: Any) -> Gate:
    """Runs a step function on W ranks with a probe and fails the test with normcheck's diagnosis."""
    try:
        import torch.distributed as dist
    except ImportError as e:
        pytest.skip(f"normcheck_gate needs torch, which this interpreter cannot import: {e}")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("normcheck_gate needs torch.distributed with the gloo backend")
    executable = request.config.getoption("--normcheck") or os.environ.get("NORMCHECK") or None
    folder = tmp_path / "normcheck"
    folder.mkdir()
    # The test's own properties, as record_property keeps them, without its warning under the default xunit2:
    # JUnit writes them into the test case either way.
    def record(name: str, value: str) -> None:
        request.node.user_properties.append((name, value))

    return Gate(str(folder), executable, request.config.getoption("--normcheck-timeout"), record)
