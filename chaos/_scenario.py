"""A scenario: a fresh database, jobs, a worker killed at one crash point, a recovery, the checks.

``fork`` mode (the default, the faithful one) runs the doomed worker in a forked child that opens
its own connections and dies by SIGKILL at the point: no ``finally``, no ``atexit``, no
context-manager exit. ``inprocess`` mode abandons the worker by raising an exception at the point
and drops its connection without committing: much cheaper, but ``finally`` blocks and ``with``
exits still run, so code that is only correct if they run looks correct. It is a weaker
approximation, documented as such.

After the kill the parent takes over: it checks the invariants that must hold at every moment,
moves the fake clock past the dead worker's lease, runs a fresh worker and the outbox sender until
nothing is due (moving time past every backoff), and checks the whole catalog at rest.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from engine import NO_PROGRESS
from engine import Outcome as RunOutcome  # the engine's run outcomes; Outcome below is a point's

from ._clock import SharedClock
from ._invariants import Evidence, Violation, check, idempotent_submit, wasted_calls, zombie_calls
from ._points import Killer, Point, Recorder, pause_classes
from ._world import Fault, World

__all__ = ["Scenario", "Outcome", "Family", "prepare", "run_point", "record", "MODES"]

MODES = ("fork", "inprocess")
T0 = 1_700_000_000.0
RECOVERY_ROUNDS_MAX = 40
ITERATIONS_PER_ROUND_MAX = 50
BACKOFF_JUMP_S = 33.0
EXIT_NOT_REACHED = 3
EXIT_ERROR = 4


class Abandon(BaseException):
    """Raised at the crash point in ``inprocess`` mode. A BaseException, so step-failure
    handling (``except Exception``) cannot swallow it, as it could not swallow a SIGKILL."""


@dataclass(frozen=True)
class Scenario:
    """A family of crash points: what happens before the doomed iteration, and what it runs.

    ``setup`` is a list of actions run cleanly first: ``"run"`` (one worker iteration),
    ``"send"`` (one outbox pass), ``"advance:<s>"`` (move the clock), ``"claim:<worker>"`` (a
    worker claims the next job and dies holding its lease). ``phase`` is ``"worker"``,
    ``"sender"`` or a person's action, ``"human:<action>:<job>[:<arg>]"`` (e.g.
    ``"human:cancel:doc-1"``; an action the engine refuses with its clear error is a clean end). ``faults`` are armed for the doomed iteration; ``second_worker`` lets a slow call
    run another worker while it lasts.
    """

    name: str
    lesson: str
    jobs: tuple[str, ...] = ("doc-1",)
    setup: tuple[str, ...] = ()
    phase: str = "worker"
    faults: tuple[Fault, ...] = ()
    second_worker: bool = False


@dataclass
class Family:
    """A scenario prepared once: its template files and the points of its doomed iteration."""

    scenario: Scenario
    template: str
    clock_after_setup: float
    submitted: dict[str, str]
    points: list[Point]
    executable: dict[str, frozenset[int]]
    baseline: "Outcome"
    between: list[bool] = field(default_factory=list)
    # For each point, the first point of its pause class (itself where operations are not counted).
    classes: list[int] = field(default_factory=list)
    template_db: str = ""  # an adapter's own template database (PostgreSQL); "" = the template's files


@dataclass
class Outcome:
    """What one scenario (one point, or the clean baseline) ended with."""

    point: str
    exit: str
    fault: str = "crash"
    violations: list[Violation] = field(default_factory=list)
    wasted_calls: int = 0
    zombie_calls: int = 0
    final_states: dict[str, str] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    applied: int = 0
    deliveries: int = 0
    seconds: float = 0.0
    blocked_s: float = 0.0

    @property
    def held(self) -> bool:
        return not self.violations

    def signature(self) -> tuple[Any, ...]:
        """What two kill modes must agree on at the same point."""
        return (
            tuple(sorted(self.final_states.items())),
            tuple(sorted(self.calls.items())),
            self.applied,
            self.deliveries,
            tuple(sorted({v.invariant for v in self.violations})),
        )


class _Run:
    """The files, clock, world and seeds of one scenario run, in its own directory.

    ``db`` is the engine's database: ``<directory>/engine.db`` unless the adapter made one of its
    own (see :func:`_copy`); ``drop`` says the run owns it and drops it when it closes.
    """

    def __init__(self, adapter: Any, directory: str, clock_at: float, seed: int, scenario: Scenario,
                 db: str | None = None, *, drop: bool = False) -> None:
        self.adapter = adapter
        self.dir = directory
        self.db = db if db is not None else os.path.join(directory, "engine.db")
        self.drop = drop
        self.clock = SharedClock(clock_at)
        self.world = World(directory, self.clock, lease_s=adapter.lease_s)
        self.world.probe = adapter.probe(self.db)
        self.seed = seed
        self.scenario = scenario
        self.sessions: list[Any] = []
        self.on_session: Callable[[Any], None] | None = None  # told of every session opened

    def session(self, worker_id: str) -> Any:
        rng = random.Random(f"{self.seed}:{self.scenario.name}:{worker_id}")
        session = self.adapter.open(self.db, self.world, worker_id=worker_id, clock=self.clock, rng=rng)
        self.sessions.append(session)
        if self.on_session is not None:
            self.on_session(session)
        return session

    def close(self) -> None:
        """Close every connection this process opened for the run (a dead child's are gone)."""
        for session in self.sessions:
            _close_quietly(session)
        self.sessions.clear()
        self.world.close()
        release = getattr(self.adapter, "release", None)
        if release is not None:
            release(self.db)
        if self.drop:
            self.drop = False
            self.adapter.drop_db(self.db)

    def evidence(self, submitted: dict[str, str], interruptions: Counter, snapshot: Any = None) -> Evidence:
        return Evidence.gather(self.adapter, self.db, self.world, submitted=submitted, interruptions=interruptions, snapshot=snapshot)


def _doomed(run: _Run) -> Callable[[], Any]:
    """The iteration that will be killed, with the scenario's faults armed."""
    scenario = run.scenario
    for fault in scenario.faults:
        run.world.arm(fault)
    session = run.session("w-doomed")
    if scenario.second_worker:
        run.world.during_slow = lambda: run.session("w-second").run_once()
    if scenario.phase == "worker":
        return session.run_once
    if scenario.phase == "sender":
        return session.send_outbox
    _, action, *args = scenario.phase.split(":")
    operation = getattr(session, action)
    human_errors = getattr(run.adapter, "human_errors", ())

    def human() -> None:
        try:
            operation(*args)
        except human_errors:
            pass  # refused with the engine's clear error: the right answer to a lost race

    return human


def prepare(adapter: Any, scenario: Scenario, workdir: str, *, seed: int, deep: bool = True) -> Family:
    """Build the scenario's template, then record the points of its doomed iteration."""
    template = os.path.join(workdir, "template-" + scenario.name)
    os.makedirs(template, exist_ok=True)
    # An adapter whose databases are not files (PostgreSQL) builds the template database itself.
    template_db = getattr(adapter, "template_db", None)
    run = _Run(adapter, template, T0, seed, scenario, template_db(template) if template_db is not None else None)
    _create(adapter, run.db)
    session = run.session("w-setup")
    submitted = {}
    for job_id in scenario.jobs:
        payload = {"source": job_id}
        session.submit(job_id, payload)
        submitted[job_id] = json.dumps(payload, sort_keys=True)
    for action in scenario.setup:
        _setup_action(run, session, action)
    run.close()
    clock_after_setup = run.clock.now()
    family = Family(scenario, template, clock_after_setup, submitted, [], {}, Outcome("baseline", "clean"),
                    template_db=run.db if template_db is not None else "")
    recording = record(adapter, family, workdir, seed=seed, deep=deep)
    family.points, family.executable, family.baseline = recording.points, recording.executable, recording.baseline
    family.between = recording.between
    family.classes = pause_classes(recording.ops) if recording.ops else list(range(len(recording.points)))
    return family


def _create(adapter: Any, db_path: str) -> None:
    """Create the scenario database, with writer attribution where the adapter offers it."""
    import inspect

    if "attribute_writers" in inspect.signature(adapter.create).parameters:
        adapter.create(db_path, attribute_writers=True)
    else:
        adapter.create(db_path)


def _setup_action(run: _Run, session: Any, action: str) -> None:
    verb, _, arg = action.partition(":")
    if verb == "run":
        session.run_once()
    elif verb == "send":
        session.send_outbox()
    elif verb == "advance":
        run.clock.advance(float(arg))
    elif verb == "claim":
        doomed = run.session(arg or "w-dead")
        doomed.worker.store.claim(
            doomed.worker.worker_id, now=run.clock.now(), lease_s=run.adapter.lease_s, starts=doomed.worker._starts
        )
        doomed.close()
    else:
        raise ValueError(f"setup action {action!r}: use run, send, advance:<s> or claim:<worker>")


def _copy(family: Family, directory: str, adapter: Any = None) -> str | None:
    """A fresh copy of the template in a new directory (a WAL file is copied, never the -shm).

    Returns the copy's database when the adapter made it (``new_scenario_db``, e.g. PostgreSQL's
    ``CREATE DATABASE ... TEMPLATE``: the run owns it and drops it), else None: the files are it.
    """
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    names = ("world.db", "world.db-wal") if family.template_db else ("engine.db", "engine.db-wal", "world.db", "world.db-wal")
    for name in names:
        source = os.path.join(family.template, name)
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(directory, name))
    if family.template_db:
        return adapter.new_scenario_db(family.template_db, directory)
    return None


