"""The watchdog: a scenario that waits forever is a ``hangs`` finding of its own, with the stack of
the stuck process, and the run goes on. Method: the crash matrix, with real forks, on the notes
workflow whose ``classify`` step waits forever when it runs a second time (after a crash
interrupted it), under a 2 s bound; and the same matrix on the correct workflow."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time

import pytest

from chaos import run_matrix
from chaos.matrix.runner import MatrixUsageError

from . import hanging_workflows
from .hanging_workflows import ImpatientNotes, SleepsInClassify, SleepsInRecovery
from .user_workflows import QuickNotes

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
BOUND_S = 2.0
RUN_S_MAX = 240.0  # seven crash classes hang, 2 s each; the rest runs in seconds: generous for a loaded machine


def _line_of(function, text):
    source, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(source) if text in line)


def test_a_step_that_sleeps_forever_in_the_recovery_is_a_hangs_finding_with_its_line_and_the_run_goes_on():
    started = time.monotonic()
    report = run_matrix(SleepsInRecovery(), faults=["crash"], scenario_timeout_s=BOUND_S)
    took = time.monotonic() - started
    assert took < RUN_S_MAX, f"the run took {took:.0f} s"
    assert report.baselines["notes"].held, "the baseline runs classify once: it never sleeps"
    hung = [r for r in report.results if any(v.invariant == "hangs" for v in r.outcome.violations)]
    held = [r for r in report.results if r.outcome.held]
    assert hung, "a crash inside classify makes the recovery run it again, and sleep"
    assert held, "the points before classify's claim and after its commit still run, and hold"
    assert {v.invariant for r in report.results for v in r.outcome.violations} == {"hangs"}
    line = _line_of(hanging_workflows._sleep, "time.sleep(SLEEP_S)")
    ran = [r for r in hung if not r.same_as]
    for result in ran:
        (violation,) = result.outcome.violations
        # The bound is 2 s, or ten times the baseline's time where a loaded machine made that longer.
        within = re.match(r"the recovery \(a fresh process\) did not finish within ([\d.]+) s at point '", violation.detail)
        assert within and float(within[1]) >= BOUND_S, violation.detail
        assert "; stuck at " in violation.detail and violation.detail.endswith(f"hanging_workflows.py:{line} in _sleep"), violation.detail
        assert result.outcome.exit == "hung"
        assert result.outcome.seconds < float(within[1]) + 30, result.outcome.seconds
        (recovery,) = result.outcome.stacks
        assert recovery["process"] == "the recovery (a fresh process)"
        assert f'hanging_workflows.py", line {line} in _sleep' in recovery["frames"].splitlines()[1], recovery["frames"]
        assert "chaos/core" not in recovery["frames"], "the trimmed stack holds only the user's and the engine's frames"
        assert "chaos/core/scenario.py" in recovery["full"], "the whole dump is kept too"


def test_a_lock_never_released_in_the_recovery_is_reported_by_the_command_line_with_its_stack_in_the_json():
    out = subprocess.run([sys.executable, "-m", "chaos", "matrix", "--target", "quality.hanging_workflows:FreezesInRecovery",
                          "--faults", "crash", "--scenario-timeout", "2", "--json", "-n", "1"],
                         capture_output=True, text=True, timeout=RUN_S_MAX, env=ENV)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    locked = f"hanging_workflows.py\", line {_line_of(hanging_workflows._locked, '_never.acquire()') + 1} in _locked"
    hung = [r for r in report["results"] if r["exit"] == "hung"]
    assert hung and all(r["stacks"] and locked in r["stacks"][0]["frames"] for r in hung if not r["same_as"])
    assert any(r["held"] for r in report["results"])
    assert all(r["replay"].endswith("--scenario-timeout 2") for r in report["results"])


def test_a_matrix_that_finishes_is_unaffected_by_a_short_bound():
    report = run_matrix(QuickNotes(), faults=["crash", "pause"], scenario_timeout_s=BOUND_S)
    assert report.points > 100
    assert report.violations == 0
    assert not any(r.outcome.stacks for r in report.results)
    assert {r.outcome.exit for r in report.results} <= {"killed", "paused", "not-reached"}


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_scenario_timeout_is_one_line_and_exit_2(value):
    out = subprocess.run([sys.executable, "-m", "chaos", "matrix", "--scenario-timeout", value], capture_output=True, text=True,
                         timeout=120, env=ENV)
    assert out.returncode == 2
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert f"--scenario-timeout: '{value}' is not a number of seconds > 0" in line
    assert "Traceback" not in out.stderr


def test_a_bad_scenario_timeout_given_to_run_matrix_or_declared_by_the_adapter_is_a_usage_error():
    with pytest.raises(MatrixUsageError, match=r"scenario timeout -1\.0 \(from scenario_timeout_s\) is not a number of seconds > 0"):
        run_matrix(QuickNotes(), faults=["crash"], scenario_timeout_s=-1.0)
    with pytest.raises(MatrixUsageError, match=r"scenario timeout 'soon' \(from the adapter's scenario_timeout_s\)"):
        run_matrix(ImpatientNotes(), faults=["crash"])


def test_a_history_whose_worker_sleeps_forever_is_a_hangs_finding_within_the_steps_bound():
    """Goal: random histories are bounded too: a step whose worker's process never ends is killed
    at the history's bound (three times the adapter's scenario bound: 3 s here) and reported as
    ``hangs``, and the exploration ends. Method: explore the notes workflow whose ``classify``
    sleeps an hour on every job but the first; before, each such step waited 900 s for its
    process, and the finding was the drain's process 'raised'. The histories are not shrunk (each
    attempt would wait out the bound again): what is asserted is the finding and the end."""
    from hypothesis import Phase

    from chaos.machine import explore

    started = time.monotonic()
    report = explore(SleepsInClassify(), max_examples=4, phases=(Phase.generate,))
    elapsed_s = time.monotonic() - started
    assert [f.invariant for f in report.findings] == ["hangs"], report.findings
    assert "did not finish within 3 s" in report.findings[0].failure
    assert elapsed_s < RUN_S_MAX, f"the exploration took {elapsed_s:.0f} s"
