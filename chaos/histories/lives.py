"""Killing a worker in the middle of a random history, and running every other iteration.

Every iteration of a history runs in a child forked from the harness's process, which never runs
the code under test itself (:func:`live`): each is a fresh process, as after a restart, so the
worker that recovers after a kill holds nothing the dead one had in memory.

A kill first *records* the iteration about to run: the database and ledger files are copied (no
transaction is open between two steps of a history), the same iteration runs on the copy under a
line recorder, with the same clock reading, armed faults and RNG seeds, and its crash points are
the lines it reached. Then the real iteration runs and dies at the drawn point:

* ``fork``: in a forked child that opens its own connections and is SIGKILLed at the point (no
  ``finally``, no ``atexit``), exactly as the crash matrix does. The clock is shared memory, so
  time the child spent (a slow call) has passed for everyone; the faults it used up and whether a
  slow call's second worker ran come back through a pipe.
* ``inprocess``: the iteration, in its child, is abandoned by an exception at the point; the child
  then exits without closing anything, which drops what it had open. Weaker: ``finally`` blocks run.

A *pause* forks the iteration the same way, but the child stops itself (SIGSTOP) at the point
and stays stopped, holding whatever it held there (a lease, an open write transaction), while
the history goes on; :func:`resume` sends SIGCONT and the child finishes its iteration on the
clock everyone shares. The faults it uses up come back through its pipe, one by one.
"""

from __future__ import annotations

import importlib
import mmap
import os
import pickle
import random
import shutil
import sqlite3
import struct
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, TYPE_CHECKING

from engine import NO_PROGRESS, FakeClock

from chaos.core.context import RunContext, close_quietly, is_sqlite, store_conn
from chaos.core.iteration import one_iteration
from chaos.core.points import CommitCounter, Killer, Point, Recorder
from chaos.core.hangs import bound_s as hang_bound_s
from chaos.core.process import TIMED_OUT, Child, Ended, Exit, die_here, fork, stop_here, tell
from chaos.core.kill import Abandon, Abandoning
from chaos.core.world import Fault, World

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = [
    "Env", "record", "kill", "pause", "resume", "abandon_frozen", "Frozen", "SECOND", "live", "Raised", "HungStep", "CLIENT", "OPS",
    "SENDER", "RECOVER", "STORMER", "HUNG", "STEP_FACTOR", "step_bound_s", "hung"
]

SECOND = "w-second"  # the worker that runs while a slow call outlives the lease
CLIENT, OPS, SENDER, RECOVER, STORMER = "client", "ops", "sender", "w-recover", "w-storm"
SECOND_ITERATIONS_MAX = 20
DATABASE_FILES = ("engine.db", "engine.db-wal", "world.db", "world.db-wal")
ERROR_CHARS_MAX = 4000
# A step's worker process may run this many times the adapter's scenario bound before it is taken
# for hung: a step runs an iteration or a few, the drain at rest every job's.
STEP_FACTOR = 3.0
HUNG = "hung:"  # how a step's outcome begins when its worker's process ran past the bound
Delivery = tuple[int, bool]  # (n, before): die right before, or right after, the n-th delivery


