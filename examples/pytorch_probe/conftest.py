# Needed only when normcheck is used from a checkout (PYTHONPATH=python): an installed package
# registers the normcheck_gate fixture through its pytest11 entry point.
def pytest_configure(config):
    manager = config.pluginmanager
    if not manager.has_plugin("normcheck") and not manager.has_plugin("normcheck.pytest_plugin"):
        manager.import_plugin("normcheck.pytest_plugin")
