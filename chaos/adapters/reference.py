"""The adapter protocol: how the harness drives an engine, and the reference engine's adapter.

To gate your own engine, implement :class:`Adapter` (usually by subclassing
:class:`ReferenceAdapter` and overriding what differs) and name it as ``module:attribute``:

    python -m chaos matrix --target mypkg.crash:adapter

An adapter opens a database, submits, runs one worker iteration and one outbox-sender pass, names
the state table and the code whose lines are crash points, and shows the harness what is in the
database (:class:`Snapshot`), including every state change, recorded by an audit trigger the
harness installs so that the check does not trust the engine's own code.
"""

from __future__ import annotations

import importlib
import os
import random
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import engine
from engine import IdempotencyConflict, SqliteStore, SqlStore, Worker, Workflow, reference_workflow, send_outbox

from chaos.core.world import World

__all__ = [
    "Adapter",
    "Session",
    "Snapshot",
    "ReferenceAdapter",
    "load_adapter",
    "REFERENCE_TARGET",
    "HUMAN_WRITER",
    "JobView",
    "OutboxView",
    "ReferenceSession",
]

REFERENCE_TARGET = "chaos:reference_adapter"

# Installed on the database under test by the harness, not by the engine: every state change and
# every change to a memo row is recorded as it commits, whatever the engine's code believes.
AUDIT_SQL = (
    "CREATE TABLE IF NOT EXISTS chaos_transition (seq INTEGER PRIMARY KEY, job_id TEXT, from_state TEXT, to_state TEXT)",
    "CREATE TABLE IF NOT EXISTS chaos_memo_change (seq INTEGER PRIMARY KEY, job_id TEXT, step TEXT, what TEXT)",
    """CREATE TRIGGER IF NOT EXISTS chaos_job_insert AFTER INSERT ON job BEGIN
        INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.id, NULL, NEW.state); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_job_state AFTER UPDATE OF state ON job
        WHEN OLD.state IS NOT NEW.state BEGIN
        INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.id, OLD.state, NEW.state); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_job_delete AFTER DELETE ON job BEGIN
        INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (OLD.id, OLD.state, NULL); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_memo_update AFTER UPDATE ON step_result BEGIN
        INSERT INTO chaos_memo_change (job_id, step, what) VALUES (OLD.job_id, OLD.step, 'updated'); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_memo_delete AFTER DELETE ON step_result BEGIN
        INSERT INTO chaos_memo_change (job_id, step, what) VALUES (OLD.job_id, OLD.step, 'deleted'); END""",
)


# Installed only on the harness's own scenario databases: every write that touches a job is
# attributed to the connection that made it (the harness registers ``chaos_writer()`` on each
# session's connection). That is how a write by a worker whose lease was taken over is seen.
WRITER_AUDIT_SQL = (
    "CREATE TABLE IF NOT EXISTS chaos_write (seq INTEGER PRIMARY KEY, job_id TEXT, kind TEXT, writer TEXT, detail TEXT)",
    """CREATE TRIGGER IF NOT EXISTS chaos_w_claim AFTER UPDATE OF lease_token ON job
        WHEN NEW.lease_token > OLD.lease_token BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.id, 'claim', chaos_writer(), NEW.lease_token); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_w_state AFTER UPDATE OF state ON job
        WHEN OLD.state IS NOT NEW.state BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.id, 'state', chaos_writer(), OLD.state || ' -> ' || NEW.state); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_w_memo AFTER INSERT ON step_result BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.job_id, 'memo', chaos_writer(), NEW.step); END""",
    """CREATE TRIGGER IF NOT EXISTS chaos_w_outbox AFTER INSERT ON outbox BEGIN
        INSERT INTO chaos_write (job_id, kind, writer, detail) VALUES (NEW.job_id, 'outbox', chaos_writer(), NEW.kind); END""",
)
HUMAN_WRITER = "human"


@dataclass(frozen=True)
class JobView:
    state: str
    payload: str
    lease_owner: str | None
    lease_until: float | None
    next_run_at: float | None
    last_error: str | None = None  # what the engine says went wrong last (shown in failures)
    result: str | None = None  # the job's result as stored (compared by same-outcome)