class Env(RunContext):
    """One process's view of a history: the run's files, world and clock (see
    :class:`~chaos.core.context.RunContext`), and the sessions this process opened, one per worker.

    Sessions open lazily with an RNG seeded by ``tag``, the worker and its life, so the recording
    of an iteration and the iteration then killed make the same random choices.
    """

    def __init__(self, adapter: Target, directory: str, clock: Any, world: World, tag: str, db: str | None = None,
                 *, drop: bool = False) -> None:
        super().__init__(adapter, directory, clock, world, db, drop=drop)
        self.tag = tag
        self.sessions: dict[str, Any] = {}
        self.lives: Counter[str] = Counter()
        self.runs: Counter[str] = Counter()  # iterations run per worker (each in a child of its own)
        self.slow_fired = False
        self.report: Callable[[dict[str, Any]], None] | None = None  # a forked child's pipe
        self.template: str | None = None  # the empty database ``db`` was copied from, if not a file
        # Once a worker may be frozen holding the write lock, every session waits this long at
        # most for it, then backs off (None: the adapter's own busy timeout).
        self.busy_timeout_s: float | None = None
        # While the disk is "full": no connection of a session may grow the database past this
        # many pages (SQLite's max_page_count). Shared memory: a frozen child sees, when it
        # wakes, whether the disk filled or was freed meanwhile (0: no limit).
        self._pages = _SharedInt()
        # How long a worker's process of one step may run before it is killed and the step is a
        # ``hangs`` finding (:func:`hung`): the history's bound (:func:`step_bound_s`).
        self.wait_s = step_bound_s(adapter)

    def session(self, worker_id: str) -> Any:
        session = self.sessions.get(worker_id)
        if session is None:
            session = self.open_session(worker_id, random.Random(f"{self.tag}:{worker_id}:{self.lives[worker_id]}"))
            if self.busy_timeout_s is not None and hasattr(session, "set_busy_timeout"):
                session.set_busy_timeout(self.busy_timeout_s)
            if self.page_limit is not None:
                _limit_pages(session, self.page_limit)
            self.sessions[worker_id] = session
        return session

    @property
    def page_limit(self) -> int | None:
        return self._pages.get() or None

    def limit_pages(self, pages: int | None) -> bool:
        """Fill the disk at ``pages`` pages for this env's sessions (open and future, and those
        of frozen children when they wake), or (None) free it again. False if a session's
        database is not a SQLite connection."""
        self._pages.set(pages or 0)
        return self.apply_page_limit()

    def apply_page_limit(self) -> bool:
        """Give this process's open sessions the page limit in force now."""
        return all([_limit_pages(session, self.page_limit) for session in self.sessions.values()])

    def shorten_busy_timeout(self, seconds: float) -> None:
        """From now on, this env's sessions (open and future) back off after ``seconds`` of waiting."""
        self.busy_timeout_s = seconds
        for session in self.sessions.values():
            if hasattr(session, "set_busy_timeout"):
                session.set_busy_timeout(seconds)

    def child(self, tag: str) -> "Env":
        """The env a forked or abandoned iteration runs in: this one's files, clock and world."""
        env = Env(self.adapter, self.directory, self.clock, self.world, tag, db=self.db)
        env.busy_timeout_s = self.busy_timeout_s
        env._pages = self._pages
        return env

    def bury(self, worker_id: str) -> None:
        """The worker's process died: its restarted successor opens new connections."""
        session = self.sessions.pop(worker_id, None)
        self.lives[worker_id] += 1
        if session is not None:
            close_quietly(session)

    def slow_hook(self) -> Callable[[], None]:
        """What runs while a slow call outlives the lease: a second worker, in this process, that
        loops as a real one would (until nothing is due) while the slow call hangs."""

        def second_worker() -> None:
            self.slow_fired = True
            if self.report is not None:
                self.report({"slow": True})
            world = self.world
            take = world.take_fault

            def take_unless_slow(task: str, job_id: str | None = None) -> Fault | None:
                # One slow call at a time. The second worker runs nested inside the first one's
                # call, so a slow call of its own would freeze the first worker, heartbeats and
                # all, for that long: a pause the history never asked for.
                upcoming = next((f for f in world.pending_faults() if f.task in (None, task)), None)
                return None if upcoming is not None and upcoming.kind == "slow" else take(task, job_id)

            world.take_fault = take_unless_slow  # type: ignore[method-assign]
            try:
                session = self.session(SECOND)
                for _ in range(SECOND_ITERATIONS_MAX):
                    if session.run_once() in NO_PROGRESS:
                        break
            finally:
                world.take_fault = take  # type: ignore[method-assign]

        return second_worker

    def close(self) -> None:
        for session in self.sessions.values():
            close_quietly(session)
        self.sessions.clear()


class _SharedInt:
    """An integer in an anonymous shared page: a parent and the children it forks share it."""

    def __init__(self) -> None:
        self._page = mmap.mmap(-1, _INT.size)

    def get(self) -> int:
        return _INT.unpack_from(self._page, 0)[0]

    def set(self, value: int) -> None:
        _INT.pack_into(self._page, 0, int(value))


_INT = struct.Struct("q")
# SQLite's own ceiling for max_page_count: asking for it lifts any limit set before.
PAGES_UNLIMITED = 0xFFFFFFFE


def _limit_pages(session: Any, pages: int | None) -> bool:
    conn = store_conn(session)
    if not is_sqlite(conn):
        return False
    conn.execute(f"PRAGMA max_page_count = {int(pages if pages is not None else PAGES_UNLIMITED)}")  # an int
    return True


