"""Proof that a random history's storm finds a backoff without jitter, and only that.

Method: drive the state machine by hand through one history with a ``Storm`` (start, the storm,
the end of the history with its at-rest checks): the reference engine passes it, and the planted
``NoJitter`` (every retry at the top of its backoff window) fails it by ``retry-spread``, revealed
by the storm. A storm drained without pacing makes even the reference look like a herd, which is
what the pacing is for; and the storm's faults reach its own jobs only. The ``ci`` profile's
finding of ``NoJitter`` is in ``test_machine_finds_planted_bugs.py``.
"""

from __future__ import annotations

import importlib
import os

import pytest

from chaos import ReferenceAdapter
from chaos.core.invariants import FAILURES_IN_A_ROW_MIN
from chaos.histories import state_machine
from chaos.histories.events import STORM_JOB_IDS, Machine, Storm
from chaos.histories.state_machine import violated

from .variants import NoJitter


def storm(machine):
    machine._step(Storm())
    machine.every_invariant_holds_now()
    return machine.log[-1]


def retry_times(machine):
    """When each herd job's call after three failures in a row of its extract was made."""
    times, in_a_row = [], {}
    for call in machine.world.calls():
        if call.job_id in STORM_JOB_IDS and call.step == "extract":
            if in_a_row.get(call.job_id, 0) >= FAILURES_IN_A_ROW_MIN:
                times.append(call.at)
            in_a_row[call.job_id] = in_a_row.get(call.job_id, 0) + 1 if call.fault else 0
    return times


def test_the_reference_engine_spreads_a_storms_retries_and_its_history_ends_clean(history):
    machine = history(ReferenceAdapter(), jobs=2)
    assert "16 jobs met the outage and settled" in storm(machine), machine.log
    times = retry_times(machine)
    assert len(times) == len(STORM_JOB_IDS)  # each job retried once after its three failures
    assert len(set(times)) > 1, times  # the paced drain shows when each came
    jobs = machine._inspect().jobs
    assert {jobs[job].state for job in STORM_JOB_IDS} == {"delivered"}
    machine.teardown()  # the at-rest drain and checks, retry-spread included: no violation


def test_a_storm_reveals_a_backoff_without_jitter_by_retry_spread(history):
    machine = history(NoJitter(), jobs=2)
    with pytest.raises(violated("retry-spread", "Storm")) as caught:
        storm(machine)
    assert "16 of 16 retries after three failures in a row fell within 1s" in str(caught.value)


def test_a_storm_drained_without_pacing_looks_like_a_herd_even_for_the_reference(history, monkeypatch):
    # What the pacing is for: a drain that jumps past every backoff at once puts every retry in
    # the same instant, so the reference's pass above depends on the storm's paced drain.
    settle = state_machine.settle
    monkeypatch.setattr(state_machine, "settle", lambda *args, paced=False, **kw: settle(*args, paced=False, **kw))
    machine = history(ReferenceAdapter(), jobs=2)
    with pytest.raises(violated("retry-spread", "Storm")):
        storm(machine)


def test_a_storms_faults_hit_its_own_jobs_only_and_a_second_storm_is_ignored(history):
    machine = history(ReferenceAdapter(), jobs=2)
    storm(machine)
    assert {job for job, _, _ in machine.world.faults_met()} == set(STORM_JOB_IDS)
    assert machine._inspect().jobs["doc-1"].state == "delivered"  # drained with them, faultless
    assert storm(machine).endswith(": ignored: a storm ran already")


def test_a_storm_waits_for_a_calm_machine(history):
    machine = history(ReferenceAdapter(), jobs=2)
    machine._step(Machine("lock-held"))
    assert storm(machine).endswith(": ignored: the machine is at fault (a drain could not write)")
    assert not machine.stormed



def test_a_storms_faults_reach_the_steps_by_the_adapters_own_task_names(history, monkeypatch):
    # tinyflow (examples/minimal_engine) calls its extract "draft": a storm armed on "extract"
    # would never fire there, and its history would pass with no herd at all.
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "minimal_engine"))
    tinyflow = importlib.import_module("crash").TinyflowAdapter
    machine = history(tinyflow(), jobs=2)
    assert "16 jobs met the outage and settled" in storm(machine), machine.log
    assert {(task, kind) for _, task, kind in machine.world.faults_met()} == {("draft", "connection"), ("draft", "timeout")}
    assert {job for job, _, _ in machine.world.faults_met()} == set(STORM_JOB_IDS)
    machine.teardown()
