"""A parsed plan checked against its target's workflow, when the plan is collected: every step,
state, task and job it names must be the target's.
"""

from __future__ import annotations

from typing import Any, Callable, TYPE_CHECKING

from chaos.core.target import resolve
from chaos.plans.model import Expect, FaultSpec, Plan, PlanError
from chaos.plans.schema import GROUP_CLAIM, GROUP_RELEASE, GROUP_SEND, JOB_POSITION

if TYPE_CHECKING:
    from chaos.adapter import Adapter
    from chaos.core.target import Target

__all__ = ["check_against", "check_jobs_named", "clipped"]


def check_jobs_named(path: str, expect: Expect | None, submitted: list[str]) -> None:
    """An expectation of a job's state names a job the plan submits: another id would fail as a
    finding of the code under test, when it is a typo in the plan."""
    if expect is None:
        return
    if any(JOB_POSITION.fullmatch(job) for job in submitted):
        return  # the target's jobs, by position: check_against checks the ids they are on its adapter
    for job in expect.states:
        if job not in submitted:
            known = ", ".join(dict.fromkeys(submitted)) or "none"
            raise PlanError(f"{path}: key '{expect.where}.states' names job {clipped(job)}, which is never submitted; "
                            f"submitted: {known}")


def clipped(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


# -- checks against the target ------------------------------------------------------------------
def check_against(plan: Plan, adapter: Adapter | Target) -> None:
    """Check the plan's step, state and task names against the target's workflow."""
    target = resolve(adapter)  # a target comes back as it is
    steps = list(target.step_states())
    states = sorted(target.states())
    tasks_fn: Callable[[], Any] | None = target.fault_tasks
    tasks = sorted(tasks_fn() if tasks_fn is not None else set(steps) | {"fetch", "send"})
    faults: list[tuple[str, FaultSpec]] = []
    expects: list[Expect] = []
    if plan.points is not None:
        p = plan.points
        groups = [GROUP_SEND] if p.phase == "sender" else [GROUP_CLAIM, *steps, GROUP_RELEASE]
        for name in p.steps or ():
            if name not in groups:
                raise PlanError(
                    f"{plan.path}: key 'points.steps' has unknown step {name!r}; allowed for phase {p.phase!r}: {', '.join(groups)}"
                )
        faults += [(f"points.faults[{i}]", f) for i, f in enumerate(p.faults)]
        expects += [p.expect] if p.expect else []
    for scenario in plan.scenarios:
        for action in scenario.script:
            if action.fault is not None:
                faults.append((action.where, action.fault))
            if action.expect is not None:
                expects.append(action.expect)
        expects += [scenario.expect] if scenario.expect else []
    _check_jobs_on(plan, target)
    for where, fault in faults:
        if fault.task is not None and fault.task not in tasks:
            raise PlanError(f"{plan.path}: key '{where}.task' is {fault.task!r}, not a task of the target; allowed: {', '.join(tasks)}")
    for expect in expects:
        _check_expect(plan.path, expect, steps, states)


def _check_jobs_on(plan: Plan, target: Target) -> None:
    """The jobs a plan names by position (its default, or a count) are the adapter's ``job_ids``:
    an expectation naming a job is checked against those ids, as it could not be when the plan was read."""
    if plan.points is not None:
        check_jobs_named(plan.path, plan.points.expect, [target.resolve_jobs(j) for j in plan.points.jobs])
    for scenario in plan.scenarios:
        submitted = [*(target.resolve_jobs(j) for j in scenario.jobs), *(a.value for a in scenario.script if a.verb == "submit")]
        for checked in [scenario.expect, *(a.expect for a in scenario.script)]:
            check_jobs_named(plan.path, checked, submitted)


def _check_expect(path: str, expect: Expect, steps: list[str], states: list[str]) -> None:
    named_states = ([("state", expect.state)] if expect.state else []) + [(f"states.{k}", v) for k, v in expect.states.items()]
    for key, state in named_states:
        if state not in states:
            raise PlanError(f"{path}: key '{expect.where}.{key}' is {state!r}, not a state of the target; allowed: {', '.join(states)}")
    named_steps = [(f"calls.{k}", k) for k in expect.calls]
    named_steps += [("burst_max.step", expect.burst_max["step"])] if expect.burst_max else []
    named_steps += [("call_gap_min.step", expect.call_gap_min["step"])] if expect.call_gap_min else []
    for key, step in named_steps:
        if step not in steps:
            raise PlanError(f"{path}: key '{expect.where}.{key}' names step {step!r}, not a step of the target; allowed: {', '.join(steps)}")
