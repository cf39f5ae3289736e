"""The SQL store: every read and write the engine makes, over one write path, for any backend.

:class:`SqlStore` holds the logic of the store's contract (:class:`~engine._store.Store`) once: the
submit, the claim, the step completion, park, heartbeat, a person's move, the memo, the outbox and
the operating queries, each through the statements of :mod:`engine._sql` as its backend's dialect
writes them. A backend (:class:`~engine.SqliteStore`, :class:`~engine.PostgresStore`) adds only
its connection, how it begins, commits and rolls back, how its errors map to
:class:`~engine.StoreBusy` and :class:`~engine.StoreFailed`, and its schema mark.

Every write goes through :meth:`SqlStore._write`, and every write a worker makes after its claim
is *fenced*: guarded by the job's state and by the lease token the claim handed out, so a worker
whose lease was taken over changes zero rows.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Mapping

from ._errors import IdempotencyConflict, UnknownJob
from ._inputs import finite_number, loads, storable_text
from ._sql import Dialect, Statements
from ._store import PAYLOAD_FIX, Claim, Completion, Job, Memo, OutboxRow, check_job_id, clip_error, load_memo, load_payload, load_stored, missing_payload, payload_json

__all__ = ["SqlStore", "COST_WINDOW_S", "STUCK_ROWS_MAX", "ERROR_ROWS_MAX"]

COST_WINDOW_S = 24 * 3600  # "which step costs the money" looks this far back
STUCK_ROWS_MAX = 50
ERROR_ROWS_MAX = 20


class SqlStore:
    """The store's contract over SQL; subclassed once per backend (see the module docstring)."""

    dialect: ClassVar[Dialect]  # what a backend class declares; sql and backend follow from it
    sql: ClassVar[Statements]  # the statements as ``dialect`` writes them
    backend: ClassVar[str]
    conn: Any  # the backend's DB-API connection
    workflow: str
    busy_timeout_s: float

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "dialect" in cls.__dict__:
            cls.sql = Statements().rendered(cls.dialect)
            cls.backend = cls.dialect.name

    # -- what a backend provides ----------------------------------------------------------------
    def close(self) -> None:
        self.conn.close()

    def claim_plan(self) -> str:
        raise NotImplementedError

    def _begin(self) -> None:
        """Open the write transaction (taking the database's write lock, where there is one)."""
        raise NotImplementedError

    def _commit(self) -> None:
        self.conn.execute("COMMIT")

    def _rollback(self) -> None:
        """Roll back what is left of a failed transaction, if anything is; never raises."""
        raise NotImplementedError

    def _ready(self) -> None:
        """Make the connection usable before a read (PostgreSQL reopens a dropped one)."""

    def _failure(self, exc: BaseException, where: str) -> Exception | None:
        """The typed error for a failed statement (StoreBusy, StoreFailed), or None to re-raise it."""
        raise NotImplementedError

    # -- the one write path and the reads -------------------------------------------------------
    def _write(self) -> "_WriteTransaction":
        """The one write path: begin, commit on success, roll back on any exception."""
        return _WriteTransaction(self)

    def _read(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run one read outside any write; a failure of the machine is raised as a typed error."""
        return self._cursor(sql, params).fetchall()

    def _cursor(self, sql: str, params: Mapping[str, Any]) -> Any:
        self._ready()
        try:
            return self.conn.execute(sql, params)
        except Exception as exc:
            error = self._failure(exc, "a read")
            if error is None:
                raise  # not a crash point: a bug guard: a statement fails otherwise than by a lock or the machine only if it is wrong
            raise error from exc

    # -- submit -----------------------------------------------------------------------------------
    def submit(self, job_id: str, payload: Any, *, now: float) -> Job:
        return self.submit_many([(job_id, payload)], now=now)[0]

    def submit_many(self, items: Iterable[tuple[str, Any]], *, now: float) -> list[Job]:
        """Submit many jobs in one transaction: all are stored, or (on any error) none."""
        finite_number("now", now)
        rows = [(check_job_id(job_id), payload_json(job_id, payload)) for job_id, payload in items]
        created: list[Job | None] = []
        sql = self.sql
        with self._write() as conn:
            for job_id, text in rows:
                # A new id is inserted and its row comes back as stored; an existing id inserts
                # nothing, and its stored payload must be the one offered.
                row = conn.execute(sql.INSERT_NEW_JOB, {"id": job_id, "workflow": self.workflow, "now": now}).fetchone()
                if row is not None:
                    conn.execute(sql.INSERT_PAYLOAD, {"id": job_id, "payload": text})
                else:
                    existing = conn.execute(sql.SELECT_PAYLOAD, {"id": job_id}).fetchone()
                    if existing is None:  # the job is there and its payload row is not
                        raise missing_payload(job_id)
                    if existing[0] != text:
                        raise IdempotencyConflict(job_id, existing[0], text)
                created.append(None if row is None else _job((*row[:3], text, *row[3:])))
        return [job if job is not None else self.get(job_id) for job, (job_id, _) in zip(created, rows)]

    def get(self, job_id: str) -> Job:
        if not storable_text(job_id):  # no job can have this id; both backends answer alike
            raise UnknownJob(job_id)
        rows = self._read(self.sql.SELECT_JOB, {"id": job_id})
        if not rows:
            raise UnknownJob(job_id)
        return _job(rows[0])

    def jobs(self) -> list[Job]:
        return [_job(r) for r in self._read(self.sql.SELECT_JOBS, {})]

    # -- the worker's writes ------------------------------------------------------------------------
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Mapping[str, str]) -> Claim | None:
        """Lease the most overdue claimable job and start its step, in ONE write transaction.

        ``starts`` maps each ready state to the working state of the step it waits for; the claim
        moves the job there by compare-and-swap. A job claimed in any other state is a working job
        whose lease expired (its worker died or froze): it stays in its state and the step is
        charged one attempt, so a job that kills every worker that touches it ends up failed.
        """
        sql = self.sql
        until = now + lease_s
        with self._write() as conn:
            row = conn.execute(sql.CLAIM, {"owner": owner, "until": until, "now": now}).fetchone()
            if row is None:
                return None
            job_id, state, payload, attempts, token, has_memos = row
            working = starts.get(state)
            if working is not None:
                moved = conn.execute(sql.FENCED_MOVE, {"id": job_id, "token": token, "now": now, "to": working, "from": state}).rowcount
                state = working
            else:
                moved = conn.execute(sql.COUNT_RECLAIM, {"id": job_id, "token": token, "now": now, "state": state}).rowcount
                attempts += 1
            if moved != 1:
                raise AssertionError(f"job {job_id!r} changed under its own write lock")  # not a crash point: a bug guard: no row changes under the worker's own write lock
            return Claim(job_id, state, payload, attempts, token, until, None if has_memos is None else bool(has_memos))

    def complete(self, claim: Claim, completion: Completion | None = None, /, **fields: Any) -> bool:
        """Commit a step's memo, its outbox rows and the state advance as ONE fenced transaction.

        See :class:`~engine.Completion` for what is committed; the keyword form
        (``complete(claim, step=..., ...)``) builds that Completion from its fields. Returns False,
        having written nothing, if the lease was taken over.
        """
        done = completion if completion is not None else Completion(**fields)
        sql, job_id, now = self.sql, claim.job_id, done.now
        move = {"id": job_id, "token": claim.token, "now": now, "to": done.done_state, "from": done.from_state}
        with self._write() as conn:
            if done.next_state is None:
                moved = conn.execute(sql.COMPLETE_RELEASE, {**move, "result": done.result_json, "next_run_at": done.release_at}).rowcount
            elif done.lease_until == claim.lease_until:
                moved = conn.execute(sql.COMPLETE_KEEP_LEASE_AS_IS, move).rowcount
            else:
                moved = conn.execute(sql.COMPLETE_KEEP_LEASE, {**move, "until": done.lease_until}).rowcount
            if moved != 1:
                return False
            if done.write_memo:
                conn.execute(sql.INSERT_MEMO, {"id": job_id, "step": done.step, "output": done.output_json, "cost": done.cost_usd, "now": now})
            for kind, payload in done.effects.items():
                conn.execute(sql.INSERT_OUTBOX, {"id": job_id, "kind": kind, "payload": payload, "now": now})
            if done.next_state is not None:
                move.update({"to": done.next_state, "from": done.done_state})
                moved = conn.execute(sql.FENCED_MOVE, move).rowcount
                if moved != 1:
                    raise AssertionError(f"job {job_id!r} changed under its own write lock")  # not a crash point: a bug guard: no row changes under the worker's own write lock
        return True

    def park(
        self,
        claim: Claim,
        *,
        from_state: str,
        to_state: str,
        attempts: int,
        error: str,
        next_run_at: float | None,
        now: float,
    ) -> bool:
        return self._swap(self.sql.PARK, {
            "id": claim.job_id, "token": claim.token, "from": from_state, "to": to_state, "attempts": attempts,
            "error": clip_error(error), "next_run_at": next_run_at, "now": now,
        })

    def heartbeat(self, claim: Claim, *, state: str, until: float, now: float) -> bool:
        return self._swap(self.sql.HEARTBEAT, {"until": until, "now": now, "id": claim.job_id, "state": state, "token": claim.token})

    def human_move(self, job_id: str, *, from_state: str, to_state: str, next_run_at: float | None, now: float) -> bool:
        return self._swap(self.sql.HUMAN_MOVE, {"id": job_id, "from": from_state, "to": to_state, "next_run_at": next_run_at, "now": now})

    def _swap(self, sql: str, params: Mapping[str, Any]) -> bool:
        """One guarded UPDATE in a transaction of its own: True if it changed the one row."""
        with self._write() as conn:
            return conn.execute(sql, params).rowcount == 1

    # -- the memo -----------------------------------------------------------------------------------
    def memo(self, job_id: str, step: str) -> Memo | None:
        rows = self._read(self.sql.SELECT_MEMO, {"id": job_id, "step": step})
        if not rows:
            return None
        output, cost, at = rows[0]
        return Memo(load_memo(job_id, step, output), cost, at)

    def memos(self, job_id: str) -> dict[str, Any]:
        return {step: load_memo(job_id, step, output) for step, output in self._read(self.sql.SELECT_MEMOS, {"id": job_id})}

    # -- the outbox ---------------------------------------------------------------------------------
    def due_outbox(self, *, now: float, limit: int) -> list[OutboxRow]:
        rows = self._read(self.sql.SELECT_DUE_OUTBOX, {"now": now, "limit": limit})
        return [OutboxRow(row_id, job_id, kind, loads(payload), attempts) for row_id, job_id, kind, payload, attempts in rows]

    def mark_sent(self, ids: list[int], *, now: float) -> int:
        if not ids:
            return 0
        with self._write() as conn:
            return conn.execute(self.sql.MARK_SENT, {"now": now, "ids": self.dialect.array(ids)}).rowcount

    def mark_send_failed(self, row_id: int, *, error: str, next_at: float) -> None:
        with self._write() as conn:
            conn.execute(self.sql.MARK_SEND_FAILED, {"id": row_id, "error": clip_error(error), "next_at": next_at})

    # -- the operating queries ----------------------------------------------------------------------
    def status(self, *, now: float, settled_states: frozenset[str] | set[str]) -> dict[str, Any]:
        """Where is everything, what is stuck, what is failing, what costs; and the oldest open job."""
        sql = self.sql
        params = {"now": now, "limit": STUCK_ROWS_MAX, "since": now - COST_WINDOW_S}
        oldest = self._dicts(sql.OLDEST_OPEN, {"now": now, "settled": self.dialect.array(sorted(settled_states))})
        return {
            "states": self._dicts(sql.WHERE_IS_EVERYTHING, params),
            "stuck": self._dicts(sql.WHAT_IS_STUCK, params),
            "failing": self._dicts(sql.WHAT_IS_FAILING, {**params, "limit": ERROR_ROWS_MAX}),
            "outbox_failing": self._dicts(sql.WHAT_IS_UNDELIVERED, {"limit": ERROR_ROWS_MAX}),
            "cost": self._dicts(sql.WHICH_STEP_COSTS, params),
            "oldest_open": oldest[0] if oldest else None,
        }

    def _dicts(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A read's rows as dicts keyed by column name."""
        cursor = self._cursor(sql, params)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


class _WriteTransaction:
    """``with store._write() as conn``: begin, then commit, or roll back on any exception.

    ``conn`` is one cursor of the store's connection, made for this transaction: its statements
    run one after the other, and ``connection.execute`` would make a new cursor for each. A plain
    class rather than a ``@contextmanager`` generator: every step completion passes through here,
    and a generator-based context manager costs several times more per use.
    """

    __slots__ = ("_store",)

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    def __enter__(self) -> Any:
        store = self._store
        try:
            store._begin()
        except Exception as exc:
            error = store._failure(exc, "BEGIN")
            if error is None:
                raise  # not a crash point: a bug guard: a statement fails otherwise than by a lock or the machine only if it is wrong
            raise error from exc
        return store.conn.cursor()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        store = self._store
        if exc is not None:
            store._rollback()
            error = store._failure(exc, "a write")
            if error is not None:  # the database failed mid-transaction: disk full, I/O, a lock
                raise error from exc
            return False  # not a crash point: a bug guard: in an iteration, only a bug guard's exception leaves a transaction this way (a submit's IdempotencyConflict does, outside any iteration)
        try:
            store._commit()
        except Exception as commit_exc:
            store._rollback()
            error = store._failure(commit_exc, "COMMIT")
            if error is None:
                raise  # not a crash point: a bug guard: a statement fails otherwise than by a lock or the machine only if it is wrong
            raise error from commit_exc
        return False


def _job(row: Any) -> Job:
    """A job row (``JOB_COLUMNS``, in that order) with its JSON parsed."""
    job_id, workflow, state, payload, result, *rest = row
    result = None if result is None else load_stored(result, job_id, "result", PAYLOAD_FIX)
    return Job(job_id, workflow, state, load_payload(job_id, payload), result, *rest)
