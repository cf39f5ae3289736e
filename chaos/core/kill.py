"""Killing a worker at a point: the doomed iteration, its faults armed, run in a child to its point.

The doomed iteration is what the worker a fault strikes runs (one worker iteration, an outbox
pass or a person's action, the scenario's phase), with the scenario's faults armed. ``fork`` mode
(the default, the faithful one) kills it by SIGKILL at the point: no ``finally``, no ``atexit``, no
context-manager exit. ``inprocess`` mode abandons it by raising :class:`Abandon` at the point, so
``finally`` blocks and ``with`` exits still run, and code that is only correct if they run looks
correct: a weaker approximation, documented as such. Either way the abandoned sessions are never
closed; the child's exit drops their connections. A point is then recovered and checked as every
fault is (:func:`chaos.core.scenario.after_fault`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Callable, TYPE_CHECKING

from chaos.core.clock import AheadClock, engine_reads
from chaos.core.invariants import point_reached, raised
from chaos.core.iteration import one_iteration
from chaos.core.points import SWITCH_INTERVAL_S, Killer, Point
from chaos.core.models import EnginesPerProcess
from chaos.core.process import Ended, Exit, Standby, die_here, fork
from chaos.core.store_faults import InCall
from chaos.core.world import STORE_FAULT_KINDS
from chaos.core.scenario import AT_START, DOOMED, MODES, Family, Outcome, Run, arm_sticky, watched
from chaos.core.settle import after_fault
from chaos.core.template import fresh_run
from chaos.core.verdict import adapter_raised, steps_in_flight

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["doomed_iteration", "second_worker", "run_point", "kill_at", "doomed_exit", "Abandon", "Abandoning"]


def doomed_iteration(run: Run) -> Callable[[], Any]:
    """The iteration that will be killed, with the scenario's faults armed (a store fault brought
    on the doomed session's store, and lifted once the iteration has ended)."""
    scenario = run.scenario
    if scenario.second_worker:  # before this process opens its engine and arms its faults (see second_worker)
        run.world.during_slow = second_worker(run)
    for fault in scenario.faults:
        run.world.arm(fault)
    session = run.session(DOOMED)
    if scenario.worker:
        session.configure_worker(**dict(scenario.worker))
    if scenario.phase == "worker":
        iteration = one_iteration(run.adapter, session)
    elif scenario.phase == "sender":
        iteration = session.send_outbox
    else:
        return _human_action(run, session)
    if not scenario.store_faults():
        return iteration
    in_call = run.world.on_store_fault = InCall(run.adapter, run.db, session)
    at_start = any(f.task == AT_START and f.kind in STORE_FAULT_KINDS for f in scenario.faults)

    def iteration_then_lift() -> Any:
        try:
            if at_start:
                run.world.strike(run.world.take_fault(AT_START))
            return iteration()
        finally:
            in_call.lift()  # a killed child never gets here: the kernel drops its lock and its connection
            run.world.on_store_fault = None

    return iteration_then_lift


def second_worker(run: Run) -> Callable[[], None]:
    """What runs while the doomed worker's call lasts: one iteration of another worker. In this
    process, nested in the call; but where the adapter's engine is one per process
    (``engines_per_process = "one"``), in a child forked now, before this process opens its engine
    (it would run on the doomed worker's engine, and could wait there for the very call it runs
    inside), started when the call needs it and waited for. What it raises is raised in the call,
    as it is where it runs nested."""
    if run.target.engines_per_process is EnginesPerProcess.MANY:
        return lambda: _second_worker(run)

    def apart() -> None:
        arm_sticky(run)
        _second_worker(run)
        run.close()

    standby = Standby(apart, "worker 'w-second' (run while a peer's call lasted)")

    def start() -> None:
        ended = standby.start()
        if ended.exit is not Exit.FINISHED:
            raise RuntimeError(f"worker 'w-second', run while a peer's call lasted, ended {ended.exit}: "
                               f"{(ended.error or f'status {ended.status}').strip().splitlines()[-1]}")

    return start