def _fresh_run(adapter: Any, family: Family, directory: str, seed: int) -> _Run:
    """A new run on a fresh copy of the family's template."""
    db = _copy(family, directory, adapter)
    return _Run(adapter, directory, family.clock_after_setup, seed, family.scenario, db, drop=db is not None)


def discard(adapter: Any, family: Family) -> None:
    """Drop a family's template database, where the adapter made one (its files go with the workdir)."""
    if family.template_db:
        adapter.drop_db(family.template_db)
        family.template_db = ""


@dataclass
class Recording:
    """What a clean run of the doomed iteration under a line recorder gave."""

    points: list[Point]
    executable: dict[str, frozenset[int]]
    baseline: Outcome
    between: list[bool]
    ops: list[int]  # visible operations finished before each point; [] when they cannot be counted


def record(adapter: Any, family: Family, workdir: str, *, seed: int, deep: bool = True) -> Recording:
    """Run the doomed iteration cleanly under a line recorder; return its points and its baseline.

    Besides the points, the recording counts the iteration's visible operations (statements sent
    on any SQLite connection a session opens, the world's ledger writes, clock reads) so that
    points with none between them form one pause class (:func:`chaos._points.pause_classes`).
    Where a session's connection cannot be watched (not SQLite), no count is given.
    """
    from ._points import function_lines

    directory = os.path.join(workdir, "baseline-" + family.scenario.name)
    run = _fresh_run(adapter, family, directory, seed)
    only = None if deep else [fn.__code__ for fn in adapter.targets().values()]
    recorder = Recorder(adapter.trace_paths(), only)
    watched = [True]

    def watch(session: Any) -> None:
        conn = _store_conn(session)
        if isinstance(conn, sqlite3.Connection):
            conn.set_trace_callback(recorder.tick)
        else:
            watched[0] = False

    run.on_session = watch
    iteration = _doomed(run)
    conn = _store_conn(run.sessions[0]) if run.sessions else None
    if hasattr(conn, "in_transaction"):
        recorder.watch_transactions(lambda: not conn.in_transaction)
    elif hasattr(getattr(conn, "info", None), "transaction_status"):  # psycopg: 0 is IDLE
        recorder.watch_transactions(lambda: conn.info.transaction_status == 0)
    run.world.conn.set_trace_callback(recorder.tick)
    run.clock.observer = recorder.tick
    started = time.perf_counter()
    try:
        with recorder:
            iteration()
    finally:
        run.clock.observer = None
        run.on_session = None
        run.world.conn.set_trace_callback(None)
    executable: dict[str, set[int]] = {}
    for code in recorder.codes:
        executable.setdefault(code.co_filename, set()).update(function_lines(code))
    outcome = _recover_and_check(run, family.submitted, Counter(), "baseline", "clean")
    outcome.seconds = time.perf_counter() - started
    return Recording(recorder.points, {f: frozenset(lines) for f, lines in executable.items()}, outcome, recorder.between,
                     recorder.ops if watched[0] else [])