class _DieAtDelivery:
    """The world's receiver, except that the sender dies right before, or right after, its n-th
    delivery: the two moments around the one side effect no transaction covers."""

    def __init__(self, inner: Any, delivery: int, before: bool, die: Callable[[], None]) -> None:
        self.inner = inner
        self.left = delivery
        self.before = before
        self.die = die

    def send(self, key: str, kind: str, payload: Any) -> None:
        self.left -= 1
        if self.left == 0 and self.before:
            self.die()
        self.inner.send(key, kind, payload)
        if self.left == 0:
            self.die()


def _iteration(main: Env, env: Env, worker: str, phase: str, delivery: Delivery | None, die: Callable[[], None]) -> Callable[[], Any]:
    """The iteration ``env``'s process is about to run (and die in)."""
    if main.world.during_slow is not None:  # a slow call's second worker lives in that process
        env.world.during_slow = env.slow_hook()
    if delivery is not None:
        env.world.sender = _DieAtDelivery(env.world.sender, delivery[0], delivery[1], die)  # type: ignore[assignment]
    session = env.session(worker)
    return one_iteration(env.adapter, session) if phase == "worker" else session.send_outbox


def record(main: Env, worker: str, phase: str, tag: str) -> list[list[Point]]:
    """Run the iteration on a copy of the files under a line recorder, in a child: its crash
    points, grouped into segments between durable writes (engine commits, paid calls, deliveries)."""
    ended = fork(lambda: _record(main, worker, phase, tag)).wait(main.wait_s)
    if ended.exit is not Exit.FINISHED:
        return []  # the iteration that is killed raises it again, and is reported there
    return ended.value


def _record(main: Env, worker: str, phase: str, tag: str) -> list[list[Point]]:
    adapter = main.adapter
    directory = os.path.join(main.directory, "dry")
    os.makedirs(directory, exist_ok=True)
    # A database that is not a file (PostgreSQL): the adapter copies the live one onto its template.
    copy_db = adapter.copy_db if main.template is not None else None
    for name in ("world.db", "world.db-wal") if copy_db is not None else DATABASE_FILES:
        path = os.path.join(main.directory, name)
        if os.path.exists(path):
            shutil.copyfile(path, os.path.join(directory, name))
    db = copy_db(main.db, main.template, directory) if copy_db is not None else os.path.join(directory, "engine.db")
    clock = FakeClock(main.clock.now())
    world = World.for_adapter(directory, clock, adapter, db)
    for fault in main.world.pending_faults():
        world.arm(fault)
    ledger_writes = [0]
    for name in ("record_call", "deliver"):
        setattr(world, name, _counting(getattr(world, name), ledger_writes))
    observer = _observer(db)
    commits: Callable[[], Any] = observer if observer is not None else (lambda: 0)
    env = Env(adapter, directory, clock, world, tag, db=db, drop=copy_db is not None)
    # Two kill points with no durable write between them leave the same files behind: the dead
    # worker's memory is gone either way. Grouping points into such segments lets a kill be drawn
    # segment first, so a short window between two commits is as likely as a long stretch of code.
    recorder = Recorder(adapter.trace_paths(), observe={"marks": lambda: (commits(), ledger_writes[0])})
    try:
        iteration = _iteration(main, env, worker, phase, None, lambda: None)
        with recorder:
            iteration()
    except Exception:  # the iteration that is killed raises it again, and is reported there
        pass
    finally:
        env.close()
        env.give_back()
        if observer is not None:
            observer.close()
        shutil.rmtree(directory, ignore_errors=True)
    segments: list[list[Point]] = []
    previous = None
    for point, mark in zip(recorder.points, recorder.observed["marks"]):
        if mark != previous or not segments:
            segments.append([])
            previous = mark
        segments[-1].append(point)
    return segments