@dataclass(frozen=True)
class OutboxView:
    id: int
    job_id: str
    kind: str
    sent_at: float | None
    next_attempt_at: float | None = None  # when the sender may try it (again)

    @property
    def key(self) -> str:
        return f"{self.job_id}:{self.kind}"


@dataclass
class Snapshot:
    """What the harness sees in the engine's database, read on a connection of its own."""

    jobs: dict[str, JobView] = field(default_factory=dict)
    transitions: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    memos: dict[tuple[str, str], str] = field(default_factory=dict)
    memo_changes: list[tuple[str, str, str]] = field(default_factory=list)
    outbox: list[OutboxView] = field(default_factory=list)
    writes: list[tuple[str, str, str, str]] = field(default_factory=list)


class Session(Protocol):
    """One process's connection to the engine under test."""

    def submit(self, job_id: str, payload: Any) -> None: ...

    def run_once(self) -> str: ...

    def send_outbox(self) -> int: ...

    def close(self) -> None: ...


class Adapter(Protocol):
    """What the harness needs from an engine. See :class:`ReferenceAdapter` for the reference."""

    name: str
    lease_s: float
    conflict_errors: tuple[type[BaseException], ...]

    def states(self) -> Mapping[str, Sequence[str]]: ...

    def settled_states(self) -> frozenset[str]: ...

    def final_effects(self) -> Mapping[str, Sequence[str]]: ...

    def step_states(self) -> Mapping[str, tuple[str, str]]: ...

    def trace_paths(self) -> list[str]: ...

    def targets(self) -> dict[str, Callable[..., Any]]: ...

    def create(self, db_path: str) -> None: ...

    def open(self, db_path: str, world: World, *, worker_id: str, clock: Any, rng: random.Random) -> Session: ...

    def inspect(self, db_path: str) -> Snapshot: ...

    def probe(self, db_path: str) -> Callable[[str, str, str, int, float], tuple[bool, bool]]: ...


class Probe:
    """Reads the engine's committed state on a connection of its own (one per process)."""

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self._conns: dict[int, sqlite3.Connection] = {}

    def __call__(self, job_id: str, step: str, worker_id: str, token: int, now: float) -> tuple[bool, bool]:
        conn = self._conns.get(os.getpid())
        if conn is None:
            conn = self._conns[os.getpid()] = sqlite3.connect(self.db_path, timeout=30, check_same_thread=False)
        memo = conn.execute("SELECT 1 FROM step_result WHERE job_id = ? AND step = ?", (job_id, step)).fetchone()
        lease = conn.execute("SELECT lease_owner, lease_until, lease_token FROM job WHERE id = ?", (job_id,)).fetchone()
        valid = lease is not None and lease[0] == worker_id and lease[2] == token and (lease[1] or 0) > now
        return memo is not None, bool(valid)

    def close(self) -> None:
        conn = self._conns.pop(os.getpid(), None)
        if conn is not None:
            conn.close()


class ReferenceSession:
    """The reference engine as the harness drives it: inline steps, the world's services."""

    def __init__(self, adapter: "ReferenceAdapter", db_path: str, world: World, *, worker_id: str, clock: Any, rng: random.Random) -> None:
        self.store = adapter.make_store(db_path)
        self.workflow = adapter.workflow(world)
        self.world = world
        self.clock = clock
        self.rng = rng
        self.worker = adapter.make_worker(self.store, self.workflow, worker_id=worker_id, clock=clock, rng=rng)
        self._send_outbox = adapter.send_outbox_fn()
        self.writer = worker_id
        conn = getattr(self.store, "conn", None)
        if isinstance(conn, sqlite3.Connection):
            conn.create_function("chaos_writer", 0, lambda: self.writer)

    def submit(self, job_id: str, payload: Any) -> None:
        self.store.submit(job_id, payload, now=self.clock.now())

    def _as_human(self, action: Callable[[], Any]) -> None:
        self.writer = HUMAN_WRITER
        try:
            action()
        finally:
            self.writer = self.worker.worker_id

    def run_once(self) -> str:
        return self.worker.run_once().outcome

    def set_busy_timeout(self, seconds: float) -> None:
        """How long this session's writes wait for a lock held by another process."""
        self.store.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")  # an int we computed
        self.store.busy_timeout_s = seconds  # what its StoreBusy message says it waited

    def send_outbox(self) -> int:
        return self._send_outbox(self.store, self.world.sender, clock=self.clock, rng=self.rng).sent

    def requeue(self, job_id: str) -> None:
        self._as_human(lambda: engine.requeue(self.store, self.workflow, job_id, now=self.clock.now()))

    def resolve(self, job_id: str, action: str) -> None:
        self._as_human(lambda: engine.resolve(self.store, self.workflow, job_id, action, now=self.clock.now()))

    def cancel(self, job_id: str) -> None:
        self._as_human(lambda: engine.cancel(self.store, self.workflow, job_id, now=self.clock.now()))

    def close(self) -> None:
        self.store.close()


