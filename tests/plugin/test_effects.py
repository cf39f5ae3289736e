"""A step that sends its email through its own client fails the gate, in a fault plan and a
crash_matrix test, at the user's line; what the project declares no effect does not, and the
summary says what was declared.

Planted bug: the orders example's ``own_client`` workflow (examples/orders/unsafe.py), whose
receipt step appends the email to a mail spool file instead of returning it as an effect. Method:
a pytester project run in a subprocess (real forks), the spool in the project's folder.
"""

from __future__ import annotations

import re
import shutil

import pytest

from .conftest import REPO

MATRIX_TEST = '''
import pytest

@pytest.mark.crash_matrix(families=["clean"])
def test_orders_survive_a_crash_anywhere(crash_matrix):
    crash_matrix()
'''
PLAN = '''
lesson = "An email sent from the step is sent again by every re-run of it."

[points]
jobs = ["doc-1"]
'''


@pytest.fixture
def orders(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    shutil.copytree(REPO / "examples" / "orders", project.path / "orders", ignore=shutil.ignore_patterns("__pycache__", "*.txt"))
    project.makepyprojecttoml('''
[tool.pytest.ini_options]
pythonpath = ["."]
addopts = "-p no:cacheprovider"
chaos_target = "orders.crash:own_client"
''')
    (project.path / "fault_plans").mkdir()
    (project.path / "fault_plans" / "orders.toml").write_text(PLAN)
    project.makepyfile(test_matrix=MATRIX_TEST)
    monkeypatch.setenv("ORDERS_MAIL_SPOOL", str(project.path / "spool" / "sent_emails.txt"))
    (project.path / "spool").mkdir()
    return project


def _spool_line() -> int:
    with open(REPO / "examples" / "orders" / "unsafe.py") as f:
        return next(n for n, line in enumerate(f, 1) if "UNSAFE: sent before the step commits" in line)


def test_an_email_appended_by_the_step_fails_the_plan_and_the_matrix_at_the_users_line(orders):
    result = orders.runpytest_subprocess("-p", "no:randomly", "--chaos-points", "10")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    spool = orders.path / "spool" / "sent_emails.txt"
    # The plan's items fail alike: the crash_matrix test's failure and the summary say it once.
    assert re.search(rf"^effects-through-outbox \(10 points, 1 family without any fault\): a step opened "
                     rf"{re.escape(repr(str(spool)))} for append, done from orders/unsafe\.py:{_spool_line()}\b", out, re.M), out
    assert "FAILED fault_plans/orders.toml::baseline" in out
    assert "FAILED test_matrix.py::test_orders_survive_a_crash_anywhere" in out
    assert spool.read_text().count("customers.example") >= 2  # it was sent, more than once


def test_a_write_declared_no_effect_passes_and_the_summary_names_the_declaration(orders):
    allowed = f"file:{orders.path / 'spool'}/*"
    result = orders.runpytest_subprocess("-p", "no:randomly", "--chaos-points", "10", "--chaos-allow-effects", allowed)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    assert f"effects allowed (from command line --chaos-allow-effects), not findings: {allowed}" in out


def test_an_allowed_effect_that_is_not_kind_and_pattern_is_a_usage_error(orders):
    result = orders.runpytest_subprocess("--chaos-allow-effects", "spool/*")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "allowed effect 'spool/*' is not KIND:PATTERN" in result.stderr.str()


def test_the_command_line_fails_the_spool_write_and_names_what_a_run_allows(orders):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(orders.path))
    command = [sys.executable, "-m", "chaos", "matrix", "--target", "orders.crash:own_client", "--family", "clean", "--faults", "crash"]
    red = subprocess.run(command, cwd=orders.path, env=env, capture_output=True, text=True, timeout=600)
    assert red.returncode == 1, red.stdout + red.stderr
    assert f"done from orders/unsafe.py:{_spool_line()}" in red.stdout
    allowed = f"file:{orders.path / 'spool'}/*"
    green = subprocess.run(command + ["--allow-effects", allowed], cwd=orders.path, env=env, capture_output=True, text=True, timeout=600)
    assert green.returncode == 0, green.stdout + green.stderr
    assert f"effects allowed (by the run), not findings: {allowed}" in green.stdout


def test_a_crash_matrix_replay_names_the_target_the_command_line_gave(orders):
    (orders.path / "fault_plans" / "orders.toml").unlink()
    result = orders.runpytest_subprocess("-p", "no:randomly", "--chaos-points", "6", "--chaos-target", "orders.crash:cached")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    replays = [line for line in out.splitlines() if "replay:" in line and "python -m pytest" in line]
    assert replays and all("--chaos-target orders.crash:cached" in line for line in replays), replays
