"""Killing a worker in the middle of a random history.

A kill first *records* the iteration about to run: the database and ledger files are copied (no
transaction is open between two steps of a history), the same iteration runs on the copy under a
line recorder, with the same clock reading, armed faults and RNG seeds, and its crash points are
the lines it reached. Then the real iteration runs and dies at the drawn point:

* ``fork``: in a forked child that opens its own connections and is SIGKILLed at the point (no
  ``finally``, no ``atexit``), exactly as the crash matrix does. The clock is shared memory, so
  time the child spent (a slow call) has passed for everyone; the faults it used up and whether a
  slow call's second worker ran come back through a pipe.
* ``inprocess``: the iteration is abandoned by an exception at the point, and its connections
  are closed, which rolls back what it had open. Cheaper, and weaker: ``finally`` blocks run.

A *pause* forks the iteration the same way, but the child stops itself (SIGSTOP) at the point
and stays stopped, holding whatever it held there (a lease, an open write transaction), while
the history goes on; :func:`resume` sends SIGCONT and the child finishes its iteration on the
clock everyone shares. The faults it uses up come back through its pipe, one by one.
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import random
import shutil
import signal
import sqlite3
import struct
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from engine import NO_PROGRESS, FakeClock

from ._points import Killer, Point, Recorder
from ._scenario import EXIT_ERROR, EXIT_NOT_REACHED, EXIT_RESUMED, Abandon, _store_conn
from ._world import Fault, World

__all__ = ["Env", "record", "kill", "pause", "resume", "abandon_frozen", "Frozen", "SECOND"]

SECOND = "w-second"  # the worker that runs while a slow call outlives the lease
SECOND_ITERATIONS_MAX = 20
DATABASE_FILES = ("engine.db", "engine.db-wal", "world.db", "world.db-wal")
ERROR_CHARS_MAX = 4000
Delivery = tuple[int, bool]  # (n, before): die right before, or right after, the n-th delivery


class Env:
    """One process's view of the system: its database, world, clock and the sessions it opened.

    Sessions open lazily with an RNG seeded by ``tag``, the worker and its life, so the recording
    of an iteration and the iteration then killed make the same random choices.
    """

    def __init__(self, adapter: Any, directory: str, clock: Any, world: World, tag: str, db: str | None = None) -> None:
        self.adapter = adapter
        self.directory = directory
        self.db = db if db is not None else os.path.join(directory, "engine.db")
        self.clock = clock
        self.world = world
        self.tag = tag
        self.sessions: dict[str, Any] = {}
        self.lives: Counter[str] = Counter()
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

    def session(self, worker_id: str) -> Any:
        session = self.sessions.get(worker_id)
        if session is None:
            rng = random.Random(f"{self.tag}:{worker_id}:{self.lives[worker_id]}")
            session = self.adapter.open(self.db, self.world, worker_id=worker_id, clock=self.clock, rng=rng)
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

            def take_unless_slow(task: str) -> Fault | None:
                # One slow call at a time. The second worker runs nested inside the first one's
                # call, so a slow call of its own would freeze the first worker, heartbeats and
                # all, for that long: a pause the history never asked for.
                upcoming = next((f for f in world.pending_faults() if f.task in (None, task)), None)
                return None if upcoming is not None and upcoming.kind == "slow" else take(task)

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
    conn = _store_conn(session)
    if not isinstance(conn, sqlite3.Connection):
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
    return session.run_once if phase == "worker" else session.send_outbox


class _SegmentRecorder(Recorder):
    """A line recorder that also notes, at each point, how many durable writes came before it.

    Two kill points with no durable write between them leave the same files behind: the dead
    worker's memory is gone either way. Grouping points into such segments lets a kill be drawn
    segment first, so a short window between two commits is as likely as a long stretch of code.
    """

    def __init__(self, paths: list[str], writes: Callable[[], Any]) -> None:
        super().__init__(paths)
        self.writes = writes
        self.marks: list[Any] = []

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.marks.append(self.writes())
        return super()._local(frame, event, arg)


def record(main: Env, worker: str, phase: str, tag: str) -> list[list[Point]]:
    """Run the iteration on a copy of the files under a line recorder: its crash points, grouped
    into segments between durable writes (engine commits, paid calls, deliveries)."""
    adapter = main.adapter
    directory = os.path.join(main.directory, "dry")
    os.makedirs(directory, exist_ok=True)
    # A database that is not a file (PostgreSQL): the adapter copies the live one onto its template.
    copy_db = getattr(adapter, "copy_db", None) if main.template is not None else None
    for name in ("world.db", "world.db-wal") if copy_db is not None else DATABASE_FILES:
        path = os.path.join(main.directory, name)
        if os.path.exists(path):
            shutil.copyfile(path, os.path.join(directory, name))
    db = copy_db(main.db, main.template, directory) if copy_db is not None else os.path.join(directory, "engine.db")
    clock = FakeClock(main.clock.now())
    world = World(directory, clock, lease_s=adapter.lease_s)
    world.probe = adapter.probe(db)
    for fault in main.world.pending_faults():
        world.arm(fault)
    ledger_writes = [0]
    for name in ("record_call", "deliver"):
        setattr(world, name, _counting(getattr(world, name), ledger_writes))
    observer = _observer(db)
    commits: Callable[[], Any] = (lambda: observer.execute("PRAGMA data_version").fetchone()[0]) if observer else (lambda: 0)
    env = Env(adapter, directory, clock, world, tag, db=db)
    recorder = _SegmentRecorder(adapter.trace_paths(), lambda: (commits(), ledger_writes[0]))
    try:
        iteration = _iteration(main, env, worker, phase, None, lambda: None)
        with recorder:
            iteration()
    except Exception:  # the iteration that is killed raises it again, and is reported there
        pass
    finally:
        env.close()
        world.close()
        if observer is not None:
            observer.close()
        if copy_db is not None:
            release = getattr(adapter, "release", None)
            if release is not None:
                release(db)
            adapter.drop_db(db)
        shutil.rmtree(directory, ignore_errors=True)
    segments: list[list[Point]] = []
    previous = None
    for point, mark in zip(recorder.points, recorder.marks):
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


def _observer(path: str) -> sqlite3.Connection | None:
    """A connection whose ``PRAGMA data_version`` moves whenever another connection commits."""
    if not os.path.exists(path):
        return None
    try:
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA data_version").fetchone()
        return conn
    except sqlite3.DatabaseError:  # not a SQLite file: segments follow the ledger alone
        return None


def kill(main: Env, worker: str, phase: str, mode: str, tag: str, point: Point | None, delivery: Delivery | None) -> str:
    """Run ``worker``'s iteration and kill it at ``point``, or around a delivery: ``delivery`` is
    ``(n, before)``, kill right before (or right after) the sender's n-th delivery.

    Returns ``"killed"``, ``"not reached"`` (the iteration ended first) or what it raised first
    (that ends a process as surely). Either way the process is gone: ``main`` buries its session.
    """
    try:
        if mode == "fork":
            return _kill_fork(main, worker, phase, tag, point, delivery)
        return _kill_inprocess(main, worker, phase, tag, point, delivery)
    except Exception as exc:  # the iteration raised before its point: that ended the process too
        return f"raised {type(exc).__name__}: {exc}; its process died"
    finally:
        main.bury(worker)


def _kill_inprocess(main: Env, worker: str, phase: str, tag: str, point: Point | None, delivery: Delivery | None) -> str:
    world = main.world
    env = main.child(tag)
    hook, sender = world.during_slow, world.sender
    reached = False

    def abandon() -> None:
        raise Abandon(tag)

    try:
        _run_to(main, point, _iteration(main, env, worker, phase, delivery, abandon), abandon)
    except Abandon:
        reached = True
    finally:
        env.close()  # closing a connection rolls back whatever the dead worker had open
        world.sender = sender
        world.during_slow = None if env.slow_fired else hook
    return "killed" if reached else "not reached"


def _run_to(main: Env, point: Point | None, iteration: Callable[[], Any], on_hit: Callable[[], None]) -> bool:
    """Run ``iteration``, calling ``on_hit`` just before ``point`` (if any); whether it got there."""
    if point is None:
        iteration()
        return False
    with Killer(main.adapter.trace_paths(), point, on_hit) as killer:
        iteration()
    return killer.reached


def _fork(body: Callable[[int], int]) -> tuple[int, int]:
    """Fork a child that runs ``body(fd)`` (``fd`` its end of a pipe to the parent) and exits with
    its code, never returning into the caller; return the child's pid and the parent's end."""
    read_fd, write_fd = os.pipe()
    gc.freeze()  # the child's collections then leave the parent's objects (and pages) alone
    pid = os.fork()
    if pid == 0:
        code = EXIT_ERROR
        try:
            gc.disable()  # a short life: no collection copying pages it shares with the parent
            os.close(read_fd)
            code = body(write_fd)
        except BaseException as exc:  # reported to the parent, which raises it
            _tell(write_fd, {"error": "".join(traceback.format_exception(exc))[-ERROR_CHARS_MAX:]})
        finally:
            os._exit(code)
    gc.unfreeze()
    os.close(write_fd)
    return pid, read_fd


def _kill_fork(main: Env, worker: str, phase: str, tag: str, point: Point | None, delivery: Delivery | None) -> str:
    pid, read_fd = _fork(lambda fd: _doomed_child(main, worker, phase, tag, point, delivery, fd))
    _, status = os.waitpid(pid, 0)
    error = _apply(main, _hear(read_fd))  # the faults the child used up are used up
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_NOT_REACHED:
        return "not reached"
    last = (error or f"exit status {status}").strip().splitlines()[-1]
    return f"raised {last}; its process died"


def _child_env(main: Env, tag: str, fd: int) -> Env:
    """The env of a forked child: ``main``'s files, clock and world (its copy of the world
    reopens the ledger; its sessions open new connections). Each fault it uses up, and a slow
    call's second worker, are told to the parent through ``fd`` (see :func:`_apply`)."""
    world = main.world
    env = main.child(tag)
    env.report = lambda message: _tell(fd, message)
    take = world.take_fault

    def take_and_report(task: str) -> Fault | None:
        fault = take(task)
        if fault is not None:
            _tell(fd, {"took": asdict(fault)})
        return fault

    world.take_fault = take_and_report  # type: ignore[method-assign]
    return env