def _store_conn(session: Any) -> Any:
    """The database connection under a session, where it can be found (the reference shape)."""
    store = getattr(getattr(session, "worker", None), "store", None) or getattr(session, "store", None)
    return getattr(store, "conn", None)


def run_point(adapter: Any, family: Family, point: Point, workdir: str, *, seed: int, mode: str = "fork", deep: bool = True) -> Outcome:
    """Kill the doomed iteration at ``point``, recover, and check every invariant."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of: {', '.join(MODES)}")
    started = time.perf_counter()
    directory = os.path.join(workdir, "point")
    run = _fresh_run(adapter, family, directory, seed)
    only = None if deep else [fn.__code__ for fn in adapter.targets().values()]
    exit_kind = _kill_fork(run, point, only) if mode == "fork" else _kill_inprocess(run, point, only)
    snapshot = adapter.inspect(run.db)
    interruptions = _interruptions(run, snapshot)
    after_kill = check(run.evidence(family.submitted, interruptions, snapshot), at_rest=False)
    outcome = _recover_and_check(run, family.submitted, interruptions, point.id, exit_kind)
    seen = {str(v) for v in outcome.violations}
    outcome.violations = [v for v in after_kill if str(v) not in seen] + outcome.violations
    outcome.seconds = time.perf_counter() - started
    return outcome


def _kill_fork(run: _Run, point: Point, only: Any) -> str:
    pid = os.fork()
    if pid == 0:  # the doomed worker: never returns into the caller
        code = EXIT_ERROR
        try:
            iteration = _doomed(run)
            with Killer(run.adapter.trace_paths(), point, lambda: os.kill(os.getpid(), signal.SIGKILL), only):
                iteration()
            code = EXIT_NOT_REACHED
        except BaseException:  # anything the doomed worker raises is reported as an error exit
            code = EXIT_ERROR
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_NOT_REACHED:
        return "not-reached"
    return "error"


def _kill_inprocess(run: _Run, point: Point, only: Any) -> str:
    iteration = _doomed(run)

    def abandon() -> None:
        raise Abandon(point.id)

    killer = Killer(run.adapter.trace_paths(), point, abandon, only)
    try:
        with killer:
            iteration()
    except Abandon:
        pass
    except Exception:
        return "error"
    finally:
        # Drop every connection the doomed process held (a second worker's too) without
        # committing: closing a connection rolls back whatever transaction it had open.
        for session in run.sessions:
            _close_quietly(session)
        run.sessions.clear()
    return "killed" if killer.reached else "not-reached"


def _close_quietly(session: Any) -> None:
    try:
        session.close()
    except Exception:  # an abandoned connection may be mid-statement; closing rolls it back
        pass


def _interruptions(run: _Run, snapshot: Any = None) -> Counter:
    """Steps that were in flight when the worker died: each may be paid for once more."""
    working = {w: step for step, (w, _) in run.adapter.step_states().items()}
    snapshot = snapshot if snapshot is not None else run.adapter.inspect(run.db)
    return Counter((job_id, working[job.state]) for job_id, job in snapshot.jobs.items() if job.state in working)


def due_at(waiting: Any, outbox: Any) -> float:
    """When the last lease, backoff or unsent outbox row still pending is due. After a clock that
    stepped back, that can be an hour away: time passes it too (the work is delayed by the step,
    never stuck)."""
    times = [t for j in waiting for t in (j.lease_until, j.next_run_at) if t is not None]
    times += [r.next_attempt_at for r in outbox if r.sent_at is None and r.next_attempt_at is not None]
    return max(times, default=0.0)


def settle(session: Any, inspect: Callable[[], Any], settled: frozenset[str], clock: Any, *,
           restart: Callable[[Any, int], Any] | None = None, gave_up: Collection[str] = NO_PROGRESS) -> tuple[Any, list[Violation], bool]:
    """Run ``session``'s worker and outbox sender until every job is settled with no lease held
    and no outbox row unsent, moving ``clock`` past the latest lease, backoff or outbox row still
    pending (at least :data:`BACKOFF_JUMP_S`) whenever nothing is due now.

    A worker iteration that answers one of ``gave_up`` ends a round. With ``restart``, an
    exception is a ``drains`` violation and ``restart(session, n)`` gives the n-th successor;
    without, it propagates. Returns the last session, the violations, and whether it settled.
    """
    crashes: list[Violation] = []
    for _ in range(RECOVERY_ROUNDS_MAX):
        try:
            for _ in range(ITERATIONS_PER_ROUND_MAX):
                if session.run_once() in gave_up:
                    break
            for _ in range(ITERATIONS_PER_ROUND_MAX):
                if not session.send_outbox():
                    break
        except Exception as exc:  # the engine's loop must survive recovery; report, then go on
            if restart is None:
                raise
            crashes.append(Violation("drains", f"the recovering worker raised {type(exc).__name__}: {exc}"))
            session = restart(session, len(crashes))
        snapshot = inspect()
        waiting = [j for j in snapshot.jobs.values() if j.state not in settled or j.lease_owner is not None]
        if not waiting and all(row.sent_at is not None for row in snapshot.outbox):
            return session, crashes, True
        clock.advance(max(BACKOFF_JUMP_S, due_at(waiting, snapshot.outbox) - clock.now() + 1))
    return session, crashes, False


def _recover_and_check(run: _Run, submitted: dict[str, str], interruptions: Counter, point_id: str, exit_kind: str) -> Outcome:
    """Stop the faults, let time pass every lease and backoff, drain, then check everything."""
    run.world.disarm()
    run.world.during_slow = None
    run.clock.advance(run.adapter.lease_s + 1)

    def restart(session: Any, n: int) -> Any:
        _close_quietly(session)
        return run.session(f"w-recover{n}")

    session, crashes, _ = settle(run.session("w-recover"), lambda: run.adapter.inspect(run.db), run.adapter.settled_states(), run.clock,
                                 restart=restart)
    evidence = run.evidence(submitted, interruptions)
    violations = crashes[:1] + check(evidence, at_rest=True)
    violations += idempotent_submit(session, lambda: run.adapter.inspect(run.db), submitted, run.adapter.conflict_errors)
    calls = Counter(f"{c.job_id}:{c.step}" for c in evidence.calls)
    outcome = Outcome(
        point=point_id,
        exit=exit_kind,
        violations=violations,
        wasted_calls=wasted_calls(evidence),
        zombie_calls=len(zombie_calls(evidence)),
        final_states={j: v.state for j, v in evidence.snapshot.jobs.items()},
        calls=dict(calls),
        applied=sum(1 for d in evidence.deliveries if d.applied),
        deliveries=len(evidence.deliveries),
    )
    run.close()
    return outcome


# -- pauses -------------------------------------------------------------------------------------
PAUSE_KINDS = ("pause-live", "pause-expired")
OTHER_BUSY_TIMEOUT_S = 0.05
EXIT_RESUMED = 0


def _stop_self() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


def _fork_until(run: _Run, point: Point, only: Any, iteration_of: Callable[[], Callable[[], Any]]) -> int:
    """Fork a worker that stops itself (SIGSTOP) just before ``point``; return its pid, stopped
    (or already exited if it never reached the point)."""
    pid = os.fork()
    if pid == 0:
        code = EXIT_ERROR
        try:
            iteration = iteration_of()
            with Killer(run.adapter.trace_paths(), point, _stop_self, only) as killer:
                iteration()
            code = EXIT_RESUMED if killer.reached else EXIT_NOT_REACHED
        except BaseException as exc:  # reported to the parent through a file: the child never returns
            with open(os.path.join(run.dir, f"error-{os.getpid()}.txt"), "w") as f:
                f.write(f"{type(exc).__name__}: {exc}")
            code = EXIT_ERROR
        finally:
            os._exit(code)
    return pid


def _is_stopped(pid: int) -> bool:
    _, status = os.waitpid(pid, os.WUNTRACED)
    return os.WIFSTOPPED(status)


def _resume(run: _Run, pid: int, who: str) -> list[Violation]:
    os.kill(pid, signal.SIGCONT)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (EXIT_RESUMED, EXIT_NOT_REACHED):
        return []
    path = os.path.join(run.dir, f"error-{pid}.txt")
    detail = open(path).read() if os.path.exists(path) else f"exit status {status}"
    return [Violation("drains", f"{who} crashed after it was resumed: {detail}")]


def _short_busy(session: Any) -> Any:
    setter = getattr(session, "set_busy_timeout", None)
    if setter is not None:
        setter(OTHER_BUSY_TIMEOUT_S)
    return session


def _other_worker(run: _Run, name: str) -> tuple[float, list[Violation]]:
    """Another worker runs as far as it can (steps and outbox) while one is frozen.

    Its busy timeout is short: where the frozen worker holds the write lock, it must wait that
    long, back off cleanly and leave the job for later. Returns the time it spent blocked.
    """
    session = _short_busy(run.session(name))
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
    finally:
        _close_quietly(session)
        run.sessions.remove(session)
    return blocked_s, []


def run_pause(adapter: Any, family: Family, point: Point, workdir: str, *, seed: int, expired: bool, deep: bool = True) -> Outcome:
    """Freeze the worker at ``point``; another worker runs with its lease still valid
    (``expired=False``) or past it; then resume the frozen worker, drain, and check."""
    started = time.perf_counter()
    directory = os.path.join(workdir, "point")
    run = _fresh_run(adapter, family, directory, seed)
    only = None if deep else [fn.__code__ for fn in adapter.targets().values()]
    kind = PAUSE_KINDS[1] if expired else PAUSE_KINDS[0]
    pid = _fork_until(run, point, only, lambda: _doomed(run))
    problems: list[Violation] = []
    blocked_s = 0.0
    interruptions: Counter = Counter()
    if _is_stopped(pid):
        exit_kind = "paused"
        if expired:
            interruptions = _interruptions(run)  # a pause longer than the lease interrupts the step
            run.clock.advance(adapter.lease_s + 1)
        blocked_s, problems = _other_worker(run, "w-other")
        problems += _resume(run, pid, "the frozen worker")
    else:
        exit_kind = "not-reached"
    after = check(run.evidence(family.submitted, interruptions), at_rest=False)
    outcome = _recover_and_check(run, family.submitted, interruptions, point.id, exit_kind)
    seen = {str(v) for v in outcome.violations}
    outcome.violations = problems + [v for v in after if str(v) not in seen] + outcome.violations
    outcome.fault = kind
    outcome.blocked_s = blocked_s
    outcome.seconds = time.perf_counter() - started
    return outcome


def run_interleaving(adapter: Any, family: Family, first: Point, second: Point, workdir: str, *, seed: int, deep: bool = True) -> Outcome:
    """Two-level interleaving on one job: A frozen at ``first``; time passes A's lease; B runs
    until ``second`` and freezes; A resumes and finishes; then B resumes; drain and check."""
    started = time.perf_counter()
    directory = os.path.join(workdir, "point")
    run = _fresh_run(adapter, family, directory, seed)
    only = None if deep else [fn.__code__ for fn in adapter.targets().values()]
    a = _fork_until(run, first, only, lambda: _doomed(run))
    problems: list[Violation] = []
    interruptions: Counter = Counter()
    exit_kind = "not-reached"
    if _is_stopped(a):
        interruptions = _interruptions(run)
        run.clock.advance(adapter.lease_s + 1)
        b = _fork_until(run, second, only, lambda: _short_busy(run.session("w-b")).run_once)
        b_stopped = _is_stopped(b)
        problems += _resume(run, a, "worker A")
        if b_stopped:
            exit_kind = "interleaved"
            problems += _resume(run, b, "worker B")
    after = check(run.evidence(family.submitted, interruptions), at_rest=False)
    point_id = f"{first.id}+{second.id}"
    outcome = _recover_and_check(run, family.submitted, interruptions, point_id, exit_kind)
    seen = {str(v) for v in outcome.violations}
    outcome.violations = problems + [v for v in after if str(v) not in seen] + outcome.violations
    outcome.fault = "interleave"
    outcome.seconds = time.perf_counter() - started
    return outcome