class _ShapeWorld:
    """Stands in for a :class:`World` where only a workflow's shape (steps, table) is needed."""

    def __init__(self) -> None:
        self.model = engine.LocalModel()
        self.documents = engine.GeneratedDocuments()
        self.sender = None


class ReferenceAdapter:
    """The reference engine (``engine/``) running the reference workflow against the world.

    Subclass it to test a variant: override :meth:`make_worker`, :meth:`make_store`,
    :meth:`workflow` or :meth:`send_outbox_fn`, and add your module to :meth:`trace_paths`.
    """

    name = "reference"
    lease_s = 120.0
    conflict_errors: tuple[type[BaseException], ...] = (IdempotencyConflict,)
    # What a person's action may answer instead of acting: refused (illegal now, no such job, a
    # damaged row to repair first) or "the database is busy, try again"; none of them changes
    # anything.
    human_errors: tuple[type[BaseException], ...] = (engine.IllegalAction, engine.UnknownJob, engine.DamagedRow, engine.StoreBusy)
    # What any write may answer when the database cannot take it now (another process holds the
    # write lock, the disk is full): "try again later", having changed nothing.
    unavailable_errors: tuple[type[BaseException], ...] = (engine.StoreBusy, engine.StoreFailed)
    # Steps run inline. The harness traces threads the iteration starts (the engine's step thread)
    # as well, but that thread's hand-off races with the worker's: a point just after it may land
    # before or after the worker's next commit, so its crash points are not deterministic yet.
    threaded = False
    # The SQLite synchronous level every store of this adapter commits with: the power fault
    # (chaos.hostfaults.power_faults) runs a copy of the adapter at FULL or NORMAL, and checks the promise.
    synchronous = "NORMAL"

    def __init__(self) -> None:
        self._table: Workflow | None = None

    # -- the engine's pieces (override these in a variant) ---------------------------------------
    def workflow(self, world: World) -> Workflow:
        return reference_workflow(world.model, world.documents)

    def make_store(self, db_path: str) -> SqlStore:
        return SqliteStore(db_path, synchronous=self.synchronous)

    def make_worker(self, store: Any, workflow: Workflow, *, worker_id: str, clock: Any, rng: random.Random) -> Worker:
        return Worker(store, workflow, worker_id=worker_id, clock=clock, rng=rng, lease_s=self.lease_s, threaded=self.threaded)

    def send_outbox_fn(self) -> Callable[..., Any]:
        return send_outbox

    # -- what the harness asks -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # The cached workflow holds closures; a copy sent to a worker process rebuilds it.
        state = dict(self.__dict__)
        state["_table"] = None
        state.pop("_readers", None)
        return state

    def _shape(self) -> Workflow:
        # The workflow a subclass builds in workflow(), on offline services: its steps and table
        # are what the harness checks, so a custom workflow needs no other override.
        if self._table is None:
            self._table = self.workflow(_ShapeWorld())  # type: ignore[arg-type]
        return self._table

    def states(self) -> Mapping[str, Sequence[str]]:
        return self._shape().table

    def settled_states(self) -> frozenset[str]:
        wf = self._shape()
        return wf.terminal_states | wf.parked_states

    def final_effects(self) -> Mapping[str, Sequence[str]]:
        wf = self._shape()
        return {wf.final_state: tuple(kind for step in wf.steps for kind in step.effects)}

    def step_states(self) -> Mapping[str, tuple[str, str]]:
        """step name -> (working state, done state)."""
        return {s.name: (s.working_state, s.done_state) for s in self._shape().steps}

    def trace_paths(self) -> list[str]:
        return [os.path.dirname(os.path.abspath(engine.__file__))]

    def targets(self) -> dict[str, Callable[..., Any]]:
        return {"worker": Worker.run_once, "sender": send_outbox}

    def create(self, db_path: str, *, attribute_writers: bool = False) -> None:
        """Create the database and install the audit triggers (and, for the harness's own
        scenario databases, the writer attribution, which needs ``chaos_writer()`` on every
        connection that writes)."""
        store = self.make_store(db_path)
        for statement in AUDIT_SQL + (WRITER_AUDIT_SQL if attribute_writers else ()):
            store.conn.execute(statement)
        store.close()

    def open(self, db_path: str, world: World, *, worker_id: str, clock: Any, rng: random.Random) -> ReferenceSession:
        return ReferenceSession(self, db_path, world, worker_id=worker_id, clock=clock, rng=rng)

    def inspect(self, db_path: str) -> Snapshot:
        """Read the database on a connection of the harness's own, kept per process and file
        until :meth:`release` (a scenario inspects the same file several times)."""
        key = (os.getpid(), db_path)
        readers = self.__dict__.setdefault("_readers", {})
        conn = readers.get(key)
        if conn is None:
            conn = readers[key] = sqlite3.connect(db_path, timeout=30, check_same_thread=False)
        # One read transaction: every table is read from the same committed state.
        conn.execute("BEGIN")
        try:
            snap = Snapshot()
            for r in conn.execute("SELECT id, state, payload, lease_owner, lease_until, next_run_at, last_error, result FROM job"):
                snap.jobs[r[0]] = JobView(*r[1:])
            snap.transitions = [tuple(r) for r in conn.execute("SELECT job_id, from_state, to_state FROM chaos_transition ORDER BY seq")]  # type: ignore[misc]
            snap.memos = {(r[0], r[1]): r[2] for r in conn.execute("SELECT job_id, step, output FROM step_result")}
            snap.memo_changes = [tuple(r) for r in conn.execute("SELECT job_id, step, what FROM chaos_memo_change ORDER BY seq")]  # type: ignore[misc]
            snap.outbox = [OutboxView(*r) for r in conn.execute("SELECT id, job_id, kind, sent_at, next_attempt_at FROM outbox ORDER BY id")]
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chaos_write'").fetchone():
                snap.writes = [tuple(r) for r in conn.execute("SELECT job_id, kind, writer, detail FROM chaos_write ORDER BY seq")]  # type: ignore[misc]
            return snap
        finally:
            conn.execute("COMMIT")

    def release(self, db_path: str) -> None:
        """Close this process's inspection connection to ``db_path``."""
        conn = self.__dict__.get("_readers", {}).pop((os.getpid(), db_path), None)
        if conn is not None:
            conn.close()

    def probe(self, db_path: str) -> Probe:
        """At the moment of a paid call: is that step's memo committed; does the caller hold the lease?"""
        return Probe(db_path)


def load_adapter(spec: str) -> Any:
    """Import ``module:attribute`` and return the adapter it names (calling a class or factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"target {spec!r} must look like MODULE:ATTR, e.g. {REFERENCE_TARGET}")
    if module_name.startswith("."):
        raise ValueError(f"target {spec!r} names a relative module; name it from the top, e.g. mypackage.adapters:{attr}")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # whatever importing someone else's module raises, it is one line here
        raise ValueError(f"cannot load target {spec!r}: {type(exc).__name__}: {exc}") from exc
    if callable(target) and not hasattr(target, "inspect") or isinstance(target, type):
        try:
            adapter = target()
        except (Exception, SystemExit) as exc:
            raise ValueError(
                f"target {spec!r} is not an adapter, and calling it failed ({type(exc).__name__}: {exc}); name an "
                "adapter, or a class or function that takes no arguments and returns one (see chaos.Adapter)"
            ) from exc
    else:
        adapter = target
    for needed in ("states", "open", "inspect", "create", "trace_paths", "targets"):
        if not hasattr(adapter, needed):
            raise ValueError(f"target {spec!r} is not an adapter: it has no {needed!r} (see chaos.Adapter)")
    return adapter