def _doomed_child(main: Env, worker: str, phase: str, tag: str, point: Point | None, delivery: Delivery | None, fd: int) -> int:
    env = _child_env(main, tag, fd)

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    _run_to(main, point, _iteration(main, env, worker, phase, delivery, die), die)
    return EXIT_NOT_REACHED


@dataclass
class Frozen:
    """A worker's process stopped at a point, and the pipe it reports through."""

    worker: str
    pid: int
    fd: int
    point: Point
    leases: list[tuple[str, str, str, float]] = field(default_factory=list)  # (job, state, owner, until) held when it stopped
    paused_at: float = 0.0  # the clock when it stopped
    calls_before: int = 0  # paid calls in the world's ledger when it stopped
    pending: bytes = b""


def pause(main: Env, worker: str, phase: str, tag: str, point: Point) -> Frozen | str:
    """Fork ``worker``'s iteration and stop it (SIGSTOP) just before ``point``.

    Returns the :class:`Frozen` child, or, when the iteration ended before the point, what became
    of it (``"not reached"``, or what it raised: its process died). Either way the faults it used
    up are used up here too.
    """
    pid, read_fd = _fork(lambda fd: _frozen_child(main, worker, phase, tag, point, fd))
    _, status = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        frozen = Frozen(worker, pid, read_fd, point)
        os.set_blocking(read_fd, False)
        _apply(main, _drain_available(frozen))
        return frozen
    return _ended(main, status, _hear(read_fd), worker)


