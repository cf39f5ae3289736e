"""Workflows that wait forever at some point, for the watchdog's tests (:mod:`quality.test_watchdog`).

- :class:`SleepsInRecovery`: the notes workflow whose ``classify`` step, run a second time (after a
  crash interrupted it), sleeps for an hour: the baseline and every point before and after
  ``classify`` hold; the points where the recovery runs ``classify`` again hang.
- :class:`FreezesInRecovery`: the same, with the recovery waiting on a lock nobody releases.
- :class:`SleepsInClassify`: ``classify`` sleeps for an hour on every job but the first (the one
  a history's baseline runs alone), under a 1 s bound: a history that runs another job that far hangs.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from engine import Step, StepOutput, Workflow

from .user_workflows import QuickNotes, notes_workflow

SLEEP_S = 3600.0
_never = threading.Lock()


def _hanging_classify(workflow: Workflow, wait: Any, when: Any = lambda ctx: ctx.attempt > 1) -> Workflow:
    def again(step: Step) -> Step:
        def hangs_when_run_again(ctx: Any) -> StepOutput:
            if when(ctx):
                wait()
            return step.fn(ctx)

        return dataclasses.replace(step, fn=hangs_when_run_again)

    return Workflow(workflow.name, [again(s) if s.name == "classify" else s for s in workflow.steps])


def _sleep() -> None:
    time.sleep(SLEEP_S)  # the line a hang's stack names


def _locked() -> None:
    _never.acquire()
    _never.acquire()


class SleepsInRecovery(QuickNotes):
    name = "notes-sleeps-in-recovery"

    def workflow(self, world: Any) -> Workflow:
        return _hanging_classify(notes_workflow(world.model), _sleep)


class FreezesInRecovery(QuickNotes):
    name = "notes-locked-in-recovery"

    def workflow(self, world: Any) -> Workflow:
        return _hanging_classify(notes_workflow(world.model), _locked)


class SleepsInClassify(QuickNotes):
    name = "notes-sleeps-in-classify"
    scenario_timeout_s = 1.0

    def workflow(self, world: Any) -> Workflow:
        return _hanging_classify(notes_workflow(world.model), _sleep, when=lambda ctx: ctx.job_id != "doc-1")


class ImpatientNotes(QuickNotes):
    """Declares a bound that is no number of seconds."""

    name = "notes-impatient"
    scenario_timeout_s = "soon"
