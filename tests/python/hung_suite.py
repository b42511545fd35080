"""A suite that hangs, for run_pytest's deadline (tests/python/deadline_check.py). Its name does not
match pytest's test_*.py, so only a run that names it collects it."""

import time


def waits_for_a_rank_that_never_comes():
    time.sleep(3600)


def test_hangs():
    waits_for_a_rank_that_never_comes()