def resume(main: Env, frozen: Frozen) -> str:
    """Wake a frozen worker (SIGCONT) and let it finish its iteration; returns how it ended."""
    os.kill(frozen.pid, signal.SIGCONT)
    _, status = os.waitpid(frozen.pid, 0)
    os.set_blocking(frozen.fd, True)
    messages = _parse(frozen.pending + _read_all(frozen.fd))
    return _ended(main, status, messages, frozen.worker, woke=True)


def abandon_frozen(frozen: Frozen) -> None:
    """Kill a frozen worker without letting it run again (a history that already failed)."""
    try:
        os.kill(frozen.pid, signal.SIGKILL)
        os.waitpid(frozen.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    os.close(frozen.fd)


def _frozen_child(main: Env, worker: str, phase: str, tag: str, point: Point, fd: int) -> int:
    env = _child_env(main, tag, fd)

    def stop() -> None:
        os.kill(os.getpid(), signal.SIGSTOP)
        env.apply_page_limit()  # woken: the disk may have filled, or been freed, meanwhile

    reached = _run_to(main, point, _iteration(main, env, worker, phase, None, stop), stop)
    env.close()
    return EXIT_RESUMED if reached else EXIT_NOT_REACHED


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


def _ended(main: Env, status: int, messages: list[dict[str, Any]], worker: str, woke: bool = False) -> str:
    error = _apply(main, messages)
    main.bury(worker)  # that process is gone; the worker's next iteration is a fresh one
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (EXIT_RESUMED, EXIT_NOT_REACHED):
        return "finished its iteration" if woke else "not reached"
    last = (error or f"exit status {status}").strip().splitlines()[-1]
    return f"raised {last}; its process died"


def _drain_available(frozen: Frozen) -> list[dict[str, Any]]:
    """The whole messages a stopped child wrote so far (its pipe is non-blocking)."""
    data = frozen.pending
    while True:
        try:
            chunk = os.read(frozen.fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    complete, _, frozen.pending = data.rpartition(b"\n")
    return _parse(complete)


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _parse(data: bytes) -> list[dict[str, Any]]:
    messages = []
    for line in data.decode(errors="replace").splitlines():
        try:
            messages.append(json.loads(line))
        except ValueError:  # a line cut short by a kill
            pass
    return messages


def _tell(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _hear(fd: int) -> list[dict[str, Any]]:
    return _parse(_read_all(fd))


def close_quietly(session: Any) -> None:
    try:
        session.close()
    except Exception:  # an abandoned connection may be mid-statement; closing rolls it back
        pass