def _counting(fn: Callable[..., Any], counter: list[int]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            counter[0] += 1

    return counted


def _observer(path: str) -> CommitCounter | None:
    """What moves whenever a commit lands in the engine's database (None: not a SQLite file, and
    segments follow the ledger alone)."""
    if not os.path.exists(path):
        return None
    try:
        return CommitCounter(path)
    except sqlite3.DatabaseError:
        return None


def kill(main: Env, worker: str, phase: str, mode: str, tag: str, point: Point | None, delivery: Delivery | None) -> str:
    """Run ``worker``'s iteration in a child and kill it at ``point``, or around a delivery:
    ``delivery`` is ``(n, before)``, kill right before (or right after) the sender's n-th delivery.

    Returns ``"killed"``, ``"not reached"`` (the iteration ended first) or what it raised first
    (that ends a process as surely). Either way the process is gone: ``main`` buries its session.
    """
    try:
        ended = fork(lambda: _doomed_child(main, worker, phase, tag, point, delivery, mode)).wait(main.wait_s)
        _apply(main, ended.notes)  # the faults the child used up are used up
        if ended.exit is Exit.KILLED or (ended.exit is Exit.FINISHED and ended.value):
            return "killed"
        if ended.exit is Exit.FINISHED:
            return "not reached"
        return _raised(ended)
    finally:
        main.bury(worker)


def _run_to(main: Env, point: Point | None, iteration: Callable[[], Any], on_hit: Callable[[], None]) -> bool:
    """Run ``iteration``, calling ``on_hit`` just before ``point`` (if any); whether it got there."""
    if point is None:
        iteration()
        return False
    with Killer(main.adapter.trace_paths(), point, on_hit) as killer:
        iteration()
    return killer.reached


def _child_env(main: Env, tag: str) -> Env:
    """The env of a forked child: ``main``'s files, clock and world (its copy of the world
    reopens the ledger; its sessions open new connections). Each fault it uses up, and a slow
    call's second worker, are told to the parent (see :func:`_apply`)."""
    world = main.world
    env = main.child(tag)
    env.report = tell
    take = world.take_fault

    def take_and_report(task: str, job_id: str | None = None) -> Fault | None:
        fault = take(task, job_id)
        if fault is not None:
            tell({"took": asdict(fault)})
        return fault

    world.take_fault = take_and_report  # type: ignore[method-assign]
    return env


def _doomed_child(main: Env, worker: str, phase: str, tag: str, point: Point | None, delivery: Delivery | None, mode: str) -> bool:
    """In the doomed child: run to the point and die there (SIGKILL), or, in inprocess mode,
    abandon the iteration by an exception and return True; False if the point was not reached."""
    env = _child_env(main, tag)
    if mode == "fork":
        _run_to(main, point, _iteration(main, env, worker, phase, delivery, die_here), die_here)
        return False

    abandon = Abandoning(tag)
    try:
        with abandon:
            _run_to(main, point, _iteration(main, env, worker, phase, delivery, abandon), abandon)
    except Abandon:
        return True  # its sessions are left as they are: the child's exit drops their connections
    return False


class Raised(Exception):
    """What an iteration run in a child raised, when the exception itself cannot be sent back."""


class HungStep(Raised):
    """A worker's process of a step ran past the history's bound (:attr:`Env.wait_s`) and was killed."""


def live(main: Env, worker: str, fn: Callable[[Env], Any]) -> Any:
    """Run ``fn(env)`` in a fresh child, as ``worker``'s next iteration; return its value or raise
    what it raised (a :class:`Raised` where the exception cannot be sent). The faults it used up,
    and a slow call's second worker, are applied here."""

    main.runs[worker] += 1
    tag = f"{main.tag}:{worker}:{main.lives[worker]}:{main.runs[worker]}"

    def body() -> tuple[str, Any]:
        env = _child_env(main, tag)
        if main.world.during_slow is not None:  # a slow call's second worker lives in that process
            env.world.during_slow = env.slow_hook()
        try:
            return "value", fn(env)
        except Exception as exc:  # sent back and raised again in the parent
            return "raised", _portable(exc)

    ended = fork(body).wait(main.wait_s)
    _apply(main, ended.notes)
    if ended.exit is not Exit.FINISHED:
        outcome = _raised(ended)
        raise (HungStep if hung(outcome) else Raised)(outcome)
    kind, value = ended.value
    if kind == "raised":
        raise _rebuilt(value)
    return value


def _portable(exc: Exception) -> Any:
    """``exc`` as it can cross the pipe: itself where it survives pickling unchanged, else its
    class's name, message and plain attributes (an engine error whose ``__init__`` takes other
    arguments than its message does not unpickle, or unpickles with another message)."""
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if type(copy) is type(exc) and str(copy) == str(exc):
            return copy
    except Exception:
        pass
    state = {}  # rebuilt on the other side from its class, message and attributes
    for name, value in vars(exc).items():
        try:
            state[name] = pickle.loads(pickle.dumps(value))
        except Exception:
            continue
    return (type(exc).__module__, type(exc).__qualname__, str(exc), state)


def _rebuilt(value: Any) -> BaseException:
    """The exception a child raised, of its own class where that class can be found here."""
    if isinstance(value, BaseException):
        return value
    module, qualname, message, state = value
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        exc = cls.__new__(cls)
        BaseException.__init__(exc, message)
        exc.__dict__.update(state)
        return exc
    except Exception:
        return Raised(f"{qualname}: {message}")


def _raised(ended: Ended) -> str:
    if ended.error.startswith(TIMED_OUT):  # killed by the bound: not the engine's exception, a hang
        return f"{HUNG} {ended.error}"
    last = (ended.error or f"exit status {ended.status}").strip().splitlines()[-1]
    return f"raised {last}; its process died"


def step_bound_s(adapter: Any) -> float:
    """How long one step's worker process may run (an iteration, a pause, a resumed worker
    finishing, a drain): :data:`STEP_FACTOR` times the adapter's scenario bound
    (:func:`chaos.core.hangs.bound_s`: its ``scenario_timeout_s``, else a minute), since a step may
    run several iterations and the drain at rest every job's."""
    return STEP_FACTOR * hang_bound_s(adapter.scenario_timeout_s)


def hung(outcome: str) -> bool:
    """Whether a step's ``outcome`` is a worker's process killed for running past the bound."""
    return outcome.startswith(HUNG)


@dataclass
class Frozen:
    """A worker's process stopped at a point."""

    worker: str
    child: Child
    point: Point
    leases: list[tuple[str, str, str, float]] = field(default_factory=list)  # (job, state, owner, until) held when it stopped
    paused_at: float = 0.0  # the clock when it stopped
    calls_before: int = 0  # paid calls in the world's ledger when it stopped

    @property
    def pid(self) -> int:
        return self.child.pid


def pause(main: Env, worker: str, phase: str, tag: str, point: Point) -> Frozen | str:
    """Fork ``worker``'s iteration and stop it (SIGSTOP) just before ``point``.

    Returns the :class:`Frozen` child, or, when the iteration ended before the point, what became
    of it (``"not reached"``, or what it raised: its process died). Either way the faults it used
    up are used up here too.
    """
    child = fork(lambda: _frozen_child(main, worker, phase, tag, point))
    ended = child.wait(main.wait_s)
    _apply(main, ended.notes)
    if ended.exit is Exit.STOPPED:
        return Frozen(worker, child, point)
    return _ended(main, ended, worker)


def resume(main: Env, frozen: Frozen) -> str:
    """Wake a frozen worker (SIGCONT) and let it finish its iteration; returns how it ended."""
    ended = frozen.child.resume(main.wait_s)
    _apply(main, ended.notes)
    return _ended(main, ended, frozen.worker, woke=True)


def abandon_frozen(frozen: Frozen) -> None:
    """Kill a frozen worker without letting it run again (a history that already failed)."""
    frozen.child.kill()


def _frozen_child(main: Env, worker: str, phase: str, tag: str, point: Point) -> bool:
    env = _child_env(main, tag)

    def stop() -> None:
        stop_here()
        env.apply_page_limit()  # woken: the disk may have filled, or been freed, meanwhile

    reached = _run_to(main, point, _iteration(main, env, worker, phase, None, stop), stop)
    env.close()
    return reached


def _apply(main: Env, messages: list[dict[str, Any]]) -> str | None:
    """Apply what a paused child reported (faults it used up, a slow call's second worker); return
    the error it reported, if any."""
    error = None
    for message in messages:
        if "took" in message:
            main.world.discard(Fault(**message["took"]))
        if message.get("slow"):
            main.world.during_slow = None
        error = message.get("error", error)
    return error


def _ended(main: Env, ended: Ended, worker: str, woke: bool = False) -> str:
    main.bury(worker)  # that process is gone; the worker's next iteration is a fresh one
    if ended.exit is Exit.FINISHED:
        return "finished its iteration" if woke else "not reached"
    return _raised(ended)

