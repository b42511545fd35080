"""Every error the package defines is a ``normcheck.Error``; failures stay ``AssertionError``s.

Needs torch (the probe, the launcher, replicas and collectives define errors of their own). Every module
of the package but the framework integrations is imported and searched, so that a new error class
without the common base fails here.
"""

import importlib
import pkgutil

import pytest

torch = pytest.importorskip("torch")

import normcheck  # noqa: E402
from normcheck import Error  # noqa: E402

FAILURES = {"NormcheckFailure", "ReplicaDivergence", "CollectiveMismatch"}
"""The errors that report a check that ran and found the step wrong."""
WARNINGS = {"NormcheckWarning"}
"""What reports those failures when the caller asked not to raise: warnings, neither failures nor misuse."""


def package_modules():
    """Every module of the package outside ``normcheck.integrations`` (those need their frameworks)."""
    names = [info.name for info in pkgutil.walk_packages(normcheck.__path__, "normcheck.")]
    return [importlib.import_module(name) for name in names
            if not name.startswith("normcheck.integrations") and name not in ("normcheck.__main__", "normcheck._core")]


def defined_errors():
    found = {}
    for module in package_modules():
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[value.__qualname__] = value
    return found


def test_every_error_class_of_the_package_derives_from_error():
    errors = defined_errors()
    assert {"NormcheckError", "NormcheckFailure", "ProbeError", "StepError", "LaunchError", "ReplicaDivergence",
            "ReplicaReadError", "CollectiveMismatch"} <= set(errors)
    assert [name for name, error in errors.items() if not issubclass(error, Error)] == []


def test_failures_are_assertion_errors_and_misuse_is_a_runtime_error():
    for name, error in defined_errors().items():
        if name == "Error":
            continue
        if name in WARNINGS:
            assert issubclass(error, Warning) and not issubclass(error, (AssertionError, RuntimeError)), name
            continue
        assert issubclass(error, AssertionError) == (name in FAILURES), name
        assert issubclass(error, RuntimeError) == (name not in FAILURES), name


def test_one_handler_catches_a_probe_s_misuse_and_a_failed_gate():
    from normcheck.check import NormcheckFailure
    from normcheck.probe import Probe

    with pytest.raises(Error, match="objective is one of"):
        Probe(torch.nn.Linear(2, 2), objective="token_maen", world_size=1, rank=0)  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        raise NormcheckFailure("the gate did not pass")
    assert isinstance(NormcheckFailure("x"), Error)


def test_the_alias_module_exports_what_the_probe_exports():
    import normcheck.probe
    import normcheck.torch

    assert normcheck.torch.__all__ == normcheck.probe.__all__
    assert all(getattr(normcheck.torch, name) is getattr(normcheck.probe, name) for name in normcheck.probe.__all__)
