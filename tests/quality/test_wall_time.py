"""An engine on the machine's time (``walltime_tinyflow``: tinyflow calling ``time.time()``), gated
as it is and declared ``time_source = "wall"``: as it is, the harness moves a clock the engine
never reads, and the families whose job must wait (a backoff, a dead worker's lease) fail without
any fault; declared, each worker's process answers ``time.time()`` from the harness's clock, in
the crash matrix and in random histories, and the gate holds as it does on tinyflow."""

from __future__ import annotations

import time

import pytest

from chaos import run_matrix
from chaos.adapter import capabilities
from chaos.core.sandbox import Sandbox
from chaos.machine import explore

# resume: a worker dies holding the job (its lease must expire); extract-timeout: a backoff.
FAMILIES = ["clean", "resume", "extract-timeout"]


@pytest.fixture
def wall(minimal_engine_path):
    from . import walltime_tinyflow

    return walltime_tinyflow


def test_an_engine_on_the_machines_time_fails_undeclared_and_holds_declared(wall):
    undeclared = run_matrix(wall.WallUndeclared(), families=FAMILIES, faults=["crash"], jobs=2)
    failing = {name for name, base in undeclared.baselines.items() if base.violations}
    assert failing == {"resume", "extract-timeout"}, failing  # the lease and the backoff never pass for it
    assert "drains" in {v.invariant for v in undeclared.baselines["resume"].violations}
    declared = run_matrix(wall.WallDeclared(), families=FAMILIES, faults=["crash"], jobs=2)
    assert not [name for name, base in declared.baselines.items() if base.violations]
    assert declared.points > undeclared.points and declared.violations == 0
    line = {s.name: s.line() for s in capabilities(wall.WallDeclared())}["time_source"]
    assert line == "  yes  time_source = 'wall'"
    assert time.time() > 1_700_000_000 + 365 * 86400  # the test's own process still reads the machine's time


def test_random_histories_of_the_declared_engine_hold(wall):
    report = explore(wall.WallDeclared(), profile="ci", max_examples=4, stateful_step_count=15)
    assert report.passed, report.format()
    assert report.examples >= 4


def test_a_sandbox_refuses_an_engine_on_the_machines_time_naming_the_fix(wall, tmp_path):
    with pytest.raises(ValueError, match="declares time_source = 'wall': a sandbox .* pass the engine the clock open"):
        Sandbox(wall.WallDeclared(), str(tmp_path))
    with pytest.raises(ValueError, match=r"time_source is 'sundial'; use 'passed' \(the default: "):
        run_matrix(wall.Sundial(), families=["clean"], faults=["crash"])

