"""Shared set-up of every pytest suite under tests/ (tests/python, tests/frameworks): the plugin, the executable,
and which interpreter runs them."""

import os
import shutil
import sys

import pytest


def pytest_configure(config):
    # From a checkout (PYTHONPATH=python) no entry point registers the plugin; an installed package's does.
    manager = config.pluginmanager
    if not manager.has_plugin("normcheck") and not manager.has_plugin("normcheck.pytest_plugin"):
        manager.import_plugin("normcheck.pytest_plugin")
    manager.import_plugin("pytester")


def pytest_report_header(config):
    import normcheck

    return [f"normcheck package: {os.path.dirname(normcheck.__file__)}",
            f"interpreter: {sys.executable}", f"NORMCHECK: {os.environ.get('NORMCHECK', '(unset)')}"]


@pytest.fixture(scope="session")
def executable():
    """The normcheck executable under test ($NORMCHECK, else normcheck on PATH); the tests fail without it."""
    chosen = os.environ.get("NORMCHECK") or shutil.which("normcheck")
    if not chosen or not os.access(chosen, os.X_OK):
        pytest.fail("no normcheck executable: set NORMCHECK (CTest passes $<TARGET_FILE:normcheck>)")
    return os.path.abspath(chosen)
