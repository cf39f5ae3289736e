"""README's test command (``-n auto``) runs three test processes per CPU: the suite mostly waits on
the processes its tests start, so one per CPU leaves the machine half idle (see tests/conftest.py)."""

from __future__ import annotations

import os


def test_auto_is_three_test_processes_per_cpu_this_process_may_run_on(pytestconfig, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    assert pytestconfig.hook.pytest_xdist_auto_num_workers(config=pytestconfig) == 3 * len(os.sched_getaffinity(0))


def test_xdists_own_variable_still_decides(pytestconfig, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert pytestconfig.hook.pytest_xdist_auto_num_workers(config=pytestconfig) == 3
