"""Retry timing: a per-job outage hits each job's first calls and no more, and retry-spread finds
a herd that comes back in one instant while a spread one, or too small a one, holds.

Method: the world's faults against a fake step context, and the invariant against hand-made
ledgers, so that each bound is checked on both of its sides.
"""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest

from chaos.core.invariants import HERD_MIN, Evidence, busiest_window, retry_spread
from chaos.core.world import Call, Fault, World
from chaos.plans.plan import PlanError, parse_plan
from engine import ConnectionFailed, FakeClock, StepTimeout


def _call(world, job_id):
    ctx = SimpleNamespace(job_id=job_id, step="extract", worker_id="w1", token=1)
    try:
        world.model.complete(ctx, "extract", "prompt")
    except (ConnectionFailed, StepTimeout) as exc:
        return type(exc).__name__
    return "answer"


def test_per_job_faults_take_turns_and_each_job_outlives_them(tmp_path):
    world = World(str(tmp_path), FakeClock(0.0))
    world.arm(Fault("connection", task="extract", sticky=True, per_job=1))
    world.arm(Fault("timeout", task="extract", sticky=True, per_job=2))
    for job_id in ("doc-1", "doc-2"):
        assert [_call(world, job_id) for _ in range(4)] == ["ConnectionFailed", "StepTimeout", "StepTimeout", "answer"]
    # Counted in the ledger: another process's world, armed the same way, sees the jobs as healed.
    other = World(str(tmp_path), FakeClock(0.0))
    other.arm(Fault("connection", task="extract", sticky=True, per_job=1))
    assert _call(other, "doc-1") == "answer"


def test_a_per_job_fault_must_be_sticky():
    with pytest.raises(ValueError, match="add sticky=True"):
        Fault("timeout", task="extract", per_job=2)
    plan = {"lesson": "L.", "scenario": [{"name": "s", "script": [{"fault": "timeout", "task": "extract", "per_job": 2}]}]}
    with pytest.raises(PlanError, match="needs sticky = true"):
        parse_plan(plan, "storm.toml")


def _ledger(retry_times):
    """Each job: three timeouts in a row at t=0, 1, 3, then its retry at the given time."""
    calls, seq = [], 0
    for n, at in enumerate(retry_times):
        for t, fault in ((0.0, "timeout"), (1.0, "timeout"), (3.0, "timeout"), (at, None)):
            seq += 1
            calls.append(Call(seq, f"doc-{n}", "extract", "extract", "w1", 1, t, False, True, fault))
    return Evidence(table={}, step_states={}, settled_states=frozenset(), final_effects={}, snapshot=None,  # type: ignore[arg-type]
                    calls=calls, deliveries=[])


def test_a_herd_retrying_in_one_instant_breaks_retry_spread():
    (violation,) = retry_spread(_ledger([14.0] * 16))
    assert violation.invariant == "retry-spread"
    assert "16 of 16 retries after three failures in a row fell within 1s" in violation.detail
    assert "at most 12 allowed" in violation.detail


def test_a_herd_spread_by_full_jitter_holds():
    rng = random.Random(0)
    assert retry_spread(_ledger([3.0 + rng.uniform(1, 8) for _ in range(16)])) == []


def test_three_quarters_of_the_herd_in_one_second_is_the_limit():
    assert retry_spread(_ledger([10.0] * 12 + [20.0, 30.0, 40.0, 50.0])) == []
    assert len(retry_spread(_ledger([10.0] * 13 + [20.0, 30.0, 40.0]))) == 1


def test_fewer_retries_than_a_herd_hold_vacuously():
    assert retry_spread(_ledger([14.0] * (HERD_MIN - 1))) == []


def test_a_429_is_not_a_storm():
    ev = _ledger([14.0] * 16)
    ev.calls = [c if c.fault is None else dataclasses.replace(c, fault="rate_limit") for c in ev.calls]
    assert retry_spread(ev) == []


def test_the_busiest_window_is_half_open():
    assert busiest_window([0.0, 1.0, 2.0], 1.0) == (1, 0.0)
    assert busiest_window([0.0, 0.999, 2.0], 1.0) == (2, 0.0)