def _second_worker(run: Run) -> None:
    """One iteration of another worker, while the doomed one's call lasts; its clock runs the
    scenario's ``second_worker_ahead_s`` ahead (in this process only, and only meanwhile)."""
    ahead_s = run.scenario.second_worker_ahead_s
    base = run.clock
    if ahead_s:
        run.clock = AheadClock(base, ahead_s)
    try:
        one_iteration(run.adapter, run.session("w-second"))()
    finally:
        if ahead_s:
            run.clock = base
            engine_reads(run.adapter, base)  # an engine on the machine's time reads the shared clock again


def _human_action(run: Run, session: Any) -> Callable[[], None]:
    """A person's action, the scenario's phase (``human:<action>:<job>[:<arg>]``)."""
    scenario = run.scenario
    _, action, *args = scenario.phase.split(":")
    operation = getattr(session, action)
    human_errors = run.target.human_errors

    def human() -> None:
        try:
            operation(*args)
        except human_errors:
            pass  # refused with the engine's clear error: the right answer to a lost race

    return human


def run_point(adapter: Target, family: Family, point: Point, workdir: str, *, seed: int, mode: str = "fork", deep: bool = True) -> Outcome:
    """Kill the doomed iteration at ``point`` (in a child), recover in a fresh child, and check
    every invariant (a scenario past its bound is a ``hangs`` result, see :mod:`chaos.core.hangs`)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of: {', '.join(MODES)}")
    return watched(adapter, family, point.id, "crash", lambda: _run_point(adapter, family, point, workdir, seed=seed, mode=mode, deep=deep))


def _run_point(adapter: Target, family: Family, point: Point, workdir: str, *, seed: int, mode: str, deep: bool) -> Outcome:
    started = time.perf_counter()
    run = fresh_run(adapter, family, os.path.join(workdir, "point"), seed)
    try:
        exit_kind, error = kill_at(run, point, deep=deep, mode=mode)
        outcome = after_fault(run, family, point.id, exit_kind, lambda snapshot: steps_in_flight(run, snapshot))
    except Exception as exc:  # an adapter raised in the harness's own process (inspect, probe)
        outcome, error = adapter_raised(point.id, exc), ""
    finally:
        run.close()
    if error:
        outcome.error = error
        outcome.violations.insert(0, raised("the doomed iteration", error))
    elif outcome.exit == Exit.NOT_REACHED:  # no kill happened: the scenario tested nothing, and must not hold
        outcome.violations.insert(0, point_reached("the doomed worker"))
    outcome.seconds = time.perf_counter() - started
    return outcome


def kill_at(run: Run, point: Point, *, deep: bool = True, mode: str = "fork") -> tuple[Exit, str]:
    """Run the doomed iteration in a child and kill it at ``point``: how it ended, and the
    traceback it left when it raised instead."""
    return doomed_exit(fork(lambda: _run_to_point(run, point, deep, mode), "the doomed iteration (before its point)").wait())


def _run_to_point(run: Run, point: Point, deep: bool, mode: str) -> bool:
    """In the doomed child: run the iteration and die at ``point`` (SIGKILL in fork mode; an
    :class:`Abandon` raised in inprocess mode, whose sessions are then left as they are: closing
    one that was abandoned mid-statement can deadlock, and the child's exit drops them anyway).
    Returns whether the point was reached (only an inprocess child returns after reaching it)."""
    iteration = doomed_iteration(run)
    if mode == "fork":
        with Killer(run.adapter.trace_paths(), point, die_here, run.only(deep)) as killer:
            iteration()
        return killer.reached

    abandon = Abandoning(point.id)
    killer = Killer(run.adapter.trace_paths(), point, abandon, run.only(deep))
    try:
        with abandon, killer:
            iteration()
    except Abandon:
        pass
    return killer.reached


def doomed_exit(ended: Ended) -> tuple[Exit, str]:
    """How a doomed child ended, and the traceback it left when it raised."""
    if ended.exit is Exit.KILLED:
        return Exit.KILLED, ""
    if ended.exit is Exit.FINISHED:
        return (Exit.KILLED if ended.value else Exit.NOT_REACHED), ""
    return Exit.ERROR, ended.error or f"its process ended: {ended.exit} (status {ended.status})"


class Abandon(BaseException):
    """Raised at the crash point in ``inprocess`` mode. A BaseException, so step-failure
    handling (``except Exception``) cannot swallow it, as it could not swallow a SIGKILL."""


class Abandoning:
    """``inprocess`` mode's kill, for a ``with`` block that runs an iteration: called at the point
    (a :class:`~chaos.core.points.Killer`'s ``on_hit``), it raises :class:`Abandon` there.

    A point may be on a thread the iteration started (the engine's step thread), where an
    exception abandons only that thread, and may kill it outside any ``try``: the worker's own
    thread, waiting for it, then waited on (once it hung a matrix for minutes). So the worker's
    thread is abandoned too: a signal (SIGUSR1) makes it raise Abandon wherever it is, a wait on a
    lock or a queue included. And once the worker's thread is abandoned no other thread of the
    iteration runs again: a step thread handed a call just before the point would make it (a paid
    call the worker never asked for, since it was abandoned). The threads keep taking turns only
    where they wait (the switch interval stays long), and the child's last write keeps the
    interpreter (:func:`chaos.core.process.fork`).
    """

    SIGNAL = signal.SIGUSR1
    # A signal that reaches the worker's thread after it let go of the interpreter but before it
    # blocks (in a lock or a queue's wait) is only taken once that wait ends: at a lost-lease point
    # on the step thread, 10 s later (the worker's wait for its step is a quarter of a heartbeat's
    # interval). So the signal is sent again, this often, until the thread has taken it.
    RESEND_S = 0.001
    RESEND_S_MAX = 5.0  # a thread in a wait no signal ends (a C call's own) takes it when the wait ends

    def __init__(self, what: str) -> None:
        self.what = what
        self.thread = threading.get_ident()  # the thread that runs the iteration
        self._previous: Any = None
        self._active = False  # while the handler is this one's
        self._taken = False  # the worker's thread has taken the signal: it is abandoned

    def __enter__(self) -> "Abandoning":
        if not isinstance(threading.excepthook, _QuietAbandon):  # pytest sets a hook of its own per test
            threading.excepthook = _QuietAbandon(threading.excepthook)
        self._previous = signal.signal(self.SIGNAL, self._raise)
        self._active = True
        self._switch_s = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._active = False
        signal.signal(self.SIGNAL, self._previous)
        if exc_type is None:  # not abandoned: the threads may take turns as usual again
            sys.setswitchinterval(self._switch_s)

    def _raise(self, *_: Any) -> None:
        if self._taken:  # a signal sent again before the first was taken: abandoned once is enough
            return
        self._taken = True
        raise Abandon(self.what)

    def __call__(self) -> None:
        if threading.get_ident() != self.thread:
            self._abandon_the_worker_thread()
        raise Abandon(self.what)

    def _abandon_the_worker_thread(self) -> None:
        """From another thread: signal the worker's thread until it has taken the signal (see
        :data:`RESEND_S`). This thread only waits meanwhile, and ends at once after."""
        deadline = time.monotonic() + self.RESEND_S_MAX
        while self._active and not self._taken and time.monotonic() < deadline:
            signal.pthread_kill(self.thread, self.SIGNAL)
            time.sleep(self.RESEND_S)


class _QuietAbandon:
    """``threading.excepthook`` that lets a thread ended by :class:`Abandon` end quietly, as a
    SIGKILL ends it in fork mode, and hands any other exception to the hook it replaced.

    An abandoned step thread printed "Exception in thread steps-w-doomed" and its traceback on
    stderr for each such point (some 140 lines in one benchmark run), which read as a failure.
    """

    def __init__(self, previous: Callable[[Any], object]) -> None:
        self.previous = previous

    def __call__(self, args: Any) -> None:
        if args.exc_type is not None and issubclass(args.exc_type, Abandon):
            return
        self.previous(args)
