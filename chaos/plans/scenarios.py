"""Playing a fault plan's scripted scenario: its script runs on a
:class:`~chaos.core.sandbox.Sandbox` action by action (submits, runs, faults, a person's actions,
checks), the system drains, and the whole invariant catalog and the scenario's ``expect`` table
are checked.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, TYPE_CHECKING

from chaos.core.invariants import Violation, busiest_window
from chaos.core.findings import plural
from chaos.plans.plan import Action, Expect, FaultSpec, ScriptedScenario
from chaos.core.sandbox import Sandbox
from chaos.core.target import resolve
from chaos.core.world import Call, Fault

if TYPE_CHECKING:
    from chaos.adapter import Adapter
    from chaos.core.target import Target

__all__ = ["ScenarioResult", "run_scenario", "expect_failures", "to_fault"]


@dataclass
class ScenarioResult:
    violations: list[Violation] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    wasted_calls: int = 0
    seconds: float = 0.0
    final_states: dict[str, str] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return not self.violations and not self.failures


def run_scenario(scenario: ScriptedScenario, adapter: Adapter, directory: str, *, seed: int) -> ScenarioResult:
    """Play the script, drain, then check the invariant catalog and the scenario's expect."""
    started = time.perf_counter()
    target = resolve(adapter)  # a target comes back as it is
    box = Sandbox(target, directory, seed=seed)
    result = ScenarioResult()
    try:
        for job_id in scenario.jobs:
            box.submit(target.resolve_jobs(job_id))  # a job named by position is the adapter's
        for action in scenario.script:
            problem = _play(box, action, target)
            if problem:
                result.failures.append(problem)
                break
        else:
            box.drain()
            result.violations = box.check()
            if scenario.expect is not None:
                result.failures += _box_failures(box, scenario.expect)
        result.wasted_calls = box.wasted_calls()
        result.final_states = box.states()
    finally:
        box.close()
    result.seconds = time.perf_counter() - started
    return result


def _play(box: Sandbox, action: Action, target: Target) -> str | None:
    """Do one action; return what went wrong, if anything."""
    o = action.options
    worker = o.get("worker", "w1")
    expected = o.get("expect_error")
    errors: tuple[type[BaseException], ...] = ()
    if expected == "conflict":
        errors = target.conflict_errors or (Exception,)
    elif expected == "illegal":
        errors = target.human_errors or (Exception,)
    try:
        if action.verb == "submit":
            box.submit(action.value, o.get("payload"), worker=worker)
        elif action.verb == "run":
            box.run(action.value, worker=worker)
        elif action.verb == "send":
            box.send(worker=worker)
        elif action.verb == "advance_s":
            box.advance(action.value)
        elif action.verb == "poll_s":
            box.poll(action.value, o["tick_s"], worker=worker)
        elif action.verb == "drain":
            box.drain(worker=worker)
        elif action.verb == "fault":
            assert action.fault is not None
            box.arm(to_fault(action.fault))
        elif action.verb == "heal":
            box.heal()
        elif action.verb == "requeue":
            box.requeue(action.value, worker=worker)
        elif action.verb == "resolve":
            box.resolve(action.value, o["action"], worker=worker)
        elif action.verb == "cancel":
            box.cancel(action.value, worker=worker)
        elif action.verb == "expect":
            assert action.expect is not None
            failures = _box_failures(box, action.expect)
            return "; ".join(failures) if failures else None
    except errors:
        return None
    except Exception as exc:
        return f"{action.where} ({_describe(action)}) raised {type(exc).__name__}: {exc}"
    if expected is not None:
        return f"{action.where} ({_describe(action)}) was accepted, but the plan expects it to be refused as {expected}"
    return None


def _describe(action: Action) -> str:
    parts = [f"{action.verb} = {json.dumps(action.value) if action.verb != 'expect' else '{...}'}"]
    parts += [f"{k} = {json.dumps(v)}" for k, v in action.options.items()]
    return ", ".join(parts)


