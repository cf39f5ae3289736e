"""One iteration of an engine's loop: one call of the session's ``run_once``, or calls until idle.

An iteration is the harness's unit of a worker's work: the crash matrix records and kills the
doomed iteration, runs one for a family's ``run`` setup and for the worker that takes a job over,
and a history's ``Run`` is one. An engine whose ``run_once`` takes a job as far as it goes (the
reference engine) keeps the default, ``iteration = "one-call"``. An engine whose loop does one step
per call declares ``iteration = "until-idle"``: an iteration is then repeated calls until one makes
**no progress**, which is a call answering ``"idle"`` (nothing was due) or ``"busy"`` (the database
stayed locked), the words of :data:`engine.NO_PROGRESS`; any other answer is progress. The clock
does not move within an iteration, so a job backed off or parked stops being due and the loop ends;
one that has not after :data:`ITERATION_CALLS_MAX` calls raises :class:`NeverIdle`.

>>> class Stepper:  # a loop of one step per call, three steps, then nothing is due
...     left = 3
...     def run_once(self):
...         self.left -= 1
...         return "stepped" if self.left >= 0 else "idle"
>>> class OneStepTarget:  # a target whose adapter declares iteration = "until-idle"
...     name = "stepper"
...     iteration = Iteration.UNTIL_IDLE
>>> stepper = Stepper()
>>> one_iteration(OneStepTarget(), stepper)(), stepper.left
('stepped', -1)
"""

from __future__ import annotations

from typing import Any, Callable, TYPE_CHECKING

from engine import NO_PROGRESS

from chaos.core.models import ITERATION_CALLS_MAX, ITERATIONS, Iteration, iteration_model

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["ITERATIONS", "Iteration", "ITERATION_CALLS_MAX", "NeverIdle", "iteration_model", "one_iteration"]


class NeverIdle(RuntimeError):
    """A session's ``run_once``, declared ``until-idle``, still made progress after the bound."""


def one_iteration(target: Target, session: Any) -> Callable[[], str]:
    """One iteration of ``session``'s loop, as ``target`` declares it. It answers as ``run_once``
    does: the last call's word where it made no progress at all or stayed ``busy``, else the last
    word that was progress (so "busy" still says the worker gave up on a locked database)."""
    run_once: Callable[[], str] = session.run_once
    if target.iteration is Iteration.ONE_CALL:
        return run_once

    def until_idle() -> str:
        said = ""
        for _ in range(ITERATION_CALLS_MAX):
            outcome = run_once()
            if outcome in NO_PROGRESS:
                return said if said and outcome == "idle" else outcome
            said = outcome
        raise NeverIdle(f"adapter {target.name!r} declares iteration = 'until-idle', but run_once made "
                        f"progress on {ITERATION_CALLS_MAX} calls in a row (the last said {said!r}) without answering 'idle' "
                        "or 'busy': make run_once answer 'idle' when nothing is due, or declare iteration = 'one-call'")

    return until_idle
