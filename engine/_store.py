"""Storage on SQLite: the schema, the SQL as named constants, and the one write path.

Every write goes through :meth:`SqliteStore._write` (``BEGIN IMMEDIATE`` ... ``COMMIT``), so a
writer takes the database's write lock up front instead of failing half-way when it upgrades a
read lock. Every write a worker makes after its claim is *fenced*: guarded by the job's state and by
the lease token the claim handed out, so a worker whose lease was taken over changes zero rows.

``synchronous`` is a documented setting:

* ``NORMAL`` (default) in WAL mode survives any process crash (SIGKILL, OOM, a panic): a committed
  transaction is in the WAL file, which the OS writes out even if the process dies. A power loss or
  kernel crash may lose the last few commits (never corrupts the file).
* ``FULL`` also fsyncs the WAL on every commit, so a commit survives a power loss too, at the cost of
  one fsync per transaction.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ._errors import DamagedRow, IdempotencyConflict, InvalidInput, SchemaMismatch, StoreBusy, StoreFailed, UnknownJob
from ._inputs import dumps
from ._inputs import finite_number as _finite_number
from ._inputs import storable_text as _storable_text
from ._opening import check_sqlite_path, sqlite_open_error
from ._inputs import check_job_id as _check_job_id
from ._inputs import payload_json as _payload_json

__all__ = ["SqliteStore", "Job", "Claim", "Memo", "OutboxRow", "SCHEMA_VERSION", "dumps"]

SCHEMA_VERSION = 1
APPLICATION_ID = 0x63676174  # "cgat": marks a file as a crashgate database
SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")
ERROR_CHARS_MAX = 500

SCHEMA = (
    """CREATE TABLE job (
        id          TEXT PRIMARY KEY,          -- the caller's idempotency key
        workflow    TEXT NOT NULL,
        state       TEXT NOT NULL,
        payload     TEXT NOT NULL,             -- canonical JSON
        result      TEXT,                      -- JSON output of the last step, once final
        attempts    INTEGER NOT NULL DEFAULT 0,-- tries of the current step
        next_run_at REAL,                      -- when it may next be claimed; NULL = not claimable
        lease_until REAL,
        lease_owner TEXT,
        lease_token INTEGER NOT NULL DEFAULT 0,-- fencing token: grows with every claim
        last_error  TEXT,
        created     REAL NOT NULL,
        updated     REAL NOT NULL
    )""",
    # The claim reads the smallest next_run_at. Finished and parked jobs have NULL there and are not
    # in this partial index at all, and LIMIT 1 on an ordered index reads one entry: the claim's
    # cost depends on neither the backlog nor the number of finished jobs.
    "CREATE INDEX job_due ON job(next_run_at) WHERE next_run_at IS NOT NULL",
    """CREATE TABLE step_result (
        job_id TEXT NOT NULL,
        step   TEXT NOT NULL,
        output TEXT NOT NULL,
        cost   REAL NOT NULL DEFAULT 0,
        at     REAL NOT NULL,
        PRIMARY KEY (job_id, step)
    ) WITHOUT ROWID""",
    """CREATE TABLE outbox (
        id              INTEGER PRIMARY KEY,
        job_id          TEXT NOT NULL,
        kind            TEXT NOT NULL,
        payload         TEXT NOT NULL,
        created         REAL NOT NULL,
        sent_at         REAL,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL,
        last_error      TEXT,
        UNIQUE (job_id, kind)
    )""",
    "CREATE INDEX outbox_due ON outbox(next_attempt_at) WHERE sent_at IS NULL",
)

SELECT_JOB = "SELECT * FROM job WHERE id = ?"
SELECT_PAYLOAD = "SELECT payload FROM job WHERE id = ?"
INSERT_JOB = (
    "INSERT INTO job (id, workflow, state, payload, attempts, next_run_at, created, updated) "
    "VALUES (:id, :workflow, 'pending', :payload, 0, :now, :now, :now)"
)
# Submit: insert unless the id exists, and hand back the row as stored (no second read).
INSERT_NEW_JOB = INSERT_JOB + " ON CONFLICT (id) DO NOTHING RETURNING *"
# One statement picks and leases the most overdue claimable job, so no other writer can slip in
# between a SELECT and its UPDATE. It runs inside BEGIN IMMEDIATE with the follow-up CAS.
CLAIM = (
    "UPDATE job SET lease_owner = :owner, lease_until = :until, next_run_at = :until, "
    "lease_token = lease_token + 1, updated = :now "
    "WHERE id = (SELECT id FROM job WHERE next_run_at <= :now ORDER BY next_run_at LIMIT 1) "
    "RETURNING id, state, payload, attempts, lease_token"
)
CLAIM_PLAN = "EXPLAIN QUERY PLAN SELECT id FROM job WHERE next_run_at <= 0 ORDER BY next_run_at LIMIT 1"
FENCED_MOVE = (
    "UPDATE job SET state = :to, updated = :now "
    "WHERE id = :id AND state = :from AND lease_token = :token"
)
COUNT_RECLAIM = (
    "UPDATE job SET attempts = attempts + 1, updated = :now "
    "WHERE id = :id AND state = :state AND lease_token = :token"
)
# Completion, step 1: advance to the done state, still leased (continue) or released (stop).
COMPLETE_KEEP_LEASE = (
    "UPDATE job SET state = :to, attempts = 0, last_error = NULL, lease_until = :until, "
    "next_run_at = :until, updated = :now "
    "WHERE id = :id AND state = :from AND lease_token = :token"
)
# ... the same, when the worker keeps the lease it holds: the lease columns (and so the job_due
# index entry) are left as they are.
COMPLETE_KEEP_LEASE_AS_IS = (
    "UPDATE job SET state = :to, attempts = 0, last_error = NULL, updated = :now "
    "WHERE id = :id AND state = :from AND lease_token = :token"
)
COMPLETE_RELEASE = (
    "UPDATE job SET state = :to, attempts = 0, last_error = NULL, result = :result, "
    "next_run_at = :next_run_at, lease_owner = NULL, lease_until = NULL, updated = :now "
    "WHERE id = :id AND state = :from AND lease_token = :token"
)
INSERT_MEMO = "INSERT INTO step_result (job_id, step, output, cost, at) VALUES (:id, :step, :output, :cost, :now)"
INSERT_OUTBOX = (
    "INSERT INTO outbox (job_id, kind, payload, created, next_attempt_at) "
    "VALUES (:id, :kind, :payload, :now, :now) ON CONFLICT (job_id, kind) DO NOTHING"
)
# Leaving the working state without a result: the retry edge, a failed state or needs_human.
PARK = (
    "UPDATE job SET state = :to, attempts = :attempts, last_error = :error, next_run_at = :next_run_at, "
    "lease_owner = NULL, lease_until = NULL, updated = :now "
    "WHERE id = :id AND state = :from AND lease_token = :token"
)
HEARTBEAT = (
    "UPDATE job SET lease_until = :until, next_run_at = :until, updated = :now "
    "WHERE id = :id AND state = :state AND lease_token = :token"
)
HUMAN_MOVE = (
    "UPDATE job SET state = :to, attempts = 0, next_run_at = :next_run_at, lease_owner = NULL, "
    "lease_until = NULL, updated = :now WHERE id = :id AND state = :from"
)
SELECT_MEMO = "SELECT output, cost, at FROM step_result WHERE job_id = ? AND step = ?"
SELECT_MEMOS = "SELECT step, output FROM step_result WHERE job_id = ?"
SELECT_DUE_OUTBOX = (
    "SELECT id, job_id, kind, payload, attempts FROM outbox "
    "WHERE sent_at IS NULL AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?"
)
MARK_SENT = "UPDATE outbox SET sent_at = :now, attempts = attempts + 1 WHERE id = :id AND sent_at IS NULL"
MARK_SEND_FAILED = (
    "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = :next_at, last_error = :error "
    "WHERE id = :id AND sent_at IS NULL"
)


@dataclass(frozen=True)
class Job:
    id: str
    workflow: str
    state: str
    payload: Any
    result: Any
    attempts: int
    next_run_at: float | None
    lease_until: float | None
    lease_owner: str | None
    lease_token: int
    last_error: str | None
    created: float
    updated: float


@dataclass(frozen=True)
class Claim:
    """A job this worker holds a lease on; ``token`` fences every write it makes."""

    job_id: str
    state: str
    payload_json: str
    attempts: int
    token: int
    lease_until: float


@dataclass(frozen=True)
class Memo:
    output: Any
    cost_usd: float
    at: float


@dataclass(frozen=True)
class OutboxRow:
    id: int
    job_id: str
    kind: str
    payload: Any
    attempts: int

    @property
    def key(self) -> str:
        """The idempotency key the receiver dedupes on: stable across re-sends."""
        return f"{self.job_id}:{self.kind}"


class SqliteStore:
    """The engine's database: one per process, opened after any ``fork``, never shared.

    >>> store = SqliteStore(":memory:")
    >>> store.submit("doc-1", {"url": "file:///a.txt"}, now=0.0).state
    'pending'
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_s: float = 5.0,
        workflow: str = "reference",
        create: bool = True,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS_LEVELS:
            raise InvalidInput(f"synchronous={synchronous!r} is not one of {', '.join(SYNCHRONOUS_LEVELS)}")
        if path.startswith("sqlite:///"):
            path = path[len("sqlite:///") :]
        self.path = path
        self.workflow = workflow
        self.busy_timeout_s = busy_timeout_s
        check_sqlite_path(path, create=create)  # create=False: a missing file is an error, not a new database
        try:
            self.conn = sqlite3.connect(
                path, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise sqlite_open_error(path, exc) from exc
        try:
            self.conn.row_factory = sqlite3.Row
            self._ensure_schema()
            if path != ":memory:":
                self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")  # validated above
        except BaseException as exc:
            self.conn.close()
            if isinstance(exc, sqlite3.Error):
                raise sqlite_open_error(path, exc) from exc
            raise

    # -- connection and schema ----------------------------------------------------------------
    def close(self) -> None:
        self.conn.close()

    def _write(self) -> "_WriteTransaction":
        """The one write path: BEGIN IMMEDIATE, commit on success, roll back on any exception."""
        return _WriteTransaction(self)

    def _ensure_schema(self) -> None:
        app_id, version, tables = self._schema_facts()
        if app_id == APPLICATION_ID and version == SCHEMA_VERSION:
            return
        self._refuse_foreign(app_id, version, tables)
        with self._write() as conn:
            app_id, version, tables = self._schema_facts()  # another process may have won the race
            if app_id == APPLICATION_ID and version == SCHEMA_VERSION:
                return
            self._refuse_foreign(app_id, version, tables)
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # constants, not input
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _schema_facts(self) -> tuple[int, int, list[str]]:
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        tables = [
            r[0]
            for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return app_id, version, tables

    def _refuse_foreign(self, app_id: int, version: int, tables: list[str]) -> None:
        if app_id == APPLICATION_ID and version > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"database {self.path!r} has schema version {version}, newer than this engine's "
                f"{SCHEMA_VERSION}; upgrade crashgate to open it (the file was not modified)"
            )
        if app_id != APPLICATION_ID and (app_id != 0 or tables):
            raise SchemaMismatch(
                f"database {self.path!r} was not created by crashgate (application_id={app_id}, "
                f"tables: {', '.join(tables) or 'none'}); refusing to modify it: pass the path of a new "
                "or an existing crashgate database"
            )

    def claim_plan(self) -> str:
        """The claim's query plan, as SQLite reports it (tests check it uses ``job_due``)."""
        return " / ".join(row[3] for row in self.conn.execute(CLAIM_PLAN))

    # -- submit -------------------------------------------------------------------------------
    def submit(self, job_id: str, payload: Any, *, now: float) -> Job:
        """Create a job, or return the existing one if ``job_id`` was submitted with this payload."""
        return self.submit_many([(job_id, payload)], now=now)[0]

    def submit_many(self, items: Iterable[tuple[str, Any]], *, now: float) -> list[Job]:
        """Submit many jobs in one transaction: all are stored, or (on any error) none."""
        _finite_number("now", now)
        rows = [(_check_job_id(job_id), _payload_json(job_id, payload)) for job_id, payload in items]
        created: list[Job | None] = []
        with self._write() as conn:
            for job_id, payload_json in rows:
                # A new id is inserted and its row comes back as stored; an existing id inserts
                # nothing, and its stored payload must be the one offered.
                row = conn.execute(
                    INSERT_NEW_JOB, {"id": job_id, "workflow": self.workflow, "payload": payload_json, "now": now}
                ).fetchone()
                if row is None:
                    existing = conn.execute(SELECT_PAYLOAD, (job_id,)).fetchone()
                    if existing is None:
                        raise AssertionError(f"job {job_id!r} neither inserted nor found under the write lock")
                    if existing[0] != payload_json:
                        raise IdempotencyConflict(job_id, existing[0], payload_json)
                created.append(None if row is None else _job(row))
        return [job if job is not None else self.get(job_id) for job, (job_id, _) in zip(created, rows)]

    def get(self, job_id: str) -> Job:
        if not _storable_text(job_id):  # no job can have this id; both backends answer alike
            raise UnknownJob(job_id)
        rows = self._read(SELECT_JOB, (job_id,))
        if not rows:
            raise UnknownJob(job_id)
        return _job(rows[0])

    def jobs(self) -> list[Job]:
        return [_job(r) for r in self._read("SELECT * FROM job ORDER BY created, id")]

    def _read(self, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        """Run one read outside any write; a failure of the machine is raised as StoreFailed."""
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            if not _machine_failure(exc):
                raise
            raise _store_error(self, exc, "a read") from exc

    # -- the worker's writes --------------------------------------------------------------------
    def claim(self, owner: str, *, now: float, lease_s: float, starts: Mapping[str, str]) -> Claim | None:
        """Lease the most overdue claimable job and start its step, in ONE write transaction.

        ``starts`` maps each ready state to the working state of the step it waits for; the claim
        moves the job there by compare-and-swap. A job claimed in any other state is a working job
        whose lease expired (its worker died or froze): it stays in its state and the step is
        charged one attempt, so a job that kills every worker that touches it ends up failed.
        """
        with self._write() as conn:
            row = conn.execute(CLAIM, {"owner": owner, "until": now + lease_s, "now": now}).fetchone()
            if row is None:
                return None
            state, token, attempts = row["state"], row["lease_token"], row["attempts"]
            working = starts.get(state)
            ident = {"id": row["id"], "token": token, "now": now}
            if working is not None:
                moved = conn.execute(FENCED_MOVE, {**ident, "to": working, "from": state}).rowcount
                state = working
            else:
                moved = conn.execute(COUNT_RECLAIM, {**ident, "state": state}).rowcount
                attempts += 1
            if moved != 1:
                raise AssertionError(f"job {row['id']!r} changed under its own write lock")
            return Claim(row["id"], state, row["payload"], attempts, token, now + lease_s)

    def complete(
        self,
        claim: Claim,
        *,
        step: str,
        from_state: str,
        done_state: str,
        output_json: str,
        cost_usd: float,
        effects: Mapping[str, str],
        next_state: str | None,
        release_at: float | None,
        lease_until: float,
        result_json: str | None,
        write_memo: bool,
        now: float,
    ) -> bool:
        """Commit a step's memo, its outbox rows and the state advance as ONE fenced transaction.

        ``next_state`` (the next step's working state) keeps the lease, renewed to ``lease_until``
        (left as it is when that is the lease the claim already holds),
        and moves on in the same transaction; otherwise the job is released, claimable again at ``release_at`` (None: never).
        Returns False, having written nothing, if the lease was taken over.
        """
        ident = {"id": claim.job_id, "token": claim.token, "now": now}
        with self._write() as conn:
            if next_state is None:
                moved = conn.execute(
                    COMPLETE_RELEASE,
                    {**ident, "to": done_state, "from": from_state, "result": result_json, "next_run_at": release_at},
                ).rowcount
            elif lease_until == claim.lease_until:
                moved = conn.execute(COMPLETE_KEEP_LEASE_AS_IS, {**ident, "to": done_state, "from": from_state}).rowcount
            else:
                moved = conn.execute(
                    COMPLETE_KEEP_LEASE, {**ident, "to": done_state, "from": from_state, "until": lease_until}
                ).rowcount
            if moved != 1:
                return False
            if write_memo:
                conn.execute(INSERT_MEMO, {"id": claim.job_id, "step": step, "output": output_json, "cost": cost_usd, "now": now})
            for kind, payload_json in effects.items():
                conn.execute(INSERT_OUTBOX, {"id": claim.job_id, "kind": kind, "payload": payload_json, "now": now})
            if next_state is not None:
                moved = conn.execute(FENCED_MOVE, {**ident, "to": next_state, "from": done_state}).rowcount
                if moved != 1:
                    raise AssertionError(f"job {claim.job_id!r} changed under its own write lock")
        return True

    def park(
        self,
        claim: Claim,
        *,
        from_state: str,
        to_state: str,
        attempts: int,
        error: str | None,
        next_run_at: float | None,
        now: float,
    ) -> bool:
        """Leave the working state without a result (retry edge, failed state or needs_human)."""
        with self._write() as conn:
            moved = conn.execute(
                PARK,
                {
                    "id": claim.job_id,
                    "token": claim.token,
                    "from": from_state,
                    "to": to_state,
                    "attempts": attempts,
                    "error": _clip_error(error),
                    "next_run_at": next_run_at,
                    "now": now,
                },
            ).rowcount
        return moved == 1

    def heartbeat(self, claim: Claim, *, state: str, until: float, now: float) -> bool:
        """Extend the lease; False means it was taken over and the worker must stop."""
        with self._write() as conn:
            changed = conn.execute(
                HEARTBEAT, {"until": until, "now": now, "id": claim.job_id, "state": state, "token": claim.token}
            ).rowcount
        return changed == 1

    def human_move(self, job_id: str, *, from_state: str, to_state: str, next_run_at: float | None, now: float) -> bool:
        """A human operation: a compare-and-swap on the state, not fenced by any lease."""
        with self._write() as conn:
            moved = conn.execute(
                HUMAN_MOVE, {"id": job_id, "from": from_state, "to": to_state, "next_run_at": next_run_at, "now": now}
            ).rowcount
        return moved == 1

    # -- the memo --------------------------------------------------------------------------------
    def memo(self, job_id: str, step: str) -> Memo | None:
        rows = self._read(SELECT_MEMO, (job_id, step))
        if not rows:
            return None
        return Memo(_memo_output(job_id, step, rows[0]["output"]), rows[0]["cost"], rows[0]["at"])

    def memos(self, job_id: str) -> dict[str, Any]:
        return {r["step"]: _memo_output(job_id, r["step"], r["output"]) for r in self._read(SELECT_MEMOS, (job_id,))}

    # -- the outbox ------------------------------------------------------------------------------
    def due_outbox(self, *, now: float, limit: int) -> list[OutboxRow]:
        return [
            OutboxRow(r["id"], r["job_id"], r["kind"], json.loads(r["payload"]), r["attempts"])
            for r in self._read(SELECT_DUE_OUTBOX, (now, limit))
        ]

    def mark_sent(self, ids: list[int], *, now: float) -> int:
        """Mark delivered rows; only ever called after the sender confirmed each delivery."""
        if not ids:
            return 0
        with self._write() as conn:
            return conn.executemany(MARK_SENT, [{"now": now, "id": i} for i in ids]).rowcount

    def mark_send_failed(self, row_id: int, *, error: str, next_at: float) -> None:
        with self._write() as conn:
            conn.execute(MARK_SEND_FAILED, {"id": row_id, "error": _clip_error(error), "next_at": next_at})


class _WriteTransaction:
    """``with store._write() as conn``: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK on any exception.

    A plain class rather than a ``@contextmanager`` generator: every step completion passes
    through here, and a generator-based context manager costs several times more per use.
    """

    __slots__ = ("_store",)

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        if store.conn.in_transaction:
            _rollback(store.conn)  # what a failing disk left open (see _rollback)
        try:
            store.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            if not _machine_failure(exc):
                raise
            raise _store_error(store, exc, "BEGIN IMMEDIATE") from exc
        return store.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        store = self._store
        if exc_type is not None:
            _rollback(store.conn)
            if _machine_failure(exc):  # disk full, an I/O error or a damaged page mid-transaction
                raise _store_error(store, exc, "a write") from exc
            return False  # the exception propagates
        try:
            store.conn.execute("COMMIT")
        except sqlite3.DatabaseError as commit_exc:
            _rollback(store.conn)
            if not _machine_failure(commit_exc):
                raise
            raise _store_error(store, commit_exc, "COMMIT") from commit_exc
        return False


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is left of a failed transaction, if anything is.

    After ``SQLITE_FULL`` or an I/O error SQLite may have rolled the transaction back by itself
    (a second ROLLBACK would fail), and on a failing disk the ROLLBACK itself may fail: the
    transaction is then left open and the next write path rolls it back before its BEGIN, so a
    connection is never stuck inside a transaction that a fault abandoned.
    """
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.DatabaseError:
            pass


def _machine_failure(exc: BaseException | None) -> bool:
    """A failure of the file or the disk under it (full, I/O error, damaged page, read-only), not
    of the statement: an IntegrityError (a second memo row) or a ProgrammingError is a bug."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) in (sqlite3.DatabaseError, sqlite3.InternalError)


def _store_error(store: SqliteStore, exc: sqlite3.DatabaseError, where: str) -> Exception:
    """The typed error for a failed statement: StoreBusy for a lock, StoreFailed for the machine."""
    if _is_busy(exc):
        if where == "COMMIT":
            return StoreBusy(f"database {store.path!r} stayed locked at commit")
        return StoreBusy(f"database {store.path!r} stayed locked for {store.busy_timeout_s}s; another process holds its write lock")
    code = getattr(exc, "sqlite_errorname", "SQLITE_ERROR")
    return StoreFailed(
        f"database {store.path!r}: {where} failed with {code} ({exc}); nothing of it was written and "
        "the worker backs off and tries again; if this persists, free disk space or check the device "
        "(a damaged file: restore it from a backup)"
    )


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        workflow=row["workflow"],
        state=row["state"],
        payload=_loads(row["payload"], row["id"], "payload", _PAYLOAD_FIX),
        result=None if row["result"] is None else _loads(row["result"], row["id"], "result", _PAYLOAD_FIX),
        attempts=row["attempts"],
        next_run_at=row["next_run_at"],
        lease_until=row["lease_until"],
        lease_owner=row["lease_owner"],
        lease_token=row["lease_token"],
        last_error=row["last_error"],
        created=row["created"],
        updated=row["updated"],
    )


_PAYLOAD_FIX = "repair the row with the payload that was submitted, then requeue the job"


def _loads(text: str, job_id: str, what: str, fix: str) -> Any:
    """Parse JSON the engine wrote itself; anything else is a damaged row (DamagedRow)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DamagedRow(job_id, what, str(exc), fix) from None


def _memo_output(job_id: str, step: str, text: str) -> Any:
    return _loads(
        text,
        job_id,
        f"memo row of step {step!r}",
        f"delete that row (DELETE FROM step_result WHERE job_id = {job_id!r} AND step = {step!r}) so that the step "
        "runs again, then requeue the job",
    )


def _clip_error(error: str | None) -> str | None:
    if error is None or len(error) <= ERROR_CHARS_MAX:
        return error
    return error[: ERROR_CHARS_MAX - 3] + "..."


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def open_store(url: str, **options: Any) -> Any:
    """Open the store a URL names: SQLite for a path or ``sqlite:///path``, PostgreSQL for ``postgresql://``."""
    if url.startswith(("postgresql://", "postgres://")):
        from ._postgres import PostgresStore  # imported here: psycopg is an optional dependency

        options.pop("create", None)  # a PostgreSQL database is created by its administrator, never here
        return PostgresStore(url, **options)
    if "://" in url and not url.startswith("sqlite:///"):
        scheme = url.split("://", 1)[0]
        raise InvalidInput(
            f"database url {url!r}: scheme {scheme!r} is not supported; use a file path, sqlite:///path or postgresql://..."
        )
    return SqliteStore(url, **options)