def _box_failures(box: Sandbox, expect: Expect) -> list[str]:
    calls = box.calls()
    failures = expect_failures(
        expect,
        states=box.states(),
        calls_by_step=Counter(c.step for c in calls),
        applied=len(box.applied()),
        wasted=box.wasted_calls(),
        last_errors=box.last_errors(),
    )
    if expect.job_rows is not None:
        rows = len(box.states())
        if rows != expect.job_rows:
            failures.append(f"{expect.where}: expected {plural(expect.job_rows, 'job row')}, found {rows}")
    if expect.burst_max is not None:
        b = expect.burst_max
        since = box.started_at + b["from_s"]
        times = sorted(c.at for c in calls if c.step == b["step"] and c.at >= since)
        worst, at = busiest_window(times, b["window_s"])
        if worst > b["max"]:
            failures.append(
                f"{expect.where}: {worst} calls of step {b['step']!r} within {b['window_s']:g}s "
                f"(from t={at - box.started_at:.2f}s); at most {b['max']} allowed"
            )
    if expect.call_gap_min is not None:
        g = expect.call_gap_min
        gap, job = _smallest_gap(calls, g["step"])
        if gap is not None and gap < g["seconds"]:
            failures.append(
                f"{expect.where}: two calls of step {g['step']!r} for job {job!r} were {gap:.2f}s apart; at least {g['seconds']:g}s expected"
            )
    return failures


def expect_failures(expect: Expect, *, states: dict[str, str], calls_by_step: Counter, applied: int, wasted: int,
                    last_errors: dict[str, str | None] | None = None) -> list[str]:
    """What a section's ``expect`` finds wrong, one line each (a job in the wrong state with its
    ``last_error``, where the engine gave one)."""
    out: list[str] = []
    errors = last_errors or {}

    def why(job_ids: Iterable[str]) -> str:
        said = [f"{job_id!r}: {errors[job_id]}" for job_id in job_ids if errors.get(job_id)]
        return f" (last_error of {'; of '.join(said)})" if said else ""

    if expect.state is not None:
        wrong = {j: s for j, s in sorted(states.items()) if s != expect.state}
        if wrong or not states:
            out.append(f"{expect.where}: expected every job in {expect.state!r}, found {wrong or 'no jobs'}{why(wrong)}")
    for job_id, state in expect.states.items():
        if states.get(job_id) != state:
            out.append(f"{expect.where}: expected job {job_id!r} in {state!r}, found {states.get(job_id)!r}{why([job_id])}")
    for step, count in expect.calls.items():
        if calls_by_step.get(step, 0) != count:
            out.append(f"{expect.where}: expected {plural(count, 'paid call')} during step {step!r}, the ledger has {calls_by_step.get(step, 0)}")
    if expect.applied is not None and applied != expect.applied:
        out.append(f"{expect.where}: expected {plural(expect.applied, 'effect')} applied at the receiver, found {applied}")
    if expect.wasted_max is not None and wasted > expect.wasted_max:
        out.append(f"{expect.where}: {plural(wasted, 'wasted paid call')}; at most {expect.wasted_max} allowed")
    return out


def _smallest_gap(calls: list[Call], step: str) -> tuple[float | None, str | None]:
    last: dict[str, float] = {}
    best: tuple[float | None, str | None] = (None, None)
    for call in calls:
        if call.step != step:
            continue
        if call.job_id in last:
            gap = call.at - last[call.job_id]
            if best[0] is None or gap < best[0]:
                best = (gap, call.job_id)
        last[call.job_id] = call.at
    return best


def to_fault(spec: FaultSpec) -> Fault:
    return Fault(spec.kind, task=spec.task, retry_after_s=spec.retry_after_s, duration_s=spec.duration_s, sticky=spec.sticky,
                 per_job=spec.per_job)
