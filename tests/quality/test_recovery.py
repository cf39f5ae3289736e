"""An engine that recovers a dead worker's work only when that worker restarts (``restart_tinyflow``),
gated with the default recovery and declared ``recovery = "restart"``: the default reports every
job the doomed worker held as stuck, the declared model restarts the worker and the gate holds;
in the crash matrix and at the end of a random history."""

from __future__ import annotations

import pytest

from chaos import run_matrix
from chaos.adapter import capabilities
from chaos.core.recovery import recovering_workers, recovery_model, recovery_wait_s
from chaos.histories.events import Kill, Run
from chaos.histories.state_machine import InvariantViolated, machine_for

# clean: the doomed worker dies mid-job; lost-lease: a worker claims and dies before the doomed one runs.
FAMILIES = ["clean", "lost-lease"]


@pytest.fixture
def restarting(minimal_engine_path):
    """The test engine's module, importable here and in the matrix's worker processes."""
    from . import restart_tinyflow

    return restart_tinyflow


def _invariants(report) -> set[str]:
    return {v.invariant for r in report.results for v in r.outcome.violations}


def test_lease_expiry_leaves_a_restarting_engines_jobs_held_and_restart_recovers_them(restarting):
    assumed = run_matrix(restarting.LeaseExpiryRestart(), families=FAMILIES, faults=["crash"], jobs=2)
    declared = run_matrix(restarting.DeclaredRestart(), families=FAMILIES, faults=["crash"], jobs=2)
    for report in (assumed, declared):  # without a crash nobody dies: both baselines complete
        assert not [name for name, base in report.baselines.items() if base.violations]
    assert assumed.points == declared.points > 0
    # A worker of a new identity never gets the doomed worker's job: most points leave it held.
    assert assumed.violations > assumed.points // 2, (assumed.violations, assumed.points)
    assert {"drains", "same-outcome"} <= _invariants(assumed)
    assert declared.violations == 0, sorted(_invariants(declared))
    lines = {type(a).__name__: {s.name: s.line() for s in capabilities(a)}["recovery"]
             for a in (restarting.LeaseExpiryRestart(), restarting.DeclaredRestart())}
    assert lines["DeclaredRestart"] == "  yes  recovery = 'restart'"
    assert lines["LeaseExpiryRestart"].startswith("  no   recovery: default: 'lease-expiry'")


def test_at_the_end_of_a_history_the_killed_worker_restarts_under_its_own_identity(restarting):
    outcomes = {}
    for adapter in (restarting.LeaseExpiryRestart(), restarting.DeclaredRestart()):
        machine = machine_for(adapter)()
        try:
            machine.start(1)
            machine._step(Run("w1", Kill(at=2048, mode="fork")))  # w1 dies holding the job
            machine._drain_and_check()
            outcomes[type(adapter).__name__] = "held"
        except InvariantViolated as exc:
            outcomes[type(adapter).__name__] = str(exc)
        finally:
            machine.ok = False
            machine.teardown()
    assert outcomes["DeclaredRestart"] == "held"
    assert "drains" in outcomes["LeaseExpiryRestart"], outcomes


def test_each_model_waits_and_recovers_as_declared():
    class Adapter:
        lease_s = 30.0

    def declared(word):
        adapter = Adapter()
        adapter.recovery = word
        return adapter

    class Target:  # a target as resolve() makes it: the declared word read into its model
        def __init__(self, adapter=None):
            self.lease_s = 30.0
            self.recovery = recovery_model(adapter if adapter is not None else Adapter())

    assert (recovery_wait_s(Target()), recovering_workers(Target(), ["w-a", "w-doomed"], "w-new")) == (31.0, ["w-new"])
    assert (recovery_wait_s(Target(declared("restart"))), recovering_workers(Target(declared("restart")), ["w-a", "w-doomed", "w-a"], "w-new")) \
        == (0.0, ["w-a", "w-doomed"])
    assert (recovery_wait_s(Target(declared("at-open"))), recovering_workers(Target(declared("at-open")), ["w-doomed"], "w-new")) == (0.0, ["w-new"])
    with pytest.raises(ValueError, match="recovery is 'reboot'; use 'lease-expiry' .*'restart' .*'at-open'"):
        recovery_model(declared("reboot"))
