"""The reference engine's adapter: ``engine/`` running the reference workflow against the world.

The contract it implements is :mod:`chaos.adapter`; its tables are declared once
(:data:`REFERENCE_SCHEMA`, a :class:`~chaos.adapters.sql.SqlSchema`), which gives the audit
triggers, the writer attribution (a claim hands out a larger ``lease_token``), the snapshot and
the probe. To gate a workflow of your own on ``engine/``, subclass :class:`ReferenceAdapter` and
override :meth:`~ReferenceAdapter.workflow`, and :meth:`~ReferenceAdapter.payload` and
:meth:`~ReferenceAdapter.job_ids` where your steps read other input and your jobs have ids of their own:

    python -m chaos matrix --target mypkg.crash:adapter
"""

from __future__ import annotations

import os
import random
import sqlite3
from typing import Any, Callable, Mapping, Sequence

import engine
from engine import IdempotencyConflict, SqliteStore, SqlStore, Worker, Workflow, reference_workflow, send_outbox

from chaos.adapter import Snapshot, default_job_ids
from chaos.adapters.sql import HUMAN_WRITER, JobTable, MemoTable, OutboxTable, SqlProbe, SqlSchema
from chaos.core.world import World

__all__ = ["ReferenceAdapter", "ReferenceSession", "REFERENCE_SCHEMA", "HUMAN_WRITER"]

# The reference engine's tables, as the harness reads them.
REFERENCE_SCHEMA = SqlSchema(
    JobTable(token="lease_token", payload_table="job_payload"),
    MemoTable(),
    OutboxTable(next_attempt_at="next_attempt_at"),
)


class ReferenceSession:
    """The reference engine as the harness drives it: inline steps, the world's services."""

    def __init__(self, adapter: "ReferenceAdapter", db_path: str, world: World, *, worker_id: str, clock: Any, rng: random.Random) -> None:
        self.adapter = adapter
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

    def connection(self) -> Any:
        """The store's connection (sqlite3 here, psycopg on PostgreSQL)."""
        return self.store.conn

    def configure_worker(self, **settings: Any) -> None:
        """Rebuild this session's worker with ``settings`` (Worker's keyword arguments, a family's)."""
        self.worker = self.adapter.make_worker(self.store, self.workflow, worker_id=self.worker.worker_id, clock=self.clock,
                                               rng=self.rng, **settings)

    def claim_only(self) -> None:
        """Claim the next job and return, holding its lease: a worker killed right after its claim."""
        self.worker.claim()

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
    session_type: type = ReferenceSession  # what open() returns: the harness reads its capabilities
    schema: SqlSchema = REFERENCE_SCHEMA  # the tables the host's damage faults overwrite
    conflict_errors: tuple[type[BaseException], ...] = (IdempotencyConflict,)
    # What a person's action may answer instead of acting: refused (illegal now, no such job, a
    # damaged row to repair first) or "the database is busy, try again"; none of them changes
    # anything.
    human_errors: tuple[type[BaseException], ...] = (engine.IllegalAction, engine.UnknownJob, engine.DamagedRow, engine.StoreBusy)
    # What any write may answer when the database cannot take it now (another process holds the
    # write lock, the disk is full): "try again later", having changed nothing.
    unavailable_errors: tuple[type[BaseException], ...] = (engine.StoreBusy, engine.StoreFailed)
    # Steps run on the worker's step thread, as Worker runs them by default: the configuration
    # users run is the one crashed. The recorder and the killer trace that thread too, and the
    # threads take turns only where the worker hands a step over (see chaos.core.points), so a
    # point on either thread is reached in the same state in the recording and in the kill.
    # A variant may set False to run its steps inline.
    threaded = True
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

    def make_worker(self, store: Any, workflow: Workflow, *, worker_id: str, clock: Any, rng: random.Random, **settings: Any) -> Worker:
        """The worker of a session; ``settings`` are a family's (see ReferenceSession.configure_worker)."""
        # The step timeout is measured on the run's clock, as every other time is (a hung call
        # moves it on); a wait that ends it still takes real time.
        defaults = {"lease_s": self.lease_s, "threaded": self.threaded, "monotonic": clock.now}
        return Worker(store, workflow, worker_id=worker_id, clock=clock, rng=rng, **{**defaults, **settings})

    def send_outbox_fn(self) -> Callable[..., Any]:
        return send_outbox

    def payload(self, job_id: str) -> Any:
        """The payload submitted for ``job_id`` where a plan or a test gives none; default ``{"source": job_id}``.

        It is what the reference workflow's fetch step reads: the document to fetch. Override it
        where your first step reads something else, e.g. ``{"order": job_id, "total_cents": 1250}``.

        >>> ReferenceAdapter().payload("doc-1")
        {'source': 'doc-1'}
        """
        return {"source": job_id}

    def job_ids(self, n: int) -> list[str]:
        """The first ``n`` job ids the harness submits; default ``doc-1`` .. ``doc-n``.

        The crash matrix's families and a fault plan's default jobs (or its count) are these, and
        findings, effect keys and replays name them. Override it so that a finding speaks of your
        jobs, e.g. ``[f"order-{1000 + i}" for i in range(1, n + 1)]``.

        >>> ReferenceAdapter().job_ids(2)
        ['doc-1', 'doc-2']
        """
        return list(default_job_ids(n))

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
        REFERENCE_SCHEMA.install(store.conn, attribute_writers=attribute_writers)
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
        return REFERENCE_SCHEMA.snapshot(conn)

    def release(self, db_path: str) -> None:
        """Close this process's inspection connection to ``db_path``."""
        conn = self.__dict__.get("_readers", {}).pop((os.getpid(), db_path), None)
        if conn is not None:
            conn.close()

    def probe(self, db_path: str) -> SqlProbe:
        """At the moment of a paid call: is that step's memo committed; does the caller hold the lease?"""
        return REFERENCE_SCHEMA.probe(db_path)
