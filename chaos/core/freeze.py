"""Freezing a worker at a point: a pause, and an interleaving of two frozen workers.

Killing is one fault; freezing is the other. A process can stop at any line for longer than its
lease (a GC pause, a VM migration, a laptop lid) and then carry on as if nothing happened, while
another worker has taken its job. Here the worker stops itself (SIGSTOP) just before the point,
another worker runs meanwhile, with the frozen one's lease still valid or past it, and then the
frozen worker resumes (SIGCONT); the system drains and the catalog is checked as after a kill
(:mod:`chaos.core.settle`). Compare-and-swap guards, lease checks and fencing tokens exist for
exactly this case, and only pauses reveal their absence.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any, Callable, TYPE_CHECKING

from engine import NO_PROGRESS
from engine import Outcome as RunOutcome  # the engine's run outcomes; Outcome below is a point's

from chaos.core.invariants import Violation, point_reached, raised
from chaos.core.iteration import one_iteration
from chaos.core.points import Point, Killer
from chaos.core.process import Exit, fork, stop_here
from chaos.core.scenario import PAUSE_KINDS, Family, Outcome, Run, arm_sticky, watched
from chaos.core.kill import doomed_exit, doomed_iteration
from chaos.core.settle import ITERATIONS_PER_ROUND_MAX, after_fault
from chaos.core.template import fresh_run
from chaos.core.verdict import adapter_raised, steps_in_flight

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["OTHER_BUSY_TIMEOUT_S", "EXIT_RESUMED", "short_busy", "other_worker", "run_pause", "run_interleaving"]

OTHER_BUSY_TIMEOUT_S = 0.05
EXIT_RESUMED = 0


def _frozen_at(run: Run, point: Point, deep: bool, iteration_of: Callable[[], Callable[[], Any]], who: str = "the worker to freeze") -> Any:
    """Fork a worker that stops itself (SIGSTOP) just before ``point``; return the child, stopped
    (or ended, if it never reached the point)."""
    def body() -> bool:
        iteration = iteration_of()
        with Killer(run.adapter.trace_paths(), point, stop_here, run.only(deep)) as killer:
            iteration()
        return killer.reached

    child = fork(body, f"{who} (before its point)")
    return child, child.wait()


def _resumed(child: Any, who: str) -> list[Violation]:
    child.what = f"{who} (resumed)"
    ended = child.resume()
    if ended.exit is Exit.FINISHED:
        return []
    detail = (ended.error or f"exit status {ended.status}").strip().splitlines()[-1]
    return [Violation("drains", f"{who} crashed after it was resumed: {detail}")]


def short_busy(session: Any) -> Any:
    setter = getattr(session, "set_busy_timeout", None)
    if setter is not None:
        setter(OTHER_BUSY_TIMEOUT_S)
    return session


def other_worker(run: Run, name: str) -> tuple[float, list[Violation]]:
    """Another worker, in a child of its own, runs as far as it can (steps and outbox) while one
    is frozen.

    Its busy timeout is short: where the frozen worker holds the write lock, it must wait that
    long, back off cleanly and leave the job for later. Returns the time it spent blocked.
    """

    def body() -> tuple[float, list[Violation]]:
        arm_sticky(run)
        session = short_busy(run.session(name))
        blocked_s = 0.0
        try:
            for _ in range(ITERATIONS_PER_ROUND_MAX):
                started = time.perf_counter()
                outcome = session.run_once()
                if outcome == RunOutcome.BUSY:
                    blocked_s += time.perf_counter() - started
                if outcome in NO_PROGRESS:
                    break
            for _ in range(ITERATIONS_PER_ROUND_MAX):
                if not session.send_outbox():
                    break
        except Exception as exc:  # the engine must survive a frozen peer: anything raised is a violation
            return blocked_s, [Violation("drains", f"worker {name!r} raised {type(exc).__name__} while a peer was frozen: {exc}")]
        run.close()
        return blocked_s, []

    ended = fork(body, f"worker {name!r} (run while a peer was frozen)").wait()
    if ended.exit is Exit.FINISHED:
        return ended.value
    return 0.0, [raised(f"worker {name!r}, while a peer was frozen", ended.error or str(ended.exit))]


def run_pause(adapter: Target, family: Family, point: Point, workdir: str, *, seed: int, expired: bool, deep: bool = True) -> Outcome:
    """Freeze the worker at ``point``; another worker runs with its lease still valid
    (``expired=False``) or past it; then resume the frozen worker, drain, and check (a scenario
    past its bound is a ``hangs`` result)."""
    kind = PAUSE_KINDS[1] if expired else PAUSE_KINDS[0]
    return watched(adapter, family, point.id, kind, lambda: _run_pause(adapter, family, point, workdir, seed=seed, expired=expired, deep=deep))


def _run_pause(adapter: Target, family: Family, point: Point, workdir: str, *, seed: int, expired: bool, deep: bool) -> Outcome:
    started = time.perf_counter()
    run = fresh_run(adapter, family, os.path.join(workdir, "point"), seed)
    kind = PAUSE_KINDS[1] if expired else PAUSE_KINDS[0]
    problems: list[Violation] = []
    blocked_s = 0.0
    interruptions: Counter = Counter()
    child = None
    try:
        child, ended = _frozen_at(run, point, deep, lambda: doomed_iteration(run))
        if ended.exit is Exit.STOPPED:
            exit_kind = Exit.PAUSED
            if expired:
                interruptions = steps_in_flight(run)  # a pause longer than the lease interrupts the step
                run.clock.advance(adapter.lease_s + 1)
            blocked_s, problems = other_worker(run, "w-other")
            problems += _resumed(child, "the frozen worker")
        else:
            exit_kind, error = doomed_exit(ended)
            if error:
                problems.append(raised("the iteration to pause", error))
            elif exit_kind is Exit.NOT_REACHED:  # no pause happened: the scenario tested nothing
                problems.append(point_reached("the worker to freeze"))
        outcome = after_fault(run, family, point.id, exit_kind, lambda _: interruptions, problems)
    except Exception as exc:  # an adapter raised in the harness's own process
        outcome = adapter_raised(point.id, exc)
    finally:
        if child is not None:
            child.kill()  # never leave a stopped worker behind
        run.close()
    outcome.fault = kind
    outcome.blocked_s = blocked_s
    outcome.seconds = time.perf_counter() - started
    return outcome


def _worker_b(run: Run) -> Callable[[], Any]:
    arm_sticky(run)
    return one_iteration(run.adapter, short_busy(run.session("w-b")))


def run_interleaving(adapter: Target, family: Family, first: Point, second: Point, workdir: str, *, seed: int, deep: bool = True) -> Outcome:
    """Two-level interleaving on one job: A frozen at ``first``; time passes A's lease; B runs
    until ``second`` and freezes; A resumes and finishes; then B resumes; drain and check (a
    scenario past its bound is a ``hangs`` result)."""
    return watched(adapter, family, f"{first.id}+{second.id}", "interleave",
                    lambda: _run_interleaving(adapter, family, first, second, workdir, seed=seed, deep=deep))


def _run_interleaving(adapter: Target, family: Family, first: Point, second: Point, workdir: str, *, seed: int, deep: bool) -> Outcome:
    started = time.perf_counter()
    run = fresh_run(adapter, family, os.path.join(workdir, "point"), seed)
    problems: list[Violation] = []
    interruptions: Counter = Counter()
    exit_kind = Exit.NOT_REACHED
    point_id = f"{first.id}+{second.id}"
    children: list[Any] = []
    try:
        a, a_ended = _frozen_at(run, first, deep, lambda: doomed_iteration(run), "worker A")
        children.append(a)
        if a_ended.exit is Exit.STOPPED:
            interruptions = steps_in_flight(run)
            run.clock.advance(adapter.lease_s + 1)
            b, b_ended = _frozen_at(run, second, deep, lambda: _worker_b(run), "worker B")
            children.append(b)
            problems += _resumed(a, "worker A")
            if b_ended.exit is Exit.STOPPED:
                exit_kind = Exit.INTERLEAVED
                problems += _resumed(b, "worker B")
        outcome = after_fault(run, family, point_id, exit_kind, lambda _: interruptions, problems)
    except Exception as exc:  # an adapter raised in the harness's own process
        outcome = adapter_raised(point_id, exc)
    finally:
        for child in children:
            child.kill()
        run.close()
    outcome.fault = "interleave"
    outcome.seconds = time.perf_counter() - started
    return outcome
